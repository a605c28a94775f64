//! How long scoring a session takes, per session, in CPU terms (one thread, so wall time).
//!
//! For each of the first N tasks of a domain, three transcripts are built the way a session
//! records them: the gold actions played in order (what an oracle agent does, ending on the
//! gold state), no call at all (ending on the initial state), and the gold actions less the
//! last mutating one (ending elsewhere, so the diff has something to say). Each is then scored
//! with `EnvSession::score`, as a session's end does; only the scoring is timed.
//!
//! ```text
//! cargo run --release -p environment-tau2 --example score_timing -- [DOMAIN] [N] [DATA_DIR] [ROUNDS]
//! ```
//!
//! Defaults: airline, 50 tasks, `PARLEY_TAU2_DATA` or `../shared/data/tau2`, one round (each
//! further round scores the same sessions again, as a training run's later epochs do). It
//! prints the milliseconds per scored session for each kind of transcript and round (the first
//! score of a domain also pays for what the domain keeps for later ones), and a fingerprint of every
//! score (the reward and its whole breakdown) so that two builds can be seen to agree;
//! `PARLEY_SCORE_DUMP=FILE` also writes the scores there, one JSON line each, for a diff.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use environment_tau2::{Data, DomainOptions, load};
use parley_core::{EnvSession, Message, Party, Role, Task, Termination, ToolCall};
use serde_json::Value;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let domain_name = args.next().unwrap_or_else(|| "airline".into());
    let count: usize = args.next().map(|n| n.parse().expect("N is a number")).unwrap_or(50);
    let data = args
        .next()
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("PARLEY_TAU2_DATA").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/tau2"));
    let rounds: usize = args.next().map(|n| n.parse().expect("ROUNDS is a number")).unwrap_or(1);
    let domain = load(&Data::Folder(data), &domain_name, DomainOptions::default()).expect("the domain loads");
    let env = domain.tau2_environment();

    let kinds = ["gold", "nothing", "all but the last write"];
    let mut checksum = Vec::new();
    for round in 1..=rounds {
        let mut spent = [Duration::ZERO; 3];
        let mut scored = [0usize; 3];
        for task in domain.tasks.iter().take(count) {
            let actions = gold_actions(task);
            let last_write = actions.iter().rposition(|(_, call)| !call.name.starts_with("get_"));
            let plays: [Vec<(Party, ToolCall)>; 3] = [
                actions.clone(),
                Vec::new(),
                actions.iter().enumerate().filter(|(i, _)| Some(*i) != last_write).map(|(_, a)| a.clone()).collect(),
            ];
            for (kind, play) in plays.iter().enumerate() {
                let mut session = env.open_session(task).expect("the task opens");
                let mut messages = task.messages.clone();
                for (party, call) in play {
                    let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
                    let out = session.call(*party, &call.name, &arguments).await.expect("the call runs");
                    let role = if *party == Party::User { Role::User } else { Role::Assistant };
                    messages.push(Message { tool_calls: vec![call.clone()], ..Message::empty(role) });
                    messages.push(Message::tool_result(call.id.clone(), out.content));
                }
                messages.push(Message::assistant("Done."));
                let start = Instant::now();
                let reward = session.score(&messages, Termination::AgentStop).await.expect("scoring runs");
                spent[kind] += start.elapsed();
                scored[kind] += 1;
                checksum.push(serde_json::json!({"task": task.id, "kind": kinds[kind], "value": reward.value, "breakdown": reward.breakdown}).to_string());
            }
        }
        for (kind, name) in kinds.iter().enumerate() {
            let ms = spent[kind].as_secs_f64() * 1000.0 / scored[kind].max(1) as f64;
            println!("{domain_name} round {round} {name:>22}: {:>4} sessions, {ms:>8.3} ms per score", scored[kind]);
        }
    }
    let lines = checksum.join("\n");
    println!("fingerprint of {} scores: {:016x}", checksum.len(), fnv(&lines));
    if let Some(path) = std::env::var_os("PARLEY_SCORE_DUMP") {
        std::fs::write(path, lines + "\n").expect("the dump is written");
    }
}

/// The task's gold actions as calls, each with the party that plays it.
fn gold_actions(task: &Task) -> Vec<(Party, ToolCall)> {
    let actions = task.row.pointer("/evaluation_criteria/actions").and_then(Value::as_array);
    actions
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, action)| {
            let party = if action["requestor"] == "user" { Party::User } else { Party::Agent };
            let call = ToolCall {
                id: format!("gold-{i}"),
                name: action["name"].as_str().unwrap_or_default().to_owned(),
                arguments: action.get("arguments").map(Value::to_string).unwrap_or_else(|| "{}".into()),
            };
            (party, call)
        })
        .collect()
}

/// FNV-1a, to print a short fingerprint of every score.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf29ce484222325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3))
}
