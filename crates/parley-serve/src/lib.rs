//! Parley as a service for RL trainers: NeMo Gym's agent-server contract (`GET /`,
//! `POST /run`, `POST /aggregate_metrics`) over the runtime every front end shares, with
//! admission control, a bearer token off loopback, Prometheus metrics and a graceful drain.
//!
//! A `/run` body is a NeMo Gym task row; the answer is the verify response NeMo RL reads: the
//! row's fields, `response` (a Responses object whose output is the trajectory), `reward` and
//! the scorer's fields. Every served session is recorded turn by turn under one service run, so
//! `parley show`, `export` and `resume` work on it as on any run.
//!
//! Invariant: no command line and no terminal; the caller binds the listener, owns the stop
//! signal and gives the runtime.

mod metrics;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use parley_core::nemo_gym::task_from_row;
use parley_core::{RunId, SessionSpec, Task, ToolLists, stable_seed};
use parley_engine::{Job, Stop, run_session};
use parley_runtime::{Failure, Rollout, RunSettings, Runtime};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

pub use metrics::Metrics;

/// How the service admits and guards its requests.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Sessions run at once.
    pub concurrency: usize,
    /// Requests that may wait for a free slot; beyond them `/run` answers 503.
    pub queue: usize,
    /// The bearer token every request must carry, when set.
    pub token: Option<String>,
}

/// The service: the runtime and its service run, and what admits requests to it.
pub struct Service {
    runtime: Arc<Runtime>,
    settings: RunSettings,
    run: RunId,
    /// Task indexes of the service run, one per request.
    next_task: AtomicUsize,
    lists: std::sync::Mutex<ToolLists>,
    /// Requests admitted: running or waiting (at most concurrency + queue).
    admitted: Arc<Semaphore>,
    /// Requests running (at most concurrency).
    running: Arc<Semaphore>,
    options: ServeOptions,
    /// Stops every session on shutdown; each request's session has its own child tokens.
    stop: Stop,
    pub metrics: Metrics,
}

impl Service {
    /// A service over `runtime`, recording its sessions in run `run` (created by the caller,
    /// with `tasks` tasks already in it).
    pub fn new(
        runtime: Arc<Runtime>,
        settings: RunSettings,
        run: RunId,
        tasks: usize,
        options: ServeOptions,
    ) -> Service {
        Service {
            runtime,
            settings,
            run,
            next_task: AtomicUsize::new(tasks),
            lists: std::sync::Mutex::new(ToolLists::default()),
            admitted: Arc::new(Semaphore::new(options.concurrency + options.queue)),
            running: Arc::new(Semaphore::new(options.concurrency)),
            options,
            stop: Stop::default(),
            metrics: Metrics::default(),
        }
    }

    /// The service run's id.
    pub fn run(&self) -> RunId {
        self.run
    }

    /// Stops the sessions: `drain` lets each finish its turn, `abort` stops them at once.
    pub fn stop(&self) -> &Stop {
        &self.stop
    }

    /// The HTTP routes.
    pub fn router(self: &Arc<Service>) -> Router {
        Router::new()
            .route("/", get(|| async { "parley serve\n" }))
            .route("/run", post(run))
            .route("/aggregate_metrics", post(aggregate_metrics))
            .route("/metrics", get(prometheus))
            .layer(axum::middleware::from_fn_with_state(Arc::clone(self), authorize))
            .with_state(Arc::clone(self))
    }
}

/// Refuses a request without the service's bearer token, when it has one.
async fn authorize(State(service): State<Arc<Service>>, request: Request, next: Next) -> Response {
    if let Some(token) = &service.options.token {
        let given = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if given.and_then(|v| v.strip_prefix("Bearer ")) != Some(token.as_str()) {
            let mut refused = (StatusCode::UNAUTHORIZED, "a bearer token is required\n").into_response();
            refused.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return refused;
        }
    }
    next.run(request).await
}

/// An answer with a JSON body naming what went wrong.
fn problem(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({"error": message.into()}))).into_response()
}

/// `POST /run`: one whole rollout of the task row in the body.
async fn run(State(service): State<Arc<Service>>, body: Bytes) -> Response {
    let started = Instant::now();
    // Admission first: an overloaded service answers at once, whatever the body.
    let Ok(admitted) = Arc::clone(&service.admitted).try_acquire_owned() else {
        service.metrics.refused();
        let mut busy = problem(StatusCode::SERVICE_UNAVAILABLE, "every slot and the queue are full; try again");
        busy.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return busy;
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
    let index = service.next_task.fetch_add(1, Ordering::Relaxed);
    let task = match task_from_row(index, row) {
        Ok(task) => task,
        Err(e) => return problem(StatusCode::BAD_REQUEST, format!("the body is not a NeMo Gym task row: {e}")),
    };
    let task = Arc::new(match service.lists.lock() {
        Ok(mut lists) => lists.share(task),
        Err(_) => task,
    });
    service.metrics.queued(1);
    let running = Arc::clone(&service.running).acquire_owned().await;
    service.metrics.queued(-1);
    let Ok(running) = running else {
        return problem(StatusCode::SERVICE_UNAVAILABLE, "the service is stopping");
    };
    let answer = drive(&service, task).await;
    drop((running, admitted));
    service.metrics.run_took(started.elapsed());
    answer
}

/// Records the task's session under the service run, drives it on a task of its own, and
/// answers with its verify response. When the client goes away, the handler is dropped: the
/// guard stops the session, which ends `cancelled` with its committed turns, resumable.
async fn drive(service: &Arc<Service>, task: Arc<Task>) -> Response {
    let store = &service.runtime.store;
    let spec = SessionSpec { task_index: task.index, trial: 0, seed: stable_seed(&task.id, 0) };
    let claims = match store
        .extend_run(service.run, &[Arc::clone(&task)], std::slice::from_ref(&spec), Some(&service.runtime.owner))
        .await
    {
        Ok(claims) => claims,
        Err(e) => return problem(StatusCode::INTERNAL_SERVER_ERROR, format!("recording the session: {e}")),
    };
    let Some(claim) = claims.first() else {
        return problem(StatusCode::INTERNAL_SERVER_ERROR, "the store recorded no session");
    };
    let job = Job { id: claim.session, fence: claim.fence, task, trial: 0, seed: spec.seed, prior: None };
    let stop = Stop { drain: service.stop.drain.child_token(), abort: service.stop.abort.child_token() };
    let _on_disconnect = stop.abort.clone().drop_guard();
    let (parties, limits) = (service.runtime.parties.clone(), service.settings.limits());
    // The session runs on a task of its own: it ends and is recorded even when the client is
    // gone, and a panic in it is contained to it.
    service.metrics.started();
    let counted = Arc::clone(service);
    let session = tokio::spawn(tracing::Instrument::instrument(
        async move {
            let result = run_session(&parties, job, &limits, &stop).await;
            let outcome = &result.outcome;
            counted.metrics.ended(outcome.termination.as_str(), outcome.failure.map(|c| c.as_str()));
            result
        },
        tracing::info_span!("served_session", run = service.run),
    ));
    let result = match session.await {
        Ok(result) => result,
        Err(e) => {
            service.metrics.ended("infrastructure_error", Some("panic"));
            return problem(StatusCode::INTERNAL_SERVER_ERROR, format!("the session panicked: {e}"));
        }
    };
    let outcome = &result.outcome;
    if result.taken_over {
        return problem(StatusCode::CONFLICT, "another process took the session over");
    }
    if outcome.termination.is_infrastructure() {
        // A 5xx is an infrastructure failure to the trainer, never a reward of 0.
        let failure = Failure::of_result(service.run, &result).row(&result.task.row);
        return (StatusCode::BAD_GATEWAY, axum::Json(failure)).into_response();
    }
    let mut row = Rollout::from(&result).row(&service.settings.model);
    if let Some(map) = row.as_object_mut() {
        map.insert("_parley_run".into(), json!(service.run));
        map.insert("_parley_session".into(), json!(result.id));
    }
    axum::Json(row).into_response()
}

/// `POST /aggregate_metrics`: the mean of every numeric field over the verify responses sent
/// (NeMo Gym's collector asks agents for it at the end of a collection).
async fn aggregate_metrics(body: Bytes) -> Response {
    let rows: Vec<Value> = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Array(rows)) => rows,
        Ok(Value::Object(mut map)) => match map.remove("verify_responses").or_else(|| map.remove("rows")) {
            Some(Value::Array(rows)) => rows,
            _ => Vec::new(),
        },
        Ok(_) => Vec::new(),
        Err(e) => return problem(StatusCode::BAD_REQUEST, format!("the body is not JSON: {e}")),
    };
    let mut sums: std::collections::BTreeMap<String, (f64, usize)> = std::collections::BTreeMap::new();
    for row in &rows {
        for (key, value) in row.as_object().into_iter().flatten() {
            if let Some(n) = value.as_f64().filter(|_| !value.is_boolean()) {
                let entry = sums.entry(key.clone()).or_default();
                entry.0 += n;
                entry.1 += 1;
            }
        }
    }
    let means: serde_json::Map<String, Value> =
        sums.into_iter().map(|(k, (sum, n))| (format!("mean/{k}"), json!(sum / n as f64))).collect();
    axum::Json(json!({"count": rows.len(), "metrics": means})).into_response()
}

/// `GET /metrics`: Prometheus text.
async fn prometheus(State(service): State<Arc<Service>>) -> impl IntoResponse {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    (headers, service.metrics.render())
}
