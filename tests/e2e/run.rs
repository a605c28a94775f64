//! A whole run: rewards, the rollout JSONL, the SQLite rows and the summary.

use serde_json::Value;

use crate::harness::{Stub, Workdir, ok, read_jsonl, run, text};

#[tokio::test]
async fn a_run_scores_stores_and_writes_every_rollout() {
    let work = Workdir::new();
    work.tasks(10);
    let stub = Stub::start(&[]);
    let key = "sk-parley-test-4e7a1c0d9b";
    let out = work.parley_with_env(
        &[
            "run",
            "--env",
            "multi-step",
            "--tasks",
            "tasks.jsonl",
            "--base-url",
            &stub.url,
            "--model",
            "stub-model",
            "--db",
            "parley.db",
            "--out",
            "out.jsonl",
            "--trials",
            "2",
            "--concurrency",
            "4",
            "--api-key-env",
            "PARLEY_E2E_KEY",
        ],
        &[("PARLEY_E2E_KEY", key)],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {}", text(&out.stderr));

    // The summary.
    assert!(stdout.contains("20 sessions"), "{stdout}");
    assert!(stdout.contains("terminations   agent_stop 20"), "{stdout}");
    assert!(stdout.contains("reward         0.500 ±"), "{stdout}");
    assert!(stdout.contains("pass@k         k=1 0.500  k=2 0.500"), "{stdout}");
    assert!(stdout.contains("pass^k         k=1 0.500  k=2 0.500"), "{stdout}");
    assert!(stdout.contains("60 model calls"), "{stdout}");

    // The rollouts, in NeMo Gym's shape.
    let rows = read_jsonl(&work.path("out.jsonl"));
    assert_eq!(rows.len(), 20);
    assert!(read_jsonl(&work.path("out_failures.jsonl")).is_empty());
    for row in &rows {
        let task = row["_ng_task_index"].as_u64().unwrap();
        assert!(row["_ng_rollout_index"].as_u64().unwrap() < 2);
        let expected = if task % 2 == 0 { 1.0 } else { 0.0 };
        assert_eq!(row["reward"].as_f64(), Some(expected), "task {task}");
        assert_eq!(row["accuracy"], Value::Bool(task % 2 == 0));
        assert_eq!(row["parsed_synonym_values"], serde_json::json!([0]));
        let types: Vec<&str> =
            row["response"]["output"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            ["function_call", "function_call_output", "function_call", "function_call_output", "message"]
        );
        // The environment's tool output is NeMo Gym's: the value of "Synonym".
        assert_eq!(row["response"]["output"][1]["output"], r#"{"synonym_value":765}"#);
        assert!(row["responses_create_params"]["tools"].is_array());
        assert!(row["response"]["usage"]["input_tokens"].as_u64().unwrap() > 0);
    }

    // The store.
    let db = work.db().await;
    let count = |sql: &'static str| {
        let db = db.clone();
        async move { sqlx::query_scalar::<_, i64>(sql).fetch_one(&db).await.unwrap() }
    };
    assert_eq!(count("SELECT COUNT(*) FROM runs WHERE status = 'finished'").await, 1);
    assert_eq!(count("SELECT COUNT(*) FROM tasks").await, 10);
    assert_eq!(
        count("SELECT COUNT(*) FROM sessions WHERE status = 'finished' AND termination = 'agent_stop'").await,
        20
    );
    // Each session: system and user, then call, result, call, result, final text.
    assert_eq!(count("SELECT COUNT(*) FROM messages").await, 20 * 7);
    assert_eq!(
        count("SELECT COUNT(*) FROM model_calls WHERE request LIKE '%\"messages\"%' AND response IS NOT NULL").await,
        60
    );
    assert_eq!(count("SELECT COUNT(*) FROM tool_calls WHERE is_error = 0").await, 40);
    assert_eq!(
        count("SELECT COUNT(*) FROM scores s JOIN sessions x ON x.id = s.session_id WHERE s.value = x.reward").await,
        20
    );
    assert_eq!(count("SELECT CAST(SUM(reward) AS INTEGER) FROM sessions").await, 10);
    let config: String = sqlx::query_scalar("SELECT config FROM runs").fetch_one(&db).await.unwrap();
    assert!(config.contains("PARLEY_E2E_KEY"), "the key's variable is named: {config}");
    db.close().await;

    // The key itself is nowhere: not in the database, its WAL, the outputs or the logs.
    for name in ["parley.db", "parley.db-wal", "out.jsonl", "out_failures.jsonl"] {
        let bytes = std::fs::read(work.path(name)).unwrap_or_default();
        assert!(!text(&bytes).contains(key), "{name} holds the API key");
    }
    assert!(!stdout.contains(key) && !text(&out.stderr).contains(key));

    // The stub saw each conversation's turns: 3 model calls per session.
    assert_eq!(stub.stats()["requests"], 60);
}

#[tokio::test]
async fn raw_bodies_can_be_left_out() {
    let work = Workdir::new();
    work.tasks(4);
    let stub = Stub::start(&[]);
    let out = crate::harness::run(&work, &stub, &["--no-raw-calls"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let db = work.db().await;
    let (bodies, calls): (i64, i64) =
        sqlx::query_as("SELECT COUNT(request), COUNT(*) FROM model_calls").fetch_one(&db).await.unwrap();
    assert_eq!((bodies, calls), (0, 12), "usage rows are kept without bodies");
}

#[test]
fn a_stub_on_one_thread_serves_a_run() {
    let work = Workdir::new();
    work.tasks(20);
    let stub = Stub::start(&["--threads", "1", "--latency-ms", "20"]);
    let out = crate::harness::run(&work, &stub, &["-c", "20"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(read_jsonl(&work.path("out.jsonl")).len(), 20);
    assert_eq!(stub.stats()["requests"], 60, "three calls for each of the 20 sessions");
}

#[test]
fn a_dry_run_needs_no_endpoint() {
    let work = Workdir::new();
    let out = work.parley(&["run", "--num-tasks", "5", "--db", "dry.db", "--out", "dry.jsonl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("the built-in stub, a test double"));
    assert_eq!(read_jsonl(&work.path("dry.jsonl")).len(), 5);
}

#[tokio::test]
async fn exports_stream_nemo_gym_and_openai_chat_rows_from_the_store() {
    let work = Workdir::new();
    work.tasks(4);
    let stub = Stub::start(&[]);
    let out = crate::harness::run(&work, &stub, &["--trials", "2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let export = |format: &str, file: &str| {
        let out = work.parley(&["export", "1", "--format", format, "--db", "parley.db", "--out", file]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        read_jsonl(&work.path(file))
    };
    // The NeMo Gym export equals what the run wrote, row for row.
    let mut exported: Vec<String> = export("nemo-gym", "ng.jsonl").iter().map(Value::to_string).collect();
    let mut written: Vec<String> = read_jsonl(&work.path("out.jsonl")).iter().map(Value::to_string).collect();
    exported.sort();
    written.sort();
    assert_eq!(exported, written);
    // OpenAI chat rows: the whole conversation with tool calls and results, and the tools.
    let chat = export("openai-chat", "chat.jsonl");
    assert_eq!(chat.len(), 8);
    let messages = chat[0]["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]);
    assert_eq!(messages[2]["tool_calls"][0]["function"]["name"], "get_synonym_value");
    assert_eq!(messages[3]["tool_call_id"], messages[2]["tool_calls"][0]["id"]);
    assert_eq!(chat[0]["tools"][0]["type"], "function");
}

/// `parley stub --repeat-call-ids` gives every tool call one id, and a run pairs each call with
/// its result all the same.
#[tokio::test]
async fn a_stub_that_repeats_call_ids_still_gets_every_call_answered() {
    let work = Workdir::new();
    work.tasks(3);
    let stub = Stub::start(&["--repeat-call-ids"]);
    let out = ok(&run(&work, &stub, &[]));
    assert!(out.contains("terminations   agent_stop 3"), "{out}");
    let db = work.db().await;
    let ids: Vec<String> = sqlx::query_scalar("SELECT DISTINCT call_id FROM tool_calls").fetch_all(&db).await.unwrap();
    assert_eq!(ids, ["call_0000000000000000"]);
    let calls: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM tool_calls WHERE is_error = 0").fetch_one(&db).await.unwrap();
    assert_eq!(calls, 6, "two tool calls per session, each answered");
}

/// The README's first command, as written there (`cargo run --release --` is the built binary):
/// tau2 airline conversations with the built-in stub on both sides, which plays some sessions'
/// gold actions, so the summary shows a spread that means something (pass@k rising, pass^k
/// falling, some tasks' groups mixed), says the stub is a test double and gives the next commands.
#[test]
fn the_readmes_first_run_shows_a_spread_and_the_next_commands() {
    let readme = std::fs::read_to_string(crate::harness::root().join("README.md")).unwrap();
    let first = readme.lines().find(|l| l.starts_with("cargo run --release -- ")).expect("the README's first command");
    let args: Vec<&str> = first.trim_start_matches("cargo run --release -- ").split_whitespace().collect();
    assert_eq!(args[..5], ["run", "--env", "tau2:airline", "--user", "llm"], "{first}");
    let work = Workdir::new();
    let out = work.parley(&args);
    let said = ok(&out);
    let figure = |label: &str| -> Vec<f64> {
        let line = said.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("{label}: {said}"));
        line.split_whitespace().filter_map(|w| w.parse().ok()).collect()
    };
    assert_eq!(figure("reward")[0], 0.715, "{said}");
    // `k=1 0.715  k=2 ...`: the values are every other word.
    let at = |label: &str| -> Vec<String> {
        let line = said.lines().find(|l| l.starts_with(label)).unwrap();
        line.split_whitespace().skip(2).step_by(2).map(str::to_owned).collect()
    };
    assert_eq!(at("pass@k"), ["0.715", "0.817", "0.870", "0.900"], "{said}");
    assert_eq!(at("pass^k"), ["0.715", "0.613", "0.565", "0.540"], "{said}");
    assert!(said.contains("groups         32 of 50 tasks"), "{said}");
    assert!(said.contains("The built-in stub is a test double"), "{said}");
    for next in ["parley show 1 --db parley.db", "parley view --db parley.db", "--base-url URL --model NAME"] {
        assert!(said.contains(next), "{next}: {said}");
    }
    // The sessions are conversations with tools: the agent called them in most (a task whose
    // gold is to refuse has none to call when its script is played).
    let rollouts = read_jsonl(&work.path("rollouts-1.jsonl"));
    assert_eq!(rollouts.len(), 200);
    let calling = rollouts
        .iter()
        .filter(|r| r["response"]["output"].as_array().unwrap().iter().any(|i| i["type"] == "function_call"))
        .count();
    assert!(calling >= 150, "{calling} of 200 sessions called a tool");
}
