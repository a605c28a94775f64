//! `POST /aggregate_metrics` against NeMo Gym 0.7.0's own answer: the same batches of verify
//! responses go to a real `parley serve` and through the function a Gym resources server's
//! `/aggregate_metrics` route calls (the `simple_agent` passes the call on to it), run with the
//! test venv's Python; the two answers must agree key for key.

use std::process::Command;

use serde_json::{Value, json};

use crate::harness::{Stub, Workdir, root};
use crate::http::request;
use crate::remote::peer;
use crate::serve::Serve;

/// Gym's `SimpleResourcesServer.aggregate_metrics` with the default hooks (a resources server
/// with no benchmark metrics of its own), on each batch in the file; the answers, serialized as
/// its route serializes them.
const GYM: &str = r#"
import asyncio, json, sys, warnings
warnings.simplefilter("ignore")  # Gym warns about repeats missing a task; the answer is the same
from nemo_gym.base_resources_server import SimpleResourcesServer
from nemo_gym.config_types import AggregateMetricsRequest
from nemo_gym.reward_profile import AggregateMetricsMixin

hooks = AggregateMetricsMixin()
answers = []
for rows in json.load(open(sys.argv[1])):
    body = AggregateMetricsRequest(verify_responses=rows)
    answers.append(asyncio.run(SimpleResourcesServer.aggregate_metrics(hooks, body)).model_dump(mode="json"))
print(json.dumps(answers))
"#;

/// A GRPO-shaped batch as a trainer collects it: 4 prompts x 4 rollouts, each a verify
/// response with a composite reward (`reward_components`, nested), flags, usage, a field only
/// some rows have, performance records on some, one prompt that scored all alike and one rollout
/// masked (a judge that failed).
fn grpo_batch() -> Vec<Value> {
    let mut rows = Vec::new();
    for task in 0..4_i64 {
        for rollout in 0..4_i64 {
            let correct = task == 3 || (task + rollout) % 3 == 0;
            let format = 0.25 * ((task * 7 + rollout * 3) % 5) as f64;
            let reward = if correct { 1.0 } else { 0.0 } + 0.1 * format;
            let turns = 1 + (task + 2 * rollout) % 4;
            let mut row = json!({
                "_ng_task_index": task,
                "_ng_rollout_index": rollout,
                "responses_create_params": {"input": [{"role": "user", "content": format!("prompt {task}")}]},
                "response": {
                    "id": format!("resp-{task}-{rollout}"),
                    "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "42"}]}],
                    "usage": {
                        "input_tokens": 120 + 10 * task,
                        "output_tokens": 30 + 7 * rollout + task,
                        "total_tokens": 150 + 10 * task + 7 * rollout + task,
                        "input_tokens_details": {"cached_tokens": 64},
                        "output_tokens_details": {"reasoning_tokens": 0},
                    },
                },
                "reward": reward,
                "reward_components": {"correctness": if correct { 1.0 } else { 0.0 }, "format": format},
                "accuracy": correct,
                "num_turns": turns,
                "extracted_answer": if correct { json!("42") } else { Value::Null },
                "instance_config": {"mask_sample": false},
                "termination": "completed",
            });
            let map = row.as_object_mut().unwrap();
            // A field that only some verifiers report.
            if rollout != 2 {
                map.insert("format_ok".into(), json!(format > 0.3));
            }
            if task == 1 {
                map.insert("judge_latency_s".into(), json!(0.5 + 0.125 * rollout as f64));
            }
            if rollout % 2 == 0 {
                map.insert(
                    "ng_perf".into(),
                    json!({"prompt_tokens": 120 + 10 * task, "completion_tokens": 30 + 7 * rollout,
                           "num_turns": turns, "total_latency_ms": 800.0 + 37.5 * (task * 4 + rollout) as f64,
                           "token_observability_coverage": 1.0}),
                );
            }
            if (task, rollout) == (2, 3) {
                map.insert("mask_sample".into(), json!(true));
                map.insert("instance_config".into(), json!({"mask_sample": true}));
            }
            rows.push(row);
        }
    }
    rows
}

#[test]
fn aggregate_metrics_agree_with_nemo_gyms_own_key_for_key() {
    let venv = root().join(".venv-nemo-gym");
    let Some(venv) = peer(venv.clone(), venv.join(".parley-ready-0.7.0")) else { return };
    let batches = vec![
        grpo_batch(),
        // One rollout of one task: no repeat level, a spread of 0.
        vec![json!({"_ng_task_index": 5, "_ng_rollout_index": 0, "reward": 0.5, "accuracy": false, "n": 2})],
        // Every rollout masked: only coverage.
        vec![
            json!({"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 0.0, "mask_sample": true}),
            json!({"_ng_task_index": 1, "_ng_rollout_index": 0, "reward": 1.0, "mask_sample": true}),
        ],
        Vec::new(),
    ];
    let work = Workdir::new();
    std::fs::write(work.path("batches.json"), serde_json::to_string(&batches).unwrap()).unwrap();
    let out = Command::new(venv.join("bin/python")).args(["-c", GYM]).arg(work.path("batches.json")).output().unwrap();
    assert!(out.status.success(), "NeMo Gym's aggregation: {}", String::from_utf8_lossy(&out.stderr));
    let gyms: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();

    let stub = Stub::start(&[]);
    let serve = Serve::start(&work, &stub, &[]);
    let mut answers = Vec::new();
    for (batch, gym) in batches.iter().zip(&gyms) {
        let body = json!({"verify_responses": batch}).to_string();
        let (status, _, answer) = request(&serve.address, "POST", "/aggregate_metrics", &body, &[]);
        assert_eq!(status, 200, "{answer}");
        let parleys: Value = serde_json::from_str(&answer).unwrap();
        let mut differences = Vec::new();
        compare("", &parleys, gym, &mut differences);
        assert!(differences.is_empty(), "Parley's answer differs from NeMo Gym's:\n{}", differences.join("\n"));
        answers.push(parleys);
    }
    // The GRPO batch exercised every part of the answer.
    let grpo = &gyms[0];
    assert_eq!(grpo["group_level_metrics"].as_array().unwrap().len(), 4);
    assert_eq!(grpo["repeat_level_metrics"].as_array().unwrap().len(), 4);
    assert!(grpo["agent_metrics"]["ci_low_95_across_repeats/mean/reward"].is_f64());
    assert_eq!(grpo["key_metrics"]["coverage/masked_rollouts"], 1);
    assert!(grpo["perf_summary"]["mean_tokens_per_turn"].is_f64());
    // Parley's figures of the prompt groups, beside Gym's: pass@k up to the group size.
    let ours = &answers[0]["agent_metrics"];
    let pass = |k: usize| ours[format!("parley/pass@{k}")].as_f64().unwrap_or_else(|| panic!("pass@{k}: {ours}"));
    assert!((0.0..=1.0).contains(&pass(1)) && pass(1) <= pass(4), "{ours}");
    assert!(ours.get("parley/pass@5").is_none(), "k up to the group size, 4: {ours}");
    assert!(ours["parley/groups_scored_alike"].is_number(), "{ours}");
}

/// Every difference between two answers, by JSON pointer: keys one has and the other lacks,
/// and values that differ (numbers by more than 1e-9, an integer equal to a float).
fn compare(at: &str, parley: &Value, gym: &Value, differences: &mut Vec<String>) {
    match (parley, gym) {
        (Value::Object(p), Value::Object(g)) => {
            // Parley's own figures (`parley/...`, beside Gym's as a benchmark's own are) are
            // checked apart.
            for key in p.keys().filter(|k| !g.contains_key(*k) && !k.starts_with("parley/")) {
                differences.push(format!("{at}/{key}: Parley has it ({}), Gym does not", p[key]));
            }
            for key in g.keys().filter(|k| !p.contains_key(*k)) {
                differences.push(format!("{at}/{key}: Gym has it ({}), Parley does not", g[key]));
            }
            for (key, value) in p.iter().filter(|(k, _)| g.contains_key(*k)) {
                compare(&format!("{at}/{key}"), value, &g[key], differences);
            }
        }
        (Value::Array(p), Value::Array(g)) if p.len() == g.len() => {
            for (i, (p, g)) in p.iter().zip(g).enumerate() {
                compare(&format!("{at}/{i}"), p, g, differences);
            }
        }
        (Value::Number(p), Value::Number(g)) => {
            let (p, g) = (p.as_f64().unwrap(), g.as_f64().unwrap());
            if (p - g).abs() > 1e-9 * g.abs().max(1.0) {
                differences.push(format!("{at}: Parley {p}, Gym {g}"));
            }
        }
        (p, g) if p == g => {}
        (p, g) => differences.push(format!("{at}: Parley {p}, Gym {g}")),
    }
}
