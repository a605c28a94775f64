//! [`GymnasiumUser`]: the user side of a Gymnasium session. It relays each agent text to the
//! server's `/step` through the session's `gym_step` user tool, then speaks the observation.

use async_trait::async_trait;
use parley_core::{Message, Role, ToolCall, UserFailure, UserSimulator, UserStop, UserTurn, UserView};
use serde_json::{Value, json};

use super::STEP_TOOL;

/// A [`UserSimulator`] for [`GymnasiumEnvironment`](super::GymnasiumEnvironment) sessions. It
/// needs an engine that routes user tool calls to the session (dual control) and hands their
/// results back to the user before the agent speaks again.
///
/// Each turn it looks at the end of its view:
/// - the agent spoke: a user message with one `gym_step` call carrying the agent's text;
/// - the step answered: the observation as the next user message, or `###STOP###` when the
///   episode terminated or was truncated (or the server had nothing more to say).
#[derive(Debug, Clone, Copy, Default)]
pub struct GymnasiumUser;

#[async_trait]
impl UserSimulator for GymnasiumUser {
    async fn respond(&self, view: UserView<'_>) -> Result<UserTurn, UserFailure> {
        let failure = |message: String| UserFailure::User { message, call: None };
        let last = view.messages.last().ok_or_else(|| failure("the Gymnasium user has nothing to answer".into()))?;
        match last.role {
            Role::Tool => {
                let step: Value = serde_json::from_str(last.content_str()).map_err(|e| {
                    failure(format!("the `{STEP_TOOL}` result is not JSON ({e}): {}", last.content_str()))
                })?;
                let over =
                    step["terminated"].as_bool().unwrap_or(false) || step["truncated"].as_bool().unwrap_or(false);
                match step["observation"].as_str() {
                    Some(observation) if !over => {
                        Ok(UserTurn { message: Message::user(observation), stop: None, call: None })
                    }
                    _ => Ok(UserTurn {
                        message: Message::user(UserStop::Stop.marker()),
                        stop: Some(UserStop::Stop),
                        call: None,
                    }),
                }
            }
            Role::Assistant => {
                let steps = view.messages.iter().filter(|m| m.role == Role::User && !m.tool_calls.is_empty()).count();
                let call = ToolCall {
                    id: format!("{STEP_TOOL}_{}", steps + 1),
                    name: STEP_TOOL.into(),
                    arguments: json!({ "text": last.content_str() }).to_string(),
                };
                Ok(UserTurn { message: Message::user_calls(vec![call]), stop: None, call: None })
            }
            Role::User | Role::System => Err(failure("the Gymnasium user speaks only after the agent".into())),
        }
    }
}
