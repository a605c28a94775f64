//! `parley init`: each scaffold (`--tools none`, `mcp`, `gym`) runs at once with `parley run
//! --settings DIR/parley.toml` from another directory, every session finished and scored with the
//! rewards its README states, and `parley rewards probe` finds the shortcut its README names; its
//! README names exactly the files written; a folder with files in it is refused.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::harness::{Stub, Workdir, ok, read_jsonl, text};

/// `parley init DIR --tools TOOLS` into the scratch folder's `env`, checked; the folder.
fn init(work: &Workdir, tools: &str) -> std::path::PathBuf {
    let out = ok(&work.parley(&["init", "env", "--tools", tools]));
    let dir = work.path("env").canonicalize().unwrap();
    assert!(out.contains(&format!("parley run --settings {}", dir.join("parley.toml").display())), "{out}");
    dir
}

/// Runs the scaffold in `dir` from the scratch folder (so its paths must not be relative to
/// the working directory), checks that every session finished with no failure, and returns the
/// rollouts' rewards by the row's expected answer, sorted.
fn run_scaffold(work: &Workdir, dir: &Path, extra: &[&str]) -> Vec<(String, f64)> {
    let settings = dir.join("parley.toml").display().to_string();
    let mut args = vec!["run", "--settings", &settings];
    args.extend(extra);
    let summary = ok(&work.parley(&args));
    assert!(summary.contains("terminations   agent_stop 8\n"), "{summary}");
    assert!(summary.contains("rollouts_failures.jsonl (0)"), "{summary}");
    assert!(!work.path("parley.db").exists(), "the store belongs in the scaffold's folder");
    assert!(dir.join("parley.db").is_file());
    assert!(read_jsonl(&dir.join("rollouts_failures.jsonl")).is_empty(), "{summary}");
    let mut rewards: Vec<(String, f64)> = read_jsonl(&dir.join("rollouts.jsonl"))
        .into_iter()
        .map(|row| (row["expected_answer"].as_str().unwrap().to_owned(), row["reward"].as_f64().unwrap()))
        .collect();
    rewards.sort_by(|a, b| a.partial_cmp(b).unwrap());
    rewards
}

/// The files the scaffold's README lists (its bullets `- \`NAME\`:`), and those in the folder.
fn listed_and_written(dir: &Path) -> (Vec<String>, Vec<String>) {
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let mut listed: Vec<String> = readme
        .lines()
        .filter_map(|line| line.strip_prefix("- `")?.split_once("`:").map(|(name, _)| name.to_owned()))
        .collect();
    let mut written: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    listed.sort();
    written.sort();
    (listed, written)
}

/// The last line of `parley rewards probe` on the scaffold, as its README quotes it.
fn probe(work: &Workdir, dir: &Path, extra: &[&str]) -> String {
    let settings = dir.join("parley.toml").display().to_string();
    let mut args = vec!["rewards", "probe", "--settings", &settings];
    args.extend(extra);
    ok(&work.parley(&args)).lines().last().unwrap_or_default().to_owned()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn init_without_tools_runs_single_turn_questions_with_the_stub() {
    let work = Workdir::new();
    let dir = init(&work, "none");
    let (listed, written) = listed_and_written(&dir);
    assert_eq!(listed, written);
    assert_eq!(written, ["README.md", "parley.toml", "tasks.jsonl"]);

    // The stub greets: every answer is wrong and unboxed, as the README says.
    let rewards = run_scaffold(&work, &dir, &[]);
    assert!(rewards.iter().all(|(_, r)| *r == 0.0), "{rewards:?}");
    assert!(probe(&work, &dir, &[]).ends_with("paid probes: none"));

    // The README's next step: the stub answering from the rows, a quarter of them wrongly.
    std::fs::remove_file(dir.join("parley.db")).unwrap();
    let tasks = dir.join("tasks.jsonl").display().to_string();
    let stub = Stub::start(&["--answers", &tasks, "--answer-format", "\\boxed{{answer}}", "--wrong-answers", "0.25"]);
    let rewards = run_scaffold(&work, &dir, &["--base-url", &stub.url]);
    assert!(rewards.iter().any(|(_, r)| close(*r, 1.0)), "{rewards:?}");
    assert!(rewards.iter().all(|(_, r)| close(*r, 1.0) || close(*r, 0.1)), "{rewards:?}");
}

#[test]
fn init_with_mcp_tools_runs_with_the_server_parley_starts() {
    let work = Workdir::new();
    let dir = init(&work, "mcp");
    let (listed, written) = listed_and_written(&dir);
    assert_eq!(listed, written);
    assert_eq!(written, ["README.md", "parley.toml", "tasks.jsonl", "tools_server.py"]);

    // The stub calls the tools with zeros and answers `Result: 0`: right on the task whose
    // answer is 0 (0.9 less the step penalty 0.1 × 3/4), wrong on the rest (the penalty alone).
    let rewards = run_scaffold(&work, &dir, &[]);
    for (expected, reward) in &rewards {
        let want = if expected == "0" { 0.825 } else { -0.075 };
        assert!(close(*reward, want), "{expected}: {reward}");
    }
    let rows = read_jsonl(&dir.join("rollouts.jsonl"));
    let calls: Vec<&Value> =
        rows[0]["response"]["output"].as_array().unwrap().iter().filter(|i| i["type"] == "function_call").collect();
    assert_eq!(calls.len(), 2, "{}", rows[0]);
    // "What is 9 times 0?" ends in its answer, which `math` reads as the last number.
    assert!(probe(&work, &dir, &[]).ends_with("paid probes: repeat-question"));
}

/// The resources server, started as the README says (on a free port), killed when dropped.
struct Server(Child, String);

impl Server {
    fn start(dir: &Path) -> Server {
        let mut child = Command::new("python3")
            .arg(dir.join("resources_server.py"))
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3, which the gym scaffold's server needs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert!(line.starts_with("http://127.0.0.1:"), "{line}");
        Server(child, line.trim().to_owned())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn init_with_a_gym_server_runs_against_the_resources_server() {
    let work = Workdir::new();
    let dir = init(&work, "gym");
    let (listed, written) = listed_and_written(&dir);
    assert_eq!(listed, written);
    assert_eq!(written, ["README.md", "parley.toml", "resources_server.py", "tasks.jsonl"]);

    let server = Server::start(&dir);
    // The stub asks for `Item`, of which none are in stock: right on the kiwis (1 less the step
    // penalty 0.1 × 3/4), wrong on the rest.
    let rewards = run_scaffold(&work, &dir, &["--server", &server.1]);
    for (expected, reward) in &rewards {
        let want = if expected == "0" { 0.925 } else { -0.075 };
        assert!(close(*reward, want), "{expected}: {reward}");
    }
    let row = &read_jsonl(&dir.join("rollouts.jsonl"))[0];
    assert_eq!(row["extracted_answer"], "0", "the verifier's own field is kept: {row}");
    assert!(probe(&work, &dir, &["--server", &server.1]).ends_with("paid probes: copy-tool-outputs"));
}

#[test]
fn init_refuses_a_folder_with_files_in_it() {
    let work = Workdir::new();
    std::fs::create_dir(work.path("env")).unwrap();
    std::fs::write(work.path("env/notes.txt"), "mine").unwrap();
    let out = work.parley(&["init", "env", "--tools", "none"]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("env is not empty") && stderr.contains("--force"), "{stderr}");
    assert!(!work.path("env/parley.toml").exists());

    // `--force` writes the scaffold beside what is there.
    ok(&work.parley(&["init", "env", "--tools", "none", "--force"]));
    assert!(work.path("env/parley.toml").is_file());
    assert_eq!(std::fs::read_to_string(work.path("env/notes.txt")).unwrap(), "mine");

    // An empty folder is fine.
    std::fs::create_dir(work.path("empty")).unwrap();
    ok(&work.parley(&["init", "empty"]));
    assert!(work.path("empty/tools_server.py").is_file());
}
