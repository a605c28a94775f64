//! The full comparison: NeMo Gym's own pipeline (`gym env start` + `gym eval run` with
//! `simple_agent` and `gymnasium_agent`, its model server in front of the same deterministic
//! stub) against Parley driving the same resources servers, row by row. Both policies are the
//! stub, so both trajectories are the same and every reward must be equal.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use parley_core::{Environment, UserSimulator};
use parley_remote::{GymnasiumEnvironment, GymnasiumUser, NemoGymEnvironment};
use parley_stub::{AnswerKey, StubConfig};
use serde_json::Value;

use crate::agents::stub_agent;
use crate::{driver, gymnasium, peers};

/// (resources server folder, agent instance, resources instance, Gymnasium?)
const CASES: [(&str, &str, &str, bool); 6] = [
    ("example_multi_step", "example_multi_step_simple_agent", "example_multi_step_resources_server", false),
    (
        "example_session_state_mgmt",
        "example_session_state_mgmt_simple_agent",
        "example_session_state_mgmt_resources_server",
        false,
    ),
    ("workplace_assistant", "workplace_assistant_simple_agent", "workplace_assistant", false),
    ("calendar", "calendar_simple_agent", "calendar", false),
    ("mcqa", "mcqa_simple_agent", "mcqa", false),
    ("example_multi_turn_gymnasium", "example_multi_turn_gymnasium_agent", "example_multi_turn_gymnasium", true),
];

#[tokio::test]
async fn rewards_equal_gym_eval_run_row_by_row() {
    let Some(venv) = peers::venv("the gym eval run comparison") else { return };
    if std::net::TcpListener::bind("127.0.0.1:11000").is_err() {
        panic!("port 11000 (NeMo Gym's head server) is taken; stop whatever holds it");
    }
    // Every Gymnasium answer for the other servers; mcqa's rows are answered from the rows
    // themselves: the right letter, a wrong one (40%) or none (20%), so its rewards differ by row.
    let final_text = format!("{} \\boxed{{E}}", gymnasium::ALL_ANSWERS);
    let mcqa_rows = peers::site_packages(&venv).join("resources_servers/mcqa/data/example.jsonl");
    let mut answers = AnswerKey::from_jsonl(&std::fs::read_to_string(mcqa_rows).unwrap(), "expected_answer").unwrap();
    answers.format = "Thinking done. \\boxed{{answer}}".into();
    (answers.wrong, answers.malformed) = (0.4, 0.2);
    let config = StubConfig { final_text: Some(final_text), answers: Some(Arc::new(answers)), ..StubConfig::default() };
    let (base, stop) = peers::stub(config).await;
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let mut configs = vec!["responses_api_models/openai_model/configs/openai_model.yaml".to_owned()];
    let mut server_dirs = vec![
        "responses_api_models/openai_model".to_owned(),
        "responses_api_agents/simple_agent".to_owned(),
        "responses_api_agents/gymnasium_agent".to_owned(),
        "environment_servers/legacy_agent".to_owned(),
    ];
    for (folder, ..) in CASES {
        configs.push(format!("resources_servers/{folder}/configs/{folder}.yaml"));
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
    let mut table = Vec::new();
    for (folder, agent_name, resources, gymnasium) in CASES {
        let input = peers::site_packages(&venv).join("resources_servers").join(folder).join("data/example.jsonl");
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
        let gym_rewards: BTreeMap<usize, f64> =
            gym_rows.iter().map(|(i, r)| (*i, r["reward"].as_f64().unwrap())).collect();

        let tasks = peers::tasks(&venv, folder, usize::MAX);
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
        // ...) must equal the one in NeMo Gym's output row.
        for (task, reward) in tasks.iter().zip(&outcomes) {
            for (key, value) in &reward.breakdown {
                if let Some(theirs) = gym_rows[&task.index].get(key) {
                    assert_eq!(value, theirs, "{folder} row {}: `{key}` differs", task.index);
                }
            }
        }
        eprintln!("{folder}: NeMo Gym {:?} | Parley {:?}", gym_rewards.values(), parley_rewards.values());
        if folder == "mcqa" {
            let distinct: std::collections::BTreeSet<String> = gym_rewards.values().map(|r| r.to_string()).collect();
            assert!(distinct.len() > 1, "mcqa's rewards are not all alike: {gym_rewards:?}");
        }
        table.push((folder, gym_rewards.clone(), parley_rewards.clone()));
        assert_eq!(parley_rewards, gym_rewards, "{folder}: Parley's rewards differ from gym eval run's");
    }
    let rows: usize = table.iter().map(|(_, g, _)| g.len()).sum();
    assert!(rows >= 20, "{rows} rows compared");
    let _ = stop.send(());
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
