//! The store on PostgreSQL, through the real binary: a run there gives what the same run gives
//! on SQLite, every reading command (and the viewer) works on it, a detached run is finished by workers that
//! share its sessions (each once, no model call asked twice), a killed worker's sessions are
//! taken over when its leases run out, a worker paused past its leases has its commits refused,
//! and a password in the URL is never printed or stored. (`cluster` drives a run with three workers
//! that fail as a cluster does: one killed, one stopped, one cut off from the database.)
//!
//! The server is the one `PARLEY_TEST_POSTGRES` names (`.ci/setup-postgres` starts one and
//! prints its URL); each test works in a schema of its own, so tests run in parallel. Without a
//! server a test passes saying it was skipped, unless `PARLEY_REQUIRE_PEERS=1` (as in CI).

use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Command, Output, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::crash::{Outcome, results, run_args, write_tasks};
use crate::harness::{PARLEY, Stub, Workdir, read_jsonl, skip, text};
use crate::view::View;

/// A session as stored: (id, task, trial, status, termination, reward).
type SessionRow = (i64, i64, i64, String, Option<String>, Option<f64>);

/// A schema of its own on the test server, dropped by [`Pg::remove`] (a failed test leaves it
/// behind, to look at).
pub(crate) struct Pg {
    /// The URL the binary is given: the server's, with the schema as its search path.
    pub(crate) url: String,
    pub(crate) pool: PgPool,
    schema: String,
}

impl Pg {
    pub(crate) async fn new() -> Option<Pg> {
        let how = "start one with `url=$(.ci/setup-postgres) && export PARLEY_TEST_POSTGRES=$url`";
        let base = match std::env::var("PARLEY_TEST_POSTGRES") {
            Ok(url) if !url.is_empty() => url,
            _ => {
                skip(&format!("PARLEY_TEST_POSTGRES names no server ({how})"));
                return None;
            }
        };
        let connect = PgConnectOptions::from_str(&base).unwrap_or_else(|e| panic!("PARLEY_TEST_POSTGRES: {e}"));
        let admin = PgPoolOptions::new().max_connections(2).acquire_timeout(Duration::from_secs(5));
        let admin = match admin.connect_with(connect.clone()).await {
            Ok(pool) => pool,
            Err(e) => {
                skip(&format!("the PostgreSQL server at {base} cannot be reached ({e}); {how}"));
                return None;
            }
        };
        static MADE: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let schema = format!("e2e_{}_{}_{nanos}", std::process::id(), MADE.fetch_add(1, Ordering::Relaxed));
        // The name is made of digits here, never of input.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&admin).await.unwrap();
        admin.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(connect.options([("search_path", schema.as_str())]))
            .await
            .unwrap();
        let joint = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{joint}options%5Bsearch_path%5D={schema}");
        Some(Pg { url, pool, schema })
    }

    pub(crate) async fn remove(self) {
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {} CASCADE", self.schema)))
            .execute(&self.pool)
            .await
            .unwrap();
        self.pool.close().await;
    }

    /// Every session's outcome and transcript, keyed by (task, trial), as `crash::results`
    /// reads them from SQLite.
    pub(crate) async fn results(&self) -> BTreeMap<(i64, i64), Outcome> {
        let sessions: Vec<SessionRow> =
            sqlx::query_as("SELECT id, task_index, trial, status, termination, reward FROM sessions")
                .fetch_all(&self.pool)
                .await
                .unwrap();
        let mut out = BTreeMap::new();
        for (id, task, trial, status, termination, reward) in sessions {
            let messages: Vec<(String, Option<String>, Option<String>)> =
                sqlx::query_as("SELECT role, content, tool_calls FROM messages WHERE session_id = $1 ORDER BY seq")
                    .bind(id)
                    .fetch_all(&self.pool)
                    .await
                    .unwrap();
            let transcript = messages.into_iter().map(|m| format!("{m:?}")).collect();
            let previous = out.insert((task, trial), (status, termination.unwrap_or_default(), reward, transcript));
            assert!(previous.is_none(), "task {task} trial {trial} has two sessions");
        }
        out
    }

    async fn finished(&self) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM sessions WHERE status = 'finished'")
            .fetch_one(&self.pool)
            .await
            .unwrap_or(0)
    }

    pub(crate) async fn wait_finished(&self, at_least: i64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.finished().await < at_least {
            assert!(Instant::now() < deadline, "the run did not get going");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The stub's turn key of every model call recorded, as `crash::recorded_turns` gives them.
    pub(crate) async fn recorded_turns(&self) -> Vec<String> {
        let rows: Vec<(i64, i64, String, Option<String>)> = sqlx::query_as(concat!(
            "SELECT m.session_id, m.seq, m.role, COALESCE(m.content, x.text) FROM messages m ",
            "LEFT JOIN texts x ON x.id = m.content_id ORDER BY m.session_id, m.seq"
        ))
        .fetch_all(&self.pool)
        .await
        .unwrap();
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
}

/// `run_args` with the store at `db` and no rollout file named (a detached run writes none).
pub(crate) fn detached_args<'a>(stub: &'a Stub, db: &'a str) -> Vec<&'a str> {
    let mut args = run_args(&stub.url, db, "unused.jsonl");
    let out = args.iter().position(|a| *a == "--out").unwrap();
    args.drain(out..out + 2);
    args.push("--detach");
    args
}

fn spawn(work: &Workdir, args: &[&str], env: &[(&str, &str)], log: &str) -> Child {
    Command::new(PARLEY)
        .current_dir(work.dir.path())
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(work.path(log)).unwrap())
        .spawn()
        .unwrap()
}

fn succeeded(mut child: Child, work: &Workdir, log: &str) -> String {
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(work.path(log)).unwrap_or_default();
    assert!(status.success(), "{log}: {stderr}");
    stderr
}

pub(crate) fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The reference: the run on SQLite, never interrupted, against a stub of its own.
pub(crate) fn reference_run() -> Workdir {
    let work = Workdir::new();
    write_tasks(&work);
    let stub = Stub::start(&["--latency-ms", "40"]);
    ok(&work.parley(&run_args(&stub.url, "reference.db", "reference.jsonl")));
    work
}

fn sorted(rows: Vec<Value>) -> Vec<String> {
    let mut rows: Vec<String> = rows.iter().map(Value::to_string).collect();
    rows.sort();
    rows
}

/// Turns the stub was asked more than once.
pub(crate) fn repeated(stats: &Value) -> Vec<(String, u64)> {
    let turns = stats["turns"].as_object().unwrap();
    turns.iter().filter(|(_, n)| n.as_u64().unwrap() > 1).map(|(k, n)| (k.clone(), n.as_u64().unwrap())).collect()
}

/// How many sessions a worker's log says it drove.
pub(crate) fn drove(log: &str) -> u64 {
    let at = log.find(" drove ").unwrap_or_else(|| panic!("the worker says what it drove: {log}"));
    log[at + 7..].split_whitespace().next().unwrap().parse().unwrap()
}

/// `parley sessions` without its timing column.
fn without_times(listing: &str) -> Vec<String> {
    listing.lines().map(|l| l.split_whitespace().take(6).collect::<Vec<_>>().join(" ")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_on_postgres_gives_what_it_gives_on_sqlite_and_every_reader_reads_it() {
    let Some(pg) = Pg::new().await else { return };
    let work = reference_run();
    let stub = Stub::start(&["--latency-ms", "40"]);
    ok(&work.parley(&run_args(&stub.url, &pg.url, "pg.jsonl")));

    assert_eq!(pg.results().await, results(&work, "reference.db").await);
    let reference = sorted(read_jsonl(&work.path("reference.jsonl")));
    assert_eq!(sorted(read_jsonl(&work.path("pg.jsonl"))), reference);

    let runs = ok(&work.parley(&["runs", "--db", &pg.url]));
    assert!(runs.lines().nth(1).is_some_and(|l| l.contains("finished") && l.contains("200")), "{runs}");
    let sessions = |db: &str| ok(&work.parley(&["sessions", "1", "--db", db]));
    assert_eq!(without_times(&sessions(&pg.url)), without_times(&sessions("reference.db")));
    let show = ok(&work.parley(&["show", "7", "--db", &pg.url]));
    assert!(show.starts_with("session 7 · run 1 · task 6 · trial 0 · finished"), "{show}");
    assert!(show.contains("[1] user"), "{show}");
    let metrics = |db: &str| -> Value {
        serde_json::from_str(&ok(&work.parley(&["metrics", "1", "--db", db, "--json"]))).unwrap()
    };
    let (on_pg, on_sqlite) = (metrics(&pg.url), metrics("reference.db"));
    for key in ["reward", "terminations", "pass", "failures", "sessions", "tokens", "training"] {
        assert_eq!(on_pg.get(key), on_sqlite.get(key), "metrics {key}: {on_pg}");
    }
    for format in ["nemo-gym", "openai-chat"] {
        let export = |db: &str| {
            let out = ok(&work.parley(&["export", "1", "--db", db, "--format", format]));
            sorted(out.lines().map(|l| serde_json::from_str(l).unwrap()).collect())
        };
        assert_eq!(export(&pg.url), export("reference.db"), "export --format {format}");
    }
    // Re-scores and replays read and write the same on both stores.
    for command in [&["rescore", "1"][..], &["replay", "--run", "1"]] {
        let on = |db: &str| {
            let out = work.parley(&[command, &["--db", db]].concat());
            assert!(out.status.success(), "{command:?}: {}", text(&out.stderr));
            text(&out.stdout) + &text(&out.stderr)
        };
        let on_pg = on(&pg.url);
        assert_eq!(on_pg, on("reference.db"), "{command:?}");
        assert!(on_pg.contains("200 sessions of run 1"), "{on_pg}");
    }
    // Another reward tried, and its score versions and their difference, the same on both.
    let scores = |db: &str| {
        ok(&work.parley(&["rescore", "1", "--db", db, "--reward", "environment:weight=0.5", "--reward-min", "0"]));
        let mut versions: Value =
            serde_json::from_str(&ok(&work.parley(&["scores", "1", "--db", db, "--json"]))).unwrap();
        for version in versions.as_array_mut().unwrap() {
            version.as_object_mut().unwrap().remove("created_at");
        }
        let diff = ok(&work.parley(&["scores", "diff", "1", "1", "3", "--db", db, "--json"]));
        (versions, serde_json::from_str::<Value>(&diff).unwrap())
    };
    let (versions, diff) = scores(&pg.url);
    assert_eq!((versions.clone(), diff.clone()), scores("reference.db"));
    assert_eq!(versions.as_array().unwrap().len(), 3, "{versions}");
    assert_eq!(versions[2]["reward"]["min"], json!(0.0), "{versions}");
    assert_eq!(diff["compared"], json!(200), "{diff}");
    let fork = ok(&work.parley(&["fork", "7", "--at", "2", "--db", &pg.url]));
    assert!(fork.starts_with("session 201: forked from session 7 at message 2"), "{fork}");
    let show = ok(&work.parley(&["show", "201", "--db", &pg.url]));
    assert!(show.starts_with("session 201 · run 1 · task 6 · trial 1 · finished"), "{show}");
    // The viewer reads it too.
    let view = View::start_on(&work, &pg.url, &[], &[]);
    for (path, status, says) in [
        ("/", 200, "multi-step"),
        ("/runs/1", 200, "agent_stop"),
        ("/runs/1/sessions?termination=agent_stop&task=6", 200, "/sessions/201"),
        ("/runs/1/sessions?after=100&limit=5", 200, "/sessions/105"),
        ("/sessions/7", 200, "extract_synonym_values"),
        ("/sessions/201", 200, "/sessions/7"),
        ("/compare?a=7&b=201", 200, "forked from #7 at 2"),
        ("/sessions/424242", 404, "session 424242 not found"),
    ] {
        let (got, _, body) = view.get(path, &[]);
        assert_eq!(got, status, "{path}: {body}");
        assert!(body.contains(says), "{path} says {says}: {body}");
    }
    pg.remove().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_password_in_the_url_is_never_printed_or_stored() {
    let Some(pg) = Pg::new().await else { return };
    let work = Workdir::new();
    let stub = Stub::start(&[]);
    // The test server trusts loopback, so it never asks for the password: the URL carries one
    // all the same, as a real deployment's would.
    let secret = "hunter2-not-for-logs";
    let url = pg.url.replacen("://parley@", &format!("://parley:{secret}@"), 1);
    assert!(url.contains(secret), "the test server's URL names the user parley: {}", pg.url);
    let mut outputs = Vec::new();
    for args in [
        vec!["run", "--base-url", &stub.url, "--num-tasks", "3", "--db", &url, "--out", "r.jsonl"],
        vec!["run", "--base-url", &stub.url, "--num-tasks", "3", "--db", &url, "--detach"],
        vec!["worker", "--db", &url],
        vec!["runs", "--db", &url],
        vec!["metrics", "1", "--db", &url],
        vec!["resume", "1", "--db", &url],
    ] {
        let out = work.parley_with_env(&args, &[("RUST_LOG", "debug")]);
        ok(&out);
        outputs.push(text(&out.stdout) + &text(&out.stderr));
    }
    // A server that cannot be reached is named without the password too.
    let unreachable = work.parley(&["runs", "--db", &format!("postgres://parley:{secret}@127.0.0.1:1/parley")]);
    assert!(!unreachable.status.success());
    outputs.push(text(&unreachable.stderr));
    for output in &outputs {
        assert!(!output.contains(secret), "the password was printed: {output}");
    }
    assert!(outputs[0].contains("stored in postgres://parley@127.0.0.1"), "{}", outputs[0]);
    let configs: Vec<String> = sqlx::query_scalar("SELECT config FROM runs").fetch_all(&pg.pool).await.unwrap();
    assert_eq!(configs.len(), 2);
    for config in configs {
        assert!(!config.contains(secret), "the password was stored: {config}");
        let db = serde_json::from_str::<Value>(&config).unwrap()["db"].as_str().unwrap().to_owned();
        assert!(db.starts_with("postgres://parley@127.0.0.1"), "{db}");
    }
    pg.remove().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_finish_a_detached_run_each_session_once() {
    let Some(pg) = Pg::new().await else { return };
    let work = reference_run();
    let stub = Stub::start(&["--latency-ms", "40"]);
    let run = ok(&work.parley(&detached_args(&stub, &pg.url)));
    assert_eq!(run.trim(), "1", "--detach prints the run's id");
    assert_eq!(pg.finished().await, 0, "--detach drives nothing");

    let worker = ["worker", "--db", &pg.url, "--run", "1"];
    let (a, b) = (spawn(&work, &worker, &[], "a.log"), spawn(&work, &worker, &[], "b.log"));
    let (a, b) = (succeeded(a, &work, "a.log"), succeeded(b, &work, "b.log"));

    assert_eq!(pg.results().await, results(&work, "reference.db").await);
    assert_eq!(repeated(&stub.stats()), [], "no model call was asked twice");
    assert_eq!(drove(&a) + drove(&b), 200, "each session driven by one worker: {a}\n{b}");
    let export = ok(&work.parley(&["export", "1", "--db", &pg.url, "--format", "nemo-gym"]));
    let rows: Vec<Value> = export.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(sorted(rows), sorted(read_jsonl(&work.path("reference.jsonl"))));
    let runs = ok(&work.parley(&["runs", "--db", &pg.url]));
    assert!(runs.lines().nth(1).is_some_and(|l| l.contains("finished")), "the last worker marks the run: {runs}");
    // With nothing left to do, a worker says so and exits.
    let idle = work.parley(&["worker", "--db", &pg.url]);
    assert!(text(&idle.stderr).contains("nothing to do"), "{}", text(&idle.stderr));
    ok(&idle);
    pg.remove().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_worker_s_sessions_are_taken_over_when_its_leases_run_out() {
    let Some(pg) = Pg::new().await else { return };
    let work = reference_run();
    let stub = Stub::start(&["--latency-ms", "40"]);
    ok(&work.parley(&detached_args(&stub, &pg.url)));

    // Another machine, as far as the store can tell: its claims end only with their leases.
    let elsewhere = [("HOSTNAME", "machine-a"), ("PARLEY_LEASE_SECS", "2")];
    let mut a = spawn(&work, &["worker", "--db", &pg.url, "--run", "1"], &elsewhere, "a.log");
    pg.wait_finished(20).await;
    a.kill().unwrap(); // SIGKILL: its claims stay in the store
    a.wait().unwrap();
    let recorded = pg.recorded_turns().await;
    let before = stub.stats()["turns"].clone();
    let held: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM sessions WHERE status = 'pending' AND owner LIKE 'machine-a:%'")
            .fetch_one(&pg.pool)
            .await
            .unwrap();
    assert!(held > 0, "the killed worker held sessions");

    let b = spawn(&work, &["worker", "--db", &pg.url, "--run", "1"], &[("PARLEY_LEASE_SECS", "2")], "b.log");
    succeeded(b, &work, "b.log");

    assert_eq!(pg.results().await, results(&work, "reference.db").await);
    let after = stub.stats();
    for turn in &recorded {
        assert_eq!(after["turns"][turn], before[turn], "turn {turn} was committed before the kill, and asked again");
    }
    assert!(repeated(&after).len() <= 2 * 8, "only turns in flight at the kill were asked again");
    pg.remove().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_paused_past_its_leases_has_its_commits_refused() {
    let Some(pg) = Pg::new().await else { return };
    let work = reference_run();
    let stub = Stub::start(&["--latency-ms", "40"]);
    ok(&work.parley(&detached_args(&stub, &pg.url)));

    let lease = [("PARLEY_LEASE_SECS", "1")];
    // The engine says at info level when the store refuses a commit as fenced.
    let a_env = [("PARLEY_LEASE_SECS", "1"), ("RUST_LOG", "warn,parley_engine=info")];
    let a = spawn(&work, &["worker", "--db", &pg.url, "--run", "1"], &a_env, "a.log");
    pg.wait_finished(20).await;
    let pid = a.id().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    // Another worker takes the paused one's sessions once its leases run out, and finishes
    // the run.
    let b = spawn(&work, &["worker", "--db", &pg.url, "--run", "1"], &lease, "b.log");
    let b_log = succeeded(b, &work, "b.log");
    let taken = pg.results().await;
    // The paused worker wakes with commits under claims taken from it: each is refused, and
    // it exits once it sees the run done.
    assert!(Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    let a_log = succeeded(a, &work, "a.log");

    assert_eq!(pg.results().await, taken, "nothing the woken worker sent was written");
    assert_eq!(taken, results(&work, "reference.db").await);
    assert!(drove(&b_log) > 0, "{b_log}");
    let fenced = ["another owner took over the session", "its end is not recorded", "not recorded"];
    assert!(fenced.iter().any(|m| a_log.contains(m)), "the woken worker's commits were refused: {a_log}");
    pg.remove().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn parley_serve_records_its_sessions_on_postgres() {
    use std::io::{BufRead, BufReader};
    let Some(pg) = Pg::new().await else { return };
    let work = Workdir::new();
    work.tasks(2);
    let stub = Stub::start(&[]);
    let mut serve = Command::new(PARLEY)
        .current_dir(work.dir.path())
        .args(["serve", "--listen", "127.0.0.1:0", "--base-url", &stub.url, "--db", &pg.url])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(serve.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let address = line.trim().trim_start_matches("http://").to_owned();
    let mut sessions = Vec::new();
    for row in std::fs::read_to_string(work.path("tasks.jsonl")).unwrap().lines() {
        let (status, _, body) = crate::http::post(&address, "/run", row);
        assert_eq!(status, 200, "{body}");
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        let session = answer["_parley_session"].as_i64().expect("the answer names its session");
        sessions.push(session.to_string());
    }
    let _ = serve.kill();
    let _ = serve.wait();
    for session in &sessions {
        let show = ok(&work.parley(&["show", session, "--db", &pg.url]));
        assert!(show.contains("termination  agent_stop"), "{show}");
    }
    pg.remove().await;
}

/// Two `parley serve` replicas over one PostgreSQL store: one is SIGKILLed with rollouts in
/// flight, the other goes on answering, and `parley resume` (from anywhere) finishes the dead
/// replica's sessions from their last committed turns, each to its end.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_that_dies_leaves_its_sessions_to_the_others() {
    use std::io::{BufRead, BufReader};
    let Some(pg) = Pg::new().await else { return };
    let work = Workdir::new();
    work.tasks(5);
    let stub = Stub::start(&["--latency-ms", "300"]);
    let replica = |name: &str, env: &[(&str, &str)]| {
        let mut child = Command::new(PARLEY)
            .current_dir(work.dir.path())
            .args(["serve", "--listen", "127.0.0.1:0", "--base-url", &stub.url, "--db", &pg.url])
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(work.path(name)).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        (child, line.trim().trim_start_matches("http://").to_owned())
    };
    // A replica killed with the request in flight cuts the connection: no status.
    let post = |address: &str, row: &str| -> (u16, String) {
        let answer = crate::http::try_request(address, "POST", "/run", row, &[]);
        answer.map_or_else(|e| (0, e.to_string()), |(status, _, body)| (status, body))
    };
    let (mut a, a_address) = replica("a.log", &[("PARLEY_LEASE_SECS", "2")]);
    let (mut b, b_address) = replica("b.log", &[]);
    let rows: Vec<String> =
        std::fs::read_to_string(work.path("tasks.jsonl")).unwrap().lines().map(str::to_owned).collect();
    // Replica A takes four rollouts; it dies after their first turns are committed.
    let in_flight: Vec<_> = rows[..4]
        .iter()
        .cloned()
        .map(|row| {
            let address = a_address.clone();
            std::thread::spawn(move || post(&address, &row))
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(450));
    let _ = a.kill();
    let _ = a.wait();
    for answer in in_flight {
        let (status, body) = answer.join().unwrap();
        assert_ne!(status, 200, "a rollout of the killed replica finished: {body}");
    }
    // Replica B answers on (another task, so that its conversation is its own to the stub).
    let (status, body) = post(&b_address, &rows[4]);
    assert_eq!(status, 200, "{body}");
    let _ = b.kill();
    let _ = b.wait();
    // A's service run is the first one recorded: its sessions were left unfinished, each with
    // its first turn committed, and are resumable from anywhere.
    let left = ok(&work.parley(&["sessions", "1", "--db", &pg.url]));
    assert_eq!(left.matches("agent_stop").count(), 0, "{left}");
    let before = stub.stats()["turns"].clone();
    let out = ok(&work.parley(&["resume", "1", "--db", &pg.url]));
    let sessions = ok(&work.parley(&["sessions", "1", "--db", &pg.url]));
    assert_eq!(sessions.matches("agent_stop").count(), 4, "{out}\n{sessions}");
    // No turn committed before the kill was asked again: only those in flight at it were.
    let after = stub.stats();
    let asked_again = after["turns"].as_object().unwrap().iter().filter(|(key, n)| {
        n.as_u64().unwrap() > before.get(key.as_str()).and_then(Value::as_u64).unwrap_or(0)
            && before.get(key.as_str()).is_some()
    });
    assert!(asked_again.count() <= 4, "{:?}", repeated(&after));
    pg.remove().await;
}
