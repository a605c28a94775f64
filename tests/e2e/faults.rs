//! Every fault the stub can inject ends in a successful retry or a recorded failure, never a
//! crash, and never stops the other sessions.

use crate::harness::{Stub, Workdir, read_jsonl, run, text};

async fn terminations(work: &Workdir) -> Vec<(String, i64)> {
    let db = work.db().await;
    sqlx::query_as("SELECT termination, COUNT(*) FROM sessions GROUP BY termination ORDER BY termination")
        .fetch_all(&db)
        .await
        .unwrap()
}

#[tokio::test]
async fn rate_limits_are_retried_after_the_servers_wait() {
    let work = Workdir::new();
    work.tasks(10);
    let stub = Stub::start(&["--rate-limit", "0.4", "--retry-after", "0"]);
    let out = run(&work, &stub, &["--max-retries", "10"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(terminations(&work).await, [("agent_stop".to_owned(), 10)]);
    let db = work.db().await;
    let retried: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM model_calls WHERE attempts > 1").fetch_one(&db).await.unwrap();
    assert!(retried > 0, "some calls needed a retry");
    assert!(stub.stats()["by_status"]["429"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn server_errors_that_persist_become_recorded_failures() {
    let work = Workdir::new();
    work.tasks(6);
    let stub = Stub::start(&["--server-error", "1.0"]);
    let out = run(&work, &stub, &["--max-retries", "2"]);
    assert!(out.status.success(), "a failing endpoint does not fail the run: {}", text(&out.stderr));
    assert_eq!(terminations(&work).await, [("infrastructure_error".to_owned(), 6)]);
    let failures = read_jsonl(&work.path("out_failures.jsonl"));
    assert_eq!(failures.len(), 6);
    // The failure class, as stored with the session; the termination beside it.
    assert_eq!(failures[0]["_ng_failure_class"], "server_error");
    assert_eq!(failures[0]["_parley_termination"], "infrastructure_error");
    assert!(failures[0]["_ng_failure_message"].as_str().unwrap().contains("after 3 attempt(s)"));
    assert!(read_jsonl(&work.path("out.jsonl")).is_empty());
    assert_eq!(stub.stats()["requests"], 18, "one attempt and two retries per session");
    assert!(text(&out.stdout).contains("reward         no scored sessions"));
}

#[tokio::test]
async fn malformed_bodies_are_retried_then_recorded() {
    let work = Workdir::new();
    work.tasks(3);
    let stub = Stub::start(&["--malformed", "1.0"]);
    let out = run(&work, &stub, &["--max-retries", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(terminations(&work).await, [("infrastructure_error".to_owned(), 3)]);
    let failures = read_jsonl(&work.path("out_failures.jsonl"));
    assert!(failures[0]["_ng_failure_message"].as_str().unwrap().contains("not JSON"), "{}", failures[0]);
}

#[tokio::test]
async fn hangs_hit_the_call_timeout() {
    let work = Workdir::new();
    work.tasks(3);
    let stub = Stub::start(&["--hang", "1.0"]);
    let started = std::time::Instant::now();
    let out = run(&work, &stub, &["--call-timeout", "0.3", "--max-retries", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(started.elapsed().as_secs() < 30, "hung calls are cut off");
    assert_eq!(terminations(&work).await, [("infrastructure_error".to_owned(), 3)]);
    let failures = read_jsonl(&work.path("out_failures.jsonl"));
    assert!(failures[0]["_ng_failure_message"].as_str().unwrap().contains("timeout"), "{}", failures[0]);
}

#[tokio::test]
async fn invalid_tool_arguments_go_back_to_the_model() {
    let work = Workdir::new();
    work.tasks(4);
    let stub = Stub::start(&["--bad-arguments", "1.0"]);
    let out = run(&work, &stub, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(terminations(&work).await, [("agent_stop".to_owned(), 4)]);
    let db = work.db().await;
    let errors: Vec<String> =
        sqlx::query_scalar("SELECT output FROM tool_calls WHERE is_error = 1").fetch_all(&db).await.unwrap();
    assert_eq!(errors.len(), 8, "both calls of every session were malformed");
    assert!(errors.iter().all(|e| e.contains("Invalid tool call arguments")), "{errors:?}");
    let rows = read_jsonl(&work.path("out.jsonl"));
    assert!(rows.iter().all(|r| r["reward"] == 0.0));
}

#[tokio::test]
async fn an_error_budget_ends_sessions_that_keep_erring() {
    let work = Workdir::new();
    work.tasks(4);
    let stub = Stub::start(&["--bad-arguments", "1.0"]);
    let out = run(&work, &stub, &["--max-errors", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(terminations(&work).await, [("too_many_errors".to_owned(), 4)]);
    assert!(text(&out.stdout).contains("too_many_errors 4"));
}
