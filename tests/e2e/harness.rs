//! Starting the binary, the stub and task files for the tests.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

pub const PARLEY: &str = env!("CARGO_BIN_EXE_parley");

/// `parley stub` on a free port, killed when dropped.
pub struct Stub {
    child: Child,
    pub url: String,
}

impl Stub {
    pub fn start(args: &[&str]) -> Stub {
        Stub::start_on(0, args)
    }

    /// A stub on a given port (0 picks a free one).
    pub fn start_on(port: u16, args: &[&str]) -> Stub {
        Stub::start_at("127.0.0.1", port, args)
    }

    /// A stub listening on `host` (an address of this machine) and `port` (0 picks a free one).
    pub fn start_at(host: &str, port: u16, args: &[&str]) -> Stub {
        let mut child = Command::new(PARLEY)
            .args(["stub", "--host", host, "--port", &port.to_string()])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start parley stub");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("read the stub's address");
        assert!(line.starts_with(&format!("http://{host}:")), "unexpected stub banner: {line}");
        Stub { child, url: line.trim().to_owned() }
    }

    pub fn port(&self) -> u16 {
        self.url.trim_end_matches("/v1").rsplit(':').next().and_then(|p| p.parse().ok()).expect("the stub's port")
    }

    /// The stub's `/stub/stats`.
    pub fn stats(&self) -> Value {
        let authority = self.url.trim_start_matches("http://").trim_end_matches("/v1");
        let (status, _, body) = crate::http::get(authority, "/stub/stats");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("stats body {body}: {e}"))
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scratch folder that holds the database, the task file and the outputs.
pub struct Workdir {
    pub dir: tempfile::TempDir,
}

impl Workdir {
    pub fn new() -> Workdir {
        Workdir { dir: tempfile::tempdir().unwrap() }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs `parley` in this folder.
    pub fn parley(&self, args: &[&str]) -> Output {
        self.parley_with_env(args, &[])
    }

    pub fn parley_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = Command::new(PARLEY);
        command.current_dir(self.dir.path()).args(args).env("NO_COLOR", "1");
        for (k, v) in env {
            command.env(k, v);
        }
        command.output().expect("run parley")
    }

    /// Runs `parley` in this folder without the variables `unset` (which the tests' own
    /// environment may carry).
    pub fn parley_without_env(&self, args: &[&str], unset: &[&str]) -> Output {
        let mut command = Command::new(PARLEY);
        command.current_dir(self.dir.path()).args(args).env("NO_COLOR", "1");
        for k in unset {
            command.env_remove(k);
        }
        command.output().expect("run parley")
    }

    /// The first row of the task file [`Workdir::tasks`] wrote, as its text.
    pub fn first_task_row(&self) -> String {
        let rows = std::fs::read_to_string(self.path("tasks.jsonl")).expect("tasks.jsonl, written by Workdir::tasks");
        rows.lines().next().expect("a task row").to_owned()
    }

    /// `count` multi-step tasks; those with an even index expect `[0]`, which is what the stub
    /// reports, so exactly they score 1.
    pub fn tasks(&self, count: usize) -> PathBuf {
        let path = self.path("tasks.jsonl");
        let out = self.parley(&["tasks", "multi-step", "--count", &count.to_string(), "--out", "tasks.jsonl"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let rows: Vec<String> = read_jsonl(&path)
            .into_iter()
            .enumerate()
            .map(|(i, mut row)| {
                if i % 2 == 0 {
                    row["expected_synonym_values"] = serde_json::json!([0]);
                }
                row.to_string()
            })
            .collect();
        std::fs::write(&path, rows.join("\n") + "\n").unwrap();
        path
    }

    /// Runs one SQL statement on the store `parley.db`, as a change to the record would.
    pub async fn exec(&self, sql: &str) {
        let db = self.db().await;
        sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).execute(&db).await.unwrap();
        db.close().await;
    }

    pub async fn db(&self) -> sqlx::SqlitePool {
        let url = format!("sqlite://{}", self.path("parley.db").display());
        sqlx::SqlitePool::connect(&url).await.expect("open the run's database")
    }
}

pub fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs a job against `stub` with the usual file names and returns its output.
pub fn run(work: &Workdir, stub: &Stub, extra: &[&str]) -> Output {
    let mut args = vec!["run", "--env", "multi-step", "--tasks", "tasks.jsonl", "--base-url", &stub.url];
    args.extend(["--model", "stub-model", "--db", "parley.db", "--out", "out.jsonl"]);
    args.extend(extra);
    work.parley(&args)
}

/// A command's stdout, after checking it succeeded (its output is shown when it did not).
pub fn ok(out: &Output) -> String {
    assert!(out.status.success(), "stdout: {}\nstderr: {}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

/// Whether every peer must be there (`PARLEY_REQUIRE_PEERS=1`, as in CI, which installs them).
pub fn peers_required() -> bool {
    std::env::var("PARLEY_REQUIRE_PEERS").as_deref() == Ok("1")
}

/// A test that cannot run here for want of a peer says so loudly and passes, having done
/// nothing (a plain `cargo nextest run` leaves such tests out; see `.config/nextest.toml`);
/// under `PARLEY_REQUIRE_PEERS=1` it fails with `message` instead.
pub fn skip(message: &str) {
    assert!(!peers_required(), "PARLEY_REQUIRE_PEERS=1, but {message}");
    eprintln!("\n*** SKIPPED: {message} ***\n");
}

/// tau2's data (`PARLEY_TAU2_DATA`, else `../shared/data/tau2` beside the repository), when it
/// is there.
pub fn tau2_data() -> Option<PathBuf> {
    let dir =
        std::env::var_os("PARLEY_TAU2_DATA").map(PathBuf::from).unwrap_or_else(|| root().join("../shared/data/tau2"));
    dir.join("derived/tools.openai.json").is_file().then(|| dir.canonicalize().unwrap_or(dir))
}

/// tau2's data as a `--data-dir` argument; a test that needs it fails without it.
pub fn tau2_data_dir() -> String {
    let data = tau2_data().expect("tau2's data at ../shared/data/tau2 (or PARLEY_TAU2_DATA)");
    data.display().to_string()
}

/// The repository's root folder.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository root")
}
