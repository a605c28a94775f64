//! The default agent: a chat model that is offered the task's tools and answers with text or
//! tool calls.
//!
//! Invariant: the agent only talks to its [`ModelClient`]; it never calls tools itself (the
//! engine does) and never sees the store.

pub mod json_mode;

use std::sync::Arc;

use async_trait::async_trait;
use parley_core::{Agent, AgentFailure, AgentTurn, AgentView, ChatRequest, ModelClient, Role, Sampling};

/// How the agent is set up.
#[derive(Debug, Clone, Default)]
pub struct ToolCallingConfig {
    pub model: String,
    /// Put before the task's own messages, when set.
    pub system_prompt: Option<String>,
    pub sampling: Sampling,
    /// Send the per-task, per-trial seed with every call (unless `sampling.seed` fixes one).
    pub seed_per_session: bool,
    /// Choose tools through a JSON-schema response format instead of native tool calls.
    pub json_tools: bool,
    /// The opening line when the agent speaks first.
    pub greeting: Option<String>,
}

pub struct ToolCallingAgent {
    client: Arc<dyn ModelClient>,
    config: ToolCallingConfig,
}

impl ToolCallingAgent {
    pub fn new(client: Arc<dyn ModelClient>, config: ToolCallingConfig) -> ToolCallingAgent {
        ToolCallingAgent { client, config }
    }
}

#[async_trait]
impl Agent for ToolCallingAgent {
    fn system_prompt(&self) -> Option<&str> {
        self.config.system_prompt.as_deref()
    }

    fn greeting(&self) -> Option<&str> {
        self.config.greeting.as_deref()
    }

    async fn act(&self, view: AgentView<'_>) -> Result<AgentTurn, AgentFailure> {
        let mut sampling = self.config.sampling.clone();
        if sampling.seed.is_none() && self.config.seed_per_session {
            sampling.seed = Some(view.seed);
        }
        if self.config.json_tools && !view.tools.is_empty() {
            let messages = json_mode::rewrite(view.messages, view.tools);
            let format = json_mode::response_format(view.tools);
            let request = ChatRequest {
                model: &self.config.model,
                messages: &messages,
                tools: &[],
                sampling: &sampling,
                response_format: Some(&format),
            };
            let reply = self.client.chat(request).await?;
            let steps = view.messages.iter().filter(|m| m.role == Role::Assistant).count();
            let mut message = json_mode::read(reply.message.content_str(), format!("call_{steps}"));
            // The reasoning behind a JSON answer is the model's all the same: keep it.
            message.reasoning = reply.message.reasoning;
            return Ok(AgentTurn { message, call: Some(reply.call) });
        }
        let request = ChatRequest {
            model: &self.config.model,
            messages: view.messages,
            tools: view.tools,
            sampling: &sampling,
            response_format: None,
        };
        let reply = self.client.chat(request).await?;
        Ok(AgentTurn { message: reply.message, call: Some(reply.call) })
    }
}
