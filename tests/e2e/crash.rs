//! Killed at any moment, resumed: nothing lost, nothing done twice.
//!
//! A run of 200 sessions is killed with SIGKILL at 20 or more pseudo-random moments and resumed
//! each time. Then: every session finished exactly once; no model call that was recorded before
//! a resume was requested again after it (the stub counts requests per conversation turn); and
//! the results equal those of a run that was never killed.

use parley_core::SessionStatus;
use std::collections::{BTreeMap, HashMap};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{PARLEY, Stub, Workdir, read_jsonl, text};

const TASKS: usize = 200;
const KILLS: usize = 20;

/// Task rows whose conversations are all distinct (the stub keys turns by their opening).
pub(crate) fn write_tasks(work: &Workdir) {
    let path = work.tasks(TASKS);
    let rows: Vec<String> = read_jsonl(&path)
        .into_iter()
        .enumerate()
        .map(|(i, mut row)| {
            let question = row["responses_create_params"]["input"][1]["content"].as_str().unwrap().to_owned();
            row["responses_create_params"]["input"][1]["content"] = Value::from(format!("{question} (case {i})"));
            row.to_string()
        })
        .collect();
    std::fs::write(&path, rows.join("\n") + "\n").unwrap();
}

/// A multi-step run of `tasks.jsonl` against the model at `base_url`, stored in `db`, its
/// rollouts written to `out`.
pub(crate) fn run_args<'a>(base_url: &'a str, db: &'a str, out: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        "--env",
        "multi-step",
        "--tasks",
        "tasks.jsonl",
        "--base-url",
        base_url,
        "--model",
        "m",
        "--db",
        db,
        "--out",
        out,
        "--concurrency",
        "8",
    ]
}

/// The stub's turn key of every model call recorded in a database.
pub(crate) async fn recorded_turns(work: &Workdir, db: &str) -> Vec<String> {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", work.path(db).display())).await.unwrap();
    let rows: Vec<(i64, i64, String, Option<String>)> = sqlx::query_as(concat!(
        "SELECT m.session_id, m.seq, m.role, COALESCE(m.content, x.text) FROM messages m ",
        "LEFT JOIN texts x ON x.id = m.content_id ORDER BY m.session_id, m.seq"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    let mut openings: HashMap<i64, (String, String)> = HashMap::new();
    let mut turns = Vec::new();
    for (session, seq, role, content) in rows {
        let opening = openings.entry(session).or_default();
        match role.as_str() {
            "system" if seq == 0 => opening.0 = content.unwrap_or_default(),
            "user" if opening.1.is_empty() => opening.1 = content.unwrap_or_default(),
            "assistant" => turns.push(format!("{}/{seq}", parley_stub::conversation_key(&opening.0, &opening.1))),
            _ => {}
        }
    }
    turns
}

/// A session as stored: (id, task, trial, status, termination, reward).
type SessionRow = (i64, i64, i64, String, Option<String>, Option<f64>);
/// A session's outcome and transcript: (status, termination, reward, messages).
pub(crate) type Outcome = (String, String, Option<f64>, Vec<String>);

/// Whether run 1 exists in the crash database.
async fn run_recorded(work: &Workdir) -> bool {
    if !work.path("crash.db").exists() {
        return false;
    }
    let Ok(pool) = sqlx::SqlitePool::connect(&format!("sqlite://{}", work.path("crash.db").display())).await else {
        return false;
    };
    let runs: Result<i64, _> = sqlx::query_scalar("SELECT COUNT(*) FROM runs").fetch_one(&pool).await;
    pool.close().await;
    runs.is_ok_and(|n| n > 0)
}

/// Every session's outcome and transcript, keyed by (task, trial).
pub(crate) async fn results(work: &Workdir, db: &str) -> BTreeMap<(i64, i64), Outcome> {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", work.path(db).display())).await.unwrap();
    let sessions: Vec<SessionRow> =
        sqlx::query_as("SELECT id, task_index, trial, status, termination, reward FROM sessions")
            .fetch_all(&pool)
            .await
            .unwrap();
    let mut out = BTreeMap::new();
    for (id, task, trial, status, termination, reward) in sessions {
        let messages: Vec<(String, Option<String>, Option<String>)> =
            sqlx::query_as("SELECT role, content, tool_calls FROM messages WHERE session_id = ? ORDER BY seq")
                .bind(id)
                .fetch_all(&pool)
                .await
                .unwrap();
        let transcript = messages.into_iter().map(|m| format!("{m:?}")).collect();
        let previous = out.insert((task, trial), (status, termination.unwrap_or_default(), reward, transcript));
        assert!(previous.is_none(), "task {task} trial {trial} has two sessions");
    }
    pool.close().await;
    out
}

/// A small deterministic generator of kill delays.
struct Delays(u64);

impl Delays {
    fn next(&mut self) -> Duration {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        Duration::from_millis(80 + (self.0 >> 33) % 220)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_at_random_moments_and_resumed_the_run_equals_an_uninterrupted_one() {
    let work = Workdir::new();
    write_tasks(&work);

    // The reference: the same run, never killed, against its own stub.
    let reference_stub = Stub::start(&["--latency-ms", "40"]);
    let out = work.parley(&run_args(&reference_stub.url, "reference.db", "reference.jsonl"));
    assert!(out.status.success(), "{}", text(&out.stderr));

    let stub = Stub::start(&["--latency-ms", "40"]);
    let mut delays = Delays(0x5eed);
    let mut kills = 0;
    let mut snapshots: Vec<(Vec<String>, Value)> = Vec::new();
    for _attempt in 0..200 {
        // A kill can land before the run is even recorded; then it is started again.
        let recorded = run_recorded(&work).await;
        let args = if recorded {
            vec!["resume", "1", "--db", "crash.db"]
        } else {
            run_args(&stub.url, "crash.db", "crash.jsonl")
        };
        if recorded {
            // What is recorded now must never be asked for again.
            snapshots.push((recorded_turns(&work, "crash.db").await, stub.stats()["turns"].clone()));
        }
        let mut child = Command::new(PARLEY)
            .current_dir(work.dir.path())
            .args(&args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(work.path("attempt.log")).unwrap())
            .spawn()
            .unwrap();
        std::thread::sleep(delays.next());
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
            kills += 1;
        } else {
            let status = child.wait().unwrap();
            let log = std::fs::read_to_string(work.path("attempt.log")).unwrap_or_default();
            assert!(status.success(), "{args:?} failed: {log}");
        }
        if kills >= KILLS {
            break;
        }
    }
    assert!(kills >= KILLS, "only {kills} kills landed while the run was in progress");

    snapshots.push((recorded_turns(&work, "crash.db").await, stub.stats()["turns"].clone()));
    let out = work.parley(&["resume", "1", "--db", "crash.db"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Every session finished exactly once, with the results of the uninterrupted run.
    let crashed = results(&work, "crash.db").await;
    let reference = results(&work, "reference.db").await;
    assert_eq!(crashed.len(), TASKS);
    assert!(crashed.values().all(|(status, ..)| status == SessionStatus::Finished.as_str()));
    assert_eq!(crashed, reference);

    // No model call recorded before a resume was requested again after it.
    let final_turns = stub.stats()["turns"].clone();
    for (i, (recorded, counts)) in snapshots.iter().enumerate() {
        for turn in recorded {
            assert_eq!(final_turns[turn], counts[turn], "turn {turn}, recorded before resume {i}, was asked again");
        }
    }
    assert!(snapshots.iter().any(|(recorded, _)| !recorded.is_empty()));

    // The rollout file holds each session once, as the uninterrupted run wrote it.
    let sorted = |name: &str| {
        let mut rows: Vec<String> = read_jsonl(&work.path(name)).iter().map(Value::to_string).collect();
        rows.sort();
        rows
    };
    let crash_rows = sorted("crash.jsonl");
    assert_eq!(crash_rows.len(), TASKS);
    assert_eq!(crash_rows, sorted("reference.jsonl"));
}
