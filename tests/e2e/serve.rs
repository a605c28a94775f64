//! `parley serve`: NeMo Gym's `/run` through the real binary on a loopback port, against the
//! stub: verify responses with the rewards `parley run` gives, admission (503), a bearer token
//! off loopback, a SIGTERM drain, Prometheus metrics, and malformed bodies named, never a panic.
//! (A client that goes away mid-session is in `hostile.rs`.)

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{PARLEY, Stub, Workdir, ok, read_jsonl, run, text};
use crate::http::{Answer, request};

/// `parley serve` on a free port, killed when dropped.
pub(crate) struct Serve {
    child: Child,
    pub(crate) address: String,
}

impl Serve {
    pub(crate) fn start(work: &Workdir, stub: &Stub, extra: &[&str]) -> Serve {
        Serve::start_with_env(work, stub, extra, &[])
    }

    /// The same, with variables set for the service's process.
    pub(crate) fn start_with_env(work: &Workdir, stub: &Stub, extra: &[&str], env: &[(&str, &str)]) -> Serve {
        let mut child = Command::new(PARLEY)
            .current_dir(work.dir.path())
            .args(["serve", "--listen", "127.0.0.1:0", "--base-url", &stub.url, "--model", "stub-model"])
            .args(["--db", "serve.db"])
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(work.path("serve.log")).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert!(
            line.starts_with("http://127.0.0.1:"),
            "{line}: {}",
            std::fs::read_to_string(work.path("serve.log")).unwrap()
        );
        Serve { child, address: line.trim().trim_start_matches("http://").to_owned() }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `POST /run` with a task row.
pub(crate) fn post_run(address: &str, row: &str) -> Answer {
    crate::http::post(address, "/run", row)
}

#[test]
fn run_answers_verify_responses_with_the_rewards_of_parley_run() {
    let work = Workdir::new();
    work.tasks(4);
    let stub = Stub::start(&[]);
    ok(&run(&work, &stub, &[]));
    let expected: Vec<Value> = read_jsonl(&work.path("out.jsonl"));
    let serve = Serve::start(&work, &stub, &[]);
    assert_eq!(request(&serve.address, "GET", "/", "", &[]).0, 200);
    let rows = std::fs::read_to_string(work.path("tasks.jsonl")).unwrap();
    let mut sessions = Vec::new();
    for (i, row) in rows.lines().enumerate() {
        let (status, _, body) = post_run(&serve.address, row);
        assert_eq!(status, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        let want = expected.iter().find(|r| r["_ng_task_index"] == i).unwrap();
        assert_eq!(answer["reward"], want["reward"], "row {i}");
        assert_eq!(answer["response"]["output"], want["response"]["output"], "row {i}: the same trajectory");
        let source: Value = serde_json::from_str(row).unwrap();
        assert_eq!(answer["id"], source["id"], "the row's fields come back");
        sessions.push(answer["_parley_session"].as_i64().unwrap());
    }
    // Each served session is stored like a run's.
    let show = ok(&work.parley(&["show", &sessions[0].to_string(), "--db", "serve.db"]));
    assert!(show.contains("termination  agent_stop"), "{show}");
    let (status, head, metrics) = request(&serve.address, "GET", "/metrics", "", &[]);
    assert_eq!(status, 200);
    assert!(head.contains("text/plain"), "{head}");
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        let (name, value) = line.rsplit_once(' ').unwrap();
        assert!(value.parse::<f64>().is_ok(), "a sample's value is a number: {line}");
        assert!(name.chars().next().unwrap().is_ascii_alphabetic(), "{line}");
    }
    assert!(metrics.contains("parley_sessions_finished_total{termination=\"agent_stop\",failure=\"\"} 4"), "{metrics}");
    assert!(metrics.contains("parley_run_seconds_count 4"), "{metrics}");

    // A served run's trajectories take another reward as any run's do: its rows are stored.
    let rescored = ok(&work.parley(&["rescore", "1", "--db", "serve.db", "--reward", "environment:weight=0.5"]));
    assert!(rescored.contains("rescored 4 sessions of run 1"), "{rescored}");
    let diff = ok(&work.parley(&["scores", "diff", "1", "1", "2", "--db", "serve.db", "--json"]));
    let diff: Value = serde_json::from_str(&diff).unwrap();
    assert_eq!(diff["compared"], 4, "{diff}");
    let (before, after) = (diff["mean_before"].as_f64().unwrap(), diff["mean_after"].as_f64().unwrap());
    assert!(before > 0.0 && (after - before / 2.0).abs() < 1e-12, "{diff}");
}

#[test]
fn malformed_bodies_are_named_with_a_400() {
    let work = Workdir::new();
    let stub = Stub::start(&[]);
    let serve = Serve::start(&work, &stub, &[]);
    for (body, needle) in [
        ("{not json", "not JSON"),
        ("[1, 2]", "task row"),
        ("{\"id\": 1}", "responses_create_params"),
        ("{\"responses_create_params\": {\"input\": 7}}", "input"),
    ] {
        let (status, _, answer) = post_run(&serve.address, body);
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(answer.contains(needle), "{body}: {answer}");
    }
    assert_eq!(request(&serve.address, "GET", "/", "", &[]).0, 200, "still serving");
}

#[test]
fn an_overloaded_service_answers_503_with_retry_after() {
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&["--latency-ms", "700"]);
    let serve = Serve::start(&work, &stub, &["--concurrency", "1", "--queue", "1"]);
    let row = work.first_task_row();
    let answers: Vec<(u16, String, String)> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..4)
            .map(|i| {
                let (address, row) = (serve.address.clone(), row.clone());
                scope.spawn(move || {
                    std::thread::sleep(Duration::from_millis(50 * i));
                    post_run(&address, &row)
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 2, "one running, one queued: {statuses:?}");
    let refused: Vec<_> = answers.iter().filter(|a| a.0 == 503).collect();
    assert_eq!(refused.len(), 2, "{statuses:?}");
    assert!(refused.iter().all(|a| a.1.contains("retry-after: 1")), "{:?}", refused[0].1);
}

#[test]
fn off_loopback_a_bearer_token_is_required() {
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&[]);
    let out = work.parley(&["serve", "--listen", "0.0.0.0:0", "--base-url", &stub.url]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--token-env"), "{}", text(&out.stderr));

    // A token too short to guard a port other machines reach is refused.
    let short = Command::new(PARLEY)
        .current_dir(work.dir.path())
        .args(["serve", "--listen", "0.0.0.0:0", "--token-env", "PARLEY_TEST_TOKEN", "--base-url", &stub.url])
        .env("PARLEY_TEST_TOKEN", "x")
        .output()
        .unwrap();
    assert_eq!(short.status.code(), Some(64));
    assert!(text(&short.stderr).contains("at least 16"), "{}", text(&short.stderr));

    let mut child = Command::new(PARLEY)
        .current_dir(work.dir.path())
        .args(["serve", "--listen", "0.0.0.0:0", "--token-env", "PARLEY_TEST_TOKEN", "--base-url", &stub.url])
        .env("PARLEY_TEST_TOKEN", "s3cret-token-0123456789")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line.trim().rsplit(':').next().unwrap().to_owned();
    let address = format!("127.0.0.1:{port}");
    let row = work.first_task_row();
    let (status, head, _) = request(&address, "POST", "/run", &row, &[]);
    assert_eq!(status, 401);
    assert!(head.contains("www-authenticate: Bearer"), "{head}");
    assert_eq!(request(&address, "POST", "/run", &row, &[("Authorization", "Bearer wrong")]).0, 401);
    // The scheme's case does not matter (RFC 9110).
    let lower = request(&address, "GET", "/metrics", "", &[("Authorization", "bearer s3cret-token-0123456789")]);
    assert_eq!(lower.0, 200);
    // A cluster's health probe needs no token; nothing else does without one.
    assert_eq!(request(&address, "GET", "/health", "", &[]).0, 200);
    assert_eq!(request(&address, "GET", "/metrics", "", &[]).0, 401);
    let (status, _, body) =
        request(&address, "POST", "/run", &row, &[("Authorization", "Bearer s3cret-token-0123456789")]);
    assert_eq!(status, 200, "{body}");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn sigterm_stops_taking_requests_and_lets_the_sessions_in_flight_finish() {
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&["--latency-ms", "300"]);
    let mut serve = Serve::start(&work, &stub, &[]);
    let row = work.first_task_row();
    let address = serve.address.clone();
    let answer = std::thread::spawn(move || post_run(&address, &row));
    std::thread::sleep(Duration::from_millis(200));
    let sent = Command::new("kill").args(["-TERM", &serve.child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    let (status, _, body) = answer.join().unwrap();
    assert_eq!(status, 200, "the session in flight finished: {body}");
    let exit = serve.child.wait().unwrap();
    assert!(exit.success(), "{}", std::fs::read_to_string(work.path("serve.log")).unwrap_or_default());
    assert!(TcpStream::connect(&serve.address).is_err(), "no longer listening");
}

#[test]
fn aggregate_metrics_answers_in_nemo_gyms_shape() {
    let work = Workdir::new();
    let stub = Stub::start(&[]);
    let serve = Serve::start(&work, &stub, &[]);
    let body = r#"{"verify_responses": [
        {"reward": 1.0, "accuracy": true, "_ng_task_index": 0, "_ng_rollout_index": 0},
        {"reward": 0.0, "accuracy": false, "_ng_task_index": 0, "_ng_rollout_index": 1},
        {"reward": 1.0, "accuracy": true, "_ng_task_index": 1, "_ng_rollout_index": 0}]}"#;
    let (status, _, answer) = request(&serve.address, "POST", "/aggregate_metrics", body, &[]);
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    let mean = answer["agent_metrics"]["mean/reward"].as_f64().unwrap();
    assert!((mean - 2.0 / 3.0).abs() < 1e-9, "{answer}");
    assert_eq!(answer["agent_metrics"]["max/accuracy"], 1.0);
    assert_eq!(answer["key_metrics"]["mean/reward"], answer["agent_metrics"]["mean/reward"]);
    assert_eq!(answer["group_level_metrics"][0]["mean/reward"], 0.5, "task 0's two repeats");
    assert_eq!(answer["repeat_level_metrics"][1]["mean/reward"], 0.0, "repeat 1");
    // NeMo Gym's spread is the sample one (n - 1); each task lists its rollouts.
    let std = answer["agent_metrics"]["std/reward"].as_f64().unwrap();
    assert!((std - (1.0_f64 / 3.0).sqrt()).abs() < 1e-9, "{answer}");
    assert_eq!(answer["agent_metrics"]["num_repeats"], 2);
    assert_eq!(answer["key_metrics"]["mean/accuracy"], answer["agent_metrics"]["mean/accuracy"]);
    assert_eq!(answer["group_level_metrics"][0]["rollout_infos"].as_array().unwrap().len(), 2);
    assert_eq!(request(&serve.address, "POST", "/aggregate_metrics", "[]", &[]).0, 400);
    let twice = r#"{"verify_responses": [{"reward": 1.0, "_ng_task_index": 0}, {"reward": 0.0, "_ng_task_index": 0}]}"#;
    let (status, _, answer) = request(&serve.address, "POST", "/aggregate_metrics", twice, &[]);
    assert!(status == 400 && answer.contains("rollout 0 of task 0"), "a rollout sent twice is named: {answer}");
}

/// A policy on several ranks (one base URL each): every session stays on one rank, and the
/// sessions spread over them.
#[test]
fn each_session_stays_on_one_rank_of_the_policy() {
    let work = Workdir::new();
    work.tasks(12);
    let (first, second) = (Stub::start(&[]), Stub::start(&[]));
    let serve = Serve::start(&work, &first, &["--base-url", &second.url]);
    for row in std::fs::read_to_string(work.path("tasks.jsonl")).unwrap().lines() {
        let (status, _, body) = post_run(&serve.address, row);
        assert_eq!(status, 200, "{body}");
    }
    let conversations =
        |stub: &Stub| -> Vec<String> { stub.stats()["conversations"].as_object().unwrap().keys().cloned().collect() };
    let (a, b) = (conversations(&first), conversations(&second));
    assert!(!a.is_empty() && !b.is_empty(), "both ranks served sessions: {a:?} {b:?}");
    assert!(a.iter().all(|c| !b.contains(c)), "no session on both ranks");
    assert_eq!(a.len() + b.len(), 12);
}

/// A multi-turn tau2 conversation over `/run`, the simulated user an LLM: the policy captures
/// tokens, so every turn of the agent carries contiguous token fields, and nothing of the
/// user's does (its calls never ask for them, though its endpoint would answer them).
#[tokio::test]
async fn a_tau2_conversation_with_the_llm_user_carries_tokens_on_the_agents_items_only() {
    let work = Workdir::new();
    let data = crate::harness::tau2_data_dir();
    let policy = Stub::start(&["--token-ids"]);
    let user = Stub::start(&["--token-ids", "--user-turns", "2"]);
    let serve = Serve::start(
        &work,
        &policy,
        &["--env", "tau2:airline", "--data-dir", &data, "--user", "llm", "--user-base-url", &user.url, "--token-ids"],
    );
    for task in ["0", "7", "21"] {
        let row = format!(
            r#"{{"id": "{task}", "responses_create_params": {{"input": [], "temperature": 1.0, "top_p": 1.0}}}}"#
        );
        let (status, _, body) = post_run(&serve.address, &row);
        assert_eq!(status, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        let output = answer["response"]["output"].as_array().unwrap();
        let users = output.iter().filter(|i| i["role"] == "user").count();
        assert!(users >= 2, "a multi-turn conversation: {body}");
        for item in output {
            let agents = item["type"] == "function_call" || item["role"] == "assistant";
            if !agents {
                assert!(item.get("generation_token_ids").is_none(), "only the agent's items carry tokens: {item}");
            }
        }
        let trainable = crate::tokens::check_trainable(&answer).unwrap();
        let turns = output.iter().filter(|i| i["role"] == "assistant").count();
        assert!(trainable >= turns, "every turn of the agent is trainable: {trainable} of {turns}");
        assert!(answer.get("_parley_token_contiguity").is_none());
    }
    let (_, _, metrics) = request(&serve.address, "GET", "/metrics", "", &[]);
    let count = |name: &str| -> f64 {
        let line = metrics.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}: {metrics}"));
        line.rsplit_once(' ').unwrap().1.parse().unwrap()
    };
    assert!(count("parley_model_call_seconds_count{party=\"agent\"}") >= 6.0, "{metrics}");
    assert!(count("parley_model_call_seconds_count{party=\"user\"}") >= 6.0, "{metrics}");
    assert!(count("parley_store_commit_seconds_count") >= 6.0, "{metrics}");
    assert_eq!(count("parley_sessions_token_discontiguous_total"), 0.0);
    drop(serve);
    // The user's calls were made without asking for tokens, and none were stored for them.
    let db = sqlx::SqlitePool::connect(&format!("sqlite://{}", work.path("serve.db").display())).await.unwrap();
    let (asked, stored, calls): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM model_calls WHERE party = 'user' AND request LIKE '%logprobs%'),
                (SELECT COUNT(*) FROM messages WHERE role = 'user' AND tokens IS NOT NULL),
                (SELECT COUNT(*) FROM model_calls WHERE party = 'user')",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!((asked, stored), (0, 0));
    assert!(calls >= 6);
}

/// The policy serves the agent alone: a simulated user without an endpoint of its own is
/// refused before anything starts, rather than sent to the trainer's policy server.
#[test]
fn the_simulated_user_never_defaults_to_the_policy() {
    let work = Workdir::new();
    let stub = Stub::start(&[]);
    let out = work.parley(&["serve", "--listen", "127.0.0.1:0", "--base-url", &stub.url, "--user", "llm"]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--user-base-url"), "{}", text(&out.stderr));
    assert_eq!(stub.stats()["requests"], 0);
}

/// A trainer's row comes back with the indices it was sent with (NeMo RL groups a prompt's
/// rollouts by `_ng_task_index`), on a scored answer and on a failure alike.
#[test]
fn a_rows_nemo_gym_indices_come_back_as_sent() {
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&[]);
    let serve = Serve::start(&work, &stub, &[]);
    let line = work.first_task_row();
    let mut row: Value = serde_json::from_str(&line).unwrap();
    row["_ng_task_index"] = 7.into();
    row["_ng_rollout_index"] = 3.into();
    let (status, _, body) = post_run(&serve.address, &row.to_string());
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((answer["_ng_task_index"].as_i64(), answer["_ng_rollout_index"].as_i64()), (Some(7), Some(3)));

    // A policy that fails: the 502's row keeps them too.
    let down = Stub::start(&["--server-error", "1.0"]);
    let elsewhere = Workdir::new();
    let failing = Serve::start(&elsewhere, &down, &["--max-retries", "0"]);
    let (status, _, body) = post_run(&failing.address, &row.to_string());
    assert_eq!(status, 502, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((answer["_ng_task_index"].as_i64(), answer["_ng_rollout_index"].as_i64()), (Some(7), Some(3)));
}

/// A non-loopback address of this machine, when it has one.
fn cluster_address() -> Option<String> {
    let out = Command::new("ip").args(["-4", "-o", "addr", "show", "scope", "global"]).output().ok()?;
    let text = text(&out.stdout);
    let address = text.split_whitespace().skip_while(|w| *w != "inet").nth(1)?;
    Some(address.split('/').next()?.to_owned())
}

/// `--trusted-network` serves a cluster address without a token (NeMo Gym and OpenEnv's
/// clients send none), says so at start, and binds that address only; every interface at once
/// is refused, and without the flag a token is still required.
#[test]
fn a_trusted_network_is_served_without_a_token_on_its_address_only() {
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&[]);
    let out = work.parley(&["serve", "--listen", "0.0.0.0:0", "--trusted-network", "--base-url", &stub.url]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("not every one"), "{}", text(&out.stderr));
    let Some(host) = cluster_address() else {
        eprintln!("*** no non-loopback address on this machine: the serving half is skipped ***");
        return;
    };
    let refused = work.parley(&["serve", "--listen", &format!("{host}:0"), "--base-url", &stub.url]);
    assert_eq!(refused.status.code(), Some(64));
    assert!(text(&refused.stderr).contains("--trusted-network"), "{}", text(&refused.stderr));

    let mut child = Command::new(PARLEY)
        .current_dir(work.dir.path())
        .args(["serve", "--listen", &format!("{host}:0"), "--trusted-network", "--base-url", &stub.url])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(work.path("trusted.log")).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let address = line.trim().trim_start_matches("http://").to_owned();
    assert!(address.starts_with(&format!("{host}:")), "{line}");
    let row = work.first_task_row();
    let (status, _, body) = post_run(&address, &row);
    assert_eq!(status, 200, "no token needed: {body}");
    let port = address.rsplit(':').next().unwrap();
    assert!(TcpStream::connect(format!("127.0.0.1:{port}")).is_err(), "only the address given is bound");
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(work.path("trusted.log")).unwrap();
    assert!(log.contains("--trusted-network") && log.contains("without a token"), "announced: {log}");
}

/// Every tau2 session of a domain opens alike (the policy, the greeting): they still spread
/// evenly over the ranks, since a session's rank follows its id, and each stays on its rank.
#[test]
fn tau2_sessions_spread_evenly_over_the_ranks() {
    let work = Workdir::new();
    let data = crate::harness::tau2_data_dir();
    let ranks = [Stub::start(&[]), Stub::start(&[]), Stub::start(&[])];
    let user = Stub::start(&["--user-turns", "2"]);
    let serve = Serve::start(
        &work,
        &ranks[0],
        &[
            "--base-url",
            &ranks[1].url,
            "--base-url",
            &ranks[2].url,
            "--env",
            "tau2:airline",
            "--data-dir",
            &data,
            "--user",
            "llm",
            "--user-base-url",
            &user.url,
        ],
    );
    for id in 0..12 {
        let row = serde_json::json!({"id": id.to_string(), "responses_create_params": {"input": []}});
        let (status, _, body) = post_run(&serve.address, &row.to_string());
        assert_eq!(status, 200, "{body}");
    }
    // The stub keys a conversation by its opening, which every session here shares: count the
    // agent's calls each rank took instead.
    let calls: Vec<u64> = ranks.iter().map(|rank| rank.stats()["requests"].as_u64().unwrap()).collect();
    let (most, least) = (*calls.iter().max().unwrap(), *calls.iter().min().unwrap());
    assert!(least > 0 && most as f64 <= least as f64 * 1.5, "agent calls per rank: {calls:?}");
}

/// A row that names its own policy URL keeps the token ids the service captures (`--token-ids`):
/// that policy is the one being trained.
#[test]
fn a_rows_own_policy_url_keeps_the_token_ids() {
    let work = Workdir::new();
    work.tasks(2);
    let (service_policy, rollout_policy) = (Stub::start(&["--token-ids"]), Stub::start(&["--token-ids"]));
    let serve = Serve::start(&work, &service_policy, &["--token-ids"]);
    for line in std::fs::read_to_string(work.path("tasks.jsonl")).unwrap().lines() {
        let mut row: Value = serde_json::from_str(line).unwrap();
        row["policy_base_url"] = rollout_policy.url.clone().into();
        let (status, _, body) = post_run(&serve.address, &row.to_string());
        assert_eq!(status, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(crate::tokens::check_trainable(&answer), Ok(3), "{answer}");
    }
    assert_eq!(service_policy.stats()["conversations"].as_object().map_or(0, |c| c.len()), 0);
}

/// A GRPO-shaped batch (prompts x copies, each prompt's copies sharing `_ng_task_index`) is
/// recorded as one task per prompt with a trial per copy: `parley metrics` gives per-prompt
/// figures, pass@k over the group and the groups whose rollouts all scored alike.
#[test]
fn a_grpo_batch_is_recorded_as_one_task_per_prompt() {
    let work = Workdir::new();
    work.tasks(3);
    let stub = Stub::start(&[]);
    let serve = Serve::start(&work, &stub, &[]);
    let rows: Vec<Value> = read_jsonl(&work.path("tasks.jsonl"));
    let mut answers = Vec::new();
    std::thread::scope(|scope| {
        let handles: Vec<_> = rows
            .iter()
            .enumerate()
            .flat_map(|(prompt, row)| (0..4).map(move |copy| (prompt, copy, row)))
            .map(|(prompt, copy, row)| {
                let mut row = row.clone();
                row["_ng_task_index"] = (100 + prompt).into();
                row["_ng_rollout_index"] = copy.into();
                let address = serve.address.clone();
                scope.spawn(move || post_run(&address, &row.to_string()))
            })
            .collect();
        answers.extend(handles.into_iter().map(|h| h.join().unwrap()));
    });
    assert!(answers.iter().all(|(status, _, _)| *status == 200), "{:?}", answers[0]);
    drop(serve);
    let metrics: Value =
        serde_json::from_str(&ok(&work.parley(&["metrics", "1", "--db", "serve.db", "--json"]))).unwrap();
    let tasks = metrics["training"]["tasks"].as_object().unwrap();
    assert_eq!(tasks.len(), 3, "one task per prompt: {metrics}");
    assert!(tasks.values().all(|t| t["sessions"] == 4), "four rollouts each: {metrics}");
    assert_eq!(metrics["groups"]["groups"], 3);
    let alike = metrics["groups"]["alike"].as_u64().unwrap();
    let variances = tasks.values().filter(|t| t["reward_variance"].as_f64() == Some(0.0)).count() as u64;
    assert_eq!(alike, variances, "alike groups are those with no spread: {metrics}");
    assert_eq!(metrics["pass"].as_array().unwrap().len(), 4, "pass@k up to the group's size: {metrics}");
    let table = ok(&work.parley(&["metrics", "1", "--db", "serve.db"]));
    assert!(table.contains(&format!("groups         {alike} of 3 tasks with 2+ rollouts scored all alike")), "{table}");
    // The viewer's run page says the same.
    let view = crate::view::View::start_on(&work, "serve.db", &[], &[]);
    let (status, _, page) = view.get("/runs/1", &[]);
    assert_eq!(status, 200);
    assert!(page.contains(&format!("{alike} of 3 tasks with 2+ rollouts scored all alike")), "{page}");
}

/// Every setting is checked before the port is bound: a bad one is named even when the port is
/// taken, and nothing is left answering.
#[test]
fn a_bad_setting_is_named_before_the_port_is_bound() {
    let work = Workdir::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let out = work.parley(&["serve", "--listen", &address, "--env", "tau2:airline", "--data-dir", "no-such-folder"]);
    assert_ne!(out.status.code(), Some(0));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("no-such-folder") && !stderr.contains("in use"), "{stderr}");
}

/// SIGTERM while an OpenEnv HTTP session is open and idle (its trainer gone quiet): the service
/// stops within its grace, exit 0, the session cancelled and resumable.
#[test]
fn sigterm_with_an_idle_openenv_session_stops_within_the_grace() {
    let work = Workdir::new();
    work.tasks(2);
    let stub = Stub::start(&[]);
    let mut serve = Serve::start(&work, &stub, &["--tasks", "tasks.jsonl", "--shutdown-grace", "2"]);
    let (status, _, body) = request(&serve.address, "POST", "/reset", "{}", &[]);
    assert_eq!(status, 200, "{body}");
    let started = std::time::Instant::now();
    assert!(Command::new("kill").args(["-TERM", &serve.child.id().to_string()]).status().unwrap().success());
    let exit = serve.child.wait().unwrap();
    let log = std::fs::read_to_string(work.path("serve.log")).unwrap_or_default();
    assert!(exit.success(), "exit {exit}: {log}");
    assert!(started.elapsed() < Duration::from_secs(6), "stopped after {:?}: {log}", started.elapsed());
}

/// With `--sampler learnable`, an OpenEnv reset that names no task draws one by the tasks'
/// outcomes: the tasks no run of the store has seen come first.
#[tokio::test]
async fn a_reset_naming_no_task_draws_the_unseen_tasks_first() {
    let work = Workdir::new();
    work.tasks(4);
    let stub = Stub::start(&[]);
    let seen =
        work.parley(&["run", "--tasks", "tasks.jsonl", "--base-url", &stub.url, "--db", "serve.db", "--budget", "2"]);
    assert!(seen.status.success(), "{}", text(&seen.stderr));
    let serve = Serve::start(&work, &stub, &["--tasks", "tasks.jsonl", "--sampler", "learnable"]);
    for _ in 0..2 {
        let (status, _, body) = request(&serve.address, "POST", "/reset", "{}", &[]);
        assert_eq!(status, 200, "{body}");
    }
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", work.path("serve.db").display())).await.unwrap();
    let drawn: Vec<String> = sqlx::query_scalar(
        "SELECT t.task_id FROM sessions s JOIN tasks t ON t.run_id = s.run_id AND t.task_index = s.task_index
         WHERE s.run_id = 2 ORDER BY s.id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    assert_eq!(drawn, ["2", "3"], "the run before saw tasks 0 and 1");
}
