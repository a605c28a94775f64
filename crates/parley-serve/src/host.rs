//! Several environments behind one service. A [`Host`] is the [`Service`]s of its environments
//! (each exactly what one environment's service is alone: its runtime, service run, admission,
//! metrics and OpenEnv sessions) behind one router, with an admission bound for the whole.
//!
//! Routing: a `/run` row goes to the environment its `environment` field names, else to the one
//! its `agent_ref.name` names; an OpenEnv reset names it in its data's `environment`. A row or
//! reset that names none goes to the default (the first), and so does a row whose
//! `agent_ref.name` is the service's own agent name (NeMo Gym's instance name for it); one naming an environment the service
//! does not host is refused with the names of those it does. A service of one environment
//! routes every row to it, whatever it names, as it always has.
//!
//! Admission: a request takes its environment's places, then the whole's (`admission`), so a
//! stalled environment holds at most its own concurrency of the whole's slots.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use parley_engine::Stop;
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;

use crate::Service;
use crate::admission::Admission;

/// The name of the environment a service hosts when it hosts one, or the first of several
/// unless named otherwise.
pub const DEFAULT: &str = "default";

/// The row field (and OpenEnv reset field) that names the environment a row is for.
pub const FIELD: &str = "environment";

/// The answer field that names the environment that played the row, when a service hosts
/// several.
pub(crate) const ANSWERED_BY: &str = "_parley_environment";

/// The environments one service hosts, by name, the default first.
pub struct Host {
    hosted: Vec<Arc<Service>>,
    /// The whole service's bound, when it hosts more than one environment (one environment's
    /// own bound is the whole's).
    whole: Option<Admission>,
    /// Requests the whole service refused before reading them, so before knowing their
    /// environment.
    refused: AtomicU64,
    /// The name a row's `agent_ref.name` calls the service itself by (NeMo Gym's agent
    /// instance): such a row goes to the environment its field names, or the default.
    agent_name: Option<String>,
}

/// Every place of the whole service is taken.
#[derive(Debug)]
pub(crate) struct Full;

/// A request's running slots: its environment's and, in a service of several, the whole's.
pub(crate) type Running = (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>);

impl Host {
    /// The services of `hosted`, the default first, bounded together by `whole` (concurrency
    /// and queue) when there are several. They must share one [`Stop`] ([`Service::with_stop`]).
    ///
    /// # Panics
    /// When `hosted` is empty: a service hosts at least its default environment.
    pub fn new(hosted: Vec<Arc<Service>>, whole: Option<(usize, usize)>) -> Host {
        assert!(!hosted.is_empty(), "a service hosts at least one environment");
        let whole = whole.filter(|_| hosted.len() > 1).map(|(concurrency, queue)| Admission::new(concurrency, queue));
        Host { hosted, whole, refused: AtomicU64::new(0), agent_name: None }
    }

    /// A host that rows also reach by `name` in their `agent_ref.name`, the name of the agent
    /// server it is to NeMo Gym: those rows choose by their `environment` field alone.
    pub fn answering_to(mut self, name: Option<String>) -> Host {
        self.agent_name = name;
        self
    }

    /// The HTTP routes.
    pub fn router(self: &Arc<Host>) -> Router {
        crate::routes(self)
    }

    /// The environments hosted, the default first.
    pub fn hosted(&self) -> &[Arc<Service>] {
        &self.hosted
    }

    /// The default environment.
    pub fn default(&self) -> &Arc<Service> {
        &self.hosted[0]
    }

    /// The only environment, when the service hosts one.
    pub(crate) fn only(&self) -> Option<&Arc<Service>> {
        match self.hosted.as_slice() {
            [only] => Some(only),
            _ => None,
        }
    }

    /// Stops every environment's sessions (they share one [`Stop`]).
    pub fn stop(&self) -> &Stop {
        self.default().stop()
    }

    /// Sessions ended so far, in every environment.
    pub fn sessions_ended(&self) -> u64 {
        self.hosted.iter().map(|s| s.metrics.sessions_ended()).sum()
    }

    /// A place among the whole service's requests (none to take with one environment), or
    /// `Full` (counted) when every one is taken.
    pub(crate) fn admit(&self) -> Result<Option<OwnedSemaphorePermit>, Full> {
        let Some(whole) = &self.whole else { return Ok(None) };
        match whole.admit() {
            Some(place) => Ok(Some(place)),
            None => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                Err(Full)
            }
        }
    }

    /// The whole service's bound on requests admitted, for a refusal's message.
    pub(crate) fn capacity(&self) -> Option<usize> {
        self.whole.as_ref().map(Admission::capacity)
    }

    /// A whole-service running slot beside `own`, the environment's, once one is free; `None`
    /// when the service is stopping.
    pub(crate) async fn run(&self, own: OwnedSemaphorePermit) -> Option<Running> {
        match &self.whole {
            None => Some((own, None)),
            Some(whole) => Some((own, Some(whole.run().await?))),
        }
    }

    /// The environment named `name` (or, for `agent_ref.name`, one of its aliases), or why none
    /// is.
    pub(crate) fn named(&self, name: &str) -> Result<&Arc<Service>, String> {
        self.hosted.iter().find(|s| s.answers_to(name)).ok_or_else(|| {
            format!(
                "no environment `{name}` is served here; the environments are {} (name one in the row's \
                 `{FIELD}` or `agent_ref.name`)",
                self.names()
            )
        })
    }

    /// The hosted environments' names, quoted and joined, for messages.
    fn names(&self) -> String {
        self.hosted.iter().map(|s| format!("`{}`", s.name())).collect::<Vec<_>>().join(", ")
    }

    /// The environment a `/run` row (or a verify response, by the environment that played it)
    /// is for: see the module's docs.
    pub(crate) fn route(&self, row: &Value) -> Result<&Arc<Service>, String> {
        if let Some(only) = self.only() {
            return Ok(only);
        }
        for field in [ANSWERED_BY, FIELD] {
            match row.get(field) {
                None | Some(Value::Null) => {}
                Some(Value::String(name)) => return self.named(name),
                Some(other) => {
                    return Err(format!(
                        "`{field}` is the name of an environment served here ({}), not {other}",
                        self.names()
                    ));
                }
            }
        }
        match row.get("agent_ref").and_then(|r| r.get("name")) {
            None | Some(Value::Null) => Ok(self.default()),
            Some(Value::String(name)) if self.agent_name.as_ref() == Some(name) => Ok(self.default()),
            Some(Value::String(name)) => self.named(name),
            Some(other) => Err(format!("`agent_ref.name` is a name, not {other}")),
        }
    }

    /// `/metrics`: one environment's as it always was; several, each sample labelled with its
    /// environment, and the requests refused before their environment was known labelled
    /// with none (`environment=""`).
    pub(crate) fn render_metrics(&self) -> String {
        if let Some(only) = self.only() {
            return only.metrics.render();
        }
        let labelled: Vec<(&str, &crate::Metrics)> = self.hosted.iter().map(|s| (s.name(), &*s.metrics)).collect();
        crate::metrics::render_labelled(&labelled, self.refused.load(Ordering::Relaxed))
    }
}
