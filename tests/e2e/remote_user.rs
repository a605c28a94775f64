//! A simulated user plugged in from outside (`--user remote`), through the real binary.
//!
//! tau2's own `UserSimulator` behind Parley's user contract (`integrations/tau2-user/server.py`,
//! tau2's source from `../shared/peers/tau2-bench`) plays the user of tau2 tasks, its model the
//! stub; the same tasks are then played with Parley's built-in tau2 user (`--user llm`) on the
//! same stub. The stub's answer follows from what it is asked, so the same prompts give the same
//! turns: every transcript must be the same, message for message (the user's texts, its tool
//! calls with their ids and arguments, its stops, and the agent's turns between), and the review
//! must find the same faults (a second run, its stub user failing on purpose in most
//! conversations, is flagged and masked session by session as the built-in user's is). Mock
//! and telecom give the user tools of its own, airline none.
//!
//! Without tau2's venv, source and data it fails under `PARLEY_REQUIRE_PEERS=1` and skips loudly
//! otherwise. The last test needs no peer: a remote user that is not there.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{Stub, Workdir, ok, read_jsonl, text};
use crate::tau2_fidelity::{peers, shared, tau2_data_dir};

/// `integrations/tau2-user/server.py`, its model the stub at `model_url`; killed when dropped.
struct Tau2User {
    child: Child,
    url: String,
}

impl Tau2User {
    fn start(work: &Workdir, venv: &Path, data: &Path, model_url: &str) -> Tau2User {
        let port_file = work.path("tau2-user.port");
        let child = Command::new(venv.join("bin/python"))
            .arg(crate::harness::root().join("integrations/tau2-user/server.py"))
            .args(["--model", "stub-user", "--base-url", model_url, "--port", "0", "--port-file"])
            .arg(&port_file)
            .env("PYTHONPATH", shared().join("peers/tau2-bench/src"))
            .env("TAU2_DATA_DIR", tau2_data_dir(work, data))
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start integrations/tau2-user/server.py");
        let mut user = Tau2User { child, url: String::new() };
        // Importing tau2 and LiteLLM takes seconds.
        let started = Instant::now();
        while user.url.is_empty() {
            if let Ok(port) = std::fs::read_to_string(&port_file) {
                user.url = format!("http://127.0.0.1:{}", port.trim());
            } else if let Ok(Some(status)) = user.child.try_wait() {
                panic!("tau2's user server exited with {status} before it listened");
            } else {
                assert!(started.elapsed() < Duration::from_secs(120), "tau2's user server did not listen in 120 s");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        user
    }
}

impl Drop for Tau2User {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One run of `tasks` tasks of `domain` with the stub as the agent's model and `user` as the
/// user; its sessions as chat rows (in task order) and its summary.
fn play(work: &Workdir, data: &Path, stub: &Stub, domain: &str, tasks: usize, user: &[&str]) -> (Vec<Value>, String) {
    let (env, tasks) = (format!("tau2:{domain}"), tasks.to_string());
    let tag = user[1];
    let (db, out, chat) =
        (format!("{domain}-{tag}.db"), format!("{domain}-{tag}.jsonl"), format!("{domain}-{tag}.chat"));
    let mut args = vec!["run", "--env", &env, "--data-dir", data.to_str().unwrap(), "--base-url", &stub.url];
    args.extend(["--num-tasks", &tasks, "--db", &db, "--out", &out, "-c", "4"]);
    args.extend(user);
    let summary = ok(&work.parley(&args));
    ok(&work.parley(&["export", "1", "--db", &db, "--format", "openai-chat", "--out", &chat]));
    (read_jsonl(&work.path(&chat)), summary)
}

/// The summary's line that starts with `label`, if any.
fn line<'a>(summary: &'a str, label: &str) -> Option<&'a str> {
    summary.lines().find(|l| l.starts_with(label))
}

#[test]
fn tau2s_own_user_behind_the_contract_says_what_parleys_tau2_user_says() {
    let Some((venv, data)) = peers() else { return };
    let work = Workdir::new();
    // The user takes one of its tools (when it has any) and then speaks, three turns, then stops;
    // the agent calls one tool and then answers.
    let stub = Stub::start(&["--tool-calls", "1", "--user-turns", "3"]);
    let tau2 = Tau2User::start(&work, &venv, &data, &stub.url);
    let mut user_turns = 0;
    for (domain, tasks) in [("mock", 5), ("telecom", 5), ("airline", 5)] {
        let (remote, remote_summary) =
            play(&work, &data, &stub, domain, tasks, &["--user", "remote", "--user-url", &tau2.url]);
        let (llm, llm_summary) = play(&work, &data, &stub, domain, tasks, &["--user", "llm"]);
        assert_eq!(remote.len(), tasks, "{domain}: one row per session");
        for (i, (theirs, ours)) in remote.iter().zip(&llm).enumerate() {
            assert_eq!(theirs["messages"], ours["messages"], "{domain}, session {i}: tau2's user and Parley's differ");
        }
        let users: Vec<&Value> =
            remote.iter().flat_map(|row| row["messages"].as_array().unwrap()).filter(|m| m["role"] == "user").collect();
        // Every session ends with the user's stop, after its three turns.
        for row in &remote {
            let last = row["messages"].as_array().unwrap().last().unwrap();
            assert!(last["content"].as_str().is_some_and(|t| t.ends_with("###STOP###")), "{domain}: {last}");
        }
        let calls = users.iter().filter(|m| m.get("tool_calls").is_some()).count();
        match domain {
            "airline" => assert_eq!(calls, 0, "airline's user has no tools"),
            _ => assert!(calls >= tasks, "{domain}: the user calls its own tools ({calls} calls)"),
        }
        user_turns += users.len();
        for label in ["terminations", "user faults", "reward"] {
            assert_eq!(line(&remote_summary, label), line(&llm_summary, label), "{domain}: {label}");
        }
    }
    assert!(user_turns >= 60, "{user_turns} user turns compared");
}

/// The tasks of the run in `db` whose user broke each rule, as `parley sessions` lists them.
fn faults(work: &Workdir, db: &str) -> Vec<(&'static str, Vec<String>)> {
    let rules = ["empty", "repeats", "speaks_as_agent", "leaks_instructions", "ends_early", "talks_after_stop"];
    let tasks = |listing: String| -> Vec<String> {
        listing.lines().skip(1).filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned)).collect()
    };
    rules
        .into_iter()
        .map(|rule| (rule, tasks(ok(&work.parley(&["sessions", "1", "--db", db, "--user-fault", rule])))))
        .collect()
}

#[test]
fn tau2s_own_user_is_reviewed_and_masked_as_parleys_tau2_user_is() {
    let Some((venv, data)) = peers() else { return };
    let work = Workdir::new();
    // A stub user that fails on purpose in most conversations, the same ones whoever asks it,
    // since the draw follows from the prompt.
    let modes = ["repeats", "speaks_as_agent", "leaks_instructions", "ends_early", "talks_after_stop"];
    let mut args = vec!["--tool-calls", "1", "--user-turns", "3"];
    let modes: Vec<String> = modes.iter().map(|m| format!("{m}:0.2")).collect();
    for mode in &modes {
        args.extend(["--user-fault", mode]);
    }
    let stub = Stub::start(&args);
    let tau2 = Tau2User::start(&work, &venv, &data, &stub.url);
    let (remote, remote_summary) =
        play(&work, &data, &stub, "airline", 10, &["--user", "remote", "--user-url", &tau2.url]);
    let (llm, llm_summary) = play(&work, &data, &stub, "airline", 10, &["--user", "llm"]);
    for (i, (theirs, ours)) in remote.iter().zip(&llm).enumerate() {
        assert_eq!(theirs["messages"], ours["messages"], "session {i}: tau2's user and Parley's differ");
    }
    let flagged = line(&remote_summary, "user faults").expect("some sessions' users failed their part");
    assert_eq!(Some(flagged), line(&llm_summary, "user faults"));
    let found = faults(&work, "airline-remote.db");
    assert_eq!(found, faults(&work, "airline-llm.db"), "the same findings, task by task");
    assert!(found.iter().filter(|(_, tasks)| !tasks.is_empty()).count() >= 2, "several rules broken: {found:?}");
}

#[test]
fn a_remote_user_that_is_not_there_fails_its_sessions_naming_its_url() {
    let work = Workdir::new();
    work.tasks(2);
    let stub = Stub::start(&[]);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let out = crate::harness::run(&work, &stub, &["--user", "remote", "--user-url", &url, "--max-retries", "0"]);
    let summary = ok(&out);
    assert!(summary.contains("infrastructure_error 2"), "{summary}");
    let failures = read_jsonl(&work.path("out_failures.jsonl"));
    assert_eq!(failures.len(), 2, "{failures:?}");
    for failure in &failures {
        assert_eq!(failure["_ng_failure_class"], "connection");
        let reason = failure["_ng_failure_message"].as_str().unwrap_or_default();
        assert!(reason.contains(&format!("the remote user at {url}/turn")), "{reason}");
    }

    // Without its URL, a usage error before anything starts.
    let out = work.parley(&["run", "--env", "multi-step", "--tasks", "tasks.jsonl", "--user", "remote"]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--user remote needs --user-url URL"), "{}", text(&out.stderr));
}
