//! `parley serve` under hostile and careless clients, through the real binary on loopback:
//! what such a client sends is refused, and what it abandons is freed.

use std::time::{Duration, Instant};

use crate::harness::{Stub, Workdir};
use crate::serve::{Serve, post_run, request};

/// OpenEnv HTTP sessions whose trainer stops stepping end at their `--session-timeout`, are
/// recorded as timed out and give their slots back; a reset refused meanwhile says when to try
/// again.
#[tokio::test(flavor = "multi_thread")]
async fn abandoned_openenv_sessions_free_their_slots() {
    let work = Workdir::new();
    work.tasks(4);
    let stub = Stub::start(&[]);
    let serve = Serve::start(
        &work,
        &stub,
        &["--tasks", "tasks.jsonl", "--concurrency", "2", "--queue", "2", "--session-timeout", "2"],
    );
    for _ in 0..4 {
        let (status, _, body) = request(&serve.address, "POST", "/reset", "{}", &[]);
        assert_eq!(status, 200, "{body}");
    }
    let (status, head, _) = request(&serve.address, "POST", "/reset", "{}", &[]);
    assert_eq!(status, 503, "every slot is held");
    assert!(head.contains("retry-after:"), "{head}");

    // The trainer never steps again: the sessions end at their time limit.
    let row = std::fs::read_to_string(work.path("tasks.jsonl")).unwrap().lines().next().unwrap().to_owned();
    let started = Instant::now();
    let answered = loop {
        let (status, _, body) = post_run(&serve.address, &row);
        if status == 200 || started.elapsed() > Duration::from_secs(20) {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(answered.0, 200, "a slot came back: {}", answered.1);
    assert_eq!(request(&serve.address, "POST", "/reset", "{}", &[]).0, 200);
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", work.path("serve.db").display())).await.unwrap();
    let timed_out: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sessions WHERE termination = 'timeout'")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    assert_eq!(timed_out, 4, "each abandoned session is recorded as timed out");
    let metrics = request(&serve.address, "GET", "/metrics", "", &[]).2;
    let line = metrics.lines().find(|l| l.starts_with("parley_sessions_in_flight")).unwrap_or_default().to_owned();
    let value: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(-1.0);
    assert_eq!(value, 1.0, "only the last reset's session is in flight: {line}");
}
