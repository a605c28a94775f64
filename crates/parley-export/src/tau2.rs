//! A run as tau2-bench's results document (`tau2.data_model.simulation.Results`), so that tau2's
//! own `tau2 evaluate-trajs` can re-score Parley sessions and its viewers can read them.
//!
//! The document is `{timestamp, info, tasks, simulations}`. `tasks` are the task rows unchanged
//! (`Task.row` is tau2's task JSON); each simulation is a `SimulationRun`: its messages in tau2's
//! shapes (`AssistantMessage`/`UserMessage` with `tool_calls: [{id, name, arguments, requestor}]`,
//! `ToolMessage` with `requestor` and `error`), and `reward_info` from the stored reward, whose
//! breakdown already uses `RewardInfo`'s field names.
//!
//! What tau2 needs to re-score a trajectory shapes the messages:
//!
//! - tau2's evaluator replays every tool call against a fresh environment and requires each
//!   call's result right after it, with the same content. Every call the environment answered
//!   is written as it was; for tau2 sessions that includes unknown tools and arguments against a
//!   tool's schema, which the tau2 environment answers itself as tau2 does (Python's
//!   `TypeError`, `Tool 'x' not found.`), so tau2's ACTION check sees them too. A call the
//!   engine answered itself (arguments that are not JSON, which tau2's agent cannot even parse;
//!   in other environments also unknown tools and schema violations) or a call left without a
//!   result cannot be replayed, so it is left out of `messages` and listed under the
//!   simulation's `parley.dropped_calls`. It changed no state, and Parley's tau2 scorer leaves
//!   it out of the trajectory it judges in the same way.
//! - A task's recorded history (`initial_state.message_history`) is written as the task row has
//!   it, so its ids, requestors and error flags are tau2's own.
//! - The agent's system prompt is not part of a tau2 trajectory, so system messages are dropped.
//!
//! Termination reasons are written in the vocabulary every tau2 release accepts (`user_stop`,
//! `agent_stop`, `max_steps`, `too_many_errors`, `agent_error`, `user_error`): a turn limit or a
//! timeout is `max_steps`, an exceeded context window is `agent_error`, and the exact Parley
//! reason stays in `parley.termination`. tau2 scores any of these but the two stops 0, as Parley
//! does. Infrastructure failures are not simulations in tau2's sense (it re-runs them), so
//! [`ResultsWriter::simulation`] refuses them; callers send those to the failures file.
//!
//! Parley does not store per-message times or prices: message `timestamp`s, `agent_cost` and
//! `user_cost` are null, and `start_time`/`end_time` are the Unix epoch and the epoch plus the
//! session's duration, so that `end_time - start_time == duration` as in tau2.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::sync::Arc;

use parley_core::{Message, Party, Reward, Role, Task, Termination, ToolCallRecord};
use serde_json::{Map, Value, json};

use crate::ExportError;

/// One stored session, as tau2 sees it.
pub struct Session<'a> {
    pub id: i64,
    pub task: &'a Task,
    pub trial: u32,
    pub seed: u64,
    /// Parley's termination reason (snake_case, as `Termination::as_str`).
    pub termination: &'a str,
    pub reward: Option<&'a Reward>,
    /// The whole stored transcript; system messages in it are skipped.
    pub messages: &'a [Message],
    /// The session's tool calls, for their `party`, `is_error` and `malformed` flags.
    pub tool_calls: &'a [ToolCallRecord],
    pub duration_ms: f64,
}

/// Streams a Results document: writes the opening with `info` and `tasks`, then each simulation as
/// it comes, then closes. A writer dropped before [`ResultsWriter::finish`] leaves the document
/// unterminated.
pub struct ResultsWriter<'w> {
    out: &'w mut dyn Write,
    timestamp: String,
    task_ids: HashSet<String>,
    written: usize,
}

/// The fields of tau2's `RewardInfo`; anything else in a reward's breakdown is Parley's own and
/// goes under `info.parley`.
const REWARD_INFO_FIELDS: [&str; 8] = [
    "db_check",
    "env_assertions",
    "action_checks",
    "nl_assertions",
    "communicate_checks",
    "reward_basis",
    "reward_breakdown",
    "info",
];

impl<'w> ResultsWriter<'w> {
    /// Writes the document's opening. `info` is merged over a complete tau2 `Info` (objects key by
    /// key), so a caller gives only what it knows: `agent_info`, `user_info`, `num_trials`,
    /// `max_steps`, `environment_info.policy`, `seed`. `environment_info.domain_name` is `domain`.
    pub fn start(
        out: &'w mut dyn Write,
        domain: &str,
        info: Value,
        tasks: &[Arc<Task>],
    ) -> Result<ResultsWriter<'w>, ExportError> {
        if !(info.is_object() || info.is_null()) {
            return Err(ExportError::Tau2(format!("`info` must be a JSON object, got {info}")));
        }
        let mut full = default_info(domain);
        merge(&mut full, info);
        full["environment_info"]["domain_name"] = json!(domain);

        let timestamp = iso(now_seconds());
        out.write_all(b"{\"timestamp\":")?;
        serde_json::to_writer(&mut *out, &timestamp)?;
        out.write_all(b",\"info\":")?;
        serde_json::to_writer(&mut *out, &full)?;
        out.write_all(b",\"tasks\":[")?;
        for (i, task) in tasks.iter().enumerate() {
            if !task.row.is_object() {
                let why = format!("task {} ({}) has a row that is not a JSON object", task.index, task.id);
                return Err(ExportError::Tau2(why));
            }
            out.write_all(if i == 0 { b"\n" } else { b",\n" })?;
            serde_json::to_writer(&mut *out, &task.row)?;
        }
        out.write_all(b"],\"simulations\":[")?;
        let task_ids = tasks.iter().map(|t| t.id.clone()).collect();
        Ok(ResultsWriter { out, timestamp, task_ids, written: 0 })
    }

    /// Writes one session as a `SimulationRun`, on a line of its own.
    pub fn simulation(&mut self, session: &Session<'_>) -> Result<(), ExportError> {
        if !self.task_ids.contains(&session.task.id) {
            return Err(ExportError::Tau2(format!(
                "session {} names task {}, which is not among the document's tasks",
                session.id, session.task.id
            )));
        }
        let reason = termination_reason(session.termination)
            .map_err(|why| ExportError::Tau2(format!("session {}: {why}", session.id)))?;
        let Converted { messages, dropped } = convert(session);
        let duration = session.duration_ms.max(0.0) / 1000.0;
        let record = json!({
            "id": format!("parley-session-{}", session.id),
            "task_id": session.task.id,
            "timestamp": self.timestamp,
            "start_time": iso(0.0),
            "end_time": iso(duration),
            "duration": duration,
            "termination_reason": reason,
            "agent_cost": null,
            "user_cost": null,
            "reward_info": session.reward.map(reward_info),
            "messages": messages,
            "trial": session.trial,
            "seed": session.seed,
            "parley": {"session": session.id, "termination": session.termination, "dropped_calls": dropped},
        });
        self.out.write_all(if self.written == 0 { b"\n" } else { b",\n" })?;
        serde_json::to_writer(&mut *self.out, &record)?;
        self.written += 1;
        Ok(())
    }

    /// Closes the document and flushes the output.
    pub fn finish(self) -> Result<(), ExportError> {
        self.out.write_all(b"]}\n")?;
        self.out.flush()?;
        Ok(())
    }
}

/// A tau2 `Info` with every required field, for Parley's tool-calling agent and a simulated user.
fn default_info(domain: &str) -> Value {
    json!({
        "git_commit": format!("parley {}", env!("CARGO_PKG_VERSION")),
        "num_trials": 1,
        "max_steps": 200,
        "max_errors": 10,
        "user_info": {"implementation": "user_simulator", "llm": null, "llm_args": null,
                      "global_simulation_guidelines": null},
        "agent_info": {"implementation": "llm_agent", "llm": null, "llm_args": null},
        "environment_info": {"domain_name": domain, "policy": "", "tool_defs": null},
        "seed": null,
    })
}

/// Objects are merged key by key; anything else in `over` replaces what `base` has.
fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                merge(base.entry(key).or_insert(Value::Null), value);
            }
        }
        (_, Value::Null) => {}
        (base, over) => *base = over,
    }
}

/// Parley's termination reason in tau2's vocabulary (see the module docs), or why it has none.
fn termination_reason(parley: &str) -> Result<&'static str, String> {
    let Some(termination) = Termination::parse(parley) else {
        return Err(format!("unknown termination reason `{parley}`"));
    };
    Ok(match termination {
        Termination::UserStop => "user_stop",
        Termination::AgentStop => "agent_stop",
        Termination::MaxSteps | Termination::MaxTurns | Termination::Timeout => "max_steps",
        Termination::TooManyErrors => "too_many_errors",
        Termination::AgentError | Termination::ContextWindowExceeded => "agent_error",
        Termination::UserError => "user_error",
        Termination::EnvironmentError | Termination::InfrastructureError | Termination::Cancelled => {
            return Err(format!(
                "it ended in `{parley}`, an infrastructure failure, which a tau2 Results document cannot hold \
                 (tau2 re-runs those); leave it out of the export"
            ));
        }
    })
}

/// A stored reward as tau2's `RewardInfo`: its fields as they are, Parley's extra diagnostics
/// (`empty_criteria`, `vacuous_components`, `error`, ...) under `info.parley`.
fn reward_info(reward: &Reward) -> Value {
    let mut info = Map::new();
    info.insert("reward".into(), json!(reward.value));
    // Absent, tau2 would default the basis to [DB]; null says that nothing was combined.
    info.insert("reward_basis".into(), Value::Null);
    let mut extra = Map::new();
    for (key, value) in &reward.breakdown {
        if REWARD_INFO_FIELDS.contains(&key.as_str()) {
            info.insert(key.clone(), value.clone());
        } else {
            extra.insert(key.clone(), value.clone());
        }
    }
    if !extra.is_empty() {
        match info.get_mut("info") {
            Some(Value::Object(map)) => {
                map.insert("parley".into(), Value::Object(extra));
            }
            _ => {
                info.insert("info".into(), json!({"parley": extra}));
            }
        }
    }
    Value::Object(info)
}

/// A session's messages in tau2's shapes, and the calls that had to be left out.
struct Converted {
    messages: Vec<Value>,
    dropped: Vec<Value>,
}

fn convert(session: &Session<'_>) -> Converted {
    let spoken: Vec<&Message> = session.messages.iter().filter(|m| m.role != Role::System).collect();
    let mut messages = Vec::new();

    // The task's recorded history, as the task row has it, when the transcript starts with it.
    let prefix: Vec<&Message> = session.task.messages.iter().filter(|m| m.role != Role::System).collect();
    let history = session.task.row.pointer("/initial_state/message_history").and_then(Value::as_array);
    let mut start = 0;
    if let Some(history) = history
        && !history.is_empty()
        && history.len() == prefix.len()
        && spoken.starts_with(&prefix)
    {
        messages.extend(history.iter().cloned());
        start = prefix.len();
    }
    let rest = &spoken[start..];

    let mut records: HashMap<&str, VecDeque<&ToolCallRecord>> = HashMap::new();
    for record in session.tool_calls {
        records.entry(record.call_id.as_str()).or_default().push_back(record);
    }
    let mut claimed = vec![false; rest.len()];
    let mut dropped = Vec::new();
    for (i, message) in rest.iter().enumerate() {
        let requestor = match message.role {
            Role::Assistant => "assistant",
            Role::User => "user",
            Role::System => continue,
            Role::Tool => {
                if !claimed[i] {
                    dropped.push(json!({
                        "id": message.tool_call_id,
                        "output": message.content,
                        "reason": "a tool result that answers no call before it",
                    }));
                }
                continue;
            }
        };
        let mut calls = Vec::new();
        let mut results = Vec::new();
        for call in &message.tool_calls {
            // Its result: the first unclaimed tool message after it that answers its id.
            let answer = (i + 1..rest.len()).find(|&j| {
                !claimed[j] && rest[j].role == Role::Tool && rest[j].tool_call_id.as_ref() == Some(&call.id)
            });
            if let Some(j) = answer {
                claimed[j] = true;
            }
            let record = records.get_mut(call.id.as_str()).and_then(VecDeque::pop_front);
            let arguments = serde_json::from_str::<Value>(&call.arguments).ok().filter(Value::is_object);
            let problem = match (answer, record, &arguments) {
                (None, _, _) => Some("no result: the call never reached the environment"),
                (_, Some(r), _) if r.malformed => Some(
                    "malformed: the engine answered it without calling the environment (tau2 could not have recorded it)",
                ),
                (_, _, None) => Some("its arguments are not a JSON object"),
                _ => None,
            };
            let output = answer.and_then(|j| rest[j].content.clone());
            if let Some(reason) = problem {
                dropped.push(json!({
                    "id": call.id, "name": call.name, "arguments": call.arguments,
                    "requestor": requestor, "output": output, "reason": reason,
                }));
                continue;
            }
            // Without a record (a transcript from elsewhere), tau2's own mark of a raised tool.
            let error = match record {
                Some(r) => r.is_error,
                None => output.as_deref().is_some_and(|o| o.starts_with("Error: ")),
            };
            let requestor = match record.map(|r| r.party) {
                Some(Party::User) => "user",
                Some(Party::Agent) => "assistant",
                None => requestor,
            };
            calls.push(json!({"id": call.id, "name": call.name, "arguments": arguments, "requestor": requestor}));
            results.push(json!({
                "id": call.id, "role": "tool", "content": output, "requestor": requestor, "error": error,
                "turn_idx": null, "timestamp": null,
            }));
        }
        let emptied = !message.tool_calls.is_empty() && calls.is_empty();
        if emptied && message.content.as_deref().is_none_or(|c| c.trim().is_empty()) {
            // Nothing of it is left for tau2: a message with neither text nor calls is invalid there.
            continue;
        }
        messages.push(json!({
            "role": message.role.as_str(),
            "content": message.content,
            "tool_calls": if calls.is_empty() { Value::Null } else { Value::Array(calls) },
            "turn_idx": null,
            "timestamp": null,
            "cost": null,
            "usage": null,
            "raw_data": null,
        }));
        messages.extend(results);
    }
    for (turn, message) in messages.iter_mut().enumerate() {
        if let Some(map) = message.as_object_mut() {
            map.insert("turn_idx".into(), json!(turn));
        }
    }
    Converted { messages, dropped }
}

fn now_seconds() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Seconds since the Unix epoch as Python's `datetime.isoformat()` writes an aware UTC time
/// (microseconds only when there are any).
fn iso(seconds: f64) -> String {
    let micros = (seconds * 1e6).round() as i64;
    let Some(time) = chrono::DateTime::from_timestamp_micros(micros) else {
        // Beyond chrono's years (±262,143): no session lasts that long; say the epoch.
        return iso(0.0);
    };
    let fraction = if micros.rem_euclid(1_000_000) == 0 { "" } else { ".%6f" };
    time.format(&format!("%Y-%m-%dT%H:%M:%S{fraction}+00:00")).to_string()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use parley_core::ToolCall;

    use super::*;

    fn task(row: Value, messages: Vec<Message>) -> Arc<Task> {
        let id = row["id"].as_str().unwrap().to_owned();
        Arc::new(Task { index: 0, id, messages, tools: Default::default(), row: row.into() })
    }

    fn greeting_task() -> Arc<Task> {
        task(
            json!({"id": "t1", "user_scenario": {"instructions": "x"}, "evaluation_criteria": null}),
            vec![Message::assistant("Hi! How can I help you today?")],
        )
    }

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall { id: id.into(), name: name.into(), arguments: arguments.into() }
    }

    fn record(party: Party, id: &str, is_error: bool, malformed: bool) -> ToolCallRecord {
        ToolCallRecord {
            seq: 0,
            party,
            call_id: id.into(),
            name: String::new(),
            arguments: String::new(),
            output: String::new(),
            is_error,
            write: false,
            malformed,
            truncated: false,
            duration: Duration::ZERO,
        }
    }

    fn document(tasks: &[Arc<Task>], info: Value, sessions: &[Session<'_>]) -> Value {
        let mut out = Vec::new();
        let mut writer = ResultsWriter::start(&mut out, "airline", info, tasks).unwrap();
        for session in sessions {
            writer.simulation(session).unwrap();
        }
        writer.finish().unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    fn session<'a>(
        task: &'a Task,
        termination: &'a str,
        messages: &'a [Message],
        tool_calls: &'a [ToolCallRecord],
    ) -> Session<'a> {
        Session {
            id: 7,
            task,
            trial: 1,
            seed: 42,
            termination,
            reward: None,
            messages,
            tool_calls,
            duration_ms: 1500.0,
        }
    }

    #[test]
    fn an_empty_run_is_a_complete_document() {
        let tasks = [greeting_task()];
        let doc = document(&tasks, json!({"agent_info": {"llm": "m"}, "max_steps": 30}), &[]);
        assert_eq!(doc["simulations"], json!([]));
        assert_eq!(doc["tasks"], json!([tasks[0].row]));
        let info = &doc["info"];
        assert_eq!(info["agent_info"], json!({"implementation": "llm_agent", "llm": "m", "llm_args": null}));
        assert_eq!(info["max_steps"], 30);
        assert_eq!(info["environment_info"]["domain_name"], "airline");
        assert!(doc["timestamp"].as_str().unwrap().ends_with("+00:00"));
    }

    #[test]
    fn messages_take_tau2_shapes_and_unreplayable_calls_are_left_out() {
        let tasks = [greeting_task()];
        let messages = vec![
            Message::system("the policy"),
            Message::assistant("Hi! How can I help you today?"),
            Message::user("cancel it"),
            Message::assistant_calls(
                None,
                vec![call("a1", "get_user_details", r#"{"user_id":"u1"}"#), call("a2", "nope", "{")],
            ),
            Message::tool_result("a1", "{\"name\":\"u\"}"),
            Message::tool_result("a2", "{\"error\":\"arguments are not JSON\"}"),
            Message::user_calls(vec![call("u1", "toggle", "{}")]),
            Message::tool_result("u1", "Error: no such thing"),
            Message::assistant_calls(None, vec![call("a3", "unknown_tool", "{}")]),
            Message::tool_result("a3", "{\"error\":\"unknown tool\"}"),
            Message::assistant_calls(Some("one moment".into()), vec![call("a4", "cancel", "{}")]),
            Message::assistant("Done."),
        ];
        let records = [
            record(Party::Agent, "a1", false, false),
            record(Party::Agent, "a2", true, true),
            record(Party::User, "u1", true, false),
            record(Party::Agent, "a3", true, true),
        ];
        let s = session(&tasks[0], "agent_stop", &messages, &records);
        let doc = document(&tasks, Value::Null, &[s]);
        let sim = &doc["simulations"][0];
        assert_eq!(sim["id"], "parley-session-7");
        assert_eq!(sim["task_id"], "t1");
        assert_eq!(sim["termination_reason"], "agent_stop");
        assert_eq!(sim["duration"], 1.5);
        assert_eq!(sim["start_time"], "1970-01-01T00:00:00+00:00");
        assert_eq!(sim["end_time"], "1970-01-01T00:00:01.500000+00:00");
        assert_eq!((sim["trial"].clone(), sim["seed"].clone()), (json!(1), json!(42)));
        assert_eq!(sim["reward_info"], Value::Null);

        let got: Vec<Value> = sim["messages"].as_array().unwrap().clone();
        let roles: Vec<&str> = got.iter().map(|m| m["role"].as_str().unwrap()).collect();
        // No system prompt; the message left with only an unknown tool is gone; the text
        // beside a call without a result stays.
        assert_eq!(roles, ["assistant", "user", "assistant", "tool", "user", "tool", "assistant", "assistant"]);
        for (i, m) in got.iter().enumerate() {
            assert_eq!(m["turn_idx"], i);
        }
        assert_eq!(got[1]["tool_calls"], Value::Null);
        assert_eq!(
            got[2]["tool_calls"],
            json!([{"id": "a1", "name": "get_user_details", "arguments": {"user_id": "u1"}, "requestor": "assistant"}])
        );
        assert_eq!(got[3]["content"], "{\"name\":\"u\"}");
        assert_eq!((got[3]["requestor"].clone(), got[3]["error"].clone()), (json!("assistant"), json!(false)));
        assert_eq!(got[4]["tool_calls"][0]["requestor"], "user");
        assert_eq!((got[5]["requestor"].clone(), got[5]["error"].clone()), (json!("user"), json!(true)));
        assert_eq!((got[6]["content"].clone(), got[6]["tool_calls"].clone()), (json!("one moment"), Value::Null));

        let dropped: Vec<&str> =
            sim["parley"]["dropped_calls"].as_array().unwrap().iter().map(|d| d["id"].as_str().unwrap()).collect();
        assert_eq!(dropped, ["a2", "a3", "a4"]);
        assert_eq!(sim["parley"]["termination"], "agent_stop");
    }

    #[test]
    fn a_recorded_history_is_written_as_the_task_has_it() {
        let history = json!([
            {"role": "assistant", "content": "Hi!", "turn_idx": null, "timestamp": "2025-01-01T00:00:00"},
            {"role": "user", "content": "Toggle it", "tool_calls": null},
            {"role": "assistant", "content": null,
             "tool_calls": [{"id": "h1", "name": "toggle", "arguments": {}, "requestor": "assistant"}]},
            {"role": "tool", "id": "h1", "content": "ok", "requestor": "assistant", "error": false},
        ]);
        let row = json!({"id": "h", "user_scenario": {"instructions": "x"},
                         "initial_state": {"message_history": history}});
        let converted: Vec<Message> = vec![
            Message::assistant("Hi!"),
            Message::user("Toggle it"),
            Message::assistant_calls(None, vec![call("h1", "toggle", "{}")]),
            Message::tool_result("h1", "ok"),
        ];
        let tasks = [task(row, converted.clone())];
        let mut messages = converted;
        messages.push(Message::assistant("Toggled."));
        let s = session(&tasks[0], "agent_stop", &messages, &[]);
        let doc = document(&tasks, Value::Null, &[s]);
        let got = doc["simulations"][0]["messages"].as_array().unwrap();
        assert_eq!(got.len(), 5);
        assert_eq!(got[0]["timestamp"], "2025-01-01T00:00:00", "verbatim");
        assert_eq!(got[0]["turn_idx"], 0);
        assert_eq!(
            got[3],
            json!({"role": "tool", "id": "h1", "content": "ok", "requestor": "assistant",
                                  "error": false, "turn_idx": 3})
        );
        assert_eq!(got[4]["content"], "Toggled.");
    }

    #[test]
    fn rewards_keep_tau2_fields_and_nest_parleys_own() {
        let reward = Reward::new(1.0)
            .with("reward_basis", json!(["DB", "COMMUNICATE"]))
            .with("db_check", json!({"db_match": true, "db_reward": 1.0}))
            .with("reward_breakdown", json!({"DB": 1.0, "COMMUNICATE": 1.0}))
            .with("empty_criteria", false)
            .with("info", json!({"env": null}));
        let info = reward_info(&reward);
        assert_eq!(info["reward"], 1.0);
        assert_eq!(info["reward_basis"], json!(["DB", "COMMUNICATE"]));
        assert_eq!(info["db_check"]["db_match"], true);
        assert_eq!(info["info"], json!({"env": null, "parley": {"empty_criteria": false}}));
        assert!(info.get("empty_criteria").is_none());

        let bare = reward_info(&Reward::new(0.5));
        assert_eq!(bare, json!({"reward": 0.5, "reward_basis": null}));
    }

    #[test]
    fn terminations_use_the_vocabulary_every_tau2_accepts() {
        for (parley, tau2) in [
            ("user_stop", "user_stop"),
            ("agent_stop", "agent_stop"),
            ("max_turns", "max_steps"),
            ("timeout", "max_steps"),
            ("too_many_errors", "too_many_errors"),
            ("context_window_exceeded", "agent_error"),
            ("user_error", "user_error"),
        ] {
            assert_eq!(termination_reason(parley).unwrap(), tau2);
        }
        for refused in ["infrastructure_error", "environment_error", "cancelled", "gone"] {
            assert!(termination_reason(refused).is_err(), "{refused}");
        }
        let tasks = [greeting_task()];
        let mut out = Vec::new();
        let mut writer = ResultsWriter::start(&mut out, "airline", Value::Null, &tasks).unwrap();
        let error = writer.simulation(&session(&tasks[0], "cancelled", &[], &[])).unwrap_err();
        assert!(format!("{error:#}").contains("infrastructure failure"), "{error:#}");
    }

    #[test]
    fn a_session_of_an_unlisted_task_is_refused() {
        let listed = [greeting_task()];
        let other = task(json!({"id": "other"}), vec![]);
        let mut out = Vec::new();
        let mut writer = ResultsWriter::start(&mut out, "airline", Value::Null, &listed).unwrap();
        let error = writer.simulation(&session(&other, "agent_stop", &[], &[])).unwrap_err();
        assert!(error.to_string().contains("not among the document's tasks"), "{error}");
        assert!(ResultsWriter::start(&mut Vec::new(), "airline", json!([1]), &listed).is_err());
    }

    #[test]
    fn times_are_written_as_python_does() {
        assert_eq!(iso(0.0), "1970-01-01T00:00:00+00:00");
        assert_eq!(iso(1_700_000_000.25), "2023-11-14T22:13:20.250000+00:00");
        assert_eq!(iso(951_782_400.0), "2000-02-29T00:00:00+00:00");
        assert_eq!(iso(4_107_542_399.0), "2100-02-28T23:59:59+00:00");
    }
}
