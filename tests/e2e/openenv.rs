//! `parley serve` as an OpenEnv environment, driven by OpenEnv's own client (`openenv-core` from
//! PyPI in `.venv-openenv`, installed by `.ci/setup-openenv`; `tests/e2e/openenv_client.py`
//! plays the trainer): every tau2 airline task's gold actions over `/ws` and over HTTP score what
//! `parley run --agent oracle` scores; wrong actions score what Parley's own run of the same
//! actions scores; 200 WebSocket sessions at once keep their own state; bad frames and bodies get
//! OpenEnv's error shapes on a connection that stays open; a dropped connection's session is
//! continued by id; OpenEnv's `validate --url` passes. Without the client the tests say so and
//! skip, and fail under `PARLEY_REQUIRE_PEERS=1`. tau2's data is read from `../shared/data/tau2`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use agent_oracle::{agent_gold_actions, closing_message};
use async_trait::async_trait;
use environment_tau2::{Data, DomainOptions, load};
use parley_core::{
    Agent, AgentFailure, AgentTurn, AgentView, Limits, Message, Player, Role, RunSpec, SessionSpec, SessionStore, Task,
    stable_seed,
};
use serde_json::{Value, json};

use crate::harness::{PARLEY, Stub, Workdir, ok, read_jsonl, root, skip, text};
use crate::http::{get, post_json};

/// The Python of `.venv-openenv`, where OpenEnv's client is installed.
pub(crate) fn client() -> Option<PathBuf> {
    let venv = root().join(".venv-openenv");
    if venv.join(".parley-ready-0.3.0").is_file() {
        return Some(venv.join("bin/python"));
    }
    skip("OpenEnv's client is not installed; run .ci/setup-openenv");
    None
}

fn data() -> Option<PathBuf> {
    let data = crate::harness::tau2_data();
    if data.is_none() {
        skip("no tau2 data at ../shared/data/tau2 (set PARLEY_TAU2_DATA)");
    }
    data
}

/// `parley serve` on a free port, killed when dropped.
struct Served {
    child: Child,
    url: String,
}

impl Served {
    fn start(work: &Workdir, args: &[&str]) -> Served {
        let mut child = Command::new(PARLEY)
            .current_dir(work.dir.path())
            .args(["serve", "--listen", "127.0.0.1:0", "--db", "serve.db"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(work.path("serve.log")).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert!(line.starts_with("http://127.0.0.1:"), "{line}: {}", work.log());
        Served { child, url: line.trim().to_owned() }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

trait Log {
    fn log(&self) -> String;
}

impl Log for Workdir {
    fn log(&self) -> String {
        std::fs::read_to_string(self.path("serve.log")).unwrap_or_default()
    }
}

/// Runs the trainer's script (`openenv_client.py COMMAND URL ARGS... OUT`) and reads what it wrote.
pub(crate) fn trainer(work: &Workdir, python: &PathBuf, command: &str, url: &str, args: &[&str]) -> Value {
    let script = root().join("tests/e2e/openenv_client.py");
    let out = work.path(&format!("{command}.json"));
    let out_arg = out.display().to_string();
    let mut all: Vec<&str> = vec![command, url];
    all.extend(args);
    all.push(&out_arg);
    if command == "play" {
        // `play` takes its transport after OUT.
        let transport = all.remove(all.len() - 2);
        all.extend(["--transport", transport]);
    }
    let run = Command::new(python).arg(&script).args(&all).current_dir(work.dir.path()).output().unwrap();
    assert!(run.status.success(), "{command}: {}\n{}\nserve: {}", text(&run.stdout), text(&run.stderr), work.log());
    serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap()
}

/// An assistant message in the Chat Completions form, as a trainer sends it.
fn action(message: &Message) -> Value {
    let calls: Vec<Value> = message
        .tool_calls
        .iter()
        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
        .collect();
    let mut action = json!({"role": "assistant", "content": message.content});
    if !calls.is_empty() {
        action["tool_calls"] = Value::Array(calls);
    }
    action
}

/// The oracle's turns for a task: its gold calls, one a turn, then its closing message.
fn gold(task: &Task) -> Vec<Message> {
    let mut turns: Vec<Message> =
        agent_gold_actions(task).into_iter().map(|call| Message::assistant_calls(None, vec![call])).collect();
    turns.push(Message::assistant(closing_message(task)));
    turns
}

/// A wrong trajectory: a call to a tool that does not exist, arguments that are not JSON, and
/// the gold calls without their last one.
fn wrong(task: &Task) -> Vec<Message> {
    let mut turns = gold(task);
    let closing = turns.pop().unwrap();
    turns.pop();
    let call = |id: &str, name: &str, arguments: &str| parley_core::ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    };
    turns.insert(0, Message::assistant_calls(None, vec![call("bad-0", "no_such_tool", "{}")]));
    turns.insert(1, Message::assistant_calls(None, vec![call("bad-1", "get_user_details", "{not json")]));
    turns.push(closing);
    turns
}

fn scripts(tasks: &[Task], indexes: &[usize], turns: fn(&Task) -> Vec<Message>) -> Value {
    indexes
        .iter()
        .map(|&i| json!({"task_index": i, "actions": turns(&tasks[i]).iter().map(action).collect::<Vec<_>>()}))
        .collect()
}

/// An agent that plays given turns in order, as a run's agent would have written them.
struct Script {
    turns: Vec<Message>,
    policy: String,
}

#[async_trait]
impl Agent for Script {
    fn system_prompt(&self) -> Option<&str> {
        Some(&self.policy)
    }

    async fn act(&self, view: AgentView<'_>) -> Result<AgentTurn, AgentFailure> {
        let opening = view.task.messages.iter().filter(|m| m.role == Role::Assistant).count();
        let made = view.messages.iter().filter(|m| m.role == Role::Assistant).count() - opening;
        let message = self.turns.get(made).cloned().unwrap_or_else(|| Message::assistant("###STOP###"));
        Ok(AgentTurn { message, call: None })
    }
}

/// What Parley's own run gives for `turns` on `task`: the engine, the tau2 environment and the
/// scripted user in process, the session stored in `db`.
async fn run_in_process(
    db: &std::path::Path,
    domain: &environment_tau2::Domain,
    task: &Task,
    turns: Vec<Message>,
) -> f64 {
    let store = Arc::new(parley_store::SqliteStore::open(db, parley_store::StoreOptions::default()).await.unwrap());
    let task = Arc::new(Task { index: 0, ..task.clone() });
    let spec = SessionSpec { task_index: 0, trial: 0, seed: stable_seed(&task.id, 0), player: Player::Run };
    let run = RunSpec { environment: "tau2:airline".into(), config: json!({}) };
    let (_, claims) = store.create_run(&run, &[Arc::clone(&task)], &[spec]).await.unwrap();
    let parties = parley_engine::Parties {
        agent: Arc::new(Script { turns, policy: domain.policy().to_owned() }),
        user: Some(Arc::new(simulator_scripted::Scripted)),
        environment: domain.environment(),
        store: store.clone(),
        leases: Default::default(),
    };
    let job = parley_engine::Job::new(parley_core::Claim::unclaimed(claims[0]), task, spec, None);
    let result = parley_engine::run_session(&parties, job, &Limits::default(), &parley_engine::Stop::default()).await;
    store.close().await.unwrap();
    result.outcome.reward.expect("a scored session").value
}

#[tokio::test(flavor = "multi_thread")]
async fn openenv_clients_score_every_airline_task_as_parley_run_does() {
    let (Some(python), Some(dir)) = (client(), data()) else { return };
    let data = dir.display().to_string();
    let work = Workdir::new();
    let ran = ok(&work.parley(&[
        "run",
        "--env",
        "tau2:airline",
        "--agent",
        "oracle",
        "--user",
        "scripted",
        "--data-dir",
        &data,
        "--db",
        "run.db",
        "--out",
        "run.jsonl",
    ]));
    assert!(ran.contains("n=50"), "{ran}");
    let mut expected = vec![f64::NAN; 50];
    for row in read_jsonl(&work.path("run.jsonl")) {
        expected[row["_ng_task_index"].as_u64().unwrap() as usize] = row["reward"].as_f64().unwrap();
    }
    assert_eq!(expected, vec![1.0; 50], "the oracle solves every airline task");

    let domain = load(&Data::Folder(dir.clone()), "airline", DomainOptions::default()).unwrap();
    let all: Vec<usize> = (0..domain.tasks.len()).collect();
    std::fs::write(work.path("gold.json"), scripts(&domain.tasks, &all, gold).to_string()).unwrap();
    let served = Served::start(&work, &["--env", "tau2:airline", "--user", "scripted", "--data-dir", &data]);
    for transport in ["ws", "http"] {
        let played = trainer(&work, &python, "play", &served.url, &["gold.json", transport]);
        let played = played.as_array().unwrap();
        assert_eq!(played.len(), 50, "{transport}");
        for (i, episode) in played.iter().enumerate() {
            assert_eq!(episode["done"], true, "{transport} task {i}: {episode}");
            assert_eq!(episode["reward"].as_f64(), Some(expected[i]), "{transport} task {i}: {episode}");
            assert_eq!(episode["termination"], "user_stop", "{transport} task {i}");
            assert_eq!(episode["state"]["task_index"], i, "{transport}");
            let steps = agent_gold_actions(&domain.tasks[i]).len() + 1;
            assert_eq!(episode["state"]["step_count"], steps, "{transport} task {i}");
        }
        if transport == "ws" {
            let first = &played[0];
            assert_eq!(first["first_roles"], json!(["system", "assistant", "user"]), "policy, greeting, opening");
            assert_eq!(first["tools"], 14, "airline's tools come with the reset");
        }
    }

    // Wrong actions score what Parley's own run of the same actions scores.
    // The first tasks whose wrong trajectory scores below 1 in Parley's own run, and one that
    // still scores 1 (its last call only reads).
    let mut wrong_tasks = Vec::new();
    let mut own = Vec::new();
    let (mut below, mut whole) = (0, 0);
    for i in all.iter().copied().filter(|&i| agent_gold_actions(&domain.tasks[i]).len() >= 2) {
        let db = work.path(&format!("in-process-{i}.db"));
        let reward = run_in_process(&db, &domain, &domain.tasks[i], wrong(&domain.tasks[i])).await;
        let wanted = if reward < 1.0 { below < 3 } else { whole < 1 };
        if wanted {
            below += usize::from(reward < 1.0);
            whole += usize::from(reward >= 1.0);
            wrong_tasks.push(i);
            own.push(reward);
        }
        if below == 3 && whole == 1 {
            break;
        }
    }
    assert_eq!(below, 3, "wrong trajectories score below 1");
    std::fs::write(work.path("wrong.json"), scripts(&domain.tasks, &wrong_tasks, wrong).to_string()).unwrap();
    let played = trainer(&work, &python, "play", &served.url, &["wrong.json", "ws"]);
    for ((episode, &i), own) in played.as_array().unwrap().iter().zip(&wrong_tasks).zip(&own) {
        assert_eq!(episode["reward"].as_f64(), Some(*own), "task {i}: {episode}");
    }

    // Every served session is stored like a run's: shown, replayed and exported.
    let session = played[0]["session_id"].to_string();
    let show = ok(&work.parley(&["show", &session, "--db", "serve.db"]));
    assert!(show.contains("no_such_tool") && show.contains("termination  user_stop"), "{show}");
    let sessions = 100 + wrong_tasks.len();
    let replay = ok(&work.parley(&["replay", &session, "--db", "serve.db"]));
    assert!(replay.contains("0 tool outputs drifted, 0 rewards changed"), "{replay}");
    ok(&work.parley(&["export", "1", "--format", "nemo-gym", "--db", "serve.db", "--out", "export.jsonl"]));
    assert_eq!(read_jsonl(&work.path("export.jsonl")).len(), sessions);
}

#[tokio::test(flavor = "multi_thread")]
async fn openenv_200_websocket_sessions_at_once_keep_their_own_state() {
    let (Some(python), Some(dir)) = (client(), data()) else { return };
    let data = dir.display().to_string();
    // tau2's mock domain: its world is small, so that 200 scores at once take little time.
    let tasks = load(&Data::Folder(dir.clone()), "mock", DomainOptions::default()).unwrap().tasks.len();
    let work = Workdir::new();
    let stub = Stub::start(&[]);
    let args = ["--env", "tau2:mock", "--data-dir", &data, "--user", "llm", "--user-base-url", &stub.url];
    let served = Served::start(&work, &[&args[..], &["--concurrency", "256"]].concat());
    let episodes = trainer(&work, &python, "many", &served.url, &["200", &tasks.to_string()]);
    let episodes = episodes.as_array().unwrap();
    assert_eq!(episodes.len(), 200);
    let mut sessions: Vec<i64> = Vec::new();
    for episode in episodes {
        let i = episode["i"].as_u64().unwrap();
        assert_eq!(episode["done"], true, "{episode}");
        assert_eq!(episode["episode_id"], format!("episode-{i}"), "{episode}");
        assert_eq!(episode["task_index"], i % tasks as u64, "{episode}");
        assert_eq!(episode["step_count"], episode["sent"], "{episode}");
        // This session's own texts, and no other session's (a task's opening may hold assistant
        // messages of its own).
        let texts = episode["assistant_texts"].as_array().unwrap();
        let marked: Vec<&str> = texts.iter().filter_map(Value::as_str).filter(|t| t.starts_with("Session ")).collect();
        assert_eq!(marked.len() as u64, episode["sent"].as_u64().unwrap(), "{episode}");
        let own = [format!("Session {i},"), format!("Session {i} ")];
        assert!(marked.iter().all(|t| own.iter().any(|o| t.starts_with(o.as_str()))), "{episode}");
        sessions.push(episode["session_id"].as_i64().unwrap());
    }
    sessions.sort_unstable();
    sessions.dedup();
    assert_eq!(sessions.len(), 200, "each episode is a session of its own");
    // Every step played is timed, by what its action held: these trainers only write text.
    let metrics = get(served.url.trim_start_matches("http://"), "/metrics").2;
    let count = |action: &str| -> u64 {
        let name = format!("parley_openenv_step_seconds_count{{action=\"{action}\"}} ");
        let line = metrics.lines().find_map(|l| l.strip_prefix(&name)).unwrap_or_else(|| panic!("{name}: {metrics}"));
        line.parse().unwrap()
    };
    let played: u64 = episodes.iter().map(|e| e["step_count"].as_u64().unwrap()).sum();
    assert_eq!(count("text"), played, "{metrics}");
    assert_eq!(count("tool_calls"), 0, "{metrics}");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", work.path("serve.db").display())).await.unwrap();
    let finished: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM sessions WHERE status = 'finished'").fetch_one(&pool).await.unwrap();
    pool.close().await;
    assert_eq!(finished, 200, "{}", work.log());
}

#[test]
fn openenv_bad_frames_and_bodies_get_openenvs_error_shapes() {
    let (Some(python), Some(dir)) = (client(), data()) else { return };
    let data = dir.display().to_string();
    let work = Workdir::new();
    let served = Served::start(&work, &["--env", "tau2:airline", "--user", "scripted", "--data-dir", &data]);
    let seen = trainer(&work, &python, "bad", &served.url, &[]);
    let ws = &seen["ws"];
    let code =
        |name: &str| ws[name]["data"]["code"].as_str().unwrap_or_else(|| panic!("{name}: {}", ws[name])).to_owned();
    for (name, want) in [
        ("not_json", "INVALID_JSON"),
        ("step_before_reset", "SESSION_ERROR"),
        ("unknown_type", "UNKNOWN_TYPE"),
        ("extra_message_field", "VALIDATION_ERROR"),
        ("reset_unknown_field", "VALIDATION_ERROR"),
        ("reset_past_the_tasks", "VALIDATION_ERROR"),
        ("action_unknown_field", "VALIDATION_ERROR"),
        ("action_not_an_object", "VALIDATION_ERROR"),
        ("call_without_name", "VALIDATION_ERROR"),
        ("step_without_data", "VALIDATION_ERROR"),
        ("step_after_done", "EXECUTION_ERROR"),
    ] {
        assert_eq!(ws[name]["type"], "error", "{name}: {}", ws[name]);
        assert_eq!(code(name), want, "{name}: {}", ws[name]);
    }
    // Each bad field is named where it is.
    assert_eq!(ws["action_unknown_field"]["data"]["errors"][0]["loc"], json!(["data", "colour"]));
    assert_eq!(
        ws["call_without_name"]["data"]["errors"][0]["loc"],
        json!(["data", "tool_calls", 0, "function", "name"])
    );
    assert_eq!(ws["reset_unknown_field"]["data"]["errors"][0]["loc"], json!(["shoe_size"]));
    // Malformed calls are the environment's tool errors, as in a run; the episode goes on.
    for name in ["arguments_not_json", "unknown_tool"] {
        let observation = &ws[name]["data"];
        assert_eq!(ws[name]["type"], "observation", "{name}");
        assert_eq!(observation["done"], false);
        let result = &observation["observation"]["messages"][0];
        assert_eq!(result["role"], "tool", "{name}: {observation}");
        assert!(result["content"].as_str().unwrap().contains("rror"), "{name}: {result}");
    }
    assert_eq!(ws["text_ends_it"]["data"]["done"], true);
    assert_eq!(ws["state_after_done"]["data"]["step_count"], 3);
    assert_eq!(ws["reset_again"]["type"], "observation", "the connection stayed open throughout");

    let http = &seen["http"];
    for (name, status) in [
        ("reset_not_json", 422),
        ("reset_unknown_field", 422),
        ("step_without_session", 422),
        ("step_unknown_session", 404),
        ("step_bad_action", 422),
        ("step_unknown_field", 422),
        // The session's id alone is a guessable number: without its key it is unknown.
        ("step_without_key", 404),
        ("state_without_key", 404),
        ("step_ends_it", 200),
        ("step_after_done", 409),
        ("state_bad_id", 422),
        ("health", 200),
    ] {
        assert_eq!(http[name]["status"], status, "{name}: {}", http[name]);
    }
    assert_eq!(http["step_bad_action"]["body"]["detail"][0]["loc"], json!(["body", "action", "content"]));
    assert_eq!(http["step_without_session"]["body"]["detail"][0]["loc"], json!(["body", "session_id"]));

    // OpenEnv's own check of a running server.
    let openenv = python.with_file_name("openenv");
    let validated = Command::new(&openenv).args(["validate", "--url", &served.url]).output().unwrap();
    assert!(validated.status.success(), "{}\n{}", text(&validated.stdout), text(&validated.stderr));
}

#[test]
fn openenv_a_dropped_connection_leaves_its_session_to_continue_by_id() {
    let (Some(python), Some(dir)) = (client(), data()) else { return };
    let data = dir.display().to_string();
    let domain = load(&Data::Folder(dir.clone()), "airline", DomainOptions::default()).unwrap();
    let i = (0..domain.tasks.len()).find(|&i| agent_gold_actions(&domain.tasks[i]).len() >= 3).unwrap();
    let work = Workdir::new();
    let script = &scripts(&domain.tasks, &[i], gold)[0];
    std::fs::write(work.path("script.json"), script.to_string()).unwrap();
    let served = Served::start(&work, &["--env", "tau2:airline", "--user", "scripted", "--data-dir", &data]);
    let episode = trainer(&work, &python, "drop", &served.url, &["script.json"]);
    assert_eq!(episode["done"], true, "{episode}\n{}", work.log());
    assert_eq!(episode["reward"], 1.0, "{episode}");
    assert_eq!(episode["state"]["episode_id"], "dropped", "{episode}");
    // The continued episode starts with the whole transcript so far: the opening, the first
    // call and its result.
    assert_eq!(episode["continued_roles"], json!(["system", "assistant", "user", "assistant", "tool"]), "{episode}");
    // A connection that names the dropped session's id without its key cannot continue it.
    assert_eq!(episode["stranger"]["data"]["code"], "SESSION_ERROR", "{episode}");
    let session = episode["session_id"].to_string();
    let show = ok(&work.parley(&["show", &session, "--db", "serve.db"]));
    let first = &agent_gold_actions(&domain.tasks[i])[0];
    assert_eq!(show.matches(&format!("{}(", first.name)).count(), 1, "the first call was made once: {show}");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_calls_the_policy_url_its_row_names_and_only_for_the_agent() {
    let work = Workdir::new();
    work.tasks(4);
    let (service_policy, rollout_policy, user) = (Stub::start(&[]), Stub::start(&[]), Stub::start(&[]));
    let served = Served::start(
        &work,
        &["--base-url", &service_policy.url, "--model", "stub-model", "--user", "llm", "--user-base-url", &user.url],
    );
    let address = served.url.trim_start_matches("http://");
    for line in std::fs::read_to_string(work.path("tasks.jsonl")).unwrap().lines() {
        let mut row: Value = serde_json::from_str(line).unwrap();
        row["policy_base_url"] = json!(rollout_policy.url);
        let answer = post_json(address, "/run", &row.to_string());
        assert!(answer.get("policy_base_url").is_none(), "the field is not echoed: {answer}");
        assert!(answer["reward"].is_number(), "{answer}");
    }
    let conversations = |stub: &Stub| stub.stats()["conversations"].as_object().map_or(0, |c| c.len());
    assert_eq!(conversations(&rollout_policy), 4, "every rollout's agent called its own policy");
    assert_eq!(conversations(&service_policy), 0, "the service's policy was not called");
    assert!(conversations(&user) > 0, "the simulated user kept its own endpoint");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", work.path("serve.db").display())).await.unwrap();
    let rows: Vec<String> = sqlx::query_scalar("SELECT row FROM tasks").fetch_all(&pool).await.unwrap();
    pool.close().await;
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| !r.contains("policy_base_url")), "the field is not stored: {}", rows[0]);
    let bad = post_json(address, "/run", r#"{"policy_base_url": 7, "responses_create_params": {"input": "hi"}}"#);
    assert!(bad["error"].as_str().unwrap().contains("policy_base_url"), "{bad}");
}
