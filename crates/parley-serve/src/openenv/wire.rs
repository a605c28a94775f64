//! What travels over OpenEnv's routes: messages out in their Chat Completions form, the trainer's
//! action (one assistant message) and the reset's parameters in, each read field by field so
//! that a bad one is named (`loc`, as OpenEnv's pydantic models name theirs), and the JSON
//! schemas `/schema` serves.

use parley_core::{ChatForm, Message, Part, Reasoning, ReasoningField, ReasoningSpelling, Role, ToolCall, ToolSpec};
use serde_json::{Value, json};

/// One thing wrong with a request: where (`loc`, field names and list positions from the
/// request's root), what, and a short kind, as pydantic reports a validation error.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Invalid {
    pub loc: Vec<Value>,
    pub msg: String,
    pub kind: &'static str,
}

impl Invalid {
    pub(crate) fn new(loc: Vec<Value>, kind: &'static str, msg: impl Into<String>) -> Invalid {
        Invalid { loc, msg: msg.into(), kind }
    }

    /// The same problem, found inside the field `prefix` names.
    pub(crate) fn under(mut self, prefix: &[Value]) -> Invalid {
        self.loc.splice(0..0, prefix.iter().cloned());
        self
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({"loc": self.loc, "msg": self.msg, "type": self.kind})
    }

    /// The problem as one sentence, its field first.
    pub(crate) fn sentence(&self) -> String {
        if self.loc.is_empty() {
            return self.msg.clone();
        }
        let path: Vec<String> =
            self.loc.iter().map(|l| l.as_str().map_or_else(|| l.to_string(), str::to_owned)).collect();
        format!("`{}`: {}", path.join("."), self.msg)
    }
}

/// How OpenEnv writes messages: `content` (text, or a list of parts), `tool_calls` with
/// `function.arguments` as text, `tool_call_id`, and an assistant message's reasoning in the field
/// it came in, so that the trainer, which wrote the agent's turns, reads back its own field. The
/// trainer's actions carry no token ids, so none are written.
const FORM: ChatForm = ChatForm { reasoning: ReasoningField::AsReceived, tokens: false };

/// A message in its Chat Completions form, as the trainer's chat template reads it.
pub(crate) fn message_json(m: &Message) -> Value {
    m.to_chat_json(FORM)
}

/// The tools in their Chat Completions form.
pub(crate) fn tools_json(tools: &[ToolSpec]) -> Value {
    Value::Array(tools.iter().map(ToolSpec::to_chat_json).collect())
}

/// Fields of an OpenAI assistant message that a trainer may pass on as its client returned
/// them, and that carry nothing when they are null or empty.
const EMPTY_ALLOWED: [&str; 5] = ["refusal", "annotations", "audio", "function_call", "name"];

/// Reads the trainer's action: one assistant message in the Chat Completions form (text, tool
/// calls, or both). A call without an `id` gets one (`call_<step>_<i>`), and arguments given
/// as a JSON object are taken as their text; arguments that are not JSON are kept as written,
/// for the engine answers them with a tool error as it does a model's. Every field that cannot
/// be read is reported, none is dropped.
pub(crate) fn action(data: &Value, step: u32) -> Result<Message, Vec<Invalid>> {
    let Value::Object(fields) = data else {
        return Err(vec![Invalid::new(
            vec![],
            "model_type",
            format!("an action is an assistant message (a JSON object), not {}", kind(data)),
        )]);
    };
    let mut problems = Vec::new();
    let mut message = Message::empty(Role::Assistant);
    for (key, value) in fields {
        let at = || vec![Value::from(key.as_str())];
        match key.as_str() {
            "role" => {
                if value.as_str() != Some("assistant") {
                    problems.push(Invalid::new(at(), "literal_error", format!("the action is the assistant's turn: `role` must be \"assistant\", not {value}")));
                }
            }
            "content" => match value {
                Value::Null => {}
                Value::String(text) => message.content = Some(text.clone()),
                Value::Array(_) => {
                    let parts = Part::list_from_json(value);
                    let read = Message::with_parts(Role::Assistant, parts);
                    message.content = read.content;
                    message.parts = read.parts;
                }
                other => problems.push(Invalid::new(at(), "string_type", format!("`content` is text, a list of parts or null, not {}", kind(other)))),
            },
            "tool_calls" => match value {
                Value::Null => {}
                Value::Array(calls) => {
                    for (i, call) in calls.iter().enumerate() {
                        match tool_call(call, step, i) {
                            Ok(call) => message.tool_calls.push(call),
                            Err(found) => problems.extend(found.into_iter().map(|p| p.under(&[json!("tool_calls"), json!(i)]))),
                        }
                    }
                }
                other => problems.push(Invalid::new(at(), "list_type", format!("`tool_calls` is a list of calls, not {}", kind(other)))),
            },
            "reasoning_content" | "reasoning" => match value {
                Value::Null => {}
                Value::String(text) => {
                    let spelling = if key == "reasoning" { ReasoningSpelling::Reasoning } else { ReasoningSpelling::ReasoningContent };
                    message.reasoning = Some(Box::new(Reasoning { text: text.clone(), spelling, items: Vec::new() }));
                }
                other => problems.push(Invalid::new(at(), "string_type", format!("`{key}` is text, not {}", kind(other)))),
            },
            // OpenEnv's base `Action` carries `metadata`; Parley keeps none of it.
            "metadata" => {
                if !(value.is_object() || value.is_null()) {
                    problems.push(Invalid::new(at(), "dict_type", format!("`metadata` is an object, not {}", kind(value))));
                }
            }
            key if EMPTY_ALLOWED.contains(&key) => {
                let empty = match value {
                    Value::Null => true,
                    Value::Array(a) => a.is_empty(),
                    Value::String(s) => key == "name" || s.is_empty(),
                    _ => false,
                };
                if !empty {
                    problems.push(Invalid::new(at(), "extra_forbidden", format!("`{key}` is not part of an action Parley can play; leave it out or null")));
                }
            }
            _ => problems.push(Invalid::new(
                at(),
                "extra_forbidden",
                format!("unknown field `{key}`: an action is an assistant message with `content`, `tool_calls` and optionally `reasoning_content`"),
            )),
        }
    }
    if problems.is_empty() { Ok(message) } else { Err(problems) }
}

/// One tool call in the Chat Completions form.
fn tool_call(call: &Value, step: u32, i: usize) -> Result<ToolCall, Vec<Invalid>> {
    let Value::Object(fields) = call else {
        return Err(vec![Invalid::new(
            vec![],
            "model_type",
            format!("a tool call is an object with `function`, not {}", kind(call)),
        )]);
    };
    let mut problems = Vec::new();
    let mut id = None;
    let mut function = None;
    for (key, value) in fields {
        let at = || vec![Value::from(key.as_str())];
        match key.as_str() {
            "id" => match value {
                Value::String(s) if !s.is_empty() => id = Some(s.clone()),
                Value::Null => {}
                other => problems.push(Invalid::new(
                    at(),
                    "string_type",
                    format!("`id` is non-empty text, not {}", kind(other)),
                )),
            },
            "type" => {
                if !(value.is_null() || value.as_str() == Some("function")) {
                    problems.push(Invalid::new(
                        at(),
                        "literal_error",
                        format!("`type` must be \"function\", not {value}"),
                    ));
                }
            }
            "function" => function = Some(value),
            _ => problems.push(Invalid::new(
                at(),
                "extra_forbidden",
                format!("unknown field `{key}`: a tool call has `id`, `type` and `function`"),
            )),
        }
    }
    let mut name = None;
    let mut arguments = None;
    match function {
        None => problems.push(Invalid::new(
            vec![json!("function")],
            "missing",
            "a tool call needs `function` with its `name` and `arguments`",
        )),
        Some(Value::Object(function)) => {
            for (key, value) in function {
                let at = || vec![json!("function"), Value::from(key.as_str())];
                match key.as_str() {
                    "name" => match value {
                        Value::String(s) if !s.is_empty() => name = Some(s.clone()),
                        other => problems.push(Invalid::new(
                            at(),
                            "string_type",
                            format!("`name` is the tool's name, not {}", kind(other)),
                        )),
                    },
                    "arguments" => match value {
                        Value::String(s) => arguments = Some(s.clone()),
                        Value::Null => arguments = Some(String::new()),
                        object @ Value::Object(_) => arguments = Some(object.to_string()),
                        other => problems.push(Invalid::new(
                            at(),
                            "string_type",
                            format!("`arguments` is JSON text (or an object), not {}", kind(other)),
                        )),
                    },
                    _ => problems.push(Invalid::new(
                        at(),
                        "extra_forbidden",
                        format!("unknown field `{key}`: a function has `name` and `arguments`"),
                    )),
                }
            }
            if name.is_none() && !function.contains_key("name") {
                problems.push(Invalid::new(
                    vec![json!("function"), json!("name")],
                    "missing",
                    "a tool call needs the tool's `name`",
                ));
            }
        }
        Some(other) => problems.push(Invalid::new(
            vec![json!("function")],
            "model_type",
            format!("`function` is an object with `name` and `arguments`, not {}", kind(other)),
        )),
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let (Some(name), arguments) = (name, arguments) else {
        return Err(vec![Invalid::new(
            vec![json!("function"), json!("name")],
            "missing",
            "a tool call needs the tool's `name`",
        )]);
    };
    Ok(ToolCall {
        id: id.unwrap_or_else(|| format!("call_{step}_{i}")),
        name,
        arguments: arguments.unwrap_or_default(),
    })
}

/// How a reset picks its session.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ResetRequest {
    /// Picks the task `seed % tasks` when no index or id is given.
    pub seed: Option<u64>,
    pub task_index: Option<usize>,
    pub task_id: Option<String>,
    pub trial: u32,
    /// The trainer's own name for the episode, shown in its state.
    pub episode_id: Option<String>,
    /// Continue this session (one a dropped connection left) instead of starting one.
    pub session_id: Option<i64>,
    /// The continued session's key, as its first observation gave it.
    pub session_key: Option<String>,
}

/// Reads a reset's parameters (OpenEnv's `seed` and `episode_id`, and Parley's own).
pub(crate) fn reset_request(data: &Value) -> Result<ResetRequest, Vec<Invalid>> {
    let fields = match data {
        Value::Null => return Ok(ResetRequest::default()),
        Value::Object(fields) => fields,
        other => {
            return Err(vec![Invalid::new(
                vec![],
                "dict_type",
                format!("a reset's data is an object, not {}", kind(other)),
            )]);
        }
    };
    let mut request = ResetRequest::default();
    let mut problems = Vec::new();
    for (key, value) in fields {
        let at = || vec![Value::from(key.as_str())];
        let count = |what: &str| -> Result<Option<u64>, Invalid> {
            match value {
                Value::Null => Ok(None),
                v => v.as_u64().map(Some).ok_or_else(|| {
                    Invalid::new(at(), "int_type", format!("`{key}` is {what} (a whole number from 0), not {v}"))
                }),
            }
        };
        match key.as_str() {
            "seed" => match count("the seed that picks a task") {
                Ok(seed) => request.seed = seed,
                Err(e) => problems.push(e),
            },
            "task_index" => match count("the task's position in the environment's tasks") {
                Ok(index) => request.task_index = index.map(|i| usize::try_from(i).unwrap_or(usize::MAX)),
                Err(e) => problems.push(e),
            },
            "trial" => match count("the trial of the task") {
                Ok(trial) => match u32::try_from(trial.unwrap_or(0)) {
                    Ok(trial) => request.trial = trial,
                    Err(_) => problems.push(Invalid::new(at(), "int_type", "`trial` is at most 4294967295")),
                },
                Err(e) => problems.push(e),
            },
            "session_id" => match count("the id of a session to continue") {
                Ok(id) => request.session_id = id.and_then(|i| i64::try_from(i).ok()),
                Err(e) => problems.push(e),
            },
            "session_key" => match value {
                Value::Null => {}
                Value::String(s) => request.session_key = Some(s.clone()),
                other => problems.push(Invalid::new(at(), "string_type", format!("`session_key` is a string, not {other}"))),
            },
            "task_id" | "episode_id" => match value {
                Value::Null => {}
                Value::String(s) if key == "task_id" => request.task_id = Some(s.clone()),
                Value::String(s) if s.len() <= 255 => request.episode_id = Some(s.clone()),
                Value::String(_) => problems.push(Invalid::new(at(), "string_too_long", "`episode_id` is at most 255 characters")),
                Value::Number(n) if key == "task_id" => request.task_id = Some(n.to_string()),
                other => problems.push(Invalid::new(at(), "string_type", format!("`{key}` is text, not {}", kind(other)))),
            },
            _ => problems.push(Invalid::new(
                at(),
                "extra_forbidden",
                format!("unknown field `{key}`: a reset takes `seed`, `task_index`, `task_id`, `trial`, `episode_id`, or `session_id` with `session_key`"),
            )),
        }
    }
    if request.session_id.is_some()
        && (request.task_index.is_some() || request.task_id.is_some() || request.seed.is_some())
    {
        problems.push(Invalid::new(
            vec![json!("session_id")],
            "value_error",
            "`session_id` continues a session, whose task is already chosen: leave out `seed`, `task_index` and `task_id`",
        ));
    }
    if problems.is_empty() { Ok(request) } else { Err(problems) }
}

/// A JSON value's kind, for messages.
pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The JSON schemas of `/schema`: the action (an assistant message), the observation and the
/// state.
pub(crate) fn schemas() -> Value {
    let message = json!({
        "type": "object",
        "description": "A message in the Chat Completions form.",
        "properties": {
            "role": {"type": "string", "enum": ["system", "user", "assistant", "tool"]},
            "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}, {"type": "null"}]},
            "tool_calls": {"type": "array", "items": {"$ref": "#/$defs/ToolCall"}},
            "tool_call_id": {"type": "string"},
            "reasoning_content": {"type": "string"},
            "reasoning": {"type": "string"}
        },
        "required": ["role", "content"]
    });
    let tool_call = json!({
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "Given when left out: call_<step>_<i>."},
            "type": {"const": "function"},
            "function": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "arguments": {"anyOf": [{"type": "string"}, {"type": "object"}], "description": "JSON text; text that is not JSON is answered with a tool error."}
                },
                "required": ["name"],
                "additionalProperties": false
            }
        },
        "required": ["function"],
        "additionalProperties": false
    });
    let action = json!({
        "title": "Action",
        "description": "The agent's turn: one assistant message. Tool calls go to the environment; text goes to the simulated user.",
        "type": "object",
        "properties": {
            "role": {"const": "assistant"},
            "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}, {"type": "null"}]},
            "tool_calls": {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/ToolCall"}}, {"type": "null"}]},
            "reasoning_content": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "reasoning": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "metadata": {"type": "object"}
        },
        "additionalProperties": false,
        "$defs": {"ToolCall": tool_call}
    });
    let observation = json!({
        "title": "Observation",
        "type": "object",
        "properties": {
            "session_id": {"type": "integer", "description": "The stored session: `parley show` it; reset with it (and its key) to continue a dropped connection's session."},
            "session_key": {"type": "string", "description": "The session's secret: a step, a state read or a reset that continues the session presents it."},
            "task_id": {"type": "string"},
            "messages": {"type": "array", "items": {"$ref": "#/$defs/Message"}, "description": "What the agent sees that it has not seen: at reset the system prompt and the task's opening, then tool results and the user's replies."},
            "tools": {"type": "array", "items": {"type": "object"}, "description": "The tools in the Chat Completions form; at reset only."},
            "termination": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "How the session ended, once done."},
            "reward_breakdown": {"anyOf": [{"type": "object"}, {"type": "null"}], "description": "The scorer's components, once done."},
            "error": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "done": {"type": "boolean"},
            "reward": {"anyOf": [{"type": "number"}, {"type": "null"}]}
        },
        "required": ["session_id", "task_id", "messages"],
        "$defs": {"Message": message.clone(), "ToolCall": tool_call.clone()}
    });
    let state = json!({
        "title": "State",
        "type": "object",
        "properties": {
            "episode_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "step_count": {"type": "integer", "minimum": 0},
            "session_id": {"type": "integer"},
            "run_id": {"type": "integer"},
            "task_id": {"type": "string"},
            "task_index": {"type": "integer", "description": "The task's position in the environment's tasks."},
            "trial": {"type": "integer"},
            "done": {"type": "boolean"},
            "termination": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "reward": {"anyOf": [{"type": "number"}, {"type": "null"}]},
            "messages": {"type": "array", "items": {"$ref": "#/$defs/Message"}, "description": "The transcript as the agent sees it."},
            "tools": {"type": "array", "items": {"type": "object"}}
        },
        "required": ["step_count"],
        "$defs": {"Message": message, "ToolCall": tool_call}
    });
    json!({"action": action, "observation": observation, "state": state})
}

/// The OpenAPI document of the HTTP routes. `info.version` is the version of OpenEnv's HTTP API
/// they follow (1.x), which OpenEnv's `validate --url` reads.
pub(crate) fn openapi() -> Value {
    let schemas = schemas();
    let body = |schema: Value| json!({"required": true, "content": {"application/json": {"schema": schema}}});
    let ok = |schema: Value| json!({"200": {"description": "OK", "content": {"application/json": {"schema": schema}}}});
    let answer = json!({"type": "object", "properties": {
        "observation": schemas["observation"], "reward": {"anyOf": [{"type": "number"}, {"type": "null"}]}, "done": {"type": "boolean"}}});
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Parley: OpenEnv HTTP API", "version": "1.0.0"},
        "paths": {
            "/health": {"get": {"summary": "Health check", "responses": ok(json!({"type": "object"}))}},
            "/metadata": {"get": {"summary": "Environment metadata", "responses": ok(json!({"type": "object"}))}},
            "/schema": {"get": {"summary": "Action, observation and state schemas", "responses": ok(json!({"type": "object"}))}},
            "/reset": {"post": {"summary": "Start a session (or continue one, by session_id)",
                "requestBody": body(json!({"type": "object", "properties": {
                    "seed": {"type": "integer", "minimum": 0}, "episode_id": {"type": "string"}, "task_index": {"type": "integer"},
                    "task_id": {"type": "string"}, "trial": {"type": "integer"}, "session_id": {"type": "integer"},
                    "session_key": {"type": "string"}}})),
                "responses": ok(answer.clone())}},
            "/step": {"post": {"summary": "Play one assistant message in a session",
                "requestBody": body(json!({"type": "object", "required": ["action", "session_id", "session_key"], "properties": {
                    "action": schemas["action"], "session_id": {"type": "integer"}, "session_key": {"type": "string"},
                    "timeout_s": {"type": "number"}, "request_id": {"type": "string"}}})),
                "responses": ok(answer)}},
            "/state": {"get": {"summary": "A session's state",
                "parameters": [{"name": "session_id", "in": "query", "schema": {"type": "integer"}},
                               {"name": "session_key", "in": "query", "schema": {"type": "string"}}],
                "responses": ok(schemas["state"].clone())}},
            "/mcp": {"post": {"summary": "JSON-RPC; tools are called within sessions", "responses": ok(json!({"type": "object"}))}}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_action_reads_text_calls_and_reasoning() {
        let data = json!({"role": "assistant", "content": "ok", "reasoning_content": "hm", "refusal": null,
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
                           {"function": {"name": "g", "arguments": {"y": 2}}}]});
        let m = action(&data, 3).unwrap();
        assert_eq!(m.content.as_deref(), Some("ok"));
        assert_eq!(m.reasoning.as_ref().unwrap().text, "hm");
        assert_eq!(m.tool_calls[0], ToolCall { id: "a".into(), name: "f".into(), arguments: "{\"x\": 1}".into() });
        assert_eq!(m.tool_calls[1].id, "call_3_1");
        assert_eq!(m.tool_calls[1].arguments, "{\"y\":2}");
        assert_eq!(message_json(&m)["tool_calls"][1]["function"]["name"], "g");
    }

    #[test]
    fn every_bad_field_is_named() {
        let data = json!({"role": "user", "colour": 1, "tool_calls": [{"function": {"arguments": 7}}, 3]});
        let problems = action(&data, 0).unwrap_err();
        let locs: Vec<Value> = problems.iter().map(|p| json!(p.loc)).collect();
        assert!(locs.contains(&json!(["role"])), "{locs:?}");
        assert!(locs.contains(&json!(["colour"])), "{locs:?}");
        assert!(locs.contains(&json!(["tool_calls", 0, "function", "arguments"])), "{locs:?}");
        assert!(locs.contains(&json!(["tool_calls", 0, "function", "name"])), "{locs:?}");
        assert!(locs.contains(&json!(["tool_calls", 1])), "{locs:?}");
        assert!(problems[0].sentence().starts_with('`'), "{}", problems[0].sentence());
        assert!(action(&json!("hi"), 0).is_err());
    }

    #[test]
    fn a_reset_picks_by_index_id_seed_or_session() {
        let r = reset_request(&json!({"seed": 5, "trial": 2, "episode_id": "e"})).unwrap();
        assert_eq!((r.seed, r.trial, r.episode_id.as_deref()), (Some(5), 2, Some("e")));
        assert_eq!(reset_request(&json!({"task_id": 7})).unwrap().task_id.as_deref(), Some("7"));
        assert_eq!(reset_request(&Value::Null).unwrap(), ResetRequest::default());
        let bad = reset_request(&json!({"seed": -1, "what": 1, "session_id": 3, "task_index": 0})).unwrap_err();
        let locs: Vec<Value> = bad.iter().map(|p| json!(p.loc)).collect();
        assert!(locs.contains(&json!(["seed"])) && locs.contains(&json!(["what"])), "{locs:?}");
        assert!(locs.contains(&json!(["session_id"])), "{locs:?}");
    }
}
