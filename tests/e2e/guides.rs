//! The README and every guide in `docs/`, run: each document's `sh` blocks, in order, are one bash
//! script, run in a scratch folder that stands for the repository's root with the built `parley`
//! first on the PATH (and at `target/release/parley`). Every command must succeed.
//!
//! What a reader has and a test does not is stood in for, and nothing else:
//!
//! - the endpoints the guides name (a policy at `127.0.0.1:8000`, a user model at `:8001`, OpenAI,
//!   a cluster's `policy:8000`) are one `parley stub`, and their ports free ones;
//! - the PostgreSQL server (`db.internal`) is the test server, a schema of its own;
//! - a server a guide starts in the foreground (`parley serve`, `parley view`, `parley stub`) runs
//!   in the background until the script ends, as in a terminal of its own, and must answer HTTP
//!   before the next line runs; one started later on the same port takes its place;
//! - a guide that starts from a store or a file the reader already has (the first run's
//!   `parley.db`, a task file) finds it made by [`Given`];
//! - the few commands that need what no test has (a Docker daemon, a Kubernetes cluster, a 12 GB
//!   benchmark, the cargo build that made the binary) are listed in [`NOT_RUN`] with the test or
//!   CI step that runs them instead; a line listed there that a document no longer has fails.
//!
//! `docs/training-environment.md` is run by `tutorial.rs`, which also checks its figures.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::harness::{PARLEY, Stub, Workdir, root, skip, text};
use crate::postgres::Pg;

/// A command a document shows that no guide run can: the document, the command's first line, and
/// what runs it instead.
const NOT_RUN: &[(&str, &str, &str)] = &[
    ("README.md", "cargo nextest run --workspace", "the test command itself, which .ci/run runs"),
    ("docs/getting-started.md", "cargo build --release", "the build that made the binary these tests run"),
    (
        "docs/performance.md",
        "PARLEY_BIN=target/release/parley bench/run --only stream",
        "a 12 GB benchmark; .ci/run runs bench/run --quick, its smoke version",
    ),
    (
        "docs/performance.md",
        "python3 bench/bench.py --only collect",
        "a benchmark of minutes; .ci/run runs its smoke version (bench/run --quick --only collect)",
    ),
    (
        "docs/performance.md",
        "python3 bench/bench.py --only serve",
        "a benchmark of minutes; .ci/run runs its smoke version within bench/run --quick",
    ),
    (
        "docs/performance.md",
        "python3 bench/bench.py --only tau2",
        "a benchmark of minutes; .ci/run runs its smoke version (bench/run --quick --only tau2)",
    ),
    (
        "docs/performance.md",
        "python3 bench/disk.py --tasks 100000 --bin before=OLD --bin after=target/release/parley",
        "a benchmark of minutes, and two binaries; .ci/run runs its smoke version (bench/disk.py --quick)",
    ),
    ("docs/scale.md", "docker build -f deploy/Dockerfile -t parley:latest .", "needs a Docker daemon"),
    (
        "docs/scale.md",
        "kubectl apply -f deploy/kubernetes/secret.yaml -f deploy/kubernetes/sweep.yaml",
        "needs a cluster; deploy.rs validates the manifests and every parley command in them",
    ),
    (
        "docs/training.md",
        "NEMO_GYM_EXTRA_ROOTS=$PWD/integrations/nemo-gym PARLEY_BIN=$PWD/target/release/parley \\",
        "gym_agent.rs starts NeMo Gym's servers with this config, and a head port and venvs of its own",
    ),
    (
        "docs/training.md",
        "gym eval run --no-serve --input rows.jsonl --output rollouts.jsonl",
        "gym_agent.rs collects rows through Parley with gym eval run --no-serve",
    ),
];

/// The ports the documents name, each given a free one in a guide's run.
const PORTS: [u16; 7] = [8000, 8001, 8080, 8088, 8090, 8700, 9000];

/// The endpoints the documents name, all played by the test's stub.
const ENDPOINTS: [&str; 4] =
    ["http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1", "https://api.openai.com/v1", "http://policy:8000/v1"];

/// The PostgreSQL server the documents name.
const POSTGRES: &str = "postgres://parley@db.internal:5432/parley";

/// `parley` as the documents run it: a server in the foreground is started in the background,
/// awaited and left running (one on the same port before it is stopped first); every other
/// command runs as it is.
const PRELUDE: &str = r#"set -euo pipefail
declare -A __servers=()
__has() { local flag=$1; shift; for word in "$@"; do [ "$word" = "$flag" ] && return 0; done; return 1; }
__value() { local flag=$1; shift; while [ $# -gt 0 ]; do [ "$1" = "$flag" ] && { echo "$2"; return; }; shift; done; }
parley() {
    local port= args=("$@")
    case "${1:-}" in
        serve | view)
            __has --listen "$@" || args+=(--listen "127.0.0.1:$PORT_8080")
            port=$(__value --listen "${args[@]}"); port=${port##*:} ;;
        stub)
            # A stub the document runs in the background (`&`, `$(...)`) is its own business.
            if [ "$BASHPID" = "$$" ]; then
                __has --port "$@" || args+=(--port "$PORT_8000")
                port=$(__value --port "${args[@]}")
            fi ;;
    esac
    if [ -z "$port" ]; then command parley "$@"; return; fi
    if [ -n "${__servers[$port]:-}" ]; then kill "${__servers[$port]}"; wait "${__servers[$port]}" || true; fi
    local log="server-$port-$RANDOM.log"
    command parley "${args[@]}" >"$log" 2>&1 &
    __servers[$port]=$!
    for _ in $(seq 600); do
        if ! kill -0 "${__servers[$port]}" 2>/dev/null; then
            echo "parley $1 stopped before it answered:" >&2; cat "$log" >&2; return 1
        fi
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/")" != 000 ] && {
            echo "== parley $1 answers on port $port"; return 0; }
        sleep 0.1
    done
    echo "parley $1 did not answer on port $port in 60 s:" >&2; cat "$log" >&2; return 1
}
"#;

/// What a guide needs beyond the binary.
#[derive(Clone, Copy, PartialEq)]
enum Need {
    Postgres,
    NemoGym,
    Tau2,
    Llama,
}

/// What the reader of a guide has made before its first command.
#[derive(Clone, Copy, PartialEq)]
enum Given {
    /// The README's first run: `parley.db` with run 1, 200 tau2 airline sessions.
    FirstRun,
    /// `tasks.jsonl`: eight multi-step rows.
    MultiStepTasks,
    /// Run 1 of `parley.db`: `math.jsonl` answered by the stub (some wrongly) and scored by `math`.
    MathRun,
    /// `row.json`, one multi-step row; `train.jsonl`, 200 arithmetic rows.
    TrainingRows,
    /// `mcqa.jsonl`: NeMo Gym's `mcqa` example rows.
    McqaRows,
    /// The document's own `parley.toml` example, written to `parley.toml`.
    ItsToml,
}

/// Runs `document`'s commands with what it needs; the script's output.
fn guide(document: &str, needs: &[Need], given: &[Given]) -> Option<String> {
    for need in needs {
        let (ready, why) = match need {
            Need::Postgres => (true, ""),
            Need::NemoGym => {
                (root().join(".venv-nemo-gym/.parley-ready-0.7.0").is_file(), "NeMo Gym 0.7.0 (.ci/setup-peers)")
            }
            Need::Tau2 => (
                root().join(".venv-tau2/.parley-ready-26.3").is_file()
                    && tau2_source().join("src/tau2").is_dir()
                    && crate::tau2_fidelity::shared().join("data/tau2").is_dir(),
                "tau2's dependencies (.ci/setup-tau2), source and data (../shared/peers/tau2-bench, ../shared/data/tau2)",
            ),
            Need::Llama => (
                Command::new(root().join(".ci/setup-llama")).arg("--cached").output().unwrap().status.success(),
                "llama-server for this processor (.ci/setup-llama)",
            ),
        };
        if !ready {
            skip(&format!("{document} needs {why}"));
            return None;
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let pg = if needs.contains(&Need::Postgres) { Some(runtime.block_on(Pg::new())?) } else { None };

    let work = Workdir::new();
    let stub_rows = work.path("math.jsonl");
    make_math_rows(&work);
    // A user that says three things before it stops, as a model playing one would.
    let stub = Stub::start(&[
        "--user-turns",
        "3",
        "--answers",
        stub_rows.to_str().unwrap(),
        "--answer-format",
        "The answer is \\boxed{{answer}}.",
        "--wrong-answers",
        "0.3",
    ]);
    let ports: HashMap<u16, u16> = PORTS.iter().map(|&p| (p, free_port())).collect();
    let text_of = std::fs::read_to_string(root().join(document)).unwrap();
    let mut doc = text_of.clone();
    for endpoint in ENDPOINTS {
        doc = doc.replace(endpoint, &stub.url);
    }
    if let Some(pg) = &pg {
        doc = doc.replace(POSTGRES, &pg.url);
    }
    doc = doc.replace("cargo run --release -- ", "parley ");
    for (from, to) in &ports {
        doc = replace_number(&doc, *from, *to);
    }

    stand_in_for_the_repository(&work);
    for g in given {
        make(*g, &work, &stub, &doc);
    }
    let (script, unrun) = script(document, &doc);
    for (file, line, _) in NOT_RUN.iter().filter(|(file, ..)| *file == document) {
        assert!(unrun.iter().any(|u| u.starts_with(line)), "{file} no longer has `{line}`: take it out of NOT_RUN");
    }

    let bin = Path::new(PARLEY).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(format!("{PRELUDE}{script}"))
        .current_dir(work.dir.path())
        .env("PATH", path)
        .env("MY_ENDPOINT_KEY", "a-key")
        .env("USER_KEY", "a-key")
        .env("LLAMA_THREADS", "1")
        .stdin(Stdio::null());
    for (from, to) in &ports {
        command.env(format!("PORT_{from}"), to.to_string());
    }
    if let Some(pg) = &pg {
        command.env("PARLEY_DB", &pg.url);
    }
    // Into files, not pipes: a server the script leaves running would hold a pipe open.
    let (stdout, stderr) = (work.path("script.out"), work.path("script.err"));
    let mut child = std::os::unix::process::CommandExt::process_group(&mut command, 0)
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let status = child.wait().unwrap();
    // The servers the script left running, and whatever it started in the background.
    let _ = Command::new("kill").args(["-TERM", "--", &format!("-{}", child.id())]).stderr(Stdio::null()).status();
    if let Some(pg) = pg {
        runtime.block_on(pg.remove());
    }
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    let said = format!("{}\n{}", read(&stdout), read(&stderr));
    eprintln!("{document}, run:\n{said}");
    assert!(status.success(), "{document}'s commands failed ({status})");
    Some(said)
}

/// The document's `sh` blocks as one script, with the commands of [`NOT_RUN`] left out; the first
/// lines of those left out.
fn script(document: &str, doc: &str) -> (String, Vec<String>) {
    let unrun: Vec<&str> = NOT_RUN.iter().filter(|(file, ..)| *file == document).map(|(_, line, _)| *line).collect();
    let mut script = String::new();
    let mut left_out = Vec::new();
    let mut in_block = false;
    let mut skipping = false;
    for line in doc.lines() {
        match (in_block, line.trim_end()) {
            (false, "```sh" | "```bash") => in_block = true,
            (true, "```") => in_block = false,
            (true, line) => {
                if !skipping && unrun.iter().any(|unrun| line.starts_with(unrun)) {
                    left_out.push(line.to_owned());
                    script.push_str(&format!("# not run here: {line}\n"));
                    skipping = line.ends_with('\\');
                } else if skipping {
                    skipping = line.ends_with('\\');
                } else {
                    script.push_str(line);
                    script.push('\n');
                }
            }
            _ => {}
        }
    }
    (script, left_out)
}

/// `text` with the number `from` replaced by `to` wherever it stands alone (no digit either side).
fn replace_number(text: &str, from: u16, to: u16) -> String {
    let from = from.to_string();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&from) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + from.len()..].chars().next();
        out.push_str(&rest[..at]);
        if before.is_some_and(|c| c.is_ascii_digit()) || after.is_some_and(|c| c.is_ascii_digit()) {
            out.push_str(&from);
        } else {
            out.push_str(&to.to_string());
        }
        rest = &rest[at + from.len()..];
    }
    out.push_str(rest);
    out
}

fn tau2_source() -> std::path::PathBuf {
    crate::tau2_fidelity::shared().join("peers/tau2-bench")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The repository's scripts, integrations and installed peers, linked into the scratch folder,
/// and the binary at `target/release/parley`, where the documents run them from.
fn stand_in_for_the_repository(work: &Workdir) {
    for entry in [".ci", ".cache", ".venv-nemo-gym", ".venv-tau2", "integrations", "deploy"] {
        if root().join(entry).exists() {
            std::os::unix::fs::symlink(root().join(entry), work.path(entry)).unwrap();
        }
    }
    // A checkout of tau2-bench at the commit of the data, laid out as the repository is.
    let (source, data) = (tau2_source(), crate::tau2_fidelity::shared().join("data/tau2"));
    if source.is_dir() && data.is_dir() {
        let domains = work.path("tau2-bench/data/tau2/domains");
        std::fs::create_dir_all(&domains).unwrap();
        std::os::unix::fs::symlink(source.join("src"), work.path("tau2-bench/src")).unwrap();
        for domain in ["mock", "airline", "retail", "telecom"] {
            std::os::unix::fs::symlink(data.join(domain), domains.join(domain)).unwrap();
        }
        std::os::unix::fs::symlink(data.join("user_simulator"), work.path("tau2-bench/data/tau2/user_simulator"))
            .unwrap();
    }
    std::fs::create_dir_all(work.path("target/release")).unwrap();
    std::os::unix::fs::symlink(PARLEY, work.path("target/release/parley")).unwrap();
}

/// `math.jsonl` (40 arithmetic rows, which the stub answers) and `test.jsonl` (40 others).
fn make_math_rows(work: &Workdir) {
    let rows = work.parley(&["tasks", "arithmetic", "--count", "80", "--seed", "3", "--out", "all-math.jsonl"]);
    assert!(rows.status.success(), "{}", text(&rows.stderr));
    let all = std::fs::read_to_string(work.path("all-math.jsonl")).unwrap();
    let lines: Vec<&str> = all.lines().collect();
    std::fs::write(work.path("math.jsonl"), lines[..40].join("\n") + "\n").unwrap();
    std::fs::write(work.path("test.jsonl"), lines[40..].join("\n") + "\n").unwrap();
}

fn make(given: Given, work: &Workdir, stub: &Stub, doc: &str) {
    let parley = |args: &[&str]| {
        let out = work.parley(args);
        assert!(out.status.success(), "given `parley {}`: {}", args.join(" "), text(&out.stderr));
    };
    match given {
        Given::FirstRun => {
            parley(&["run", "--env", "tau2:airline", "--user", "llm", "--trials", "4", "--concurrency", "64"])
        }
        Given::MultiStepTasks => parley(&["tasks", "multi-step", "--count", "8", "--out", "tasks.jsonl"]),
        Given::MathRun => {
            parley(&["run", "--env", "custom", "--tasks", "math.jsonl", "--reward", "math", "--base-url", &stub.url])
        }
        Given::TrainingRows => {
            parley(&["tasks", "multi-step", "--count", "1", "--out", "row.json"]);
            parley(&["tasks", "arithmetic", "--count", "200", "--seed", "5", "--out", "train.jsonl"]);
        }
        Given::McqaRows => {
            let site = root().join(".venv-nemo-gym/lib");
            let data = std::fs::read_dir(&site)
                .unwrap()
                .map(|python| python.unwrap().path().join("site-packages/resources_servers/mcqa/data/example.jsonl"))
                .find(|data| data.is_file())
                .expect("NeMo Gym's mcqa example rows");
            std::fs::copy(data, work.path("mcqa.jsonl")).unwrap();
        }
        Given::ItsToml => {
            let toml = doc.split("```toml\n").nth(1).and_then(|b| b.split("\n```").next()).expect("a toml block");
            std::fs::write(work.path("parley.toml"), toml).unwrap();
        }
    }
}

/// The documents, each run once: a new document joins here.
#[test]
fn every_document_with_commands_is_run_here_or_by_the_tutorial() {
    let here = include_str!("guides.rs");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        let name = format!("docs/{}", path.file_name().unwrap().to_string_lossy());
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let has_commands = text.lines().any(|l| matches!(l.trim_end(), "```sh" | "```bash"));
        if has_commands && name != "docs/training-environment.md" && !here.contains(&format!("guide(\"{name}\"")) {
            missing.push(name);
        }
    }
    assert!(missing.is_empty(), "documents whose commands no test runs: {missing:?}");
}

#[test]
fn the_readme() {
    let Some(said) = guide("README.md", &[Need::Postgres], &[]) else { return };
    assert!(said.contains("200 sessions in"), "{said}");
}

#[test]
fn getting_started() {
    let Some(said) = guide("docs/getting-started.md", &[Need::Llama], &[Given::MultiStepTasks]) else { return };
    assert!(said.contains("== parley view answers"), "{said}");
}

#[test]
fn environments() {
    guide("docs/environments.md", &[Need::NemoGym], &[Given::McqaRows]);
}

#[test]
fn simulated_users() {
    guide("docs/simulated-users.md", &[], &[]);
}

#[test]
fn remote_user() {
    let Some(said) = guide("docs/remote-user.md", &[Need::Tau2], &[]) else { return };
    assert!(said.contains("10 sessions in") && !said.contains("user faults"), "tau2's user played its part: {said}");
}

#[test]
fn rewards() {
    let Some(said) = guide("docs/rewards.md", &[], &[Given::MathRun]) else { return };
    assert!(said.contains("== parley stub answers"), "{said}");
}

#[test]
fn durable_sessions() {
    guide("docs/durable-sessions.md", &[], &[Given::FirstRun]);
}

#[test]
fn training() {
    let Some(said) = guide("docs/training.md", &[], &[Given::TrainingRows]) else { return };
    assert!(said.contains("\"reward\""), "a /run answer: {said}");
    assert!(said.contains("1500 sessions drawn (learnable sampler) from 200 tasks"), "{said}");
}

#[test]
fn scale() {
    let Some(said) = guide("docs/scale.md", &[Need::Postgres], &[]) else { return };
    assert!(said.contains("drove 114 sessions; run 1 is done"), "{said}");
    assert!(said.contains("exported 114 sessions of run 1"), "{said}");
}

#[test]
fn viewer() {
    guide("docs/viewer.md", &[], &[Given::FirstRun]);
}

#[test]
fn performance() {
    guide("docs/performance.md", &[], &[]);
}

#[test]
fn reliability() {
    guide("docs/reliability.md", &[], &[Given::FirstRun]);
}

#[test]
fn cli() {
    use Given::*;
    guide("docs/cli.md", &[], &[FirstRun, MultiStepTasks, ItsToml]);
}

#[test]
fn protocols() {
    guide("docs/protocols.md", &[], &[]);
}

#[test]
fn a_number_is_replaced_only_where_it_stands_alone() {
    assert_eq!(replace_number("--port 8000 :8000/v1 18000 80001", 8000, 41), "--port 41 :41/v1 18000 80001");
}

#[test]
fn commands_not_run_are_left_out_whole() {
    let doc = "```sh\necho a\nNEMO_GYM_EXTRA_ROOTS=$PWD/integrations/nemo-gym PARLEY_BIN=$PWD/target/release/parley \\\n    gym env start\necho b\n```\n";
    let (script, unrun) = script("docs/training.md", doc);
    assert_eq!(script.lines().filter(|l| l.starts_with("echo")).count(), 2, "{script}");
    assert!(!script.contains("gym env start"), "{script}");
    assert_eq!(unrun.len(), 1);
}
