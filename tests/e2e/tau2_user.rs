//! tau2's simulated user, exactly: for every task of the four domains, the first request Parley
//! sends its user model (`--user llm`, by default) carries the system prompt, the messages and
//! the tools that tau2's own `UserSimulator` sends on its first turn, byte for byte, and tau2's
//! default temperature. tau2's side is `tests/e2e/tau2_user.py`, which builds tau2's text
//! orchestrator from its source (`../shared/peers/tau2-bench`) for each task and takes the
//! user's first request before any model is called. Parley's side is one run per domain with
//! the oracle as agent, whose user endpoint keeps every request and answers `###STOP###`.
//!
//! Left out, as they are no part of what the user is told: the model name, the seed (tau2's is
//! one per trial, Parley's one per session) and `tool_choice` (tau2 writes `auto`, the default).
//!
//! Needs `.venv-tau2` (`.ci/setup-tau2`), the tau2 source and the data under `../shared`; without
//! them it fails under `PARLEY_REQUIRE_PEERS=1` and skips loudly otherwise.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::endpoint::{Endpoint, completion};
use crate::harness::{Workdir, ok, text};
use crate::tau2_fidelity::{peers, shared, tau2_data_dir};

const DOMAINS: [&str; 4] = ["mock", "airline", "retail", "telecom"];

#[test]
fn parleys_user_asks_its_model_what_tau2s_user_asks() {
    let Some((venv, data)) = peers() else { return };
    let work = Workdir::new();
    // tau2's side runs while Parley runs.
    let tau2 = Command::new(venv.join("bin/python"))
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2e/tau2_user.py"))
        .args(DOMAINS)
        .env("PYTHONPATH", shared().join("peers/tau2-bench/src"))
        .env("TAU2_DATA_DIR", tau2_data_dir(&work, &data))
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tau2_user.py");

    let user = Endpoint::start(|_, _| (200, completion("###STOP###")));
    let mut parley = HashMap::new();
    for domain in DOMAINS {
        let env = format!("tau2:{domain}");
        let db = format!("{domain}.db");
        ok(&work.parley(&[
            "run",
            "--env",
            &env,
            "--data-dir",
            data.to_str().unwrap(),
            "--agent",
            "oracle",
            "--user",
            "llm",
            "--user-base-url",
            &user.url,
            "--max-turns",
            "1",
            "--db",
            &db,
            "--out",
            "out.jsonl",
            "-c",
            "16",
        ]));
        // One user request per session, each carrying the session's seed, which names its task.
        for body in user.take_bodies() {
            let request: Value = serde_json::from_str(&body).expect("a user request is JSON");
            let seed = request["seed"].as_u64().expect("a user request carries its seed");
            assert!(parley.insert((domain, seed), request).is_none(), "{domain}: two user requests with seed {seed}");
        }
    }

    let out = tau2.wait_with_output().expect("run tau2_user.py");
    assert!(out.status.success(), "tau2_user.py failed: {}", text(&out.stderr));
    let mut checked = HashMap::<&str, usize>::new();
    let mut wrong = Vec::new();
    for line in text(&out.stdout).lines() {
        let tau2: Value = serde_json::from_str(line).expect("tau2_user.py writes JSON lines");
        let domain = DOMAINS.into_iter().find(|d| tau2["domain"] == *d).expect("a domain of ours");
        let id = tau2["id"].as_str().unwrap();
        assert!(tau2.get("error").is_none(), "{domain} / {id}: {}", tau2["error"]);
        let Some(parley) = parley.get(&(domain, parley_core::stable_seed(id, 0))) else {
            wrong.push(format!("{domain} / {id}: Parley's user never asked its model"));
            continue;
        };
        *checked.entry(domain).or_default() += 1;
        if let Some(why) = difference(&tau2, parley) {
            wrong.push(format!("{domain} / {id}: {why}"));
        }
    }
    assert!(wrong.is_empty(), "{} of the first user requests differ from tau2's:\n{}", wrong.len(), wrong.join("\n"));
    // Every task of every domain, and nothing else.
    let counts: Vec<usize> = DOMAINS.iter().map(|d| checked.get(d).copied().unwrap_or(0)).collect();
    assert_eq!(counts, [10, 50, 114, 20], "tasks checked in {DOMAINS:?}");
    assert_eq!(parley.len(), counts.iter().sum::<usize>(), "one user request per task");
}

/// Where Parley's request differs from tau2's: a message (its role, its text byte for byte,
/// its calls or the call it answers), the tools, or the temperature.
fn difference(tau2: &Value, parley: &Value) -> Option<String> {
    let (theirs, ours) = (tau2["messages"].as_array().unwrap(), parley["messages"].as_array().unwrap());
    for (i, (t, p)) in theirs.iter().zip(ours).enumerate() {
        let (t, p) = (present(t), present(p));
        if t != p {
            let (a, b) = (t["content"].as_str().unwrap_or_default(), p["content"].as_str().unwrap_or_default());
            if a == b {
                return Some(format!("message {i} differs beside its text: tau2 {t}, Parley {p}"));
            }
            let at = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
            let near = |s: &str| {
                String::from_utf8_lossy(&s.as_bytes()[at.saturating_sub(30)..(at + 30).min(s.len())]).into_owned()
            };
            return Some(format!(
                "message {i}'s text differs from byte {at}: tau2 {:?}, Parley {:?}",
                near(a),
                near(b)
            ));
        }
    }
    if theirs.len() != ours.len() {
        return Some(format!("tau2 sends {} messages, Parley {}", theirs.len(), ours.len()));
    }
    let tools = |request: &Value| request.get("tools").filter(|t| !t.is_null()).cloned();
    if tools(tau2) != tools(parley) {
        return Some(format!("the tools differ:\n  tau2   {}\n  Parley {}", tau2["tools"], parley["tools"]));
    }
    let temperature = (tau2["kwargs"]["temperature"].as_f64(), parley["temperature"].as_f64());
    if temperature.0 != temperature.1 {
        return Some(format!("temperature: tau2 {:?}, Parley {:?}", temperature.0, temperature.1));
    }
    None
}

/// A message's fields that are there: tau2 writes `"tool_calls": null` where Parley leaves the
/// key out.
fn present(message: &Value) -> Value {
    let fields = message.as_object().unwrap().iter().filter(|(_, v)| !v.is_null());
    Value::Object(fields.map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// The first user request of each session of a run, with `args` after the usual ones.
fn first_user_requests(work: &Workdir, args: &[&str]) -> Vec<Value> {
    let user = Endpoint::start(|_, _| (200, completion("###STOP###")));
    let mut all = vec!["run", "--user", "llm", "--user-base-url", &user.url, "--max-turns", "1", "--db", "parley.db"];
    all.extend(args);
    ok(&work.parley(&all));
    user.take_bodies().iter().map(|b| serde_json::from_str(b).expect("a user request is JSON")).collect()
}

#[test]
fn the_flags_replace_tau2s_user_and_parleys_own_stays_elsewhere() {
    let work = Workdir::new();
    let data = crate::harness::tau2_data_dir();
    std::fs::write(work.path("guidelines.md"), "Be a {scenario} customer.").unwrap();
    std::fs::write(work.path("prompt.txt"), "{guidelines}|{persona}|{scenario}").unwrap();
    // Mock's user has tools: the replaced guidelines hold with tools too.
    let own = [
        "--env",
        "tau2:mock",
        "--data-dir",
        &data,
        "--agent",
        "oracle",
        "--num-tasks",
        "1",
        "--user-guidelines",
        "guidelines.md",
        "--user-prompt",
        "prompt.txt",
        "--user-temperature",
        "0.5",
    ];
    let requests = first_user_requests(&work, &own);
    let system = requests[0]["messages"][0]["content"].as_str().unwrap();
    // The first mock task's scenario is two lines of free text, as tau2 writes it.
    let tasks: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{data}/mock/tasks.json")).unwrap()).unwrap();
    let scenario = &tasks[0]["user_scenario"];
    let (persona, instructions) = (scenario["persona"].as_str().unwrap(), scenario["instructions"].as_str().unwrap());
    assert_eq!(system, format!("Be a {{scenario}} customer.||Persona:\n\t{persona}\nInstructions:\n\t{instructions}"));
    assert!(requests[0]["tools"].as_array().is_some_and(|t| !t.is_empty()), "mock's user has its tools");
    assert_eq!(requests[0]["temperature"], 0.5);

    // Elsewhere Parley's own guidelines, and the endpoint's own temperature.
    let work = Workdir::new();
    work.tasks(1);
    let requests = first_user_requests(&work, &["--env", "multi-step", "--tasks", "tasks.jsonl"]);
    let system = requests[0]["messages"][0]["content"].as_str().unwrap();
    assert!(system.starts_with(&simulator_llm::Prompt::default().guidelines), "{system}");
    assert!(requests[0].get("temperature").is_none(), "{}", requests[0]);
}
