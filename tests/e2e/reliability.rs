//! Reliability: a long run under every fault the stub can inject, failure classes, retrying the
//! failed sessions, graceful shutdown on SIGTERM, and databases that cannot be used.

use parley_core::SessionStatus;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{PARLEY, Stub, Workdir, ok, read_jsonl, run, text};

/// Sessions by (termination, failure class).
async fn outcomes(work: &Workdir) -> BTreeMap<(String, Option<String>), i64> {
    let db = work.db().await;
    let rows: Vec<(String, Option<String>, i64)> = sqlx::query_as(
        "SELECT COALESCE(termination, status), failure, COUNT(*) FROM sessions GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    rows.into_iter().map(|(t, f, n)| ((t, f), n)).collect()
}

/// A session's status, termination, reward, failure class, error and retries.
type SessionEnd = (String, String, Option<f64>, Option<String>, Option<String>, i64);

/// What the last error of a session failed with `class` must say.
fn says_its_class(class: &str, error: &str) -> bool {
    match class {
        "rate_limited" => error.contains("429"),
        "server_error" => error.contains("500"),
        "timeout" => error.contains("timeout"),
        "connection" => error.contains("error"),
        "malformed_response" => error.contains("not JSON") || error.contains("larger than the limit"),
        _ => false,
    }
}

#[tokio::test]
async fn a_thousand_sessions_under_mixed_faults_end_recorded_and_retry_to_completion() {
    let work = Workdir::new();
    work.tasks(1000);
    let stub = Stub::start(&[
        "--rate-limit=0.03",
        "--retry-after=0",
        "--server-error=0.03",
        "--hang=0.01",
        "--hang-secs=30",
        "--malformed=0.02",
        "--reset=0.03",
        "--huge=0.01",
        "--huge-bytes=2000000",
        "--bad-arguments=0.03",
        "--seed=7",
    ]);
    let started = Instant::now();
    let out = run(
        &work,
        &stub,
        &["-c", "64", "--max-retries", "1", "--call-timeout", "0.5", "--max-response-bytes", "1000000"],
    );
    let took = started.elapsed();
    let stdout = ok(&out);

    // Every session ended, and each either was scored or failed with a class its error bears out.
    let db = work.db().await;
    let rows: Vec<SessionEnd> =
        sqlx::query_as("SELECT status, termination, reward, failure, error, retries FROM sessions")
            .fetch_all(&db)
            .await
            .unwrap();
    assert_eq!(rows.len(), 1000);
    let mut classes: BTreeMap<String, usize> = BTreeMap::new();
    for (status, termination, reward, failure, error, _) in &rows {
        assert_eq!(status, SessionStatus::Finished.as_str());
        match failure {
            None => {
                assert!(reward.is_some(), "{termination} without a failure is scored");
                assert!(["agent_stop", "too_many_errors"].contains(&termination.as_str()), "{termination}");
            }
            Some(class) => {
                assert_eq!(termination, "infrastructure_error");
                assert!(reward.is_none(), "a failed session has no reward");
                let error = error.as_deref().unwrap_or_default();
                assert!(says_its_class(class, error), "{class}: {error}");
                *classes.entry(class.clone()).or_default() += 1;
            }
        }
    }
    let failed: usize = classes.values().sum();
    assert!(classes.len() >= 4, "the faults show up as several classes: {classes:?}");
    assert!(failed < 200, "most sessions got through on a retry: {classes:?}");
    let retries: i64 = rows.iter().map(|r| r.5).sum();
    assert!(retries > 100, "{retries} retries");
    let malformed: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM tool_calls WHERE malformed = 1").fetch_one(&db).await.unwrap();
    assert!(malformed > 0, "bad arguments went back to the model");

    // The summary counts the classes and excludes the failures from the rewards.
    let listed: Vec<String> = classes.iter().map(|(c, n)| format!("{c} {n}")).collect();
    assert!(stdout.contains(&format!("failures       {}", listed.join(" · "))), "{stdout}");
    assert!(stdout.contains(&format!("n={}", 1000 - failed)), "{stdout}");
    assert!(stdout.contains(&format!("retries        {retries} model-call retries")), "{stdout}");
    // Nothing is lost: every session is a rollout or a failure row.
    let rollouts = read_jsonl(&work.path("out.jsonl"));
    let failures = read_jsonl(&work.path("out_failures.jsonl"));
    assert_eq!((rollouts.len(), failures.len()), (1000 - failed, failed));
    // Each failure row names its session's stored failure class.
    let mut written: BTreeMap<String, usize> = BTreeMap::new();
    for f in &failures {
        *written.entry(f["_ng_failure_class"].as_str().unwrap_or("-").to_owned()).or_default() += 1;
    }
    assert_eq!(written, classes, "failure rows by class");
    eprintln!(
        "fault run: 1000 sessions in {:.1} s, {failed} failed {classes:?}, {retries} retries",
        took.as_secs_f64()
    );

    // The endpoint recovers (a stub without faults on the same port), and the failed sessions
    // are taken up again from their last committed turn: all of them finish, and no session
    // that had finished asks for anything again.
    let port = stub.port();
    drop(stub);
    let clean = Stub::start_on(port, &[]);
    let out = ok(&work.parley(&["resume", "1", "--db", "parley.db", "--retry-failed"]));
    assert!(!out.contains("failures       "), "{out}");
    assert!(out.contains("n=1000"), "{out}");
    let requests = clean.stats()["requests"].as_u64().unwrap() as usize;
    assert!(requests <= 3 * failed, "{requests} requests to finish {failed} sessions");
    assert_eq!(read_jsonl(&work.path("out.jsonl")).len(), 1000);
    assert!(read_jsonl(&work.path("out_failures.jsonl")).is_empty());
    let attempts: i64 = sqlx::query_scalar("SELECT MAX(attempt) FROM sessions").fetch_one(&db).await.unwrap();
    assert_eq!(attempts, 1, "the retried sessions count their attempt");
}

#[tokio::test]
async fn each_fault_is_recorded_with_its_own_class() {
    let cases: [(&[&str], &str, &str); 6] = [
        (&["--rate-limit=1", "--retry-after=0"], "rate_limited", "429"),
        (&["--server-error=1"], "server_error", "500"),
        (&["--hang=1"], "timeout", "timeout"),
        (&["--malformed=1"], "malformed_response", "not JSON"),
        (&["--reset=1"], "connection", "error"),
        (&["--huge=1", "--huge-bytes=300000"], "malformed_response", "larger than the limit of 100000 bytes"),
    ];
    for (faults, class, says) in cases {
        let work = Workdir::new();
        work.tasks(3);
        let stub = Stub::start(faults);
        let out = run(&work, &stub, &["--max-retries", "1", "--call-timeout", "0.3", "--max-response-bytes", "100000"]);
        let stdout = ok(&out);
        let key = ("infrastructure_error".to_owned(), Some(class.to_owned()));
        assert_eq!(outcomes(&work).await, BTreeMap::from([(key, 3)]), "{faults:?}");
        let db = work.db().await;
        let errors: Vec<String> = sqlx::query_scalar("SELECT error FROM sessions").fetch_all(&db).await.unwrap();
        assert!(errors.iter().all(|e| e.contains(says)), "{faults:?}: {errors:?}");
        assert!(stdout.contains(&format!("failures       {class} 3")), "{stdout}");
        assert!(stdout.contains("retries        3 model-call retries"), "{faults:?}: {stdout}");
    }

    // No server at all: the connection is refused.
    let work = Workdir::new();
    work.tasks(2);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let url = format!("http://{closed}/v1");
    let out = work.parley(&[
        "run",
        "--tasks",
        "tasks.jsonl",
        "--base-url",
        &url,
        "--db",
        "parley.db",
        "--out",
        "out.jsonl",
        "--max-retries",
        "1",
    ]);
    ok(&out);
    let key = ("infrastructure_error".to_owned(), Some("connection".to_owned()));
    assert_eq!(outcomes(&work).await, BTreeMap::from([(key, 2)]));
}

#[tokio::test]
async fn sigterm_lets_turns_in_flight_commit_and_the_run_resumes_without_redoing_any() {
    let work = Workdir::new();
    work.tasks(40);
    let stub = Stub::start(&["--latency-ms", "400"]);
    let mut child = Command::new(PARLEY)
        .current_dir(work.dir.path())
        .args(["run", "--tasks", "tasks.jsonl", "--base-url", &stub.url, "--db", "parley.db", "--out", "out.jsonl"])
        .args(["--concurrency", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let stopped = Instant::now();
    let mut stderr = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        stderr.push_str(&line.unwrap());
        stderr.push('\n');
    }
    let out = child.wait_with_output().unwrap();
    // A script can tell a run that stopped early from one that finished: 128 + SIGTERM.
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    assert!(stopped.elapsed() < Duration::from_secs(10), "the turns in flight end well within the grace period");
    assert!(stderr.contains("SIGTERM: stopping"), "{stderr}");
    assert!(stderr.contains("resume it with: parley resume 1 --db parley.db"), "{stderr}");

    let db = work.db().await;
    let (finished, pending): (i64, i64) =
        sqlx::query_as("SELECT SUM(status = 'finished'), SUM(status = 'pending') FROM sessions")
            .fetch_one(&db)
            .await
            .unwrap();
    assert!(finished > 0 && pending > 0, "{finished} finished, {pending} pending");
    let answered = stub.stats()["by_status"]["200"].as_u64().unwrap();
    let committed: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM model_calls").fetch_one(&db).await.unwrap();
    assert_eq!(answered as i64, committed, "every answer the stub gave before the stop was committed");

    let out = ok(&work.parley(&["resume", "1", "--db", "parley.db"]));
    assert!(out.contains("terminations   agent_stop 40"), "{out}");
    let requests = stub.stats()["requests"].as_i64().unwrap();
    let committed: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM model_calls").fetch_one(&db).await.unwrap();
    assert_eq!(requests, committed, "no model call was made twice: nothing in flight was lost");
}

fn exits_with(work: &Workdir, args: &[&str], env: &[(&str, &str)], code: i32, needle: &str) {
    let out = work.parley_with_env(args, env);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: `{stderr}` should say `{needle}`");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test]
async fn databases_that_cannot_be_used_are_refused_untouched() {
    let work = Workdir::new();
    work.tasks(2);
    let stub = Stub::start(&[]);
    let run_into = |db: &str| {
        vec!["run", "--tasks", "tasks.jsonl", "--base-url", stub.url.as_str(), "--db", db, "--out", "o.jsonl"]
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<String>>()
    };
    fn args(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    // Not a database at all.
    std::fs::write(work.path("notes.txt"), "just some notes\n".repeat(100)).unwrap();
    exits_with(&work, &args(&run_into("notes.txt")), &[], 65, "notes.txt is not a SQLite database");
    exits_with(&work, &["runs", "--db", "notes.txt"], &[], 65, "is not a SQLite database");
    assert_eq!(std::fs::read_to_string(work.path("notes.txt")).unwrap(), "just some notes\n".repeat(100));

    // Another program's SQLite database.
    let other = work.path("other.db");
    let made = Command::new("sqlite3").arg(&other).arg("CREATE TABLE photos (id INTEGER, path TEXT);").status();
    assert!(made.unwrap().success());
    let before = std::fs::read(&other).unwrap();
    exits_with(&work, &args(&run_into("other.db")), &[], 65, "another program (tables: photos)");
    assert_eq!(std::fs::read(&other).unwrap(), before, "left untouched");

    // A Parley database from a newer Parley.
    ok(&work.parley(&args(&run_into("parley.db"))));
    let db = work.db().await;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (9999, 'from the future', 1, x'00', 0)",
    )
    .execute(&db)
    .await
    .unwrap();
    db.close().await;
    exits_with(&work, &["runs", "--db", "parley.db"], &[], 65, "schema version 9999");
    exits_with(&work, &args(&run_into("parley.db")), &[], 65, "upgrade parley");

    // A database another process keeps locked.
    ok(&work.parley(&args(&run_into("locked.db"))));
    let mut holder = Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys, time\n\
             c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
             c.execute('BEGIN EXCLUSIVE')\n\
             print('locked', flush=True)\n\
             time.sleep(60)",
        ])
        .arg(work.path("locked.db"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "locked");
    exits_with(
        &work,
        &args(&run_into("locked.db")),
        &[("PARLEY_BUSY_TIMEOUT", "0.5")],
        75,
        "locked by another process",
    );
    holder.kill().unwrap();
    holder.wait().unwrap();

    // A read-only database (immutable, since the tests may run as root).
    ok(&work.parley(&args(&run_into("frozen.db"))));
    let frozen = work.path("frozen.db");
    let immutable = Command::new("chattr").arg("+i").arg(&frozen).status().is_ok_and(|s| s.success());
    if immutable {
        let out = work.parley(&args(&run_into("frozen.db")));
        let _ = Command::new("chattr").arg("-i").arg(&frozen).status();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(73), "{stderr}");
        assert!(stderr.contains("read-only"), "{stderr}");
    } else {
        eprintln!("\n*** chattr +i is not available here: the read-only case is not checked ***\n");
    }
}
