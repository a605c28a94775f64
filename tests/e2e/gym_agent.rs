//! NeMo Gym starts Parley as one of its agent servers (`integrations/nemo-gym`), and NeMo Gym's
//! own `gym eval run` collects rollouts through it: through its `legacy_agent` environment
//! server, which relays `/run` to Parley, then `/aggregate_metrics`. Every row comes back once,
//! with the rewards `parley run` gives on the same rows and stub.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{PARLEY, Stub, Workdir, ok, read_jsonl, root, run};
use crate::remote::peer;

/// NeMo Gym's head server for this test, off its default port so that other tests that start
/// NeMo Gym can run beside it.
const HEAD_PORT: u16 = 11_317;

/// Kills `gym env start` and everything it started (its process group) when dropped.
struct Group(std::process::Child);

impl Drop for Group {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let term = Command::new("kill").args(["-TERM", "--", &group]).status();
        std::thread::sleep(Duration::from_millis(500));
        let kill = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.0.wait();
        eprintln!("stopped NeMo Gym's process group {group}: {term:?} {kill:?}");
    }
}

/// Starts NeMo Gym's servers (Parley among them, with `parley_args`, a Hydra list, and its
/// policy at `policy`) with their head on `head_port`, collects `rows.jsonl` with `gym eval run`,
/// and stops them: the rows collected, and the run's log.
pub(crate) fn collect(
    work: &Workdir,
    venv: &Path,
    policy: &str,
    parley_args: &str,
    head_port: u16,
) -> (Vec<Value>, String) {
    // One shared venv for the servers, as NeMo Gym's `skip_venv_if_present` allows.
    for server in ["responses_api_agents/parley", "environment_servers/legacy_agent"] {
        let at = work.path("venvs").join(server);
        std::fs::create_dir_all(&at).unwrap();
        std::os::unix::fs::symlink(venv, at.join(".venv")).unwrap();
    }
    std::fs::write(
        work.path("env.yaml"),
        format!("policy_base_url: {policy}\npolicy_api_key: dummy\npolicy_model_name: stub-model\n"),
    )
    .unwrap();
    let integration = root().join("integrations/nemo-gym");
    let path = format!("{}:{}", venv.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let log = work.path("env_start.log");
    let mut start = Command::new(venv.join("bin/gym"));
    start
        .args(["env", "start", "--config"])
        .arg(integration.join("responses_api_agents/parley/configs/parley.yaml"))
        .arg(format!("+uv_venv_dir={}", work.path("venvs").display()))
        .arg("+skip_venv_if_present=true")
        .arg(format!("+head_server.port={head_port}"))
        // The configuration's arguments, with the database in this test's folder.
        .arg(format!("++parley_agent.responses_api_agents.parley.parley_args={parley_args}"))
        .current_dir(work.dir.path())
        .env("PATH", &path)
        .env("NEMO_GYM_EXTRA_ROOTS", &integration)
        .env("PARLEY_BIN", PARLEY)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(work.path("env_start.err")).unwrap());
    let mut group = Group(std::os::unix::process::CommandExt::process_group(&mut start, 0).spawn().unwrap());
    let begun = Instant::now();
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("servers ready") {
        let err = std::fs::read_to_string(work.path("env_start.err")).unwrap_or_default();
        let exited = group.0.try_wait().ok().flatten();
        assert!(exited.is_none(), "gym env start exited ({exited:?}):\n{err}");
        assert!(begun.elapsed() < Duration::from_secs(240), "gym env start did not get ready:\n{err}");
        std::thread::sleep(Duration::from_millis(500));
    }

    let output = work.path("gym.jsonl");
    let status = Command::new(venv.join("bin/gym"))
        .args(["eval", "run", "--no-serve", "--concurrency", "3", "--input"])
        .arg(work.path("rows.jsonl"))
        .arg("--output")
        .arg(&output)
        .arg(format!("+head_server.port={head_port}"))
        .current_dir(work.dir.path())
        .env("PATH", &path)
        .stdout(std::fs::File::create(work.path("eval.log")).unwrap())
        .stderr(Stdio::inherit())
        .status()
        .unwrap();
    let eval_log = std::fs::read_to_string(work.path("eval.log")).unwrap_or_default();
    assert!(status.success(), "gym eval run: {status}\n{eval_log}");
    drop(group);
    (read_jsonl(&output), eval_log)
}

#[test]
fn nemo_gym_collects_rollouts_through_parley_as_its_agent_server() {
    let venv = root().join(".venv-nemo-gym");
    let Some(venv) = peer(venv.clone(), venv.join(".parley-ready-0.7.0")) else { return };
    let work = Workdir::new();
    work.tasks(6);
    // The rows name Parley's agent, as a trainer's rows do.
    let rows: Vec<String> = read_jsonl(&work.path("tasks.jsonl"))
        .into_iter()
        .map(|mut row| {
            row["agent_ref"] = serde_json::json!({"type": "responses_api_agents", "name": "parley_agent"});
            row.to_string()
        })
        .collect();
    std::fs::write(work.path("rows.jsonl"), rows.join("\n") + "\n").unwrap();
    // The policy answers as NeMo RL's vLLM server does, token ids and log-probs included.
    let stub = Stub::start(&["--token-ids"]);
    ok(&run(&work, &stub, &["--token-ids"]));
    let expected = read_jsonl(&work.path("out.jsonl"));

    let args = format!("[--env,multi-step,--db,{},--token-ids]", work.path("parley-serve.db").display());
    let (collected, eval_log) = collect(&work, &venv, &stub.url, &args, HEAD_PORT);
    assert_eq!(collected.len(), 6, "every row once:\n{eval_log}");
    for row in &collected {
        let index = &row["_ng_task_index"];
        let want = expected.iter().find(|e| e["_ng_task_index"] == *index).unwrap();
        assert_eq!(row["reward"], want["reward"], "task {index}");
        assert_eq!(row["response"]["output"], want["response"]["output"], "task {index}: the same trajectory");
        assert!(row["_parley_session"].is_i64(), "answered by Parley: {row}");
        // What NeMo RL trains on: every model call's turn trainable, the whole row contiguous.
        assert_eq!(crate::tokens::check_trainable(row), Ok(3), "task {index}: {row}");
    }
    assert!(work.path("parley-serve.db").is_file(), "the served sessions were recorded where the arguments said");
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(work.path("gym_aggregate_metrics.json")).unwrap_or_default())
            .unwrap_or(Value::Null);
    assert!(!metrics.is_null(), "NeMo Gym asked Parley for its aggregate metrics:\n{eval_log}");
}
