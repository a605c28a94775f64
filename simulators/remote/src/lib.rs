//! A simulated user plugged in from outside: any program that answers one HTTP request per
//! user turn (`--user remote --user-url URL`). Each turn Parley posts the user's view of the
//! conversation (the conversation's roles: `assistant` is the agent, `user` this user), the
//! task row, its scenario and persona, the user's tools and the session's seed to
//! `{url}/turn`, and reads back text, tool calls or a stop ([`wire`]; the contract for people
//! writing a user is `docs/remote-user.md`). `integrations/tau2-user` is tau2's own
//! `UserSimulator` behind it.
//!
//! Every call goes through `parley-http`'s one client stack: a timeout per attempt, bounded
//! retries within the session's deadline (a turn is asked again after a transport error, a
//! timeout, 408, 429, 5xx or a 2xx that is not an answer, so a user must be safe to ask twice),
//! a concurrency limit, a bounded body with registered keys redacted. A call that fails is a
//! [`ModelFailure`] naming the URL and quoting at most an excerpt of the body, so the session
//! ends as an infrastructure failure, as when an LLM user's endpoint fails; an answer that is
//! no turn (empty, or a stop beside tool calls) is the user's own failure.
//!
//! Invariant: the user is stateless to Parley. Every request carries the whole view, so a
//! resumed session, a retried call or a second Parley process asks the same question.
//! Its turns are reviewed by `parley_core::review`'s rules like an LLM user's, against what
//! Parley told it (its scenario and persona).

pub mod wire;

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use parley_core::{
    ModelCall, ModelFailure, ModelFailureKind, RawJson, Task, ToolSpec, UserFailure, UserSimulator, UserTurn, UserView,
};
use parley_http::client::Limits;
use parley_http::{Client, ClientError, Failure, Retry, excerpt_bytes};
use serde_json::Value;

use crate::wire::{Answer, Request, Session, TURN, VERSION};

/// What a task row tells the user: its scenario as text and its persona.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Brief {
    pub scenario: String,
    pub persona: Option<String>,
}

/// How a task row's brief is written: the caller's choice (the runtime writes it as its own
/// LLM user would be told it, tau2's way in tau2's domains).
pub type Briefing = Arc<dyn Fn(&Value) -> Brief + Send + Sync>;

/// A remote user's setup.
#[derive(Clone)]
pub struct RemoteUserConfig {
    /// The user's base URL; turns go to `{url}/turn`.
    pub url: String,
    pub limits: Limits,
    /// Sent as `Authorization: Bearer <key>` when given.
    pub key: Option<String>,
    pub briefing: Briefing,
}

/// A user behind the contract.
pub struct RemoteUser {
    client: Client,
    briefing: Briefing,
}

impl std::fmt::Debug for RemoteUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteUser").field("url", &self.client.base_url()).finish_non_exhaustive()
    }
}

/// Why a remote user could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SetupError(String);

impl RemoteUser {
    pub fn new(config: RemoteUserConfig) -> Result<RemoteUser, SetupError> {
        let client = Client::new(&config.url, &config.limits, config.key.as_deref()).map_err(|e| match e {
            ClientError::BadUrl(url) => SetupError(format!("`{url}` is not an http(s) URL: use http://host:port")),
            other => SetupError(format!("the remote user's HTTP client: {other}")),
        })?;
        Ok(RemoteUser { client, briefing: config.briefing })
    }

    /// Where turns are posted.
    pub fn url(&self) -> String {
        format!("{}{TURN}", self.client.base_url())
    }

    /// What the review compares the user's words with: what Parley told it.
    fn told(&self, row: &Value) -> String {
        let brief = (self.briefing)(row);
        match brief.persona {
            Some(persona) if !brief.scenario.contains(&persona) => format!("{persona}\n\n{}", brief.scenario),
            _ => brief.scenario,
        }
    }
}

/// Whether a 2xx body is an answer of the contract; one that is not is asked again.
fn accept(body: &[u8]) -> Result<(), String> {
    serde_json::from_slice::<Answer>(body).map(drop).map_err(|e| format!("not an answer of the user contract ({e})"))
}

#[async_trait]
impl UserSimulator for RemoteUser {
    async fn respond(&self, view: UserView<'_>) -> Result<UserTurn, UserFailure> {
        let url = self.url();
        let brief = (self.briefing)(view.task.row.fields());
        let request = Request {
            version: VERSION,
            session: Session {
                task_id: &view.task.id,
                task_index: view.task.index,
                trial: view.trial,
                seed: view.seed,
            },
            task: &view.task.row,
            scenario: &brief.scenario,
            persona: brief.persona.as_deref(),
            messages: Request::messages(view.messages),
            tools: Request::tools(view.tools),
        };
        let body = serde_json::to_string(&request).map_err(|e| UserFailure::User {
            message: format!("the request to the remote user at {url} does not serialize: {e}"),
            call: None,
        })?;
        let started = Instant::now();
        let (result, attempts) = self
            .client
            .post_json(TURN, body.clone().into_bytes(), Default::default(), Retry::Transient, Some(accept))
            .await;
        let mut call = ModelCall {
            endpoint: url.clone(),
            request: RawJson::from_string(body).unwrap_or_default(),
            latency: started.elapsed(),
            attempts,
            ..ModelCall::default()
        };
        let failed = |kind: ModelFailureKind, message: String, mut call: ModelCall| {
            call.error = Some(message.clone());
            UserFailure::Model(ModelFailure { kind, message, call })
        };
        let answer = match result {
            Ok(answer) if answer.is_success() => answer,
            Ok(answer) => {
                call.response = json(&answer.body);
                let message = format!(
                    "the remote user at {url} answered HTTP {} after {attempts} attempt(s): {}",
                    answer.status,
                    excerpt_bytes(&answer.body)
                );
                return Err(failed(ModelFailureKind::Status(answer.status), message, call));
            }
            Err(failure) => {
                let (kind, quoted) = match &failure {
                    Failure::Timeout => (ModelFailureKind::Timeout, String::new()),
                    Failure::Unaccepted(unaccepted) => {
                        call.response = json(&unaccepted.body);
                        (ModelFailureKind::MalformedResponse, format!(": {}", excerpt_bytes(&unaccepted.body)))
                    }
                    Failure::TooLarge(_) => (ModelFailureKind::MalformedResponse, String::new()),
                    Failure::Unsendable(_) | Failure::Connect(_) | Failure::Transport(_) => {
                        (ModelFailureKind::Transport, String::new())
                    }
                };
                let message = format!("the remote user at {url}: {failure} after {attempts} attempt(s){quoted}");
                return Err(failed(kind, message, call));
            }
        };
        call.response = json(&answer.body);
        // The stack accepted the body as an answer, so it reads again.
        let parsed: Answer = serde_json::from_slice(&answer.body).unwrap_or_default();
        match parsed.into_turn(view.messages.len()) {
            Ok(turn) => Ok(UserTurn { message: turn.message, stop: turn.stop, call: Some(call) }),
            Err(refusal) => {
                let message = format!("the remote user at {url} sent {refusal}: {}", excerpt_bytes(&answer.body));
                call.error = Some(message.clone());
                Err(UserFailure::User { message, call: Some(call) })
            }
        }
    }

    /// A remote user's turns are reviewed like an LLM user's: Parley does not know its system
    /// prompt, so a quotation is looked for in what Parley told it (scenario and persona).
    fn instructions(&self, task: &Task, _tools: &[ToolSpec]) -> Option<String> {
        Some(self.told(task.row.fields()))
    }
}

/// A body kept in the call's record when it is JSON.
fn json(body: &[u8]) -> Option<RawJson> {
    std::str::from_utf8(body).ok().and_then(|text| RawJson::from_string(text.to_owned()).ok())
}
