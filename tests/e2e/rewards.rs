//! Composite rewards end to end: `--env custom` over a task file, the stub answering from the
//! rows (right, wrong and malformed), and the reward's components in the rollout rows, the
//! store, `parley show`, `parley metrics` and a rescore.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::harness::{Stub, Workdir, ok, read_jsonl, text};

/// Writes `count` single-step arithmetic rows in NeMo Gym's format.
pub(crate) fn math_tasks(work: &Workdir, count: usize) -> PathBuf {
    let path = work.path("math.jsonl");
    let rows: Vec<String> = (0..count)
        .map(|i| {
            json!({"id": i, "responses_create_params": {"input": [{"role": "user",
                "content": format!("What is {i} times 3? Put the answer in \\boxed{{}}.")}]},
                "expected_answer": (3 * i).to_string()})
            .to_string()
        })
        .collect();
    std::fs::write(&path, rows.join("\n") + "\n").unwrap();
    path
}

fn components(row: &Value) -> &serde_json::Map<String, Value> {
    row["reward_components"].as_object().unwrap_or_else(|| panic!("no reward_components in {row}"))
}

#[test]
fn a_composite_reward_is_kept_in_rows_store_show_and_metrics() {
    let work = Workdir::new();
    let tasks = math_tasks(&work, 60);
    let stub = Stub::start(&[
        "--answers",
        tasks.to_str().unwrap(),
        "--answer-format",
        "So it is \\boxed{{answer}}.",
        "--wrong-answers",
        "0.3",
        "--malformed-answers",
        "0.2",
    ]);
    let out = work.parley(&[
        "run",
        "--env",
        "custom",
        "--tasks",
        "math.jsonl",
        "--base-url",
        &stub.url,
        "--db",
        "parley.db",
        "--out",
        "out.jsonl",
        "--reward",
        "math:weight=0.8",
        "--reward",
        "format:pattern=\\\\boxed,weight=0.2",
        "--reward",
        "steps:budget=2,weight=-0.1,cap=1",
    ]);
    ok(&out);
    let rows = read_jsonl(&work.path("out.jsonl"));
    assert_eq!(rows.len(), 60);
    let (mut right, mut wrong, mut malformed) = (0, 0, 0);
    for row in &rows {
        let parts = components(row);
        let sum: f64 = parts.values().map(|v| v.as_f64().unwrap()).sum();
        let reward = row["reward"].as_f64().unwrap();
        assert!((sum - reward).abs() < 1e-9, "components sum to the reward: {row}");
        let said = row["response"]["output"][0]["content"][0]["text"].as_str().unwrap();
        let expected = row["expected_answer"].as_str().unwrap();
        // One turn against a budget of two: -0.1 × 0.5.
        assert_eq!(parts["steps"], json!(-0.05));
        if said == format!("So it is \\boxed{{{expected}}}.") {
            right += 1;
            assert_eq!((parts["math"].clone(), parts["format"].clone()), (json!(0.8), json!(0.2)), "{row}");
        } else if said.contains("\\boxed") {
            wrong += 1;
            assert_eq!((parts["math"].clone(), parts["format"].clone()), (json!(0.0), json!(0.2)), "{row}");
        } else {
            malformed += 1;
            assert_eq!((parts["math"].clone(), parts["format"].clone()), (json!(0.0), json!(0.0)), "{row}");
            assert_eq!(row["reward_details"]["math"]["extracted_answer"], Value::Null, "{row}");
        }
    }
    assert!(right > 10 && wrong > 5 && malformed > 3, "right {right}, wrong {wrong}, malformed {malformed}");

    let show = ok(&work.parley(&["show", "1", "--db", "parley.db"]));
    assert!(show.contains("reward_components") && show.contains("\"steps\":-0.05"), "{show}");

    let metrics: Value =
        serde_json::from_str(&ok(&work.parley(&["metrics", "1", "--db", "parley.db", "--json"]))).unwrap();
    let training = &metrics["training"];
    let math = training["run"]["components"]["math"].as_f64().unwrap();
    assert!((math - 0.8 * right as f64 / 60.0).abs() < 1e-9, "{training}");
    assert_eq!(training["run"]["mean_steps"], json!(1.0));
    assert_eq!(training["tasks"].as_object().unwrap().len(), 60);
    let mean = training["run"]["mean_reward"].as_f64().unwrap();
    let parts: f64 = training["run"]["components"].as_object().unwrap().values().map(|v| v.as_f64().unwrap()).sum();
    assert!((mean - parts).abs() < 1e-9, "the component means sum to the mean reward: {training}");
    let table = ok(&work.parley(&["metrics", "1", "--db", "parley.db"]));
    assert!(table.contains("components     format") && table.contains("per task"), "{table}");

    // A rescore with the same settings changes nothing.
    let rescore = ok(&work.parley(&["rescore", "1", "--db", "parley.db"]));
    assert!(rescore.contains("rescored 60 sessions of run 1: 0 changed"), "{rescore}");

    // Another reward tried on the same trajectories: the format check weighs half as much. The
    // sessions whose answer had the format (right and wrong ones) move by -0.1 in `format`, the
    // malformed ones not at all.
    let tried_out = work.parley(&[
        "rescore",
        "1",
        "--db",
        "parley.db",
        "--reward",
        "math:weight=0.8",
        "--reward",
        "format:pattern=\\\\boxed,weight=0.1",
        "--reward",
        "steps:budget=2,weight=-0.1,cap=1",
    ]);
    let tried = ok(&tried_out);
    let moved = (right + wrong) as usize;
    assert!(tried.contains(&format!("rescored 60 sessions of run 1: {moved} changed")), "{tried}");
    assert!(tried.contains("(score version 3)"), "{tried}");
    assert!(text(&tried_out.stderr).contains("parley scores diff 1 2 3"), "{}", text(&tried_out.stderr));
    let versions: Value =
        serde_json::from_str(&ok(&work.parley(&["scores", "1", "--db", "parley.db", "--json"]))).unwrap();
    let versions = versions.as_array().unwrap();
    assert_eq!(versions.len(), 3, "{versions:?}");
    assert_eq!((versions[0]["run_reward"].clone(), versions[2]["run_reward"].clone()), (json!(true), json!(false)));
    assert_eq!(versions[2]["reward"]["components"][1]["weight"], json!(0.1), "the reward version 3 was scored with");
    let drop = versions[0]["mean"].as_f64().unwrap() - versions[2]["mean"].as_f64().unwrap();
    assert!((drop - 0.1 * moved as f64 / 60.0).abs() < 1e-9, "{versions:?}");
    let table = ok(&work.parley(&["scores", "1", "--db", "parley.db"]));
    assert!(table.contains("0.8·math + 0.1·format + -0.1·steps"), "{table}");

    let diff: Value =
        serde_json::from_str(&ok(&work.parley(&["scores", "diff", "1", "1", "3", "--db", "parley.db", "--json"])))
            .unwrap();
    assert_eq!((diff["compared"].clone(), diff["changed"].as_array().unwrap().len()), (json!(60), moved));
    for change in diff["changed"].as_array().unwrap() {
        assert!((change["after"].as_f64().unwrap() - change["before"].as_f64().unwrap() + 0.1).abs() < 1e-9);
        assert_eq!(change["components"], json!([{"name": "format", "before": 0.2, "after": 0.1}]), "{change}");
    }
    assert_eq!(diff["by_component"][0]["name"], "format");
    assert_eq!(diff["by_component"][0]["sessions"], json!(moved));
    let table = ok(&work.parley(&["scores", "diff", "1", "1", "3", "--db", "parley.db", "--limit", "2"]));
    assert!(table.contains(&format!("{moved} of 60 sessions changed")), "{table}");
    assert!(table.contains("format 0.2 -> 0.1") && table.contains(&format!("... {} more", moved - 2)), "{table}");

    // The same reward from a settings file's `[[reward]]` tables: the same scores again.
    std::fs::write(
        work.path("try.toml"),
        "[[reward]]\nscorer = \"math\"\nweight = 0.8\n\n[[reward]]\nscorer = \"format\"\nweight = 0.1\n\
         options = { pattern = '\\\\boxed' }\n\n[[reward]]\nscorer = \"steps\"\nweight = -0.1\ncap = 1\n\
         options = { budget = 2 }\n",
    )
    .unwrap();
    let again = ok(&work.parley(&["rescore", "1", "--db", "parley.db", "--settings", "try.toml"]));
    assert!(again.contains("rescored 60 sessions of run 1: 0 changed (score version 4)"), "{again}");
    let diff = ok(&work.parley(&["scores", "diff", "1", "3", "4", "--db", "parley.db", "--json"]));
    assert_eq!(serde_json::from_str::<Value>(&diff).unwrap()["changed"], json!([]), "{diff}");

    // Bad input: a version the run does not have, a component no scorer has.
    let out = work.parley(&["scores", "diff", "1", "1", "9", "--db", "parley.db"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(text(&out.stderr).contains("no score version 9; its versions: 1, 2, 3, 4"), "{}", text(&out.stderr));
    let out = work.parley(&["rescore", "1", "--db", "parley.db", "--reward", "exactly"]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    let versions = ok(&work.parley(&["scores", "1", "--db", "parley.db", "--json"]));
    assert_eq!(serde_json::from_str::<Value>(&versions).unwrap().as_array().unwrap().len(), 4, "nothing added");
}

/// The judge is asked twice per right-looking answer (the swap), its verdicts and the prompt's
/// hash are kept, and a rescore answers every request from the stored verdicts.
#[test]
fn a_judge_component_asks_both_orders_and_a_rescore_reuses_its_verdicts() {
    let work = Workdir::new();
    let tasks = math_tasks(&work, 8);
    // The reply differs from the expected answer, so the swapped request differs from the first
    // (identical ones would be answered by the verdict cache).
    let agent = Stub::start(&["--answers", tasks.to_str().unwrap(), "--answer-format", "The product is {answer}."]);
    let judge = Stub::start(&["--final-text", "Both name the same number. [[A=B]]"]);
    ok(&work.parley(&[
        "run",
        "--env",
        "custom",
        "--tasks",
        "math.jsonl",
        "--base-url",
        &agent.url,
        "--judge-base-url",
        &judge.url,
        "--db",
        "parley.db",
        "--out",
        "out.jsonl",
        "--reward",
        "judge",
    ]));
    let rows = read_jsonl(&work.path("out.jsonl"));
    for row in &rows {
        assert_eq!(row["reward"], json!(1.0), "{row}");
        let details = &row["reward_details"]["judge"];
        assert_eq!(details["judge_verdicts"].as_array().unwrap().len(), 2, "{row}");
        assert_eq!(details["judge_prompt_sha256"].as_str().unwrap().len(), 64);
    }
    assert_eq!(judge.stats()["requests"], json!(16), "two judgements per session");
    let out = ok(&work.parley(&["rescore", "1", "--db", "parley.db"]));
    assert!(out.contains("0 changed; 0 judge calls, 16 verdicts reused"), "{out}");
    assert_eq!(judge.stats()["requests"], json!(16), "the rescore asked the judge nothing");
}

/// A reward model behind the stub's `/pooling`: its score (the reply's length over 100) is the
/// component's value.
#[test]
fn a_reward_model_component_scores_through_the_pooling_api() {
    let work = Workdir::new();
    let tasks = math_tasks(&work, 4);
    let stub = Stub::start(&["--answers", tasks.to_str().unwrap()]);
    let base = stub.url.trim_end_matches("/v1").to_owned();
    ok(&work.parley(&[
        "run",
        "--env",
        "custom",
        "--tasks",
        "math.jsonl",
        "--base-url",
        &stub.url,
        "--db",
        "parley.db",
        "--out",
        "out.jsonl",
        "--reward",
        &format!("reward-model:base_url={base},weight=2"),
    ]));
    for row in read_jsonl(&work.path("out.jsonl")) {
        let said = row["response"]["output"][0]["content"][0]["text"].as_str().unwrap().chars().count();
        assert_eq!(row["reward"], json!(2.0 * said as f64 / 100.0), "{row}");
    }
}

/// Bad components are refused before anything runs, by name.
#[test]
fn bad_reward_components_are_usage_errors() {
    let work = Workdir::new();
    math_tasks(&work, 1);
    for (args, says) in
        [(vec!["--reward", "steps"], "budget"), (vec!["--reward", "chess"], "chess"), (vec![], "--reward")]
    {
        let mut all = vec!["run", "--env", "custom", "--tasks", "math.jsonl", "--db", "parley.db"];
        all.extend(args);
        let out = work.parley(&all);
        assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains(says), "{}", text(&out.stderr));
    }
}

/// `--env custom` with tools from an MCP server (multi-step) and with a scripted user
/// (multi-turn): the composite reward scores both, and its budget term counts the agent's turns.
#[test]
fn a_custom_environment_is_multi_step_with_mcp_tools_and_multi_turn_with_a_user() {
    let work = Workdir::new();
    let mcp = crate::harness::root().join(".mcp-peers");
    let script = mcp.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if mcp.join(".parley-ready").is_file() {
        let row = json!({"responses_create_params": {"input": "Echo something."}, "expected_answer": "Result"});
        std::fs::write(work.path("tools.jsonl"), format!("{row}\n{row}\n")).unwrap();
        let stub = Stub::start(&["--tool-calls", "1"]);
        let command = format!("node {} stdio", script.display());
        ok(&work.parley(&[
            "run",
            "--env",
            "custom",
            "--mcp-stdio",
            &command,
            "--tasks",
            "tools.jsonl",
            "--base-url",
            &stub.url,
            "--db",
            "parley.db",
            "--out",
            "tools-out.jsonl",
            "--reward",
            "exact:contains=true,weight=0.8",
            "--reward",
            "steps:budget=4,weight=-0.1",
        ]));
        for row in read_jsonl(&work.path("tools-out.jsonl")) {
            // A tool call, its output, then the answer quoting it: two agent turns.
            assert_eq!(row["response"]["output"][0]["type"], "function_call", "{row}");
            assert_eq!(row["reward_details"]["steps"]["used"], json!(2), "{row}");
            assert_eq!(row["reward"], json!(0.75), "{row}");
        }
    } else {
        crate::harness::skip("the MCP half: the MCP reference server is not installed; run .ci/setup-peers");
    }

    let row = json!({"responses_create_params": {"input": "Hi."}, "expected_answer": "hello",
                     "follow_ups": ["Go on.", "Thanks."]});
    std::fs::write(work.path("talk.jsonl"), format!("{row}\n")).unwrap();
    let stub = Stub::start(&[]);
    ok(&work.parley(&[
        "run",
        "--env",
        "custom",
        "--user",
        "scripted",
        "--tasks",
        "talk.jsonl",
        "--base-url",
        &stub.url,
        "--db",
        "parley.db",
        "--out",
        "talk-out.jsonl",
        "--reward",
        "exact:contains=true",
        "--reward",
        "steps:budget=10,weight=-0.5",
    ]));
    let rows = read_jsonl(&work.path("talk-out.jsonl"));
    // The opening, then two follow-ups: three agent turns, each `Hello from parley-stub.`.
    assert_eq!(rows[0]["reward_details"]["steps"]["used"], json!(3), "{}", rows[0]);
    assert_eq!(rows[0]["reward"], json!(1.0 - 0.15), "{}", rows[0]);
}

/// A run whose judge was the in-process stub is rescored from its stored verdicts alone.
#[test]
fn a_run_judged_by_the_in_process_stub_is_rescored_from_its_verdicts() {
    let work = Workdir::new();
    math_tasks(&work, 3);
    ok(&work.parley(&[
        "run",
        "--env",
        "custom",
        "--tasks",
        "math.jsonl",
        "--db",
        "parley.db",
        "--out",
        "out.jsonl",
        "--reward",
        "judge",
    ]));
    let out = ok(&work.parley(&["rescore", "1", "--db", "parley.db"]));
    assert!(out.contains("rescored 3 sessions of run 1: 0 changed; 0 judge calls, 3 verdicts reused"), "{out}");
}
