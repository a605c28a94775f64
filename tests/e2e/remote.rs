//! Remote environments through the binary: NeMo Gym's own resources servers, started by Parley
//! from a NeMo Gym config, and an MCP reference server. The peers come from `.ci/setup-peers`;
//! without them the tests say so loudly and skip, or fail under `PARLEY_REQUIRE_PEERS=1`.

use parley_core::SessionStatus;
use std::path::{Path, PathBuf};

use crate::harness::{Stub, Workdir, ok, read_jsonl, root, text};

pub(crate) fn peer(path: PathBuf, ready: PathBuf) -> Option<PathBuf> {
    if ready.is_file() {
        return Some(path);
    }
    crate::harness::skip("the test peers are not installed; run .ci/setup-peers");
    None
}

/// `parley run` on `rows.jsonl` against NeMo Gym's `server`, which Parley starts from its config
/// with the `venv`'s Python, and the stub, storing in `parley.db` and `out.jsonl`.
fn gym_run(venv: &Path, server: &Path, stub: &Stub, extra: &[&str]) -> Vec<String> {
    let config = server.join("configs/example_multi_step.yaml");
    let mut args: Vec<String> = ["run", "--env", "nemo-gym", "--config"].map(String::from).into();
    args.push(config.to_str().unwrap().to_owned());
    args.extend(["--gym-venv".to_owned(), venv.to_str().unwrap().to_owned()]);
    args.extend(
        ["--tasks", "rows.jsonl", "--base-url", &stub.url, "--db", "parley.db", "--out", "out.jsonl"].map(String::from),
    );
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

#[tokio::test]
async fn parley_starts_nemo_gyms_servers_from_its_config_and_verifies_with_them() {
    let venv = root().join(".venv-nemo-gym");
    let Some(venv) = peer(venv.clone(), venv.join(".parley-ready-0.7.0")) else { return };
    let server = venv.join("lib/python3.13/site-packages/resources_servers/example_multi_step");
    let work = Workdir::new();
    // Five of NeMo Gym's own rows, with the first one's expectation set to what the stub reports.
    let rows: Vec<String> = std::fs::read_to_string(server.join("data/example.jsonl"))
        .unwrap()
        .lines()
        .take(5)
        .enumerate()
        .map(|(i, line)| {
            let mut row: serde_json::Value = serde_json::from_str(line).unwrap();
            if i == 0 {
                row["expected_synonym_values"] = serde_json::json!([0]);
            }
            row.to_string()
        })
        .collect();
    std::fs::write(work.path("rows.jsonl"), rows.join("\n") + "\n").unwrap();
    let stub = Stub::start(&[]);
    let args = gym_run(&venv, &server, &stub, &[]);
    // The run's servers inherit its environment: a mark of this test's own finds them.
    let mark = work.dir.path().to_str().unwrap().to_owned();
    let out = ok(&work.parley_with_env(&args.iter().map(String::as_str).collect::<Vec<_>>(), &[(MARK, &mark)]));
    assert!(out.contains("terminations   agent_stop 5"), "{out}");
    let rows = read_jsonl(&work.path("out.jsonl"));
    assert_eq!(rows.len(), 5);
    for row in &rows {
        let first = row["_ng_task_index"] == 0;
        // The verify fields came from NeMo Gym's own server.
        assert_eq!(row["reward"], if first { 1.0 } else { 0.0 }, "{row}");
        assert_eq!(row["accuracy"], first);
        assert_eq!(row["parsed_synonym_values"], serde_json::json!([0]));
        assert!(row["set_overlap"].is_number());
        assert_eq!(row["response"]["output"][1]["output"], r#"{"synonym_value":765}"#, "tool output from the server");
    }
    // The servers Parley started are gone.
    assert_eq!(marked(&mark), Vec::<u32>::new(), "servers left running");
}

/// The variable that marks the processes a test starts, and theirs.
const MARK: &str = "PARLEY_TEST_MARK";

/// The processes running (not ended) whose environment holds `MARK=mark`.
fn marked(mark: &str) -> Vec<u32> {
    let entry = format!("{MARK}={mark}");
    let pids = std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok());
    pids.filter(|pid| {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ended = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()) == Some("Z");
        !ended && environ.split(|b| *b == 0).any(|e| e == entry.as_bytes())
    })
    .collect()
}

/// A `parley` killed outright (SIGKILL: none of its destructors run) leaves none of the NeMo Gym
/// servers it started behind: each asked the kernel to stop it when its parent is gone.
#[test]
fn the_servers_of_a_parley_killed_outright_stop_with_it() {
    let venv = root().join(".venv-nemo-gym");
    let Some(venv) = peer(venv.clone(), venv.join(".parley-ready-0.7.0")) else { return };
    let server = venv.join("lib/python3.13/site-packages/resources_servers/example_multi_step");
    let work = Workdir::new();
    let rows = std::fs::read_to_string(server.join("data/example.jsonl")).unwrap();
    std::fs::write(work.path("rows.jsonl"), rows.lines().take(2).collect::<Vec<_>>().join("\n") + "\n").unwrap();
    // A model that takes a minute keeps the run, and the servers, going until the kill.
    let stub = Stub::start(&["--latency-ms", "60000"]);
    let args = gym_run(&venv, &server, &stub, &[]);
    let mark = work.dir.path().to_str().unwrap().to_owned();
    let mut parley = std::process::Command::new(crate::harness::PARLEY)
        .current_dir(work.dir.path())
        .args(&args)
        .env(MARK, &mark)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Its servers, once each runs its entry point as `python app.py` (the request to the kernel
    // is made before).
    let servers = || -> Vec<u32> {
        let running_app = |pid: &u32| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmdline.split(|b| *b == 0).nth(1) == Some(b"app.py".as_slice())
        };
        marked(&mark).into_iter().filter(running_app).collect()
    };
    let since = std::time::Instant::now();
    let started = loop {
        let started = servers();
        if !started.is_empty() {
            break started;
        }
        assert!(since.elapsed() < std::time::Duration::from_secs(60), "parley started no server");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    // Up and serving: the servers answered, and the sessions are waiting on the model.
    while stub.stats()["requests"].as_u64().unwrap_or(0) == 0 {
        assert!(since.elapsed() < std::time::Duration::from_secs(120), "the run never called the model");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    parley.kill().unwrap(); // SIGKILL
    parley.wait().unwrap();
    let since = std::time::Instant::now();
    while !marked(&mark).is_empty() {
        if since.elapsed() > std::time::Duration::from_secs(20) {
            let left = marked(&mark);
            for pid in &left {
                let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            }
            panic!("servers {left:?} of {started:?} outlived the parley that started them");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[tokio::test]
async fn an_mcp_server_over_stdio_is_an_environment() {
    let mcp = root().join(".mcp-peers");
    let script = mcp.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let Some(script) = peer(script, mcp.join(".parley-ready")) else { return };
    let work = Workdir::new();
    let row = serde_json::json!({"responses_create_params": {"input": "Echo something."}, "expected_answer": "Result"});
    std::fs::write(work.path("rows.jsonl"), format!("{row}\n{row}\n")).unwrap();
    let stub = Stub::start(&["--tool-calls", "1"]);
    let command = format!("node {} stdio", script.display());
    let out = ok(&work.parley(&[
        "run",
        "--env",
        "mcp",
        "--mcp-stdio",
        &command,
        "--tasks",
        "rows.jsonl",
        "--base-url",
        &stub.url,
        "--db",
        "parley.db",
        "--out",
        "out.jsonl",
    ]));
    assert!(out.contains("terminations   agent_stop 2"), "{out}");
    let db = work.db().await;
    let calls: Vec<(String, String)> =
        sqlx::query_as("SELECT name, output FROM tool_calls ORDER BY session_id, seq").fetch_all(&db).await.unwrap();
    assert_eq!(calls.len(), 2, "one MCP call per session: {calls:?}");
    // The stub answers with `Result: <tool output>`, which contains the expected answer.
    let rows = read_jsonl(&work.path("out.jsonl"));
    assert!(rows.iter().all(|r| r["reward"] == 1.0), "{rows:?}");
}

#[test]
fn remote_environments_need_their_servers_named() {
    let work = Workdir::new();
    std::fs::write(work.path("rows.jsonl"), "{\"responses_create_params\": {\"input\": \"x\"}}\n").unwrap();
    for (args, needle) in [
        (vec!["run", "--env", "nemo-gym", "--tasks", "rows.jsonl"], "--config CONFIG.yaml or --server URL"),
        (vec!["run", "--env", "nemo-gym", "--server", "localhost:1", "--tasks", "rows.jsonl"], "localhost:1"),
        (vec!["run", "--env", "mcp", "--tasks", "rows.jsonl"], "--mcp-stdio"),
        (vec!["run", "--env", "mcp", "--mcp-http", "http://127.0.0.1:1/mcp"], "--tasks"),
    ] {
        let out = work.parley(&args);
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert!(text(&out.stderr).contains(needle), "{args:?}: {}", text(&out.stderr));
    }
}

#[tokio::test]
async fn a_resources_server_that_dies_mid_run_fails_only_its_sessions_and_they_retry_later() {
    let venv = root().join(".venv-nemo-gym");
    let Some(venv) = peer(venv.clone(), venv.join(".parley-ready-0.7.0")) else { return };
    let server = venv.join("lib/python3.13/site-packages/resources_servers/example_multi_step");
    let work = Workdir::new();
    // NeMo Gym's five example rows, eight times over.
    let rows: Vec<&str> = std::fs::read_to_string(server.join("data/example.jsonl")).unwrap().leak().lines().collect();
    let rows: Vec<&str> = rows.iter().cycle().take(40).copied().collect();
    std::fs::write(work.path("rows.jsonl"), rows.join("\n") + "\n").unwrap();
    let stub = Stub::start(&["--latency-ms", "100"]);
    let run_args = gym_run(&venv, &server, &stub, &["-c", "2", "--max-retries", "1"]);
    let child = std::process::Command::new(crate::harness::PARLEY)
        .current_dir(work.dir.path())
        .args(run_args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once some sessions have finished, the server is killed as an out-of-memory kill would.
    let db_path = work.path("parley.db");
    let started = std::time::Instant::now();
    loop {
        assert!(started.elapsed().as_secs() < 120, "the run never got going");
        std::thread::sleep(std::time::Duration::from_millis(200));
        if !db_path.exists() {
            continue;
        }
        let db = work.db().await;
        let done: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sessions WHERE status = 'finished'")
            .fetch_one(&db)
            .await
            .unwrap_or(0);
        db.close().await;
        if done >= 6 {
            break;
        }
    }
    // The server is the one child process of the run.
    let killed = std::process::Command::new("pkill").args(["-KILL", "-P", &child.id().to_string()]).status();
    assert!(killed.unwrap().success(), "the server was running");
    let out = child.wait_with_output().unwrap();
    let stdout = ok(&out);

    let db = work.db().await;
    let rows: Vec<(String, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT status, failure, error FROM sessions").fetch_all(&db).await.unwrap();
    assert_eq!(rows.len(), 40);
    assert!(rows.iter().all(|(status, _, _)| status == SessionStatus::Finished.as_str()), "every session ended");
    let failed: Vec<&String> = rows.iter().filter_map(|(_, f, e)| f.as_ref().map(|_| e.as_ref().unwrap())).collect();
    let scored = rows.len() - failed.len();
    assert!(scored >= 6, "the sessions before the kill kept their results");
    assert!(!failed.is_empty(), "the sessions after the kill failed");
    assert!(rows.iter().all(|(_, f, _)| f.is_none() || f.as_deref() == Some("environment_error")));
    assert!(failed.iter().all(|e| e.contains("example_multi_step")), "the error names the server: {failed:?}");
    assert!(stdout.contains(&format!("failures       environment_error {}", failed.len())), "{stdout}");

    // With the server back (Parley starts it again from the run's config), the failed sessions
    // are retried from their last committed turn and all finish.
    let out = ok(&work.parley(&["resume", "1", "--db", "parley.db", "--retry-failed"]));
    assert!(out.contains("terminations   agent_stop 40"), "{out}");
    assert!(!out.contains("failures       "), "{out}");
    assert_eq!(read_jsonl(&work.path("out.jsonl")).len(), 40);
}
