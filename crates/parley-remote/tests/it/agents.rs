//! The policies of the tests: the stub behind a real model client, or a scripted oracle that
//! plays a task's gold actions (it reads the task row, as an oracle may).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_tool_calling::{ToolCallingAgent, ToolCallingConfig};
use async_trait::async_trait;
use parley_core::{Agent, AgentFailure, AgentTurn, AgentView, Message, Role, ToolCall};
use parley_remote::{ResponsesClient, ResponsesConfig};

/// The default agent on the stub through the Responses client.
pub fn stub_agent(base_url: &str) -> ToolCallingAgent {
    let config = ResponsesConfig { base_url: base_url.into(), ..ResponsesConfig::default() };
    let client = ResponsesClient::new(&config).expect("a Responses client");
    ToolCallingAgent::new(Arc::new(client), ToolCallingConfig { model: "stub".into(), ..Default::default() })
}

type Script = fn(&serde_json::Value) -> Vec<Vec<(String, String)>>;

/// Plays `script(row)`: each entry is one turn of tool calls `(name, arguments)`; then answers
/// with `answer(row)`.
pub struct Oracle {
    script: Script,
    answer: fn(&serde_json::Value) -> String,
    calls: AtomicUsize,
}

impl Oracle {
    pub fn new(script: Script, answer: fn(&serde_json::Value) -> String) -> Oracle {
        Oracle { script, answer, calls: AtomicUsize::new(0) }
    }
}

#[async_trait]
impl Agent for Oracle {
    async fn act(&self, view: AgentView<'_>) -> Result<AgentTurn, AgentFailure> {
        let turns = (self.script)(view.task.row.fields());
        let done = view.messages.iter().filter(|m| m.role == Role::Assistant && !m.tool_calls.is_empty()).count();
        let message = match turns.get(done) {
            Some(calls) => Message::assistant_calls(
                None,
                calls
                    .iter()
                    .map(|(name, arguments)| ToolCall {
                        id: format!("oracle_{}", self.calls.fetch_add(1, Ordering::Relaxed)),
                        name: name.clone(),
                        arguments: arguments.clone(),
                    })
                    .collect(),
            ),
            None => Message::assistant((self.answer)(view.task.row.fields())),
        };
        Ok(AgentTurn { message, call: None })
    }
}
