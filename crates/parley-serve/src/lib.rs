//! Parley as a service for RL trainers: NeMo Gym's agent-server contract (`GET /`,
//! `POST /run`, `POST /aggregate_metrics`) and OpenEnv's protocol (`openenv`: a trainer that
//! writes the agent's turns steps a session) over the runtime every front end shares, with
//! admission control, a bearer token off loopback, Prometheus metrics and a graceful drain.
//!
//! A `/run` body is a NeMo Gym task row; the answer is the verify response NeMo RL reads: the
//! row's fields, `response` (a Responses object whose output is the trajectory), `reward` and
//! the scorer's fields. Every served session is recorded turn by turn under one service run, so
//! `parley show`, `export` and `resume` work on it as on any run.
//!
//! A `/run`, step by step:
//!
//! - **Admission** (`admission`) is two semaphores: `admitted` (concurrency + queue), taken at
//!   once or the answer is 503 with `Retry-After`, before the body is read; `running`
//!   (concurrency), waited for by admitted requests. A service hosting several environments
//!   (`host`) has a bound of its own beside each environment's, and reads the body first to know
//!   the row's environment.
//! - **The row** is checked before any model call: a `policy_base_url` is taken out of it
//!   (`policy`); in an environment that brings its own tasks, a row naming one by `id` plays it
//!   ([`Runtime::served_task`](parley_runtime::Runtime::served_task)); a row the environment
//!   cannot run or score ([`Environment::check`](parley_core::Environment::check)) is a 400.
//! - **Its place**: `groups` makes copies of one row sharing `_ng_task_index` trials of one
//!   task; places are given and queued to the `recorder` under one lock, so a task's first
//!   session is never recorded after a later one. The recorder records and claims it under the
//!   runtime's owner in one store call.
//! - **The session** is the runtime's ([`Runtime::spawn`](parley_runtime::Runtime::spawn)), on a
//!   task of its own, with child tokens of the service's [`Stop`]. A drop guard in the handler
//!   aborts it when the client goes away: it ends cancelled, its turns kept, resumable.
//! - **The answer** is the runtime's [`Rollout`] row with the row's NeMo Gym indices as sent; a
//!   session that failed outside the agent is a 502 carrying its failure row, except a verifier's
//!   own failure (`verifier_failed`), which is a 200 masked with `instance_config.mask_sample`,
//!   as is a session whose simulated user's review found faults (named in `user_faults`); a
//!   session another process took over is a 409.
//!
//! Invariant: no command line and no terminal; the caller binds the listener, owns the stop
//! signal and gives the runtime.

mod admission;
mod aggregate;
mod groups;
mod host;
mod metrics;
mod observe;
mod offload;
mod openenv;
mod policy;
mod recorder;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use parley_core::nemo_gym::task_from_row;
use parley_core::{Agent, FailureClass, Player, RunId, SessionSpec, Task, ToolLists, stable_seed};
use parley_engine::{Job, Stop};
use parley_runtime::{Failure, Rollout, Runtime};
use serde_json::{Value, json};

use crate::admission::{Admission, Admitted};

pub use host::{DEFAULT, FIELD, Host};
pub use metrics::Metrics;

/// The largest request body taken (a `/run` row with its images, an OpenEnv step over HTTP);
/// a larger one is answered 413.
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// How the service admits and guards its requests.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Sessions run at once.
    pub concurrency: usize,
    /// Requests that may wait for a free slot; beyond them `/run` answers 503.
    pub queue: usize,
    /// The bearer token every request must carry, when set.
    pub token: Option<String>,
    /// Which names and web pages may reach the service.
    pub site: parley_http::guard::Site,
    /// Prefixes of the per-row policy URLs trusted with the service's API key.
    pub policy_url_allow: Vec<String>,
}

/// The service: the runtime and its service run, and what admits requests to it.
pub struct Service {
    /// The runtime whose parties are observed for the metrics, the scoring of an environment
    /// that computes kept off the I/O workers.
    runtime: Arc<Runtime>,
    run: RunId,
    /// The service run's tasks: one per prompt group, or per request without one.
    groups: groups::Groups,
    lists: std::sync::Mutex<ToolLists>,
    /// How many requests it admits (running or waiting) and runs at once.
    admission: Admission,
    options: ServeOptions,
    /// The name it is hosted under beside other environments (`Host`); `None` alone.
    name: Option<String>,
    /// Other names rows call it by in `agent_ref.name` (NeMo Gym agents bound to it).
    aliases: Vec<String>,
    /// Stops every session on shutdown; each request's session has its own child tokens.
    stop: Stop,
    pub metrics: Arc<Metrics>,
    /// OpenEnv's side: the tasks a reset picks from, the sessions it holds.
    hub: openenv::Hub,
    /// Agents for the policy URLs `/run` rows named.
    policies: policy::Policies,
    /// Records each request's session under the service run, a burst of them at once.
    recorder: recorder::Recorder,
}

impl Service {
    /// A service over `runtime`, recording its sessions in run `run` (created by the caller,
    /// with `tasks` tasks already in it).
    pub fn new(mut runtime: Runtime, run: RunId, tasks: usize, options: ServeOptions) -> Service {
        let metrics = Arc::new(Metrics::default());
        let mut parties = runtime.parties.clone();
        parties.environment = offload::offloaded(parties.environment);
        runtime.parties = observe::observed(&parties, &metrics);
        let runtime = Arc::new(runtime);
        let recorder = recorder::Recorder::spawn(Arc::clone(&runtime), run);
        Service {
            runtime,
            run,
            groups: groups::Groups::new(tasks),
            lists: std::sync::Mutex::new(ToolLists::default()),
            admission: Admission::new(options.concurrency, options.queue),
            name: None,
            aliases: Vec::new(),
            policies: policy::Policies::new(options.policy_url_allow.clone()),
            options,
            stop: Stop::default(),
            metrics,
            hub: openenv::Hub::default(),
            recorder,
        }
    }

    /// The tasks an OpenEnv reset picks from (the environment's own, or a task file's).
    pub fn with_tasks(mut self, tasks: Vec<Arc<Task>>) -> Service {
        self.hub = openenv::Hub::new(tasks);
        self
    }

    /// The name this environment is hosted under beside others: a `Host` routes rows and resets
    /// naming it here, and every answer names it in `_parley_environment`.
    pub fn named(mut self, name: impl Into<String>) -> Service {
        self.name = Some(name.into());
        self
    }

    /// Other names a row's `agent_ref.name` may call this environment by: the NeMo Gym agents
    /// a config binds to the resources server it is.
    pub fn also_named(mut self, aliases: Vec<String>) -> Service {
        self.aliases = aliases;
        self
    }

    /// Whether a row's `agent_ref.name` of `name` calls this environment.
    fn answers_to(&self, name: &str) -> bool {
        self.name() == name || self.aliases.iter().any(|a| a == name)
    }

    /// Shares `stop` with other services of one `Host`, so that one signal stops them all.
    pub fn with_stop(mut self, stop: Stop) -> Service {
        self.stop = stop;
        self
    }

    /// The environment's name: as hosted, or [`DEFAULT`].
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(DEFAULT)
    }

    /// The service run's id.
    pub fn run(&self) -> RunId {
        self.run
    }

    /// The runtime the service drives its sessions with.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Stops the sessions: `drain` lets each finish its turn, `abort` stops them at once.
    pub fn stop(&self) -> &Stop {
        &self.stop
    }

    /// The HTTP routes of this service alone: a [`Host`] of one environment.
    pub fn router(self: &Arc<Service>) -> Router {
        Arc::new(Host::new(vec![Arc::clone(self)], None)).router()
    }

    /// A 503 for a request this environment has no place for, counted.
    fn busy(&self) -> Response {
        self.metrics.refused();
        busy()
    }
}

/// The answer to a request no place is free for.
fn busy() -> Response {
    let mut busy = problem(StatusCode::SERVICE_UNAVAILABLE, "every slot and the queue are full; try again");
    busy.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    busy
}

/// The routes every service has, over its host.
fn routes(host: &Arc<Host>) -> Router {
    Router::new()
        .route("/", get(|| async { "parley serve\n" }))
        .route("/run", post(run))
        .route("/aggregate_metrics", post(aggregate::aggregate_metrics))
        .route("/metrics", get(prometheus))
        .merge(openenv::routes())
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(host), authorize))
        .with_state(Arc::clone(host))
}

/// Refuses a request that a web page of another site sent (or that names another host, on
/// loopback), and one without the service's bearer token, when it has one. `GET /health` needs
/// no token: it tells only that the service is up, and a cluster's probes carry none. The
/// environments of one host share the guard: the default's options are the service's.
async fn authorize(State(host): State<Arc<Host>>, request: Request, next: Next) -> Response {
    let service = host.default();
    if let Err(why) = service.options.site.check(request.headers()) {
        return problem(StatusCode::FORBIDDEN, why);
    }
    let health = request.method() == axum::http::Method::GET && request.uri().path() == "/health";
    if let Some(token) = service.options.token.as_ref().filter(|_| !health)
        && !parley_http::guard::carries_bearer(request.headers(), token)
    {
        let mut refused = (StatusCode::UNAUTHORIZED, "a bearer token is required\n").into_response();
        refused.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return refused;
    }
    next.run(request).await
}

/// An answer with a JSON body naming what went wrong.
fn problem(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({"error": message.into()}))).into_response()
}

/// `POST /run`: one whole rollout of the task row in the body, in the environment it names.
async fn run(State(host): State<Arc<Host>>, body: Bytes) -> Response {
    let started = Instant::now();
    // Admission first: an overloaded service answers at once, whatever the body. With one
    // environment the row's is known before its body is read.
    let Ok(whole) = host.admit() else { return busy() };
    let early = match host.only() {
        Some(service) => match service.admission.admit() {
            Some(own) => Some((Arc::clone(service), own)),
            None => return service.busy(),
        },
        None => None,
    };
    let row: Value = match serde_json::from_slice(&body) {
        Ok(row @ Value::Object(_)) => row,
        Ok(other) => {
            return problem(
                StatusCode::BAD_REQUEST,
                format!("the body must be a task row (a JSON object), not {other}"),
            );
        }
        Err(e) => return problem(StatusCode::BAD_REQUEST, format!("the body is not JSON: {e}")),
    };
    let (service, own) = match early {
        Some(early) => early,
        None => {
            let service = match host.route(&row) {
                Ok(service) => Arc::clone(service),
                Err(why) => return problem(StatusCode::BAD_REQUEST, why),
            };
            match service.admission.admit() {
                Some(own) => (service, own),
                None => return service.busy(),
            }
        }
    };
    service.serve_row(&host, row, Admitted::new(own, whole), started).await
}

impl Service {
    /// Checks a row admitted to this environment, waits for a running slot (this
    /// environment's, then the whole's) and drives its session.
    async fn serve_row(
        self: &Arc<Service>,
        host: &Host,
        mut row: Value,
        admitted: Admitted,
        started: Instant,
    ) -> Response {
        let service = self;
        let agent = match policy::take(&mut row) {
            Ok(None) => None,
            Ok(Some(url)) => match service.policies.agent(&service.runtime, &url) {
                Ok(agent) => Some((agent, service.policies.trusted(&url))),
                Err(e) => return problem(StatusCode::BAD_REQUEST, format!("`{}`: {e}", policy::FIELD)),
            },
            Err(e) => return problem(StatusCode::BAD_REQUEST, e.to_string()),
        };
        let group = groups::key(&row);
        // Its index in the service run is given when it is recorded.
        let task = match task_from_row(0, row) {
            Ok(task) => service.runtime.served_task(task),
            Err(e) => return problem(StatusCode::BAD_REQUEST, format!("the body is not a NeMo Gym task row: {e}")),
        };
        // A row that cannot be run or scored is the trainer's data, refused before any model call.
        if let Err(why) = service.runtime.parties.environment.check(&task) {
            let env = &service.runtime.settings.env;
            return problem(StatusCode::BAD_REQUEST, format!("the row cannot be run in {env}: {why}"));
        }
        service.metrics.queued(1);
        let running = match service.admission.run().await {
            Some(own) => host.run(own).await,
            None => None,
        };
        service.metrics.queued(-1);
        let Some(running) = running else {
            return problem(StatusCode::SERVICE_UNAVAILABLE, "the service is stopping");
        };
        let answer = drive(service, task, group, agent).await;
        drop((running, admitted));
        service.metrics.run_took(started.elapsed());
        answer
    }
}

/// Records the task's session under the service run (a trial of its prompt group's task, when
/// it has one), drives it on a task of its own (with `agent`, the rollout's own policy, when the
/// row named one), and answers with its verify response. When the client goes away, the
/// handler is dropped: the guard stops the session, which ends `cancelled` with its committed
/// turns, resumable.
async fn drive(
    service: &Arc<Service>,
    mut task: Task,
    group: Option<u64>,
    agent: Option<(Arc<dyn Agent>, bool)>,
) -> Response {
    // What an untrusted policy URL answered is not quoted back to the client that named it.
    let untrusted_policy = agent.as_ref().is_some_and(|(_, trusted)| !trusted);
    let player = if agent.is_some() { Player::RowPolicy } else { Player::Run };
    let (task, spec, claim) = service.groups.place(group, |place| {
        task.index = place.task_index;
        let task = Arc::new(match service.lists.lock() {
            Ok(mut lists) => lists.share(task),
            Err(_) => task,
        });
        let seed = stable_seed(&task.id, place.trial);
        let spec = SessionSpec { task_index: place.task_index, trial: place.trial, seed, player };
        let claim = service.recorder.enqueue(Arc::clone(&task), place.new_task, spec);
        (task, spec, claim)
    });
    let claim = match claim.await {
        Ok(claim) => claim,
        Err(why) => return problem(StatusCode::INTERNAL_SERVER_ERROR, why),
    };
    let job = Job::new(claim, task, spec, None);
    let stop = Stop { drain: service.stop.drain.child_token(), abort: service.stop.abort.child_token() };
    let _on_disconnect = stop.abort.clone().drop_guard();
    let agent = agent.map(|(agent, _)| observe::agent(agent, &service.metrics));
    // The session runs on a task of its own: it ends and is recorded even when the client is
    // gone, and a panic in it is contained to it and recorded.
    service.metrics.started();
    let counted = Arc::clone(service);
    let session = service.runtime.spawn(job, agent, stop, move |result| {
        counted.metrics.ended(&result.outcome);
    });
    let result = match session.await {
        Ok(result) => result,
        Err(e) => return problem(StatusCode::INTERNAL_SERVER_ERROR, format!("the session was lost: {e}")),
    };
    let outcome = &result.outcome;
    if result.taken_over {
        return problem(StatusCode::CONFLICT, "another process took the session over");
    }
    let verifier_failed = outcome.failure == Some(FailureClass::VerifierFailed);
    if outcome.termination.is_infrastructure() && !verifier_failed {
        // A 5xx is an infrastructure failure to the trainer, never a reward of 0.
        let mut failure = Failure::of_result(service.run, &result).row(&result.task.row);
        as_sent(&mut failure, result.task.row.fields());
        if let (true, Some(map)) = (untrusted_policy, failure.as_object_mut()) {
            let class = outcome.failure.map_or("failure", |c| c.as_str());
            let message = format!("the rollout's policy URL failed ({class}); its answer is not quoted");
            map.insert("_ng_failure_message".into(), json!(message));
        }
        return (StatusCode::BAD_GATEWAY, axum::Json(failure)).into_response();
    }
    let mut row = Rollout::from(&result).row(&service.runtime.settings.model);
    as_sent(&mut row, result.task.row.fields());
    if let Some(map) = row.as_object_mut() {
        if verifier_failed {
            // The trajectory is sound and only its verdict failed: the trainer gets it, masked
            // from the loss (NeMo RL reads `instance_config.mask_sample`), with reward 0.
            parley_core::nemo_gym::mask(map);
            map.insert("failure_kind".into(), json!(FailureClass::VerifierFailed.as_str()));
            map.insert("failure_reason".into(), json!(outcome.error));
        }
        if !outcome.user_faults.is_empty() {
            // The simulated user failed its part: its reward says more of the simulator than of
            // the policy, so the sample is masked from the loss, the faults named beside it.
            parley_core::nemo_gym::mask(map);
            map.insert("user_faults".into(), json!(outcome.user_faults));
        }
        map.insert("_parley_run".into(), json!(service.run));
        map.insert("_parley_session".into(), json!(result.id));
        if let Some(name) = &service.name {
            map.insert(host::ANSWERED_BY.into(), json!(name));
        }
    }
    axum::Json(row).into_response()
}

/// NeMo Gym's indices of a row come back as the trainer sent them: NeMo RL groups a prompt's
/// rollouts by `_ng_task_index` and logs by both.
fn as_sent(answer: &mut Value, sent: &Value) {
    for key in ["_ng_task_index", "_ng_rollout_index"] {
        if let (Some(value), Some(map)) = (sent.get(key), answer.as_object_mut()) {
            map.insert(key.to_owned(), value.clone());
        }
    }
}

/// `GET /metrics`: Prometheus text, each sample labelled with its environment when the service
/// hosts several.
async fn prometheus(State(host): State<Arc<Host>>) -> impl IntoResponse {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    (headers, host.render_metrics())
}
