//! The default agent: a chat model that is offered the task's tools and answers with text or
//! tool calls.
//!
//! Invariant: the agent only talks to its [`ModelClient`]; it never calls tools itself (the
//! engine does) and never sees the store.

pub mod json_mode;

use std::sync::Arc;

use async_trait::async_trait;
use parley_core::{Agent, AgentFailure, AgentTurn, AgentView, ChatRequest, ModelClient, Role, Sampling, ToolList};

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
    /// Take `temperature`, `top_p` and `max_output_tokens` from each task row's
    /// `responses_create_params` when it sets them, over `sampling`: a trainer sets them per
    /// request, and its policy server refuses any other values.
    pub sampling_from_row: bool,
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
        // The request is built once the endpoint has room for the call: a session queued behind
        // its bound holds no request, nor the call's future.
        let ready = self.client.ready().await;
        let mut sampling = self.config.sampling.clone();
        if self.config.sampling_from_row {
            row_sampling(view.task.row.fields(), &mut sampling);
        }
        if sampling.seed.is_none() && self.config.seed_per_session {
            sampling.seed = Some(view.seed);
        }
        if self.config.json_tools && !view.tools.is_empty() {
            let messages = json_mode::rewrite(view.messages, view.tools);
            let format = json_mode::response_format(view.tools);
            let request = ChatRequest {
                model: &self.config.model,
                messages: &messages,
                tools: ToolList::none(),
                sampling: &sampling,
                response_format: Some(&format),
                session: Some(view.session),
                ready: Some(&ready),
            };
            let reply = self.client.chat(request).await?;
            let steps = view.messages.iter().filter(|m| m.role == Role::Assistant).count();
            let mut message = json_mode::read(reply.message.content_str(), format!("call_{steps}"));
            // The reasoning behind a JSON answer is the model's all the same: keep it.
            message.reasoning = reply.message.reasoning;
            message.tokens = reply.message.tokens;
            return Ok(AgentTurn { message, call: Some(reply.call) });
        }
        let request = ChatRequest {
            model: &self.config.model,
            messages: view.messages,
            tools: view.tools,
            sampling: &sampling,
            response_format: None,
            session: Some(view.session),
            ready: Some(&ready),
        };
        let reply = self.client.chat(request).await?;
        Ok(AgentTurn { message: reply.message, call: Some(reply.call) })
    }
}

/// The sampling settings a NeMo Gym row's `responses_create_params` sets, over `sampling`.
fn row_sampling(row: &serde_json::Value, sampling: &mut Sampling) {
    let params = &row["responses_create_params"];
    if let Some(t) = params["temperature"].as_f64() {
        sampling.temperature = Some(t);
    }
    if let Some(p) = params["top_p"].as_f64() {
        sampling.top_p = Some(p);
    }
    if let Some(n) = params["max_output_tokens"].as_u64() {
        sampling.max_tokens = Some(u32::try_from(n).unwrap_or(u32::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rows_sampling_settings_win_when_it_sets_them() {
        let mut sampling = Sampling { temperature: Some(0.2), top_p: Some(0.5), max_tokens: Some(10), seed: None };
        let row = serde_json::json!({"responses_create_params": {"temperature": 1.0, "max_output_tokens": 64}});
        row_sampling(&row, &mut sampling);
        assert_eq!((sampling.temperature, sampling.top_p, sampling.max_tokens), (Some(1.0), Some(0.5), Some(64)));
        row_sampling(&serde_json::json!({"id": 1}), &mut sampling);
        assert_eq!(sampling.temperature, Some(1.0), "a row without them changes nothing");
    }
}
