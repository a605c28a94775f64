//! NeMo Gym's Gymnasium servers (`/reset`, `/step`) mapped onto Parley's seams.
//!
//! In Gymnasium the whole model response goes to `/step`, which answers with tool outputs
//! (`info.tool_outputs`), an observation (the next user message), a reward and whether the
//! episode is over; NeMo Gym's `gymnasium_agent` sums the rewards. Parley's seams split that:
//!
//! - **Tool calls** go through [`EnvSession::call`]: each call is one `/step` whose response
//!   holds that one `function_call`; its output is the matching `info.tool_outputs` entry.
//! - **Text turns** reach `/step` through the user seam: [`GymnasiumUser`] answers the agent's
//!   text with a (hidden) user tool call `gym_step {"text": ...}` on the same session, reads
//!   the step's JSON result, and speaks the observation as the next user message, or stops
//!   (`###STOP###`) when the episode terminated or was truncated. The agent never sees these
//!   calls ([`parley_core::agent_view`] hides user tool calls).
//! - **Score** is the sum of every step's reward, with `terminated`, `truncated` and `info` in
//!   the breakdown (the fields of NeMo Gym's Gymnasium output row). When the session ended on
//!   an agent text that no user relayed (no user simulator), [`EnvSession::score`] steps that
//!   text first, so single-turn Gymnasium tasks score right without a user.
//!
//! Differences from `gymnasium_agent`: a model turn with several tool calls (or text and tool
//! calls) is stepped one call at a time, not as one response; an observation returned by
//! `/reset` or by a tool step is delivered by the user after the agent's next text, not before
//! the agent's first turn; `max_steps` is the engine's limit, not the agent server's.
//!
//! Owns: the `/reset` → `/step` protocol and the episode's running reward. Never panics on
//! what the server sends.

mod user;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use parley_core::{
    EnvError, EnvSession, Environment, Message, Party, Reward, Role, Task, Termination, ToolList, ToolOutput, ToolSpec,
};
use serde_json::{Map, Value, json};

use crate::error::RemoteError;
use crate::http::{CookieJar, HttpServer, Retry, ServerOptions};
use crate::nemo_gym::{DEFAULT_MODEL_NAME, produced};
pub use user::GymnasiumUser;

/// The user tool through which [`GymnasiumUser`] relays the agent's text to `/step`.
pub const STEP_TOOL: &str = "gym_step";

/// A NeMo Gym Gymnasium server.
#[derive(Debug, Clone)]
pub struct GymnasiumEnvironment {
    server: HttpServer,
    model_name: String,
    steps: Arc<AtomicU64>,
    user_tools: ToolList,
}

impl GymnasiumEnvironment {
    /// A Gymnasium server at `base_url`, called `name` in errors and logs.
    pub fn new(name: &str, base_url: &str, options: &ServerOptions) -> Result<GymnasiumEnvironment, RemoteError> {
        Ok(GymnasiumEnvironment {
            server: HttpServer::new(name, base_url, options)?,
            model_name: DEFAULT_MODEL_NAME.to_owned(),
            steps: Arc::default(),
            user_tools: ToolList::from(vec![step_tool()]),
        })
    }

    /// Sets the `model` field of the responses sent to `/step`.
    pub fn with_model_name(mut self, model: impl Into<String>) -> GymnasiumEnvironment {
        self.model_name = model.into();
        self
    }

    pub fn server(&self) -> &HttpServer {
        &self.server
    }

    /// `POST /aggregate_metrics` with `{"verify_responses": rows}`.
    pub async fn aggregate_metrics(&self, rows: &[Value]) -> Result<Value, RemoteError> {
        crate::nemo_gym::aggregate_metrics(&self.server, rows).await
    }
}

/// The spec of [`STEP_TOOL`].
pub fn step_tool() -> ToolSpec {
    ToolSpec {
        name: STEP_TOOL.into(),
        description: "Send the agent's text turn to the Gymnasium server's /step; returns the observation, \
                      reward, terminated and truncated."
            .into(),
        parameters: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        strict: false,
    }
}

#[async_trait]
impl Environment for GymnasiumEnvironment {
    fn name(&self) -> &str {
        self.server.name()
    }

    async fn open(&self, task: &Task) -> Result<Box<dyn EnvSession>, EnvError> {
        let mut jar = CookieJar::default();
        const CALL: &str = "POST /reset";
        let exchange = self.server.post("/reset", &task.row, Some(&mut jar), Retry::Unsent).await?;
        let reset = exchange.success(&self.server, CALL)?.json(&self.server, CALL)?;
        let observation = reset.get("observation").and_then(Value::as_str).map(str::to_owned);
        let explicit_close = reset.pointer("/info/supports_explicit_close") == Some(&Value::Bool(true));
        Ok(Box::new(GymnasiumSession {
            server: self.server.clone(),
            jar,
            task: task.clone(),
            model_name: self.model_name.clone(),
            steps: self.steps.clone(),
            user_tools: self.user_tools.clone(),
            pending_observation: observation,
            explicit_close,
            total: 0.0,
            text_steps: 0,
            last: None,
        }))
    }
}

/// What the last `/step` said.
#[derive(Debug, Clone)]
struct StepResult {
    observation: Option<String>,
    reward: f64,
    terminated: bool,
    truncated: bool,
    info: Value,
}

struct GymnasiumSession {
    server: HttpServer,
    jar: CookieJar,
    task: Task,
    model_name: String,
    steps: Arc<AtomicU64>,
    user_tools: ToolList,
    /// An observation not yet spoken to the agent (from `/reset` or a tool step).
    pending_observation: Option<String>,
    explicit_close: bool,
    total: f64,
    text_steps: usize,
    last: Option<StepResult>,
}

impl GymnasiumSession {
    fn done(&self) -> bool {
        self.last.as_ref().is_some_and(|s| s.terminated || s.truncated)
    }

    /// `POST /step` with the row and a response made of `output`.
    async fn step(&mut self, output: Vec<Value>) -> Result<StepResult, RemoteError> {
        const CALL: &str = "POST /step";
        let number = self.steps.fetch_add(1, Ordering::Relaxed);
        let response = json!({
            "id": format!("resp_parley_{number}"), "object": "response", "created_at": 0,
            "model": self.model_name, "status": "completed", "output": output,
            "parallel_tool_calls": false, "tool_choice": "auto", "tools": [],
        });
        let mut body = match self.task.row.to_value() {
            Value::Object(row) => row,
            _ => Map::new(),
        };
        body.insert("response".into(), response);
        let exchange = self.server.post("/step", &Value::Object(body), Some(&mut self.jar), Retry::Unsent).await?;
        let answer = exchange.success(&self.server, CALL)?.json(&self.server, CALL)?;
        let reward = match answer.get("reward") {
            None | Some(Value::Null) => 0.0,
            Some(v) => v.as_f64().ok_or_else(|| RemoteError::Protocol {
                server: self.server.label(),
                call: CALL.into(),
                cause: format!("`reward` is not a number: {}", parley_http::excerpt(&v.to_string())),
            })?,
        };
        let result = StepResult {
            observation: answer.get("observation").and_then(Value::as_str).map(str::to_owned),
            reward,
            terminated: answer.get("terminated").and_then(Value::as_bool).unwrap_or(false),
            truncated: answer.get("truncated").and_then(Value::as_bool).unwrap_or(false),
            info: answer.get("info").cloned().unwrap_or_else(|| json!({})),
        };
        self.total += result.reward;
        self.last = Some(result.clone());
        Ok(result)
    }

    async fn step_text(&mut self, text: &str) -> Result<StepResult, RemoteError> {
        self.text_steps += 1;
        let number = self.text_steps;
        self.step(vec![json!({
            "type": "message", "role": "assistant", "id": format!("msg_parley_{number}"), "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        })])
        .await
    }

    fn episode_over(&self) -> ToolOutput {
        ToolOutput::error("the Gymnasium episode is over (terminated or truncated); no more steps are accepted")
    }
}

#[async_trait]
impl EnvSession for GymnasiumSession {
    fn tools(&self) -> &ToolList {
        &self.task.tools
    }

    fn user_tools(&self) -> &ToolList {
        &self.user_tools
    }

    async fn call(&mut self, party: Party, name: &str, arguments: &Value) -> Result<ToolOutput, EnvError> {
        if self.done() {
            return Ok(self.episode_over());
        }
        if party == Party::User {
            if name != STEP_TOOL {
                return Ok(ToolOutput::error(format!("unknown user tool `{name}`; the only one is `{STEP_TOOL}`")));
            }
            let text = arguments.get("text").and_then(Value::as_str).unwrap_or_default().to_owned();
            let step = self.step_text(&text).await?;
            let observation = step.observation.clone().or_else(|| self.pending_observation.take());
            let result = json!({
                "observation": observation, "reward": step.reward,
                "terminated": step.terminated, "truncated": step.truncated,
            });
            return Ok(ToolOutput { content: result.to_string(), is_error: false, write: true });
        }
        let number = self.steps.load(Ordering::Relaxed);
        let call_id = format!("call_parley_{number}");
        let step = self
            .step(vec![json!({
                "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments.to_string(),
                "id": format!("fc_parley_{number}"), "status": "completed",
            })])
            .await?;
        if let Some(observation) = step.observation.clone() {
            self.pending_observation = Some(observation);
        }
        let outputs = step.info.get("tool_outputs").and_then(Value::as_array).cloned().unwrap_or_default();
        let output = outputs
            .iter()
            .find(|o| o.get("call_id").and_then(Value::as_str) == Some(call_id.as_str()))
            .or(outputs.first())
            .and_then(|o| o.get("output"))
            .map(|o| o.as_str().map_or_else(|| o.to_string(), str::to_owned));
        Ok(match output {
            Some(content) => ToolOutput { content, is_error: false, write: true },
            None => ToolOutput {
                content: format!("the Gymnasium server returned no output for `{name}`"),
                is_error: true,
                write: true,
            },
        })
    }

    async fn score(&mut self, transcript: &[Message], _termination: Termination) -> Result<Reward, EnvError> {
        // The agent's last text, if nobody relayed it to /step (a session without a user).
        let produced = produced(transcript, &self.task);
        let texts: Vec<&Message> =
            produced.iter().filter(|m| m.role == Role::Assistant && m.tool_calls.is_empty()).collect();
        if !self.done()
            && texts.len() > self.text_steps
            && let Some(last) = produced.last().filter(|m| m.role == Role::Assistant && m.tool_calls.is_empty())
        {
            self.step_text(last.content_str()).await?;
        }
        let (terminated, truncated, info) = match &self.last {
            Some(s) => (s.terminated, !s.terminated, s.info.clone()),
            None => (false, true, json!({})),
        };
        Ok(Reward::new(self.total).with("terminated", terminated).with("truncated", truncated).with("info", info))
    }

    async fn close(&mut self) {
        if self.explicit_close
            && let Err(error) = self.server.post("/close", &json!({}), Some(&mut self.jar), Retry::Unsent).await
        {
            tracing::warn!(%error, "POST /close failed");
        }
    }
}
