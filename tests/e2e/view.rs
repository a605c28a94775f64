//! `parley view`: the real binary serving a real database on a loopback port. One test answers
//! strangers and bad input over raw HTTP; the other drives every page in headless Chromium
//! (Debian's, through playwright-core, both installed by `.ci/setup-browser`), with hostile
//! text in the transcripts and a run that is still going on.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{PARLEY, Stub, Workdir, ok, read_jsonl, root, run, text};
use crate::http::Answer;

/// `parley view` on a free loopback port, stopped when dropped.
pub(crate) struct View {
    child: Child,
    base: String,
}

impl View {
    fn start(work: &Workdir, extra: &[&str], env: &[(&str, &str)]) -> View {
        View::start_on(work, "parley.db", extra, env)
    }

    /// The viewer of the store at `db`.
    pub(crate) fn start_on(work: &Workdir, db: &str, extra: &[&str], env: &[(&str, &str)]) -> View {
        let mut command = Command::new(PARLEY);
        command
            .current_dir(work.dir.path())
            .args(["view", "--db", db, "--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("start parley view");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("read the viewer's address");
        assert!(line.starts_with("http://127.0.0.1:"), "unexpected banner: {line}");
        View { child, base: line.trim().trim_end_matches('/').to_owned() }
    }

    /// The viewer's `host:port`.
    pub(crate) fn address(&self) -> String {
        self.base.trim_start_matches("http://").to_owned()
    }

    /// GET `path` with `headers`: the status, the head and the body.
    pub(crate) fn get(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
        crate::http::request(&self.address(), "GET", path, "", headers)
    }
}

impl Drop for View {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_viewer_answers_strangers_and_bad_input_with_pages() {
    let work = Workdir::new();
    work.tasks(4);
    let stub = Stub::start(&[]);
    ok(&run(&work, &stub, &["--trials", "2"]));

    // Off loopback without a token, and with a token variable that is unset: refused before
    // anything is bound.
    let out = work.parley(&["view", "--db", "parley.db", "--listen", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--token-env"), "{}", text(&out.stderr));
    let out = work.parley(&["view", "--db", "parley.db", "--listen", "0.0.0.0:0", "--token-env", "PARLEY_VIEW_UNSET"]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    let out = work.parley(&["view", "--db", "missing.db"]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));

    // With a token, every request must carry it.
    let view = View::start(&work, &["--token-env", "PARLEY_VIEW_TOKEN"], &[("PARLEY_VIEW_TOKEN", "s3cret-token")]);
    assert_eq!(view.get("/", &[]).0, 401);
    assert_eq!(view.get("/runs/1", &[("Authorization", "Bearer wrong-token")]).0, 401);
    let (status, _, body) = view.get("/runs/1", &[("Authorization", "Bearer s3cret-token")]);
    assert_eq!(status, 200);
    assert!(body.contains("Run 1"), "{body}");
    let (status, head, _) = view.get("/runs/1?token=s3cret-token", &[]);
    assert_eq!(status, 303, "{head}");
    assert!(head.contains("parley_view_token=s3cret-token") && head.contains("HttpOnly"), "{head}");
    assert_eq!(view.get("/", &[("Cookie", "parley_view_token=s3cret-token")]).0, 200);
    drop(view);

    // On loopback, open; bad ids and parameters are pages that say what was wrong.
    let view = View::start(&work, &[], &[]);
    let auth: &[(&str, &str)] = &[];
    for (path, status, says) in [
        ("/runs/77", 404, "run 77 not found"),
        ("/sessions/9999", 404, "session 9999 not found"),
        ("/sessions/-3", 400, "not an id"),
        ("/runs/abc/sessions", 400, "not an id"),
        ("/runs/1/sessions?reward_min=high", 400, "reward_min `high` is not a number"),
        ("/runs/1/sessions?termination=exploded", 400, "is not one of"),
        ("/runs/1/sessions?limit=0", 400, "limit `0`"),
        ("/runs/1/sessions?after=1&before=5", 400, "not both"),
        ("/runs/1/sessions?colour=red", 400, "unknown parameter `colour`"),
        ("/runs/1/sessions?task=%ZZ", 400, "task `%ZZ` is not a whole number"),
        ("/compare?a=1&b=424242", 404, "session 424242 not found"),
        ("/compare?a=1", 400, "two sessions"),
        ("/no/such/page", 404, "not found"),
    ] {
        let (got, head, body) = view.get(path, auth);
        assert_eq!(got, status, "{path}: {head}\n{body}");
        assert!(body.contains(says), "{path}: {body}");
        assert!(body.contains("<h1>"), "{path} is a page: {body}");
        assert!(head.to_ascii_lowercase().contains("content-security-policy: default-src 'none'"), "{head}");
    }
    // The viewer is still serving after all of that.
    let (status, _, body) = view.get("/runs/1/sessions?status=finished&reward_min=1&limit=3", auth);
    assert_eq!(status, 200);
    assert_eq!(body.matches("href=\"/sessions/").count(), 3, "{body}");
    assert!(body.contains("4 sessions match"), "{body}");
    let (status, _, body) = view.get("/runs/1/sessions?failure=rate_limited", auth);
    assert_eq!(status, 200);
    assert!(body.contains("0 sessions match") && body.contains("No sessions on this page."), "{body}");
    let (status, _, body) = view.get("/runs/1/sessions?task=1&reward_max=0.5", auth);
    assert_eq!(status, 200);
    assert!(body.contains("2 sessions match"), "task 1 fails in both its trials: {body}");

    // SIGTERM stops it cleanly: exit 0, and the port is let go.
    let mut view = view;
    let status = Command::new("kill").args(["-TERM", &view.child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let started = Instant::now();
    let exit = loop {
        if let Some(exit) = view.child.try_wait().unwrap() {
            break exit;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "parley view did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "{exit:?}");
    assert!(TcpStream::connect(view.base.trim_start_matches("http://")).is_err(), "still listening after it stopped");
}

/// A run's score versions and what a rescore moved are pages: the run lists its versions with the
/// reward of each, and the scores page compares two, each changed session linked.
#[test]
fn a_runs_score_versions_and_what_a_rescore_moved_are_pages() {
    let work = Workdir::new();
    work.tasks(4);
    let stub = Stub::start(&[]);
    ok(&run(&work, &stub, &["--trials", "2"]));
    for weight in ["0.5", "0.25"] {
        let reward = format!("environment:weight={weight}");
        ok(&work.parley(&["rescore", "1", "--db", "parley.db", "--reward", &reward]));
    }
    let view = View::start(&work, &[], &[]);
    let (status, _, body) = view.get("/runs/1", &[]);
    assert_eq!(status, 200);
    assert!(body.contains("Score versions") && body.contains("0.5·environment"), "{body}");
    assert!(body.contains("the environment&#39;s own") || body.contains("the environment's own"), "{body}");
    assert!(body.contains("href=\"/runs/1/scores?a=2&amp;b=3\""), "{body}");

    // By default the latest two: the four sessions that failed score 0 either way, the four
    // that succeeded (mean 0.5 at version 1) pay half as much.
    let (status, _, body) = view.get("/runs/1/scores", &[]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Version 2 → 3") && body.contains("4 of 8 sessions changed"), "{body}");
    assert!(body.contains("<td>environment</td>"), "{body}");
    assert_eq!(body.matches("href=\"/sessions/").count(), 4, "{body}");
    let (status, _, body) = view.get("/runs/1/scores?a=1&b=3", &[]);
    assert_eq!(status, 200);
    assert!(body.contains("Version 1 → 3"), "{body}");
    for (path, status, says) in [
        ("/runs/1/scores?a=1&b=9", 404, "score version 9 of run 1 not found"),
        ("/runs/1/scores?a=1", 400, "compare two versions"),
        ("/runs/1/scores?a=x&b=2", 400, "`x`"),
    ] {
        let (got, _, body) = view.get(path, &[]);
        assert_eq!(got, status, "{path}: {body}");
        assert!(body.contains(says), "{path}: {body}");
    }
}

/// The browser and playwright-core that `.ci/setup-browser` installs, or why they are missing.
fn browser() -> Result<std::path::PathBuf, String> {
    let module = root().join(".browser-tests/node_modules/playwright-core");
    if !std::path::Path::new("/usr/bin/chromium").is_file() {
        return Err("Chromium is not installed at /usr/bin/chromium; run .ci/setup-browser".into());
    }
    if !module.join("package.json").is_file() {
        return Err("playwright-core is not installed in .browser-tests; run .ci/setup-browser".into());
    }
    Ok(module)
}

#[tokio::test]
async fn every_page_works_in_a_browser_and_runs_nothing_it_shows() {
    let module = match browser() {
        Ok(module) => module,
        Err(message) => {
            crate::harness::skip(&message);
            return;
        }
    };
    let work = Workdir::new();
    let tasks = 6;
    let path = work.tasks(tasks);
    // Task 0 says hostile things; task 1 says one line of 300,000 characters.
    let mut rows = read_jsonl(&path);
    rows[0]["responses_create_params"]["input"][1]["content"] = serde_json::json!(
        "<script>window.__pwned = 1</script>\"><img src=x onerror=\"window.__pwned = 2\"> '><svg onload=alert(3)> </textarea></pre>&amp;"
    );
    rows[0]["responses_create_params"]["input"][0]["content"] =
        serde_json::json!("<style>body{display:none}</style><iframe src=\"javascript:alert(4)\"></iframe>");
    rows[1]["responses_create_params"]["input"][1]["content"] = serde_json::json!("W".repeat(300_000));
    let lines: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();

    let stub = Stub::start(&[]);
    ok(&run(&work, &stub, &["--trials", "2"]));
    let db = work.db().await;
    let id = |task: i64| {
        let db = db.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT MIN(id) FROM sessions WHERE run_id = 1 AND task_index = ?")
                .bind(task)
                .fetch_one(&db)
                .await
                .unwrap()
        }
    };
    let (hostile, huge, plain) = (id(0).await, id(1).await, id(2).await);
    // A fork of the plain session, continued by a stub that makes one tool call where the
    // original made two: it differs from its source from the fork point on.
    let other = Stub::start(&["--tool-calls", "1"]);
    ok(&work.parley(&["fork", &plain.to_string(), "--at", "4", "--base-url", &other.url, "--db", "parley.db"]));
    let fork: i64 = sqlx::query_scalar("SELECT MAX(id) FROM sessions").fetch_one(&db).await.unwrap();
    let successes: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM sessions WHERE run_id = 1 AND termination = 'agent_stop' AND reward >= 1",
    )
    .fetch_one(&db)
    .await
    .unwrap();

    // tau2's mock domain: the oracle (its writes match the gold database), then the stub as the
    // agent (they do not).
    let data = root().join("../shared/data/tau2");
    let data = data.to_str().unwrap();
    let tau2 =
        ["--env", "tau2:mock", "--user", "scripted", "--data-dir", data, "--db", "parley.db", "--num-tasks", "2"];
    ok(&work.parley(&[&["run", "--agent", "oracle", "--out", "oracle.jsonl"], &tau2[..]].concat()));
    ok(&work
        .parley(&[&["run", "--base-url", &stub.url, "--model", "stub-model", "--out", "t.jsonl"], &tau2[..]].concat()));
    let tau2_session = |run: i64, matched: bool| {
        let db = db.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT MIN(s.id) FROM sessions s JOIN scores c ON c.session_id = s.id
                 WHERE s.run_id = ? AND json_extract(c.breakdown, '$.db_check.db_match') = ?",
            )
            .bind(run)
            .bind(matched)
            .fetch_one(&db)
            .await
            .unwrap()
        }
    };
    let (tau2_match, tau2_differs) = (tau2_session(2, true).await, tau2_session(3, false).await);

    // A conversation with a simulated user (the stub plays it too): user turns with model calls.
    ok(&work.parley(&[
        "run",
        "--env",
        "multi-step",
        "--tasks",
        "tasks.jsonl",
        "--num-tasks",
        "2",
        "--base-url",
        &stub.url,
        "--model",
        "stub-model",
        "--user",
        "llm",
        "--user-base-url",
        &stub.url,
        "--user-model",
        "user-model",
        "--db",
        "parley.db",
        "--out",
        "users.jsonl",
    ]));
    let conversation: i64 =
        sqlx::query_scalar("SELECT MAX(id) FROM sessions WHERE run_id = 4").fetch_one(&db).await.unwrap();

    // A fifth run that goes on while the browser watches: slow answers, one session at a time.
    let slow = Stub::start(&["--latency-ms", "400"]);
    let mut running = Command::new(PARLEY)
        .current_dir(work.dir.path())
        .args(["run", "--env", "multi-step", "--tasks", "tasks.jsonl", "--base-url", &slow.url])
        .args(["--model", "stub-model", "--db", "parley.db", "--out", "slow.jsonl", "--trials", "4"])
        .args(["--concurrency", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM runs").fetch_one(&db).await.unwrap() < 5 {
        assert!(started.elapsed() < Duration::from_secs(20), "the fifth run never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let view = View::start(&work, &[], &[]);
    let shots = work.path("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    // docs/viewer.md's screenshot: written when missing or when PARLEY_UPDATE_SNAPSHOTS=1, like the
    // snapshots, so that a test run does not change the working tree (times and seeds differ).
    let docs = root().join("docs/viewer-session.png");
    let docs = (!docs.is_file() || std::env::var("PARLEY_UPDATE_SNAPSHOTS").as_deref() == Ok("1")).then_some(docs);
    let plan = serde_json::json!({
        "base": view.base, "out": shots, "docs": docs,
        "runs": [1, 2, 3, 4, 5], "run": 1, "trials": 2, "tasks": tasks, "successes": successes,
        "hostile": hostile, "huge": huge, "session": plain,
        "source": plain, "fork": fork, "fork_at": 4, "running": 5, "conversation": conversation,
        "tau2_match": tau2_match, "tau2_differs": tau2_differs,
    });
    let out = Command::new("node")
        .arg(root().join("tests/e2e/browser/view.cjs"))
        .env("PLAYWRIGHT_CORE", &module)
        .env("VIEW_PLAN", plan.to_string())
        .output()
        .expect("run node");
    let _ = running.kill();
    let _ = running.wait();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "the browser checks failed:\n{stdout}\n{}", text(&out.stderr));
    eprintln!("{stdout}");
    // PARLEY_VIEW_SCREENSHOTS=DIR keeps the screenshots, which the work folder takes with it.
    if let Some(keep) = std::env::var_os("PARLEY_VIEW_SCREENSHOTS") {
        std::fs::create_dir_all(&keep).unwrap();
        for entry in std::fs::read_dir(&shots).unwrap().flatten() {
            if entry.path().extension().is_some_and(|e| e == "png") {
                std::fs::copy(entry.path(), std::path::Path::new(&keep).join(entry.file_name())).unwrap();
            }
        }
    }
    for shot in
        ["runs.png", "run.png", "sessions.png", "session.png", "session-hostile.png", "compare.png", "running.png"]
    {
        let size = std::fs::metadata(shots.join(shot)).map(|m| m.len()).unwrap_or(0);
        assert!(size > 10_000, "screenshot {shot} is missing or blank ({size} bytes)");
    }
}
