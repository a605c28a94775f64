//! The full comparison: NeMo Gym's own pipeline (`gym env start` + `gym eval run` with
//! `simple_agent` and `gymnasium_agent`, its model server in front of the same deterministic
//! stub) against Parley driving the same resources servers, row by row. Both policies are the
//! stub, so both trajectories are the same and every reward must be equal. mcqa, string_match,
//! math_with_judge and equivalence_llm_judge (whose judge is the stub too) get right, wrong and
//! malformed answers, so their rewards differ by row and a Parley that scored them alike fails.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use parley_core::nemo_gym::task_from_row;
use parley_core::{Environment, UserSimulator};
use parley_remote::{GymnasiumEnvironment, GymnasiumUser, NemoGymEnvironment};
use parley_stub::{AnswerKey, StubConfig};
use serde_json::{Value, json};

use crate::agents::stub_agent;
use crate::{driver, gymnasium, peers};

/// One resources server, compared on its rows.
struct Case {
    /// The resources server's folder.
    folder: &'static str,
    /// The agent instance `gym eval run` drives.
    agent: &'static str,
    /// The resources server instance Parley talks to.
    resources: &'static str,
    gymnasium: bool,
    /// Whether the stub answers the rows from the rows themselves (right, wrong or malformed),
    /// so that the rewards must include a 1 and a 0.
    answered: bool,
}

const fn case(folder: &'static str, agent: &'static str, resources: &'static str) -> Case {
    Case { folder, agent, resources, gymnasium: false, answered: false }
}

const CASES: [Case; 9] = [
    case("example_multi_step", "example_multi_step_simple_agent", "example_multi_step_resources_server"),
    case(
        "example_session_state_mgmt",
        "example_session_state_mgmt_simple_agent",
        "example_session_state_mgmt_resources_server",
    ),
    case("workplace_assistant", "workplace_assistant_simple_agent", "workplace_assistant"),
    case("calendar", "calendar_simple_agent", "calendar"),
    Case { answered: true, ..case("mcqa", "mcqa_simple_agent", "mcqa") },
    Case { answered: true, ..case("string_match", "string_match_simple_agent", "string_match") },
    Case { answered: true, ..case("math_with_judge", "math_with_judge_simple_agent", "math_with_judge") },
    Case {
        answered: true,
        ..case("equivalence_llm_judge", "equivalence_llm_judge_simple_agent", "equivalence_llm_judge")
    },
    Case {
        gymnasium: true,
        ..case("example_multi_turn_gymnasium", "example_multi_turn_gymnasium_agent", "example_multi_turn_gymnasium")
    },
];

/// `equivalence_llm_judge` with the swap check, its judge (`policy_model`) the stub: the judge
/// is shown what is inside the answer's box, so a right answer passes both questions, while a
/// wrong one that contains the gold text (`not darwin`) passes the first and fails the swapped
/// one, and a number off by one or no answer fails the first.
const EQUIVALENCE_CONFIG: &str = r"equivalence_llm_judge:
  resources_servers:
    equivalence_llm_judge:
      entrypoint: app.py
      judge_model_server: {type: responses_api_models, name: policy_model}
      judge_responses_create_params: {input: []}
      judge_prompt_template_fpath: prompt_templates/equivalence_llm_judge.txt
      response_extract_regex: '\\boxed\{(.*)\}'
      check_twice_swap: true
      reward_if_swap_fails: 0.0
      domain: knowledge
equivalence_llm_judge_simple_agent:
  responses_api_agents:
    simple_agent:
      entrypoint: app.py
      resources_server: {type: resources_servers, name: equivalence_llm_judge}
      model_server: {type: responses_api_models, name: policy_model}
";

#[tokio::test]
async fn rewards_equal_gym_eval_run_row_by_row() {
    let Some(venv) = peers::venv("the gym eval run comparison") else { return };
    if std::net::TcpListener::bind("127.0.0.1:11000").is_err() {
        panic!("port 11000 (NeMo Gym's head server) is taken; stop whatever holds it");
    }
    let rows: Vec<Vec<Value>> = CASES.iter().map(|c| rows(&venv, c.folder)).collect();
    // Every Gymnasium answer for the other servers. The answered servers' rows are answered from
    // the rows themselves: the right answer, a wrong one (40%) or none (20%), so their rewards
    // differ by row; the judge's questions get the stub's verdicts.
    let final_text = format!("{} \\boxed{{E}}", gymnasium::ALL_ANSWERS);
    let answered: Vec<String> =
        CASES.iter().zip(&rows).filter(|(c, _)| c.answered).flat_map(|(_, r)| r).map(Value::to_string).collect();
    let mut answers = AnswerKey::from_jsonl(&answered.join("\n"), "expected_answer").unwrap();
    // The box on a line of its own, so that string_match's `last_line` reads it too.
    answers.format = "Thinking done.\n\\boxed{{answer}}".into();
    (answers.wrong, answers.malformed) = (0.4, 0.2);
    let answers = Some(Arc::new(answers));
    let config = StubConfig { final_text: Some(final_text), answers, judge: true, ..StubConfig::default() };
    let (base, stop) = peers::stub(config).await;
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    std::fs::write(dir.join("equivalence_llm_judge.yaml"), EQUIVALENCE_CONFIG).unwrap();
    let mut configs = vec!["responses_api_models/openai_model/configs/openai_model.yaml".to_owned()];
    let mut server_dirs = vec![
        "responses_api_models/openai_model".to_owned(),
        "responses_api_agents/simple_agent".to_owned(),
        "responses_api_agents/gymnasium_agent".to_owned(),
        "environment_servers/legacy_agent".to_owned(),
    ];
    for Case { folder, .. } in &CASES {
        configs.push(match *folder {
            "equivalence_llm_judge" => dir.join("equivalence_llm_judge.yaml").display().to_string(),
            _ => format!("resources_servers/{folder}/configs/{folder}.yaml"),
        });
        server_dirs.push(format!("resources_servers/{folder}"));
    }
    // One shared venv for every server, as in the notes: `uv` is neither here nor reachable.
    for server in &server_dirs {
        let at = dir.join("venvs").join(server);
        std::fs::create_dir_all(&at).unwrap();
        std::os::unix::fs::symlink(&venv, at.join(".venv")).unwrap();
    }
    std::fs::write(
        dir.join("env.yaml"),
        format!("policy_base_url: {base}\npolicy_api_key: dummy\npolicy_model_name: stub\n"),
    )
    .unwrap();
    let gym = venv.join("bin/gym");
    let log = dir.join("env_start.log");
    let mut start = tokio::process::Command::new(&gym);
    start.args(["env", "start"]);
    for config in &configs {
        start.args(["--config", config]);
    }
    start
        .arg(format!("+uv_venv_dir={}", dir.join("venvs").display()))
        .arg("+skip_venv_if_present=true")
        .current_dir(dir)
        .env("PATH", path_with(&venv))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.join("env_start.err")).unwrap())
        .process_group(0)
        .kill_on_drop(true);
    let env_start = start.spawn().unwrap();
    let group = env_start.id().unwrap();
    let _stop_group = KillGroup(group);
    wait_for(&log, "servers ready", Duration::from_secs(240), dir).await;
    let instances: Vec<Value> =
        reqwest::get("http://127.0.0.1:11000/server_instances").await.unwrap().json().await.unwrap();
    let url_of = |name: &str| {
        let i = instances
            .iter()
            .find(|i| i["process_name"] == name)
            .unwrap_or_else(|| panic!("{name} is not among the started servers"));
        i["url"].as_str().map_or_else(|| format!("http://{}:{}", i["host"].as_str().unwrap(), i["port"]), str::to_owned)
    };

    let agent = stub_agent(&base);
    for (case, rows) in CASES.iter().zip(&rows) {
        let Case { folder, agent: agent_name, resources, gymnasium, answered } = *case;
        let input = dir.join(format!("{folder}.input.jsonl"));
        let lines: Vec<String> = rows.iter().map(Value::to_string).collect();
        std::fs::write(&input, lines.join("\n") + "\n").unwrap();
        let output = dir.join(format!("{folder}.jsonl"));
        let status = tokio::process::Command::new(&gym)
            .args(["eval", "run", "--no-serve", "--agent", agent_name, "--concurrency", "4"])
            .arg("--input")
            .arg(&input)
            .arg("--output")
            .arg(&output)
            .current_dir(dir)
            .env("PATH", path_with(&venv))
            .stdout(std::fs::File::create(dir.join(format!("{folder}.eval.log"))).unwrap())
            .stderr(Stdio::null())
            .status()
            .await
            .unwrap();
        assert!(status.success(), "gym eval run for {agent_name}: {status}");
        let gym_rows: BTreeMap<usize, Value> = std::fs::read_to_string(&output)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .map(|r| (r["_ng_task_index"].as_u64().unwrap() as usize, r))
            .collect();
        assert_eq!(gym_rows.len(), rows.len(), "{folder}: gym eval run scored every row");
        let gym_rewards: BTreeMap<usize, f64> =
            gym_rows.iter().map(|(i, r)| (*i, r["reward"].as_f64().unwrap())).collect();

        let tasks: Vec<_> = rows.iter().enumerate().map(|(i, row)| task_from_row(i, row.clone()).unwrap()).collect();
        let url = url_of(resources);
        let environment: Box<dyn Environment> = if gymnasium {
            Box::new(GymnasiumEnvironment::new(resources, &url, &peers::options()).unwrap())
        } else {
            Box::new(NemoGymEnvironment::new(resources, &url, &peers::options()).unwrap())
        };
        let user = GymnasiumUser;
        let user = gymnasium.then_some(&user as &dyn UserSimulator);
        let runs = tasks.iter().map(|t| driver::run(&agent, environment.as_ref(), user, t, 10));
        let outcomes: Vec<_> = join_all(runs).await.into_iter().map(|o| o.unwrap().reward.unwrap()).collect();
        let parley_rewards: BTreeMap<usize, f64> =
            tasks.iter().zip(&outcomes).map(|(t, r)| (t.index, r.value)).collect();
        // Every verify field Parley keeps (accuracy, set_overlap, extracted_answer, terminated,
        // judge_evaluations, ...) must equal the one in NeMo Gym's output row.
        for (task, reward) in tasks.iter().zip(&outcomes) {
            for (key, value) in &reward.breakdown {
                if let Some(theirs) = gym_rows[&task.index].get(key) {
                    assert_eq!(value, theirs, "{folder} row {}: `{key}` differs", task.index);
                }
            }
        }
        eprintln!("{folder}: NeMo Gym {:?} | Parley {:?}", gym_rewards.values(), parley_rewards.values());
        // Right answers score 1 and wrong or malformed ones 0, so a Parley that scored every row
        // alike could not pass.
        if answered {
            for reward in [1.0, 0.0] {
                assert!(gym_rewards.values().any(|r| *r == reward), "{folder}: no reward {reward}: {gym_rewards:?}");
            }
        }
        if folder == "equivalence_llm_judge" {
            let verdicts: std::collections::BTreeSet<&str> = gym_rows
                .values()
                .flat_map(|r| r["judge_evaluations"].as_array().unwrap())
                .map(|e| e["verdict_label"].as_str().unwrap())
                .collect();
            assert_eq!(verdicts.len(), 2, "the judge said both [[A=B]] and [[A!=B]]: {verdicts:?}");
            let swap_failed = gym_rows.values().filter(|r| {
                let labels: Vec<&Value> =
                    r["judge_evaluations"].as_array().unwrap().iter().map(|e| &e["verdict_label"]).collect();
                labels == [&json!("[[A=B]]"), &json!("[[A!=B]]")]
            });
            assert!(swap_failed.count() > 0, "some rows pass the first question and fail the swapped one");
        }
        assert_eq!(parley_rewards, gym_rewards, "{folder}: Parley's rewards differ from gym eval run's");
    }
    let compared: usize = rows.iter().map(Vec::len).sum();
    assert!(compared >= 100, "{compared} rows compared");
    let _ = stop.send(());
}

/// A case's rows: the server's shipped examples, and for the answered servers generated rows,
/// so that right, wrong and malformed answers occur in every kind the server grades.
fn rows(venv: &Path, folder: &str) -> Vec<Value> {
    let examples = peers::site_packages(venv).join("resources_servers").join(folder).join("data/example.jsonl");
    let mut rows: Vec<Value> =
        std::fs::read_to_string(examples).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let ask = |text: String| json!({"input": [{"role": "user", "content": text}]});
    match folder {
        "string_match" => {
            // Words, several words and numbers; a wrong number is one more, which string_match
            // grades 0.98 when it is near enough (2048 → 2049).
            let answers = ["Paris", "Pacific Ocean", "Mount Everest", "oxygen", "1969", "2048", "12", "Jupiter"];
            let modes = ["boxed", "final_answer", "last_line"];
            rows.extend((0..24).map(|i| {
                json!({
                    "responses_create_params": ask(format!("String-match question {i}: answer in \\boxed{{}}.")),
                    "expected_answer": answers[i % answers.len()],
                    "extraction_mode": modes[i % modes.len()],
                    "case_sensitive": i % 5 == 0,
                })
            }));
        }
        "math_with_judge" => {
            rows.extend((0..24u64).map(|i| {
                let (a, b) = (7 + 13 * i, 3 + 5 * i);
                let question = format!("What is {a} times {b}? Put the answer inside \\boxed{{}}.");
                json!({"responses_create_params": ask(question.clone()), "question": question,
                    "expected_answer": (a * b).to_string()})
            }));
        }
        "equivalence_llm_judge" => {
            let answers = ["Charles Darwin", "photosynthesis", "42", "mitochondria", "1066", "nitrogen"];
            rows.extend((0..24).map(|i| {
                let question = format!("Judged question {i}: put the final answer inside \\boxed{{}}.");
                json!({"responses_create_params": ask(question.clone()), "question": question,
                    "expected_answer": answers[i % answers.len()]})
            }));
        }
        _ => {}
    }
    rows
}

struct KillGroup(u32);

impl Drop for KillGroup {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").args(["-s", "TERM", "--", &format!("-{}", self.0)]).status();
    }
}

fn path_with(venv: &Path) -> std::ffi::OsString {
    let mut paths = vec![venv.join("bin")];
    paths.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    std::env::join_paths(paths).unwrap()
}

async fn wait_for(log: &Path, needle: &str, timeout: Duration, dir: &Path) {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default()
            + &std::fs::read_to_string(dir.join("env_start.err")).unwrap_or_default();
        if text.contains(needle) {
            return;
        }
        if started.elapsed() > timeout {
            let err = std::fs::read_to_string(dir.join("env_start.err")).unwrap_or_default();
            let tail: String = err.chars().rev().take(3000).collect::<String>().chars().rev().collect();
            panic!("gym env start was not ready within {timeout:?}:\n{text}\n{tail}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
