//! An in-process environment with the task shape of NeMo Gym's `example_multi_step`: the agent
//! looks up the values of synonyms with `get_synonym_value` and reports them with
//! `extract_synonym_values`; the verifier checks the reported list against the expected one.
//!
//! Tasks are NeMo Gym JSONL rows (`responses_create_params` plus `expected_synonym_values`,
//! `expected_synonyms`, `minefield_label`, `minefield_label_value`); [`generate`] writes any
//! number of them. Tool outputs and verify fields are byte-for-byte those of NeMo Gym's server.
//!
//! Invariant: stateless; every session gets the same tools and the same answers.

mod generate;
mod verify;

use std::sync::OnceLock;

use async_trait::async_trait;
use parley_core::{
    EnvError, EnvSession, Environment, Message, Party, Reward, Task, Termination, ToolList, ToolOutput, ToolSpec,
};
use serde_json::{Value, json};

pub use generate::generate;
pub use verify::verify;

pub const NAME: &str = "multi-step";

/// The two tools, as NeMo Gym's example rows declare them.
pub fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "get_synonym_value".into(),
            description: "Get the synonym value for a synonym. This operation returns a value that conforms to the following JSON Schema: {\"properties\": {\"synonym_value\": {\"type\": \"integer\", \"title\": \"Synonym Value\", \"description\": \"The value for this synonym.\"}}, \"type\": \"object\", \"required\": [\"synonym_value\"]}\n".into(),
            parameters: json!({"type": "object", "properties": {"synonym": {"type": "string", "title": "Synonym", "description": "The synonym to get the value for."}}, "required": ["synonym"], "additionalProperties": false}),
            strict: true,
        },
        ToolSpec {
            name: "extract_synonym_values".into(),
            description: "Extract the synonym values you retrieved for the term that is relevant to the user query.".into(),
            parameters: json!({"type": "object", "properties": {"synonym_values": {"type": "array", "items": {"type": "integer"}, "title": "Synonym Values", "description": "The synonym values corresponding to the term for the user query."}}, "required": ["synonym_values"], "additionalProperties": false}),
            strict: true,
        },
    ]
}

/// The value of a synonym: the sum of its characters' code points.
pub fn synonym_value(synonym: &str) -> u64 {
    synonym.chars().map(u64::from).sum()
}

#[derive(Debug, Default)]
pub struct MultiStep;

#[async_trait]
impl Environment for MultiStep {
    fn name(&self) -> &str {
        NAME
    }

    fn check(&self, task: &Task) -> Result<(), String> {
        verify::check(task.row.fields())?;
        if !task.messages.iter().any(|m| m.role == parley_core::Role::User) {
            return Err("`responses_create_params.input` has no user message: there is no question to answer".into());
        }
        Ok(())
    }

    async fn open(&self, task: &Task) -> Result<Box<dyn EnvSession>, EnvError> {
        let tools = match task.tools.is_empty() {
            true => default_tools().clone(),
            false => task.tools.clone(),
        };
        Ok(Box::new(Session { tools, scored: verify::Scored::of(task.row.fields()) }))
    }
}

/// [`tools`], made once: what rows that name no tools run with, and all a row may name.
pub fn default_tools() -> &'static ToolList {
    static DEFAULT_TOOLS: OnceLock<ToolList> = OnceLock::new();
    DEFAULT_TOOLS.get_or_init(|| tools().into())
}

struct Session {
    tools: ToolList,
    /// What scoring reads of the task row.
    scored: verify::Scored,
}

#[async_trait]
impl EnvSession for Session {
    fn tools(&self) -> &ToolList {
        &self.tools
    }

    async fn call(&mut self, _party: Party, name: &str, arguments: &Value) -> Result<ToolOutput, EnvError> {
        Ok(match name {
            "get_synonym_value" => match arguments.get("synonym").and_then(Value::as_str) {
                Some(synonym) => ToolOutput::ok(json!({"synonym_value": synonym_value(synonym)}).to_string()),
                None => ToolOutput::error(json!({"error": "`synonym` must be a string"}).to_string()),
            },
            "extract_synonym_values" => ToolOutput::ok(json!({"success": true}).to_string()),
            other => ToolOutput::error(json!({"error": format!("unknown tool `{other}`")}).to_string()),
        })
    }

    async fn score(&mut self, transcript: &[Message], _termination: Termination) -> Result<Reward, EnvError> {
        self.scored.verify(transcript)
    }
}
