//! Endpoints that misbehave on the network's side: a 200 that is not a completion, 429s that
//! outlast the session, calls in flight at the session's deadline, an endpoint that echoes the
//! key it was sent, and bodies too large to quote.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::endpoint::{Endpoint, completion};
use crate::harness::{Stub, Workdir, ok, read_jsonl, text};

/// A session's termination, failure class, reward, retries and error.
type End = (String, Option<String>, Option<f64>, i64, Option<String>);

async fn ends(work: &Workdir) -> Vec<End> {
    sqlx::query_as("SELECT termination, failure, reward, retries, error FROM sessions ORDER BY id")
        .fetch_all(&work.db().await)
        .await
        .unwrap()
}

/// `parley run` of the work folder's tasks against `url`, with `env` set.
fn run_at(work: &Workdir, url: &str, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut args = vec!["run", "--env", "multi-step", "--tasks", "tasks.jsonl", "--base-url", url];
    args.extend(["--model", "m", "--db", "parley.db", "--out", "out.jsonl"]);
    args.extend(extra);
    work.parley_with_env(&args, env)
}

#[tokio::test]
async fn a_200_that_is_not_a_completion_counts_against_the_one_retry_budget() {
    // An endpoint that alternates a 500 and a 200 that is not a completion: each kind of failed
    // attempt is retried, and all of them count against one budget of --max-retries.
    let work = Workdir::new();
    work.tasks(1);
    let endpoint = Endpoint::start(|n, _| match n % 2 {
        0 => (500, r#"{"error":{"message":"busy"}}"#.into()),
        _ => (200, r#"{"not":"a completion"}"#.into()),
    });
    ok(&run_at(&work, &endpoint.url, &["--max-retries", "3"], &[]));
    assert_eq!(endpoint.requests(), 4, "--max-retries 3 makes 4 attempts in all");
    let ends = ends(&work).await;
    assert_eq!(ends[0].0, "infrastructure_error");
    assert_eq!(ends[0].1.as_deref(), Some("malformed_response"));
    assert_eq!(ends[0].3, 3, "three retries recorded");

    // An endpoint that only ever answers a 200 that is not a completion.
    let work = Workdir::new();
    work.tasks(1);
    let endpoint = Endpoint::start(|_, _| (200, r#"{"choices":[]}"#.into()));
    ok(&run_at(&work, &endpoint.url, &["--max-retries", "2"], &[]));
    assert_eq!(endpoint.requests(), 3, "--max-retries 2 makes 3 attempts in all");
}

#[tokio::test]
async fn a_session_held_back_by_429s_past_its_time_is_the_endpoints_failure() {
    let work = Workdir::new();
    work.tasks(2);
    let stub = Stub::start(&["--rate-limit=1", "--retry-after=100000"]);
    let started = Instant::now();
    let stdout = ok(&run_at(&work, &stub.url, &["--session-timeout", "30"], &[]));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a Retry-After past the session's time fails the call at once"
    );
    for (termination, failure, reward, retries, error) in ends(&work).await {
        assert_eq!(termination, "infrastructure_error");
        assert_eq!(failure.as_deref(), Some("rate_limited"), "{error:?}");
        assert_eq!((reward, retries), (None, 0));
        assert!(error.as_deref().is_some_and(|e| e.contains("429")), "{error:?}");
    }
    // Left out of rewards, written to the failures file, and retried by --retry-failed.
    assert!(stdout.contains("rate_limited 2 (excluded from rewards"), "{stdout}");
    assert!(read_jsonl(&work.path("out.jsonl")).is_empty());
    assert_eq!(read_jsonl(&work.path("out_failures.jsonl")).len(), 2);
    let before = stub.stats()["requests"].as_u64().unwrap();
    ok(&work.parley(&["resume", "1", "--db", "parley.db", "--retry-failed"]));
    assert_eq!(stub.stats()["requests"].as_u64().unwrap(), before + 2, "each failed session asked again");
}

#[tokio::test]
async fn a_session_whose_time_runs_out_with_a_call_in_flight_is_a_timeout_of_the_endpoint() {
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&["--hang=1", "--hang-secs=60"]);
    ok(&run_at(&work, &stub.url, &["--session-timeout", "2", "--call-timeout", "100"], &[]));
    let ends = ends(&work).await;
    let (termination, failure, reward, _, error) = &ends[0];
    assert_eq!(termination, "infrastructure_error", "{error:?}");
    assert_eq!(failure.as_deref(), Some("timeout"));
    assert_eq!(*reward, None);
    assert!(error.as_deref().is_some_and(|e| e.contains("waiting on an endpoint")), "{error:?}");
}

#[tokio::test]
async fn a_session_whose_time_runs_out_while_retrying_counts_its_retries() {
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&["--server-error=1"]);
    let started = Instant::now();
    ok(&run_at(&work, &stub.url, &["--session-timeout", "3", "--max-retries", "100"], &[]));
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    let ends = ends(&work).await;
    let (termination, failure, reward, retries, error) = &ends[0];
    assert_eq!(termination, "infrastructure_error", "{error:?}");
    assert_eq!(failure.as_deref(), Some("server_error"), "{error:?}");
    assert_eq!(*reward, None);
    let requests = stub.stats()["requests"].as_i64().unwrap();
    assert!(*retries >= 2 && *retries == requests - 1, "{retries} retries recorded for {requests} requests");
}

/// Whether `needle` occurs in the file at `path` (a missing file holds nothing).
fn file_holds(path: &Path, needle: &[u8]) -> bool {
    std::fs::read(path).is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
}

#[tokio::test]
async fn a_key_the_endpoint_echoes_is_stored_exported_and_logged_nowhere() {
    const KEY: &str = "sk-parley-e2e-0123456789abcdef";
    let work = Workdir::new();
    work.tasks(3);
    // Request by request: the key in a completion, in a JSON error body, in a body that is not
    // JSON at all.
    let endpoint = Endpoint::start(|n, auth| match n % 3 {
        0 => (200, completion(&format!("you sent {auth}"))),
        1 => (400, serde_json::json!({"error": {"message": format!("bad key: {auth}")}}).to_string()),
        _ => (200, format!("<html>{auth}</html>")),
    });
    let run = run_at(
        &work,
        &endpoint.url,
        &["-c", "1", "--max-retries", "0", "--api-key-env", "E2E_ECHO_KEY"],
        &[("E2E_ECHO_KEY", KEY)],
    );
    ok(&run);
    assert_eq!(endpoint.requests(), 3);
    let mut outputs = vec![run];
    for (format, file) in [("nemo-gym", "ng.jsonl"), ("openai-chat", "chat.jsonl"), ("tau2", "tau2.json")] {
        outputs.push(work.parley(&["export", "1", "--format", format, "--db", "parley.db", "--out", file]));
        assert!(!file_holds(&work.path(file), KEY.as_bytes()), "the {format} export holds the key");
    }
    for session in ["1", "2", "3"] {
        let show = work.parley(&["show", session, "--db", "parley.db"]);
        assert!(ok(&show).contains("[redacted]") || session != "1", "{}", text(&show.stdout));
        outputs.push(show);
    }
    for out in &outputs {
        for stream in [&out.stdout, &out.stderr] {
            assert!(!text(stream).contains(KEY), "{}", text(stream));
        }
    }
    for file in ["parley.db", "parley.db-wal", "out.jsonl", "out_failures.jsonl"] {
        assert!(!file_holds(&work.path(file), KEY.as_bytes()), "{file} holds the key");
    }
    // The echoes were stored, redacted: the test would pass vacuously otherwise.
    let db = work.db().await;
    let echoed: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE content LIKE '%Bearer [redacted]%'")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(echoed, 1);
    let errors: Vec<String> =
        sqlx::query_scalar("SELECT error FROM sessions WHERE error IS NOT NULL").fetch_all(&db).await.unwrap();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors.iter().all(|e| e.contains("[redacted]")), "{errors:?}");
}

#[tokio::test]
async fn errors_and_logs_quote_a_bounded_prefix_of_a_huge_body() {
    let work = Workdir::new();
    work.tasks(4);
    let endpoint = Endpoint::start(|_, _| (200, "x".repeat(15 << 20)));
    let out = run_at(&work, &endpoint.url, &["--max-retries", "1"], &[]);
    ok(&out);
    assert_eq!(endpoint.requests(), 8);
    assert!(out.stderr.len() < 64 << 10, "{} bytes of stderr for 8 answers", out.stderr.len());
    for (_, failure, _, _, error) in ends(&work).await {
        assert_eq!(failure.as_deref(), Some("malformed_response"));
        let error = error.unwrap();
        assert!(error.len() < 1000 && error.contains("15728640 bytes"), "{} bytes: {}", error.len(), &error[..200]);
    }
}
