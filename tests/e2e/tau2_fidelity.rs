//! Parley's tau2 scores against tau2's own evaluator, session by session: `parley stub` plays the
//! agent and the user (`--user llm`) on all four domains, clean, with broken tool arguments, with
//! the same call id on every turn (the stub in-process, `parley_stub::CallIds::Repeated`), and in
//! long conversations, and the oracle with the scripted user plays every task; each run is
//! exported (`parley export --format tau2`) and `tests/e2e/tau2_peer.py` re-scores every session with `evaluate_simulation` from tau2's source
//! (`../shared/peers/tau2-bench`) and replays every tool call against a fresh tau2 environment.
//! A deterministic NL judge (served by the same script) answers both sides. The reward, every
//! component, every replayed tool output and the final database hashes must agree; sessions
//! where tau2 itself raises are counted and must be the ones explained below.
//!
//! Needs `.venv-tau2` (`.ci/setup-tau2`), the tau2 source and the data under `../shared`; without
//! them it fails under `PARLEY_REQUIRE_PEERS=1` and skips loudly otherwise.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::harness::{Stub, Workdir, ok, text};

/// tau2 raises in `evaluate_simulation` on this task whenever the agent has not created
/// `task_2`: its env assertion looks the task up and the lookup's `ValueError` escapes
/// (`run_env_assertion` only catches assertion failures). Parley grades it 0 with the error.
const TAU2_RAISES: [(&str, &str); 1] = [("create_task_1_with_env_assertions", "Task task_2 not found")];

/// `../shared` beside the repository: tau2's source and data.
pub(crate) fn shared() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared")
}

/// The tau2 venv and the data, when both are there; without them a failure under
/// `PARLEY_REQUIRE_PEERS=1`, else a loud skip.
pub(crate) fn peers() -> Option<(PathBuf, PathBuf)> {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv-tau2");
    let source = shared().join("peers/tau2-bench/src");
    let data = shared().join("data/tau2");
    if venv.join(".parley-ready-26.3").is_file() && source.join("tau2").is_dir() && data.is_dir() {
        return Some((venv, data));
    }
    crate::harness::skip(
        "tau2's peer is missing: run .ci/setup-tau2 and provide ../shared/peers/tau2-bench and ../shared/data/tau2",
    );
    None
}

/// tau2 reads its data from `<dir>/tau2/domains/<domain>`: links into the shared data.
pub(crate) fn tau2_data_dir(work: &Workdir, data: &Path) -> PathBuf {
    let dir = work.path("tau2-data");
    std::fs::create_dir_all(dir.join("tau2/domains")).unwrap();
    for domain in ["mock", "airline", "retail", "telecom"] {
        std::os::unix::fs::symlink(data.join(domain), dir.join("tau2/domains").join(domain)).unwrap();
    }
    std::os::unix::fs::symlink(data.join("user_simulator"), dir.join("tau2/user_simulator")).unwrap();
    dir
}

fn python(venv: &Path, tau2_data: &Path, judge: &str) -> Command {
    let mut command = Command::new(venv.join("bin/python"));
    command
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2e/tau2_peer.py"))
        .env("PYTHONPATH", shared().join("peers/tau2-bench/src"))
        .env("TAU2_DATA_DIR", tau2_data)
        .env("OPENAI_BASE_URL", judge)
        .env("OPENAI_API_KEY", "unused")
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("NO_COLOR", "1");
    command
}

/// The judge, killed when dropped.
struct Judge {
    child: Child,
    url: String,
}

impl Judge {
    fn start(venv: &Path, tau2_data: &Path, work: &Workdir) -> Judge {
        let port_file = work.path("judge.port");
        let child = python(venv, tau2_data, "")
            .args(["judge", port_file.to_str().unwrap()])
            .stdout(Stdio::null())
            .spawn()
            .expect("start the judge");
        let started = std::time::Instant::now();
        while !port_file.is_file() {
            assert!(started.elapsed().as_secs() < 60, "the judge did not start");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let port = std::fs::read_to_string(&port_file).unwrap();
        Judge { child, url: format!("http://127.0.0.1:{}/v1", port.trim()) }
    }
}

impl Drop for Judge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The reward and the components tau2 and Parley must agree on.
const COMPONENTS: [&str; 7] = [
    "reward",
    "reward_breakdown",
    "db_check",
    "env_assertions",
    "action_checks",
    "communicate_checks",
    "nl_assertions",
];

#[derive(Default)]
struct Tally {
    sessions: usize,
    agreed: usize,
    tau2_raised: usize,
    disagreements: Vec<String>,
}

/// The agent's model: `parley stub` with some flags, or the stub in-process giving every call
/// the same id (an option the CLI does not expose).
enum Agent {
    Cli(&'static [&'static str]),
    RepeatedIds,
    /// `--agent oracle --user scripted` on every task: the gold trajectories.
    Oracle,
}

/// The stub in-process, stopped with its runtime when dropped.
struct InProcess {
    _runtime: tokio::runtime::Runtime,
    url: String,
}

fn repeated_ids_stub() -> InProcess {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let listener = runtime.block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0))).unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let config = parley_stub::StubConfig::default();
    runtime.spawn(parley_stub::serve_with(listener, config, parley_stub::CallIds::Repeated, std::future::pending()));
    InProcess { _runtime: runtime, url }
}

/// Runs one domain in one variant, exports it, has tau2 re-score it, and tallies.
#[allow(clippy::too_many_arguments)]
fn cross_check(
    work: &Workdir,
    venv: &Path,
    tau2_data: &Path,
    judge: &Judge,
    domain: &str,
    split: Option<&str>,
    label: &str,
    agent: &Agent,
    user_args: &[&str],
    tally: &mut Tally,
) {
    let (_cli, _in_process, agent_url) = match agent {
        Agent::Cli(args) => {
            let stub = Stub::start(args);
            let url = stub.url.clone();
            (Some(stub), None, Some(url))
        }
        Agent::RepeatedIds => {
            let stub = repeated_ids_stub();
            let url = stub.url.clone();
            (None, Some(stub), Some(url))
        }
        Agent::Oracle => (None, None, None),
    };
    let user = Stub::start(user_args);
    let db = format!("{label}.db");
    let data = shared().join("data/tau2");
    let domain_arg = format!("tau2:{domain}");
    let mut args = vec!["run", "--env", &domain_arg, "--data-dir", data.to_str().unwrap()];
    match &agent_url {
        Some(url) => args.extend(["--base-url", url, "--user", "llm", "--user-base-url", &user.url]),
        None => args.extend(["--agent", "oracle", "--user", "scripted"]),
    }
    args.extend([
        "--judge-base-url",
        &judge.url,
        "--judge-model",
        "gpt-4.1-2025-04-14",
        "--db",
        &db,
        "--out",
        "out.jsonl",
        "-c",
        "4",
    ]);
    let mut args: Vec<String> = args.into_iter().map(str::to_owned).collect();
    if let Some(split) = split {
        args.extend(["--split".to_owned(), split.to_owned()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&work.parley(&args));
    let results = format!("{label}.json");
    ok(&work.parley(&["export", "1", "--format", "tau2", "--db", &db, "--out", &results]));
    let out = python(venv, tau2_data, &judge.url)
        .args(["rescore", work.path(&results).to_str().unwrap()])
        .output()
        .expect("run tau2_peer.py rescore");
    assert!(out.status.success(), "tau2_peer.py rescore failed: {}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("the rescore report is JSON");
    if matches!(agent, Agent::RepeatedIds) {
        let document: Value = serde_json::from_str(&std::fs::read_to_string(work.path(&results)).unwrap()).unwrap();
        let ids: std::collections::BTreeSet<&str> = document["simulations"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["messages"].as_array().unwrap())
            .filter(|m| m["role"] == "tool" && m["requestor"] == "assistant")
            .filter_map(|m| m["id"].as_str())
            .collect();
        assert_eq!(ids.into_iter().collect::<Vec<_>>(), ["call_0000000000000000"], "{label}: one id for every call");
    }
    for session in report["sessions"].as_array().unwrap() {
        tally.sessions += 1;
        let task = session["task_id"].as_str().unwrap();
        let what = format!("{label} / {task}");
        if let Some(raised) = session.get("tau2_raised").and_then(Value::as_str) {
            let explained = TAU2_RAISES.iter().any(|(t, m)| *t == task && raised.contains(m));
            assert!(explained, "{what}: tau2 raised unexpectedly: {raised}");
            assert_eq!(session["parley"]["reward"], 0.0, "{what}: Parley grades what tau2 cannot evaluate 0");
            tally.tau2_raised += 1;
            continue;
        }
        for key in ["load_raised", "replay_raised"] {
            assert!(session.get(key).is_none(), "{what}: {key}: {}", session[key]);
        }
        let (tau2, parley) = (&session["tau2"], &session["parley"]);
        let mut wrong: Vec<String> = COMPONENTS
            .iter()
            .filter(|key| tau2[**key] != parley[**key])
            .map(|key| format!("{key}: tau2 {} parley {}", tau2[*key], parley[*key]))
            .collect();
        if let Some(differences) = session["output_differences"].as_array().filter(|d| !d.is_empty()) {
            wrong.push(format!("tool outputs: {}", Value::Array(differences.clone())));
        }
        // Parley's stored hashes (in info.parley) are the final state tau2 reaches by replaying.
        let hashes = &parley["info"]["parley"]["db_hashes"];
        if hashes != &session["db_hashes"] {
            wrong.push(format!("final hashes: tau2 {} parley {hashes}", session["db_hashes"]));
        }
        if wrong.is_empty() {
            tally.agreed += 1;
        } else {
            tally.disagreements.push(format!("{what}:\n  {}", wrong.join("\n  ")));
        }
    }
}

#[test]
fn tau2_rescores_every_stub_session_exactly_as_parley_scored_it() {
    let Some((venv, data)) = peers() else { return };
    let work = Workdir::new();
    let tau2_data = tau2_data_dir(&work, &data);
    let judge = Judge::start(&venv, &tau2_data, &work);
    // Airline and retail run their test splits: their large databases make every score and
    // every re-score take a while.
    let domains = [("mock", None), ("airline", Some("test")), ("retail", Some("test")), ("telecom", None)];
    let variants: [(&str, Agent, &[&str]); 5] = [
        ("clean", Agent::Cli(&[]), &["--user-turns", "3"]),
        (
            "bad-arguments",
            Agent::Cli(&["--bad-arguments", "0.5", "--tool-calls", "3"]),
            &["--user-turns", "3", "--tool-calls", "2"],
        ),
        ("repeated-ids", Agent::RepeatedIds, &["--user-turns", "3"]),
        ("long", Agent::Cli(&["--tool-calls", "6"]), &["--user-turns", "8", "--tool-calls", "3"]),
        ("oracle", Agent::Oracle, &[]),
    ];
    let mut lines = Vec::new();
    let mut all = Tally::default();
    for (domain, split) in domains {
        let mut tally = Tally::default();
        for (variant, agent, user) in &variants {
            let label = format!("{domain}-{variant}");
            // The oracle plays every task: its final hashes must be tau2's on all of them.
            let split = if matches!(agent, Agent::Oracle) { None } else { split };
            cross_check(&work, &venv, &tau2_data, &judge, domain, split, &label, agent, user, &mut tally);
        }
        lines.push(format!(
            "{domain:<8} {:>4} sessions  {:>4} agree  {:>2} tau2 raised",
            tally.sessions, tally.agreed, tally.tau2_raised
        ));
        all.sessions += tally.sessions;
        all.agreed += tally.agreed;
        all.tau2_raised += tally.tau2_raised;
        all.disagreements.extend(tally.disagreements);
    }
    eprintln!("{}", lines.join("\n"));
    assert!(all.disagreements.is_empty(), "{}", all.disagreements.join("\n"));
    assert_eq!(all.agreed + all.tau2_raised, all.sessions);
    assert!(all.sessions > 550, "{} sessions", all.sessions);
}
