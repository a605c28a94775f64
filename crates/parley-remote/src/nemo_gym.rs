//! NeMo Gym resources servers as a Parley [`Environment`]: seed, tool calls and verify over
//! HTTP, one cookie jar per session, exactly as NeMo Gym's `simple_agent` drives them.
//!
//! Owns: the resources-server protocol (`/seed_session`, `/{tool}`, `/verify`,
//! `/close_session`, `/aggregate_metrics`). Never runs a model and never decides a reward: the
//! server's `/verify` does. Never panics on what a server sends: a broken answer is an
//! [`EnvError`] naming the server and the call.

mod reward;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use parley_core::nemo_gym::response_object;
use parley_core::{
    EnvError, EnvSession, Environment, Message, Party, Reward, Task, Termination, ToolList, ToolOutput, Usage,
};
use serde_json::{Value, json};

use crate::error::RemoteError;
use crate::http::{CookieJar, HttpServer, Retry, ServerOptions};
pub use reward::reward_from_verify;

/// The model name written into the `NeMoGymResponse` objects sent to `/verify`.
pub const DEFAULT_MODEL_NAME: &str = "parley";

/// One NeMo Gym resources server (the `/seed_session` → `/{tool}` → `/verify` protocol).
#[derive(Debug, Clone)]
pub struct NemoGymEnvironment {
    server: HttpServer,
    model_name: String,
    sessions: Arc<AtomicU64>,
}

impl NemoGymEnvironment {
    /// A resources server at `base_url` (`http://127.0.0.1:PORT`), called `name` in errors and
    /// logs (the config's instance name, say).
    pub fn new(name: &str, base_url: &str, options: &ServerOptions) -> Result<NemoGymEnvironment, RemoteError> {
        Ok(NemoGymEnvironment {
            server: HttpServer::new(name, base_url, options)?,
            model_name: DEFAULT_MODEL_NAME.to_owned(),
            sessions: Arc::default(),
        })
    }

    /// Sets the `model` field of the responses sent to `/verify` (the policy's name, say).
    pub fn with_model_name(mut self, model: impl Into<String>) -> NemoGymEnvironment {
        self.model_name = model.into();
        self
    }

    pub fn server(&self) -> &HttpServer {
        &self.server
    }

    /// `POST /aggregate_metrics` with `{"verify_responses": rows}`: NeMo Gym's own summary of
    /// output rows (each a verify response plus `_ng_task_index` and `_ng_rollout_index`).
    pub async fn aggregate_metrics(&self, rows: &[Value]) -> Result<Value, RemoteError> {
        aggregate_metrics(&self.server, rows).await
    }
}

/// `POST /aggregate_metrics` to any NeMo Gym server (resources or Gymnasium).
pub async fn aggregate_metrics(server: &HttpServer, rows: &[Value]) -> Result<Value, RemoteError> {
    const CALL: &str = "POST /aggregate_metrics";
    let body = json!({ "verify_responses": rows });
    let exchange = server.post("/aggregate_metrics", &body, None, Retry::Transient).await?;
    exchange.success(server, CALL)?.json(server, CALL)
}

#[async_trait]
impl Environment for NemoGymEnvironment {
    fn name(&self) -> &str {
        self.server.name()
    }

    async fn open(&self, task: &Task) -> Result<Box<dyn EnvSession>, EnvError> {
        let number = self.sessions.fetch_add(1, Ordering::Relaxed);
        let mut session = NemoGymSession {
            server: self.server.clone(),
            jar: CookieJar::default(),
            task: task.clone(),
            model_name: self.model_name.clone(),
            session_id: format!("parley-{}-{number}", task.id),
        };
        const CALL: &str = "POST /seed_session";
        let exchange = session.server.post("/seed_session", &task.row, Some(&mut session.jar), Retry::Unsent).await?;
        exchange.success(&session.server, CALL)?;
        Ok(Box::new(session))
    }
}

struct NemoGymSession {
    server: HttpServer,
    jar: CookieJar,
    task: Task,
    model_name: String,
    session_id: String,
}

#[async_trait]
impl EnvSession for NemoGymSession {
    fn tools(&self) -> &ToolList {
        &self.task.tools
    }

    async fn call(&mut self, _party: Party, name: &str, arguments: &Value) -> Result<ToolOutput, EnvError> {
        let path = format!("/{name}");
        let exchange = self.server.post(&path, arguments, Some(&mut self.jar), Retry::Unsent).await?;
        // NeMo Gym feeds the body text back whatever the status (a 422 detail, a 400 "Session
        // not initialized"), so the model reads it; the status only marks it as an error. Any
        // tool may change the server's state, so every call counts as a write for resume.
        Ok(ToolOutput { is_error: !exchange.is_success(), content: exchange.body, write: true })
    }

    async fn score(&mut self, transcript: &[Message], _termination: Termination) -> Result<Reward, EnvError> {
        let produced = produced(transcript, &self.task);
        let response = response_object(&self.model_name, produced, Usage::default());
        let mut body = match self.task.row.to_value() {
            Value::Object(row) => row,
            _ => serde_json::Map::new(),
        };
        body.insert("response".into(), response);
        const CALL: &str = "POST /verify";
        let exchange = self.server.post("/verify", &Value::Object(body), Some(&mut self.jar), Retry::Unsent).await?;
        let verify = exchange.success(&self.server, CALL)?.json(&self.server, CALL)?;
        if let Some(failure) = reward::verifier_failure(&verify) {
            return Err(EnvError::verifier_failed(format!("{}: {CALL}: {failure}", self.server.label())));
        }
        Ok(reward_from_verify(&verify, self.task.row.fields()).map_err(|cause| RemoteError::Protocol {
            server: self.server.label(),
            call: CALL.into(),
            cause,
        })?)
    }

    async fn close(&mut self) {
        close_session(&self.server, &mut self.jar, &self.session_id).await;
    }
}

/// `POST /close_session` (NeMo Gym 0.7.0), with the 0.7.0 body. Servers without it (404),
/// or that want another body (422), are left alone: closing is best effort.
pub(crate) async fn close_session(server: &HttpServer, jar: &mut CookieJar, session_id: &str) {
    let body = json!({
        "resources_session_id": session_id,
        "episode_id": {"rollout_id": session_id, "attempt": 0},
    });
    match server.post("/close_session", &body, Some(jar), Retry::Unsent).await {
        Ok(exchange) if exchange.is_success() || matches!(exchange.status, 404 | 405 | 422) => {}
        Ok(exchange) => {
            tracing::warn!(server = %server.label(), status = exchange.status, "POST /close_session failed");
        }
        Err(error) => tracing::warn!(%error, "POST /close_session failed"),
    }
}

/// The part of a transcript the session produced: what follows the task's opening. An agent's
/// own system prompt may stand before the opening, so the opening is looked for near the start.
pub(crate) fn produced<'a>(transcript: &'a [Message], task: &Task) -> &'a [Message] {
    let n = task.messages.len();
    let start = (0..=2.min(transcript.len()))
        .find(|&i| transcript.get(i..i + n).is_some_and(|opening| opening == task.messages.as_slice()))
        .map_or(n.min(transcript.len()), |i| i + n);
    &transcript[start..]
}
