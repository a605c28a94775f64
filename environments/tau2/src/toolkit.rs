//! The seam between the session machinery and a domain's Python-faithful code: a domain state
//! answers calls on its two toolkits (the agent's and the user's), runs the helper functions
//! that tasks name in `initialization_actions` and `env_assertions`, and hashes its databases.
//!
//! A tool's return value stays Python-shaped ([`Out`]) until [`to_content`] renders it the way
//! tau2's `Environment.to_json_str` does; an exception is a [`ToolError`], rendered as
//! `Error: <message>`. This module never knows which domain it serves.

use crate::pyjson::Py;

/// Which toolkit a call goes to: tau2's `requestor` / `env_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Requestor {
    Assistant,
    User,
}

impl Requestor {
    pub fn parse(s: &str) -> Option<Requestor> {
        match s {
            "assistant" => Some(Requestor::Assistant),
            "user" => Some(Requestor::User),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Requestor::Assistant => "assistant",
            Requestor::User => "user",
        }
    }
}

/// What a Python tool function returned, before serialization.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// A `str`: passed to the model unchanged.
    Str(String),
    /// Anything else (a pydantic model, a list, a dict, a bool, `None`): `json.dumps`-ed.
    Json(Py),
}

/// An exception raised by a tool: its `str(e)`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError(pub String);

impl ToolError {
    pub fn new(message: impl Into<String>) -> ToolError {
        ToolError(message.into())
    }
}

pub type ToolResult = Result<Out, ToolError>;

/// tau2's `to_json_str`: strings unchanged, everything else through `json.dumps`.
pub fn to_content(result: &ToolResult) -> (String, bool) {
    match result {
        Ok(Out::Str(s)) => (s.clone(), false),
        Ok(Out::Json(py)) => (py.dumps(), false),
        Err(e) => (format!("Error: {}", e.0), true),
    }
}

/// One domain's mutable world: both toolkits' databases.
pub trait DomainState: Send + Sync {
    fn clone_box(&self) -> Box<dyn DomainState>;

    /// Calls any method of a toolkit by name, tool or helper. `None` when the toolkit has no
    /// such method. The caller has already checked that a tool call names a tool.
    fn call(&mut self, toolkit: Requestor, name: &str, args: &crate::args::Args) -> Option<ToolResult>;

    /// tau2's `Environment.sync_tools`, run after every tool call and env function.
    fn sync_tools(&mut self) -> Result<(), ToolError> {
        Ok(())
    }

    /// A toolkit's database as a tree (for `initialization_data` patches), `None` without one.
    fn db(&self, toolkit: Requestor) -> Option<Py>;

    /// Replaces a toolkit's database from a tree (after a patch), validating it.
    fn set_db(&mut self, toolkit: Requestor, db: &Py) -> Result<(), String>;

    /// `json.dumps(db.model_dump(), sort_keys=True, default=str)`, the text tau2's
    /// `get_db_hash` digests; `None` without that database. tau2 compares two worlds by these
    /// hashes, so the scorer compares these texts.
    fn canonical(&self, toolkit: Requestor) -> Option<String>;

    /// The same database in parts, for comparing two states without their whole dumps (see
    /// [`crate::view`]); `None` without that database.
    fn view(&self, toolkit: Requestor) -> Option<crate::view::View<'_>>;

    /// What a user tool raises in tau2 once the user toolkit shares the agent's database (after
    /// an `agent_data` patch): an `AttributeError` for the first user-database field it reads.
    fn user_tool_on_agent_db(&self) -> ToolError;

    /// sha256 of [`DomainState::canonical`]: tau2's `get_db_hash`.
    fn hash(&self, toolkit: Requestor) -> Option<String> {
        self.canonical(toolkit).map(|text| crate::hash::sha256_hex(&text))
    }
}

impl Clone for Box<dyn DomainState> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}
