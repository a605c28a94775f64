//! Re-score, replay, fork, Ctrl-C, and the snapshots of `show` and `metrics`.

use parley_core::RunStatus;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::{PARLEY, Stub, Workdir, ok, run, text};

/// A run with no finished session has nothing to score again: a usage error that says where to
/// look, and no score version is written.
#[test]
fn a_rescore_of_a_run_with_no_finished_session_is_refused() {
    let work = Workdir::new();
    work.tasks(2);
    let stub = Stub::start(&[]);
    ok(&run(&work, &stub, &["--detach"]));
    let out = work.parley(&["rescore", "1", "--db", "parley.db", "--reward", "environment"]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no finished session with a reward"), "{}", text(&out.stderr));
    let versions = ok(&work.parley(&["scores", "1", "--db", "parley.db"]));
    assert!(versions.contains("has no scores yet"), "{versions}");
}

#[tokio::test]
async fn rescore_keeps_old_scores_and_shows_what_changed() {
    let work = Workdir::new();
    work.tasks(4);
    let stub = Stub::start(&[]);
    ok(&run(&work, &stub, &[]));
    let out = ok(&work.parley(&["rescore", "1", "--db", "parley.db"]));
    assert!(out.contains("rescored 4 sessions of run 1: 0 changed"), "{out}");
    // Correct the ground truth of task 1 so that the stub's answer is now right.
    work.exec("UPDATE tasks SET row = json_set(row, '$.expected_synonym_values', json('[0]')) WHERE task_index = 1")
        .await;
    let out = ok(&work.parley(&["rescore", "1", "--db", "parley.db"]));
    assert!(out.contains("session 2: reward 0 -> 1 (score version 3)"), "{out}");
    assert!(out.contains("accuracy: false -> true"), "{out}");
    assert!(out.contains("rescored 4 sessions of run 1: 1 changed"), "{out}");
    let db = work.db().await;
    let versions: Vec<(i64, f64)> =
        sqlx::query_as("SELECT version, value FROM scores WHERE session_id = 2 ORDER BY version")
            .fetch_all(&db)
            .await
            .unwrap();
    assert_eq!(versions, [(1, 0.0), (2, 0.0), (3, 1.0)]);
    let metrics = ok(&work.parley(&["metrics", "1", "--db", "parley.db", "--json"]));
    let metrics: serde_json::Value = serde_json::from_str(&metrics).unwrap();
    assert_eq!(metrics["reward"]["mean"], 0.75);
}

#[tokio::test]
async fn replay_reports_no_drift_then_exactly_the_changed_tool_output() {
    let work = Workdir::new();
    work.tasks(3);
    let stub = Stub::start(&[]);
    ok(&run(&work, &stub, &[]));
    let out = ok(&work.parley(&["replay", "--run", "1", "--db", "parley.db"]));
    assert!(out.contains("replayed 3 sessions of run 1: 0 tool outputs drifted, 0 rewards changed"), "{out}");
    // The recording of session 2's first tool call came from an older version of the tool.
    work.exec(r#"UPDATE tool_calls SET output = '{"synonym_value":1}' WHERE session_id = 2 AND seq = 3"#).await;
    let out = ok(&work.parley(&["replay", "--run", "1", "--db", "parley.db"]));
    let drift: Vec<&str> = out.lines().filter(|l| l.contains("recorded")).collect();
    assert_eq!(
        drift,
        [r#"session 2 message 3 `get_synonym_value`: recorded {"synonym_value":1} · replayed {"synonym_value":765}"#]
    );
    assert!(out.contains("1 tool outputs drifted"));
}

#[tokio::test]
async fn a_fork_shares_the_prefix_and_continues_with_another_model() {
    let work = Workdir::new();
    work.tasks(2);
    let stub = Stub::start(&[]);
    ok(&run(&work, &stub, &[]));
    let out = ok(&work.parley(&["fork", "1", "--at", "4", "--model", "other-model", "--db", "parley.db"]));
    assert!(out.contains("session 3: forked from session 1 at message 4 with model other-model; agent_stop"), "{out}");
    let db = work.db().await;
    let (from, at): (i64, i64) =
        sqlx::query_as("SELECT forked_from, fork_at FROM sessions WHERE id = 3").fetch_one(&db).await.unwrap();
    assert_eq!((from, at), (1, 4));
    let prefix = |id: i64| {
        let db = db.clone();
        async move {
            sqlx::query_as::<_, (String, Option<String>, Option<String>)>(
                "SELECT role, content, tool_calls FROM messages WHERE session_id = ? AND seq < 4 ORDER BY seq",
            )
            .bind(id)
            .fetch_all(&db)
            .await
            .unwrap()
        }
    };
    assert_eq!(prefix(1).await, prefix(3).await);
    let models: Vec<(i64, String)> = sqlx::query_as(
        "SELECT seq, json_extract(request, '$.model') FROM model_calls WHERE session_id = 3 ORDER BY seq",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    assert_eq!(models, [(2, "stub-model".to_owned()), (4, "other-model".to_owned()), (6, "other-model".to_owned())]);
    let out = work.parley(&["fork", "1", "--at", "3", "--db", "parley.db"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(text(&out.stderr).contains("use --at 4"));
}

#[tokio::test]
async fn ctrl_c_stops_cleanly_and_says_how_to_resume() {
    let work = Workdir::new();
    work.tasks(20);
    let stub = Stub::start(&["--latency-ms", "300"]);
    let child = Command::new(PARLEY)
        .current_dir(work.dir.path())
        .args(["run", "--tasks", "tasks.jsonl", "--base-url", &stub.url, "--db", "parley.db", "--out", "out.jsonl"])
        .args(["--concurrency", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    // Stopped early, and says so: 128 + SIGINT, as a shell reports it.
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("resume it with: parley resume 1 --db parley.db"), "{stderr}");
    assert!(stderr.contains("stopped by SIGINT"), "{stderr}");
    let db = work.db().await;
    let pending: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM sessions WHERE status = 'pending'").fetch_one(&db).await.unwrap();
    assert!(pending > 0, "the run was cut short");
    let status: String = sqlx::query_scalar("SELECT status FROM runs").fetch_one(&db).await.unwrap();
    assert_eq!(status, RunStatus::Interrupted.as_str());
    let out = ok(&work.parley(&["resume", "1", "--db", "parley.db"]));
    assert!(out.contains("terminations   agent_stop 20"), "{out}");
    assert_eq!(crate::harness::read_jsonl(&work.path("out.jsonl")).len(), 20);
}

/// `show`, `metrics` and `sessions` of a run against their snapshots (`snapshots/`), read
/// through `insta`: a run compares, and a change is accepted only by `cargo insta review`. What
/// changes from run to run is masked: a number followed by `ms`, and the sessions table's last
/// column, whose padding changes with the number's width.
#[tokio::test]
async fn show_and_metrics_match_their_snapshots() {
    let work = Workdir::new();
    work.tasks(4);
    let stub = Stub::start(&["--bad-arguments", "0.3"]);
    // One session at a time: the stub's fault draws then follow one order.
    ok(&run(&work, &stub, &["--trials", "2", "--concurrency", "1"]));
    let show = ok(&work.parley(&["show", "2", "--db", "parley.db"]));
    let metrics = ok(&work.parley(&["metrics", "1", "--db", "parley.db"]));
    let sessions = ok(&work.parley(&["sessions", "1", "--db", "parley.db", "--termination", "agent_stop"]));
    let times = (r"(?m)(^| )\d+(\.\d+)? ms", "${1}<ms> ms");
    insta::with_settings!({ filters => vec![times] }, {
        insta::assert_snapshot!("show", show);
        insta::assert_snapshot!("metrics", metrics);
    });
    insta::with_settings!({ filters => vec![times, (r"(?m) +\d+(\.\d+)?$", "  <ms>")] }, {
        insta::assert_snapshot!("sessions", sessions);
    });
}

/// A rescore asks the judge nothing it has judged before: tau2's NL assertions are answered from
/// the verdicts stored by the run, the rescore says so, and the endpoint sees no request.
#[test]
fn a_rescore_reuses_the_judges_stored_verdicts() {
    let work = Workdir::new();
    let data = crate::harness::tau2_data_dir();
    let stub = Stub::start(&[]);
    ok(&work.parley(&[
        "run",
        "--env",
        "tau2:retail",
        "--data-dir",
        &data,
        "--num-tasks",
        "4",
        "--user",
        "llm",
        "--base-url",
        &stub.url,
        "--db",
        "parley.db",
        "--out",
        "out.jsonl",
    ]));
    let asked = stub.stats()["requests"].clone();
    let out = ok(&work.parley(&["rescore", "1", "--db", "parley.db"]));
    assert!(out.contains("rescored 4 sessions of run 1: 0 changed; 0 judge calls"), "{out}");
    let reused: u64 = out.split(" judge calls, ").nth(1).and_then(|t| t.split(' ').next()?.parse().ok()).unwrap();
    assert!(reused > 0, "the run's verdicts were reused: {out}");
    assert_eq!(stub.stats()["requests"], asked, "the rescore made no model call");
}

/// A session whose stored text is damaged is named (table, session, column, and how to recover
/// the file), and every other session is still exported.
#[tokio::test]
async fn an_export_writes_every_readable_session_and_names_the_damaged_one() {
    let work = Workdir::new();
    work.tasks(4);
    let stub = Stub::start(&[]);
    ok(&run(&work, &stub, &[]));
    // Bytes that are not UTF-8 where text belongs, as a damaged page leaves them.
    work.exec("UPDATE messages SET content = CAST(X'C328FF' AS TEXT) WHERE session_id = 3 AND seq = 1").await;
    let out = work.parley(&["export", "1", "--format", "nemo-gym", "--out", "rows.jsonl", "--db", "parley.db"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("session 3") && stderr.contains("messages") && stderr.contains("content"), "{stderr}");
    assert!(stderr.contains(".recover"), "the fix is named: {stderr}");
    let rows = crate::harness::read_jsonl(&work.path("rows.jsonl"));
    let mut sessions: Vec<u64> = rows.iter().map(|r| r["_ng_task_index"].as_u64().unwrap()).collect();
    sessions.sort_unstable();
    assert_eq!(sessions, [0, 1, 3], "every readable session is written");
}
