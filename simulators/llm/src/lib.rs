//! An LLM plays the user, through any OpenAI-compatible endpoint configured apart from the
//! agent's. Its system prompt is built from three replaceable templates: global guidelines, a
//! persona, and the task's scenario (reason for the call, what the user knows and does not know,
//! instructions), in Parley's words or, for tau2's domains, exactly as tau2's own user simulator
//! writes them ([`Prompt::tau2`]). Roles are flipped for it: the agent's text arrives as `user` and its own turns
//! are `assistant`; it never sees the agent's tool calls. It ends the conversation with
//! `###STOP###`, `###TRANSFER###` or `###OUT-OF-SCOPE###`.
//!
//! Invariant: the seed sent with every call is the session's, derived from task and trial by a
//! stable hash, so a rerun asks the endpoint the same questions.

mod prompt;

use std::sync::Arc;

use async_trait::async_trait;
use parley_core::{
    ChatRequest, Message, ModelClient, Role, Sampling, Task, ToolSpec, UserFailure, UserSimulator, UserStop, UserTurn,
    UserView,
};

pub use prompt::{Prompt, ScenarioFormat, persona_of, scenario_of, tau2};

/// How the simulated user is set up.
#[derive(Debug, Clone)]
pub struct LlmUserConfig {
    pub model: String,
    pub sampling: Sampling,
    pub prompt: Prompt,
}

pub struct LlmUser {
    client: Arc<dyn ModelClient>,
    config: LlmUserConfig,
}

impl std::fmt::Debug for LlmUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmUser").field("model", &self.config.model).finish_non_exhaustive()
    }
}

impl LlmUser {
    pub fn new(client: Arc<dyn ModelClient>, config: LlmUserConfig) -> LlmUser {
        LlmUser { client, config }
    }
}

/// The conversation from the simulated user's side: the agent's text as `user`, the user's own
/// messages and tool calls as `assistant`, results of its own calls as tool messages.
pub fn flipped(system: String, view: &[Message]) -> Vec<Message> {
    let mut messages = Vec::with_capacity(view.len() + 1);
    messages.push(Message::system(system));
    for m in view {
        messages.push(match m.role {
            Role::Assistant => Message::user(m.text_content()),
            // Its own words as the user model wrote them; parts become their text, since an
            // assistant message cannot carry images.
            Role::User if !m.parts.is_empty() => Message {
                role: Role::Assistant,
                content: Some(m.text_content().into_owned()),
                parts: Vec::new(),
                ..m.clone()
            },
            Role::User => Message { role: Role::Assistant, ..m.clone() },
            Role::Tool => m.clone(),
            Role::System => continue,
        });
    }
    messages
}

#[async_trait]
impl UserSimulator for LlmUser {
    async fn respond(&self, view: UserView<'_>) -> Result<UserTurn, UserFailure> {
        // The prompt and the flipped transcript are built once the endpoint has room for the
        // call: a session queued behind its bound holds neither.
        let ready = self.client.ready().await;
        let system = self.config.prompt.render(view.task.row.fields(), !view.tools.is_empty());
        let messages = flipped(system, view.messages);
        let mut sampling = self.config.sampling.clone();
        sampling.seed = Some(sampling.seed.unwrap_or(view.seed));
        let request = ChatRequest {
            model: &self.config.model,
            messages: &messages,
            tools: view.tools,
            sampling: &sampling,
            response_format: None,
            session: None,
            ready: Some(&ready),
        };
        let reply = self.client.chat(request).await?;
        let text = reply.message.content.clone().unwrap_or_default();
        if text.trim().is_empty() && reply.message.tool_calls.is_empty() {
            return Err(UserFailure::User {
                message: "the user model sent an empty message".into(),
                call: Some(reply.call),
            });
        }
        let stop = UserStop::find(&text);
        // The user's words and calls only: a reasoning user model's thoughts stay in its call record.
        let message = Message {
            content: (!text.is_empty()).then_some(text),
            tool_calls: reply.message.tool_calls,
            ..Message::empty(Role::User)
        };
        Ok(UserTurn { message, stop, call: Some(reply.call) })
    }

    /// Every LLM user's turns are reviewed against the prompt it was given.
    fn instructions(&self, task: &Task, tools: &[ToolSpec]) -> Option<String> {
        Some(self.config.prompt.render(task.row.fields(), !tools.is_empty()))
    }
}
