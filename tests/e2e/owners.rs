//! One driver per session: processes that drive the same run at once (two resumes after a
//! kill, a resume beside the live run) share its sessions under claims, so each session is
//! driven once, no model call is asked twice, and every process ends cleanly.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::crash::{recorded_turns, results, run_args, write_tasks};
use crate::harness::{PARLEY, Stub, Workdir, read_jsonl, text};

fn spawn(work: &Workdir, args: &[&str], log: &str) -> Child {
    Command::new(PARLEY)
        .current_dir(work.dir.path())
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(work.path(log)).unwrap())
        .spawn()
        .unwrap()
}

async fn finished(work: &Workdir, db: &str) -> i64 {
    if !work.path(db).exists() {
        return 0;
    }
    let Ok(pool) = sqlx::SqlitePool::connect(&format!("sqlite://{}", work.path(db).display())).await else { return 0 };
    let n = sqlx::query_scalar("SELECT COUNT(*) FROM sessions WHERE status = 'finished'").fetch_one(&pool).await;
    pool.close().await;
    n.unwrap_or(0)
}

/// Waits until `at_least` sessions of the database are finished.
async fn wait_finished(work: &Workdir, db: &str, at_least: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while finished(work, db).await < at_least {
        assert!(Instant::now() < deadline, "the run did not get going");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn succeeded(mut child: Child, work: &Workdir, log: &str) -> String {
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(work.path(log)).unwrap_or_default();
    assert!(status.success(), "{log}: {stderr}");
    stderr
}

/// A work folder with the tasks and the reference: the same run, never interrupted, against a
/// stub of its own (`reference.db`, `reference.jsonl`).
fn reference_run() -> Workdir {
    let work = Workdir::new();
    write_tasks(&work);
    let reference_stub = Stub::start(&["--latency-ms", "40"]);
    let out = work.parley(&run_args(&reference_stub.url, "reference.db", "reference.jsonl"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    work
}

/// A rollout file's rows, in a stable order.
fn sorted_rows(work: &Workdir, name: &str) -> Vec<String> {
    let mut rows: Vec<String> = read_jsonl(&work.path(name)).iter().map(Value::to_string).collect();
    rows.sort();
    rows
}

/// Turns the stub was asked more than once.
fn repeated(stats: &Value) -> Vec<(String, u64)> {
    let turns = stats["turns"].as_object().unwrap();
    turns.iter().filter(|(_, n)| n.as_u64().unwrap() > 1).map(|(k, n)| (k.clone(), n.as_u64().unwrap())).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_resumes_at_once_after_a_kill_finish_every_session_once() {
    let work = reference_run();

    let stub = Stub::start(&["--latency-ms", "40"]);
    let mut run = spawn(&work, &run_args(&stub.url, "crash.db", "crash.jsonl"), "run.log");
    wait_finished(&work, "crash.db", 20).await;
    run.kill().unwrap(); // SIGKILL: its claims stay in the store, held by a process that is gone
    run.wait().unwrap();
    let recorded = recorded_turns(&work, "crash.db").await;
    let before = stub.stats()["turns"].clone();

    let resume = ["resume", "1", "--db", "crash.db"];
    let (a, b) = (spawn(&work, &resume, "a.log"), spawn(&work, &resume, "b.log"));
    succeeded(a, &work, "a.log");
    succeeded(b, &work, "b.log");

    // Every session finished once, as the uninterrupted run finished it.
    assert_eq!(results(&work, "crash.db").await, results(&work, "reference.db").await);
    let after = stub.stats();
    for turn in &recorded {
        assert_eq!(after["turns"][turn], before[turn], "turn {turn} was recorded before the resumes, and asked again");
    }
    // After the kill, the two resumes together asked each turn at most once: two resumes
    // driving the same session would both ask its turns. (A turn in flight at the kill, asked
    // by the killed run but never recorded, is asked once more.)
    let asked_by_both: Vec<(String, u64)> = after["turns"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(turn, n)| (turn.clone(), n.as_u64().unwrap() - before[turn].as_u64().unwrap_or(0)))
        .filter(|(_, n)| *n > 1)
        .collect();
    assert_eq!(asked_by_both, [], "turns asked by both resumes");
    assert!(repeated(&after).len() <= 3 * 8, "only turns in flight at the kill were asked again");
    assert_eq!(sorted_rows(&work, "crash.jsonl"), sorted_rows(&work, "reference.jsonl"), "every session once");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resume_beside_the_live_run_drives_nothing_twice() {
    let work = reference_run();

    let stub = Stub::start(&["--latency-ms", "40"]);
    let run = spawn(&work, &run_args(&stub.url, "live.db", "live.jsonl"), "run.log");
    wait_finished(&work, "live.db", 10).await;
    let resume = spawn(&work, &["resume", "1", "--db", "live.db"], "resume.log");
    let resumed = succeeded(resume, &work, "resume.log");
    succeeded(run, &work, "run.log");

    assert_eq!(results(&work, "live.db").await, results(&work, "reference.db").await);
    assert_eq!(repeated(&stub.stats()), [], "no model call was asked twice");
    assert!(resumed.contains("resuming"), "{resumed}");
    assert_eq!(sorted_rows(&work, "live.jsonl"), sorted_rows(&work, "reference.jsonl"), "every session once");
}

/// Resumes of a finished run, all at once, each write the run's files again from the store
/// through temporary files of their own: none renames another's away (`No such file`), each
/// ends cleanly, and the files hold every session once, with no temporary file left.
#[test]
fn resumes_at_once_each_rewrite_the_files_through_their_own() {
    let work = reference_run();
    let before = sorted_rows(&work, "reference.jsonl");
    let resume = ["resume", "1", "--db", "reference.db"];
    let resumes: Vec<(Child, String)> = (0..4)
        .map(|i| {
            let log = format!("resume-{i}.log");
            (spawn(&work, &resume, &log), log)
        })
        .collect();
    for (child, log) in resumes {
        succeeded(child, &work, &log);
    }
    assert_eq!(sorted_rows(&work, "reference.jsonl"), before, "every session once");
    let left: Vec<String> = std::fs::read_dir(work.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".partial"))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "temporary files left");
}
