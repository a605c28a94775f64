//! tau2's `Environment` for one domain instance: routing a call to the right toolkit (solo mode
//! included), rendering results and exceptions, `sync_tools` after every call, running set-up
//! functions and assertions, and `set_state` (patches, set-up calls, and a strict replay of a
//! recorded trajectory's mutating calls). Sessions and the scorer both build on it; it never
//! scores.

use std::sync::Arc;

use parley_core::{Message, Role};
use serde_json::Value;

use crate::args::{Args, check_signature};
use crate::catalog::Catalog;
use crate::compare::same_output;
use crate::pyjson::Py;
use crate::spec::{EnvAssertion, EnvCall, TaskSpec};
use crate::toolkit::{DomainState, Out, Requestor, ToolError, ToolResult, to_content};
use crate::view::{Known, View};

/// A clone is cheap: it shares every record with the original until either changes it.
#[derive(Clone)]
pub struct World {
    pub state: Box<dyn DomainState>,
    pub catalog: Arc<Catalog>,
    pub solo: bool,
    /// tau2's `set_state` points the user toolkit at the agent's database after an
    /// `initialization_data.agent_data` patch (`self.user_tools.db = self.tools.db`): from then on
    /// user tools run against the agent's database and the user hash is the agent's.
    user_db_is_agent_db: bool,
}

/// One recorded tool call and the result the transcript holds for it.
struct Recorded<'a> {
    requestor: Requestor,
    name: &'a str,
    arguments: &'a str,
    content: &'a str,
}

impl World {
    pub fn new(state: Box<dyn DomainState>, catalog: Arc<Catalog>, solo: bool) -> World {
        World { state, catalog, solo, user_db_is_agent_db: false }
    }

    /// tau2's `make_tool_call` (without `sync_tools`).
    pub fn make_tool_call(&mut self, requestor: Requestor, name: &str, arguments: &Value) -> ToolResult {
        let toolkit = match requestor {
            Requestor::User if self.solo => return Err(ToolError::new("User tool calls are not allowed in solo mode")),
            Requestor::User if !self.catalog.has_user_toolkit() => {
                return Err(ToolError::new("User tools not available"));
            }
            Requestor::User => Requestor::User,
            Requestor::Assistant if self.solo && self.catalog.find(Requestor::User, name).is_some() => Requestor::User,
            Requestor::Assistant => Requestor::Assistant,
        };
        let not_found = || ToolError::new(format!("Tool '{name}' not found."));
        let info = self.catalog.find(toolkit, name).ok_or_else(not_found)?;
        let args = Args::from_value(arguments)?;
        check_signature(&format!("{}.{name}", info.toolkit), &info.params, &info.required, &args)?;
        if toolkit == Requestor::User && self.user_db_is_agent_db {
            return Err(self.state.user_tool_on_agent_db());
        }
        self.state.call(toolkit, name, &args).unwrap_or_else(|| Err(not_found()))
    }

    /// tau2's `get_response`: the call, then `sync_tools`; an exception in either is the result.
    pub fn get_response(&mut self, requestor: Requestor, name: &str, arguments: &Value) -> ToolResult {
        let result = self.make_tool_call(requestor, name, arguments)?;
        self.state.sync_tools()?;
        Ok(result)
    }

    /// Whether a call to `name` by `requestor` may change state (what replay re-runs).
    pub fn writes(&self, requestor: Requestor, name: &str) -> bool {
        let toolkit =
            if requestor == Requestor::Assistant && self.solo && self.catalog.find(Requestor::User, name).is_some() {
                Requestor::User
            } else {
                requestor
            };
        self.catalog.find(toolkit, name).is_some_and(|t| t.mutates)
    }

    /// tau2's `run_env_function_call`: any toolkit function, then `sync_tools`.
    pub fn run_env_function(&mut self, call: &EnvCall) -> ToolResult {
        let toolkit = Requestor::parse(&call.env_type)
            .ok_or_else(|| ToolError::new(format!("Invalid environment type: {}", call.env_type)))?;
        let func = &call.func_name;
        if toolkit == Requestor::User && !self.catalog.has_user_toolkit() {
            return Err(ToolError::new(format!("'NoneType' object has no attribute '{func}'")));
        }
        let args = Args::from_value(&call.arguments)?;
        if toolkit == Requestor::User && self.user_db_is_agent_db {
            return Err(self.state.user_tool_on_agent_db());
        }
        let result = self.state.call(toolkit, func, &args).unwrap_or_else(|| {
            Err(ToolError::new(format!("'{}' object has no attribute '{func}'", self.catalog.class(toolkit))))
        })?;
        self.state.sync_tools()?;
        Ok(result)
    }

    /// tau2's `run_env_assertion` without raising: whether the assertion holds.
    pub fn run_env_assertion(&mut self, assertion: &EnvAssertion) -> Result<bool, ToolError> {
        match self.run_env_function(&assertion.call)? {
            Out::Json(Py::Bool(b)) => Ok(b == assertion.assert_value),
            other => Err(ToolError::new(format!(
                "Function {} returned {} instead of bool",
                assertion.call.func_name,
                match other {
                    Out::Str(_) => "<class 'str'>",
                    Out::Json(Py::None) => "<class 'NoneType'>",
                    Out::Json(Py::List(_)) => "<class 'list'>",
                    Out::Json(_) => "<class 'dict'>",
                }
            ))),
        }
    }

    /// tau2's `set_state`: `initialization_data`, `initialization_actions`, then a strict replay
    /// of the mutating calls in `messages`. An error means the state could not be rebuilt.
    pub fn set_state(&mut self, spec: &TaskSpec, messages: &[Message]) -> Result<(), String> {
        for (toolkit, patch) in [(Requestor::Assistant, &spec.agent_data), (Requestor::User, &spec.user_data)] {
            let Some(patch) = patch else { continue };
            let mut db = self.state.db(toolkit).ok_or_else(|| {
                format!("initialization_data for the {} database, which this domain lacks", toolkit.as_str())
            })?;
            db.merge(patch);
            self.state
                .set_db(toolkit, &db)
                .map_err(|e| format!("initialization_data does not fit the database: {e}"))?;
            // tau2 then makes both toolkits share the patched database (the user patch the other
            // way round, which only a domain whose two databases have one type could survive).
            if toolkit == Requestor::Assistant && self.catalog.has_user_toolkit() {
                self.user_db_is_agent_db = true;
            }
        }
        for action in &spec.init_actions {
            self.run_env_function(action)
                .map_err(|e| format!("initialization action {}.{}: {}", action.env_type, action.func_name, e.0))?;
        }
        self.replay(messages)?;
        self.state.sync_tools().map_err(|e| e.0)
    }

    /// Re-runs every mutating call of a transcript and checks that it returns what was recorded.
    /// Calls to unknown tools, read-only calls, calls whose arguments are not JSON, calls the
    /// engine rejected before they reached the environment (a `{"error": ...}` result) and calls
    /// without a recorded result are skipped: none of them changed the state.
    pub fn replay(&mut self, messages: &[Message]) -> Result<(), String> {
        for call in recorded_calls(messages) {
            if !self.catalog.has_tool(call.name) || !self.catalog.is_mutating(call.name) {
                continue;
            }
            let Ok(arguments) = serde_json::from_str::<Value>(call.arguments) else { continue };
            if engine_rejection(call.content) {
                continue;
            }
            let (content, _) = to_content(&self.get_response(call.requestor, call.name, &arguments));
            if !same_output(&content, call.content) {
                return Err(format!(
                    "replaying {}({}) returned {content:?}, but the transcript recorded {:?}",
                    call.name, call.arguments, call.content
                ));
            }
        }
        Ok(())
    }

    /// tau2's `get_db_hash` (agent) or `get_user_db_hash` (user), from the whole dump: what
    /// [`World::hash_with`] must agree with.
    #[cfg(test)]
    pub fn hash(&self, toolkit: Requestor) -> Option<String> {
        self.canonical(toolkit).map(|text| crate::hash::sha256_hex(&text))
    }

    /// [`World::hash`] from what is known of the base this world came from: a state hashed
    /// before is not hashed again, and otherwise only the records this world changed are
    /// written (the digest still reads the whole text).
    pub fn hash_with(&self, toolkit: Requestor, known: &Known) -> Option<String> {
        let database = self.database(toolkit)?;
        Some(known.hash(database, &self.state.view(database)?))
    }

    /// The parts of [`World::canonical`], to compare two worlds without their dumps.
    pub fn view(&self, toolkit: Requestor) -> Option<View<'_>> {
        self.state.view(self.database(toolkit)?)
    }

    /// The text behind [`World::hash`].
    pub fn canonical(&self, toolkit: Requestor) -> Option<String> {
        self.state.canonical(self.database(toolkit)?)
    }

    /// Which of the state's databases a toolkit's hash reads: none for the user's without a
    /// user toolkit, the agent's once the user toolkit shares it.
    fn database(&self, toolkit: Requestor) -> Option<Requestor> {
        match toolkit {
            Requestor::User if !self.catalog.has_user_toolkit() => None,
            Requestor::User if self.user_db_is_agent_db => Some(Requestor::Assistant),
            toolkit => Some(toolkit),
        }
    }
}

/// The engine's answer to a malformed call (bad JSON, unknown tool, schema violation) is a JSON
/// object with one `error` key; tau2's tools never answer that way.
pub(crate) fn engine_rejection(content: &str) -> bool {
    matches!(serde_json::from_str::<Value>(content), Ok(Value::Object(m)) if m.len() == 1 && m.contains_key("error"))
}

/// The messages of a transcript that a tau2 trajectory of it holds: a call the engine answered
/// itself (its arguments are not JSON, which tau2's agent cannot even parse) is left out with
/// its result, and so is a message left with neither text nor calls, as Parley's tau2 export
/// writes it.
pub(crate) fn tau2_messages(transcript: &[Message]) -> Vec<&Message> {
    let mut keep = vec![true; transcript.len()];
    for (i, message) in transcript.iter().enumerate() {
        if !matches!(message.role, Role::Assistant | Role::User) || message.tool_calls.is_empty() {
            continue;
        }
        let mut rejected = 0;
        for j in i + 1..(i + 1 + message.tool_calls.len()).min(transcript.len()) {
            if transcript[j].role == Role::Tool && engine_rejection(transcript[j].content_str()) {
                keep[j] = false;
                rejected += 1;
            }
        }
        if rejected == message.tool_calls.len() && message.content.as_deref().is_none_or(|c| c.trim().is_empty()) {
            keep[i] = false;
        }
    }
    transcript.iter().zip(keep).filter(|(_, kept)| *kept).map(|(m, _)| m).collect()
}

/// Each call with the tool message at its place after the calling message, as tau2's `set_state`
/// pairs them: by position, not by id, since some servers give every turn's call the same id.
/// A call with no tool message at its place has no recorded result.
fn recorded_calls(messages: &[Message]) -> Vec<Recorded<'_>> {
    let mut recorded = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let requestor = match message.role {
            Role::User => Requestor::User,
            Role::Assistant => Requestor::Assistant,
            _ => continue,
        };
        for (j, call) in message.tool_calls.iter().enumerate() {
            let Some(result) = messages.get(i + 1 + j).filter(|m| m.role == Role::Tool) else { break };
            recorded.push(Recorded {
                requestor,
                name: &call.name,
                arguments: &call.arguments,
                content: result.content_str(),
            });
        }
    }
    recorded
}
