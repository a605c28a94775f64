//! OpenEnv's protocol, for trainers that keep the loop and write the agent's turns themselves
//! (TRL, Unsloth, SkyRL, ART, Oumi, torchforge through `openenv-core`; NeMo RL's
//! `EnvironmentInterface.step` has the same shape).
//!
//! Routes: `GET /health`, `/schema`, `/metadata`, `/openapi.json`, `POST /reset`, `POST /step`,
//! `GET /state`, `POST /mcp` (a JSON-RPC error saying tools are called within a session), and
//! the WebSocket `/ws`, whose frames are `{type: reset|step|state|close, data}`, answered by
//! `{type: observation|state|error, data}`. A WebSocket connection holds one session at a time;
//! when it drops, its session is cancelled with its committed turns kept, and a reset naming
//! its `session_id` (on any connection) continues it. OpenEnv's own HTTP `/reset` and `/step`
//! keep no session between requests; Parley's do, by id: `/reset` answers the `session_id`,
//! which `/step` (in its body) and `/state` (`?session_id=`) name. An HTTP session ends as any
//! session does, at the latest by its time limit (`--session-timeout`).
//!
//! A service hosting several environments (`host`) serves each one's sessions on the same
//! routes: a reset names its environment in its data's `environment` (the default otherwise),
//! a step or state finds the session in whichever environment holds it, and `/schema` and
//! `/metadata` list the environments.
//!
//! A reset picks a task of the environment (by `task_index`, `task_id`, or `seed` modulo the
//! number of tasks; the next in turn when it names none) and a `trial`, records the session
//! under the service run and answers the first observation: the messages the agent sees and the
//! tools. A step is one assistant message. Everything else is the engine's, as in a run.
//!
//! The tasks a reset picks from are read whole when the service starts ([`Hub`]). A WebSocket
//! connection's frames are read on a task of their own, so pings are answered and a client that
//! goes away is noticed mid-step; each frame carries the instant it was read, where a step's
//! time in `/metrics` starts (it ends with the observation written). A connection that drops
//! cancels its session (committed turns kept) and leaves it in `Hub::dropped`, from which a
//! reset naming it continues it with the same `Prior` a resume uses.

mod episode;
mod wire;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message as Frame, WebSocket, WebSocketUpgrade};
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{SinkExt, StreamExt};
use parley_core::{Player, SessionId, SessionSpec, Task, Termination, stable_seed};
use parley_runtime::curriculum::{Learnable, Sampler};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use self::episode::{Episode, Resumable, StepRefused};
use self::wire::Invalid;
use crate::admission::Admitted;
use crate::host::FIELD;
use crate::metrics::Action;
use crate::{Host, Service};

/// How long an HTTP session that has ended stays readable by `GET /state`.
const ENDED_KEPT: Duration = Duration::from_secs(300);
/// The largest frame `/ws` reads: an action is one message.
const MAX_FRAME: usize = 16 << 20;

/// The OpenEnv side of the service: the tasks a reset picks from and the sessions it holds.
#[derive(Default)]
pub(crate) struct Hub {
    tasks: Vec<Arc<Task>>,
    /// The next task for a reset that names none.
    next: std::sync::atomic::AtomicUsize,
    /// With `--sampler learnable`, what a reset that names no task draws from instead: the
    /// tasks by their outcomes (the store's earlier runs of the environment, then every episode
    /// that ends here), made at the first such reset.
    learnable: tokio::sync::OnceCell<Mutex<Learnable>>,
    /// Sessions whose connection dropped, by id, until a reset continues them. `recorded` turns
    /// true once the session's cancellation is committed.
    dropped: Mutex<HashMap<SessionId, (Resumable, watch::Receiver<bool>)>>,
    /// Sessions driven over HTTP, by id.
    http: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<Episode>>>>,
    reaper: std::sync::OnceLock<()>,
}

impl Hub {
    pub(crate) fn new(tasks: Vec<Arc<Task>>) -> Hub {
        Hub { tasks, ..Hub::default() }
    }
}

/// The routes, under the service's bearer-token check.
pub(crate) fn routes() -> Router<Arc<Host>> {
    Router::new()
        .route("/health", get(|| async { axum::Json(json!({"status": "healthy"})) }))
        .route("/schema", get(schema))
        .route("/metadata", get(metadata))
        .route("/reset", post(http_reset))
        .route("/step", post(http_step))
        .route("/state", get(http_state))
        .route("/ws", get(ws))
        .route("/openapi.json", get(|| async { axum::Json(wire::openapi()) }))
        .route("/mcp", post(mcp))
}

/// `POST /mcp`: OpenEnv's MCP route answers JSON-RPC. Parley offers its tools through sessions
/// (`/reset`, `/step`, `/ws`), not bare: every request is answered with a JSON-RPC error that
/// says so (or that it is not JSON-RPC), so a client learns it at once.
async fn mcp(body: Bytes) -> Response {
    let request: Option<Value> = serde_json::from_slice(&body).ok();
    let (code, message, id) = match &request {
        None => (-32700, "Parse error: the body is not JSON".to_owned(), Value::Null),
        Some(Value::Object(r))
            if r.get("jsonrpc") == Some(&json!("2.0")) && r.get("method").is_some_and(Value::is_string) =>
        {
            (
                -32601,
                format!(
                    "Method not found: {}; Parley's tools are called within a session (POST /reset and /step, or /ws)",
                    r["method"]
                ),
                r.get("id").cloned().unwrap_or(Value::Null),
            )
        }
        Some(_) => {
            (-32600, "Invalid Request: a JSON-RPC 2.0 request has `jsonrpc` and `method`".to_owned(), Value::Null)
        }
    };
    axum::Json(json!({"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": id})).into_response()
}

/// `GET /schema`: OpenEnv's schemas; in a service of several environments, with each
/// environment a reset may name.
async fn schema(State(host): State<Arc<Host>>) -> Response {
    let mut schemas = wire::schemas();
    if host.hosted().len() > 1 {
        schemas["environments"] = environments(&host);
    }
    axum::Json(schemas).into_response()
}

/// What each hosted environment is, by name: its kind, its tasks and its service run.
fn environments(host: &Host) -> Value {
    host.hosted()
        .iter()
        .map(|s| {
            let about = json!({
                "env": s.runtime.settings.env.to_string(),
                "tasks": s.hub.tasks.len(),
                "run": s.run,
                "concurrency": s.admission.concurrency,
                "queue": s.admission.queue,
            });
            (s.name().to_owned(), about)
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

async fn metadata(State(host): State<Arc<Host>>) -> Response {
    let service = host.default();
    let mut metadata = json!({
        "name": format!("parley {}", service.runtime.settings.env),
        "description": format!(
            "Parley serving {} ({} tasks) with its simulated user; an action is one assistant message, \
             an observation what the agent sees next. Sessions are stored in run {}.",
            service.runtime.settings.env,
            service.hub.tasks.len(),
            service.run
        ),
        "readme_content": null,
        "version": env!("CARGO_PKG_VERSION"),
        "author": null,
        "documentation_url": null,
    });
    if host.hosted().len() > 1 {
        metadata["default_environment"] = json!(service.name());
        metadata["environments"] = environments(&host);
    }
    axum::Json(metadata).into_response()
}

/// Why a reset or step was refused.
enum Refusal {
    /// The request is malformed: each bad field named.
    Invalid(Vec<Invalid>),
    /// Every slot for a session is taken.
    Capacity(usize),
    /// The session named cannot be driven here.
    Unknown(String),
    /// The episode has ended.
    Done,
    /// A step before any reset.
    NoEpisode,
    /// Something outside the request failed (the store).
    Failed(String),
}

impl Refusal {
    fn message(&self) -> String {
        match self {
            Refusal::Invalid(problems) => {
                let sentences: Vec<String> = problems.iter().map(Invalid::sentence).collect();
                format!("invalid message: {}", sentences.join("; "))
            }
            Refusal::Capacity(max) => {
                format!(
                    "all {max} session slots are taken; close a session or start `parley serve` with a larger --concurrency or --queue"
                )
            }
            Refusal::Unknown(why) | Refusal::Failed(why) => why.clone(),
            Refusal::Done => "the episode is done; reset to start another".into(),
            Refusal::NoEpisode => "no episode yet: send a reset first".into(),
        }
    }

    /// The WebSocket error frame, in OpenEnv's shape.
    fn frame(&self) -> Value {
        let code = match self {
            Refusal::Invalid(_) => "VALIDATION_ERROR",
            Refusal::Capacity(_) => "CAPACITY_REACHED",
            Refusal::Unknown(_) | Refusal::NoEpisode => "SESSION_ERROR",
            Refusal::Done | Refusal::Failed(_) => "EXECUTION_ERROR",
        };
        let mut data = json!({"message": self.message(), "code": code});
        if let Refusal::Invalid(problems) = self {
            data["errors"] = problems.iter().map(Invalid::to_json).collect();
        }
        json!({"type": "error", "data": data})
    }

    /// The HTTP answer, in FastAPI's shape (`{"detail": ...}`; a list of errors for a 422).
    fn response(&self, under: &[Value]) -> Response {
        let (status, detail) = match self {
            Refusal::Invalid(problems) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                problems.iter().map(|p| p.clone().under(under).to_json()).collect::<Value>(),
            ),
            Refusal::Capacity(_) => (StatusCode::SERVICE_UNAVAILABLE, json!(self.message())),
            Refusal::Unknown(_) | Refusal::NoEpisode => (StatusCode::NOT_FOUND, json!(self.message())),
            Refusal::Done => (StatusCode::CONFLICT, json!(self.message())),
            Refusal::Failed(_) => (StatusCode::INTERNAL_SERVER_ERROR, json!(self.message())),
        };
        let mut response = (status, axum::Json(json!({"detail": detail}))).into_response();
        if let Refusal::Capacity(_) = self {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
        }
        response
    }
}

/// Starts the session a reset asks for, in the environment it names: a new one on a task of the
/// environment, or one that a dropped connection left (in the environment that holds it).
async fn reset(host: &Arc<Host>, data: &Value) -> Result<(Arc<Service>, Episode, Value), Refusal> {
    let mut data = data.clone();
    let named = match data.as_object_mut().and_then(|d| d.remove(FIELD)) {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(name),
        Some(other) => {
            let msg = format!("`{FIELD}` is the name of an environment served here, not {other}");
            return Err(Refusal::Invalid(vec![Invalid::new(vec![json!(FIELD)], "string_type", msg)]));
        }
    };
    let request = wire::reset_request(&data).map_err(Refusal::Invalid)?;
    let service = match &named {
        Some(name) => host
            .named(name)
            .map_err(|why| Refusal::Invalid(vec![Invalid::new(vec![json!(FIELD)], "value_error", why)]))?,
        None => request
            .session_id
            .and_then(|id| host.hosted().iter().find(|s| s.hub.dropped.lock().is_ok_and(|d| d.contains_key(&id))))
            .unwrap_or_else(|| host.default()),
    };
    let service = Arc::clone(service);
    if service.stop.is_stopping() {
        return Err(Refusal::Failed("the service is stopping: it starts no session".into()));
    }
    let Ok(whole) = host.admit() else {
        return Err(Refusal::Capacity(host.capacity().unwrap_or_else(|| service.admission.capacity())));
    };
    let Some(own) = service.admission.admit() else {
        return Err(Refusal::Capacity(service.admission.capacity()));
    };
    let permit = Admitted::new(own, whole);
    let (episode, observation) = reset_in(&service, request, permit).await?;
    Ok((service, episode, observation))
}

/// [`reset`] in the environment `service`, its places taken.
async fn reset_in(
    service: &Arc<Service>,
    request: wire::ResetRequest,
    permit: Admitted,
) -> Result<(Episode, Value), Refusal> {
    if let Some(id) = request.session_id {
        // Only the trainer that holds the session's key continues it; to anyone else a session
        // is as unknown as one that never was.
        let given = request.session_key.as_deref().unwrap_or_default();
        let (mut start, recorded) = service
            .hub
            .dropped
            .lock()
            .ok()
            .and_then(|mut d| {
                let held =
                    d.get(&id).is_some_and(|(s, _)| parley_http::guard::same(s.key.as_bytes(), given.as_bytes()));
                held.then(|| d.remove(&id)).flatten()
            })
            .ok_or_else(|| {
                Refusal::Unknown(format!(
                    "session {id} is not one this service can continue: only a session of this service whose \
                 connection dropped before it ended can be (one of a service that stopped is closed by `parley \
                 resume`, never continued by another policy)"
                ))
            })?;
        let mut recorded = recorded;
        let _ = recorded.wait_for(|done| *done).await;
        let transcript = service
            .runtime
            .store
            .transcript(id)
            .await
            .map_err(|e| Refusal::Failed(format!("reading session {id}'s transcript: {e}")))?;
        if request.episode_id.is_some() {
            start.episode_id = request.episode_id;
        }
        return Ok(Episode::start(service, start, Some(parley_runtime::prior(transcript)), permit).await);
    }
    let tasks = &service.hub.tasks;
    if tasks.is_empty() {
        return Err(Refusal::Failed(format!(
            "the environment {} brings no tasks: start `parley serve` with --tasks FILE, or an environment with \
             tasks of its own (--env tau2:airline)",
            service.runtime.settings.env
        )));
    }
    let index = if let Some(index) = request.task_index {
        if index >= tasks.len() {
            let msg = format!("there are {} tasks, numbered from 0; {index} is past them", tasks.len());
            return Err(Refusal::Invalid(vec![Invalid::new(vec![json!("task_index")], "less_than", msg)]));
        }
        index
    } else if let Some(id) = &request.task_id {
        tasks.iter().position(|t| &t.id == id).ok_or_else(|| {
            let msg = format!("no task has the id `{id}` in {}", service.runtime.settings.env);
            Refusal::Invalid(vec![Invalid::new(vec![json!("task_id")], "value_error", msg)])
        })?
    } else if let Some(seed) = request.seed {
        (seed % tasks.len() as u64) as usize
    } else if let Some(learnable) = learnable(service).await? {
        learnable.lock().unwrap_or_else(std::sync::PoisonError::into_inner).draw()
    } else {
        service.hub.next.fetch_add(1, Ordering::Relaxed) % tasks.len()
    };
    let recorded_index = service.groups.fresh();
    let task = Arc::new(Task { index: recorded_index, ..Task::clone(&tasks[index]) });
    let seed = stable_seed(&task.id, request.trial);
    let spec = SessionSpec { task_index: recorded_index, trial: request.trial, seed, player: Player::Trainer };
    let claim = service.recorder.record(Arc::clone(&task), spec).await.map_err(Refusal::Failed)?;
    let start = Resumable {
        id: claim.session,
        fence: claim.fence,
        task,
        catalogue_index: index,
        trial: request.trial,
        seed,
        episode_id: request.episode_id,
        key: episode::new_key(),
    };
    Ok(Episode::start(service, start, None, permit).await)
}

/// Lets go of an episode whose trainer went away: the session is cancelled where it is, and a
/// reset naming it continues it once its cancellation is committed.
fn detach(service: &Arc<Service>, episode: Episode) {
    let Some((start, handle)) = episode.detach() else { return };
    let id = start.id;
    let (recorded, watcher) = watch::channel(false);
    if let Ok(mut dropped) = service.hub.dropped.lock() {
        dropped.insert(id, (start, watcher));
    }
    let service = Arc::clone(service);
    tokio::spawn(tracing::Instrument::instrument(
        async move {
            let resumable = match handle.await {
                Ok(result) => result.outcome.termination == Termination::Cancelled && !result.taken_over,
                Err(_) => false,
            };
            if !resumable && let Ok(mut dropped) = service.hub.dropped.lock() {
                // It ended before the stop reached it: it is finished, nothing to continue.
                dropped.remove(&id);
            }
            let _ = recorded.send(true);
        },
        tracing::info_span!("openenv_detach", session = id),
    ));
}

/// `GET /ws`: one WebSocket connection, one session at a time.
async fn ws(State(host): State<Arc<Host>>, upgrade: WebSocketUpgrade) -> Response {
    upgrade.max_message_size(MAX_FRAME).on_upgrade(move |socket| connection(host, socket))
}

/// A connection's episode, with the environment that plays it.
type Held = Option<(Arc<Service>, Episode)>;

/// One connection. Its frames are read on a task of their own, so that pings are answered and
/// a client that goes away is noticed while a step is under way (a simulated user's reply can
/// take longer than a client waits for a pong).
async fn connection(host: Arc<Host>, socket: WebSocket) {
    let stop = host.stop().clone();
    let (mut sink, mut stream) = socket.split();
    // Each frame with the instant it was read off the connection, where a step's time starts;
    // or why the connection is closed: a frame that could not be read.
    let (frames_tx, mut frames) = mpsc::channel::<Result<(String, Instant), CloseFrame>>(8);
    let gone = CancellationToken::new();
    let reader = tokio::spawn({
        let gone = gone.clone();
        async move {
            while let Some(frame) = stream.next().await {
                let text = match frame {
                    Ok(Frame::Text(text)) => text.to_string(),
                    Ok(Frame::Binary(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
                    Ok(Frame::Ping(_) | Frame::Pong(_)) => continue,
                    Ok(Frame::Close(_)) => break,
                    Err(e) => {
                        let _ = frames_tx.send(Err(unreadable(&e))).await;
                        return;
                    }
                };
                if frames_tx.send(Ok((text, Instant::now()))).await.is_err() {
                    break;
                }
            }
            gone.cancel();
        }
    });
    let mut episode: Held = None;
    loop {
        let (text, read) = tokio::select! {
            frame = frames.recv() => match frame {
                Some(Ok(frame)) => frame,
                // The client is told why, in the close frame, before the connection goes.
                Some(Err(why)) => {
                    let _ = sink.send(Frame::Close(Some(why))).await;
                    break;
                }
                None => break,
            },
            () = stop.abort.cancelled() => break,
        };
        let answered = tokio::select! {
            answered = answer(&host, &mut episode, &text) => answered,
            () = gone.cancelled() => break,
            () = stop.abort.cancelled() => break,
        };
        if answered.close || sink.send(Frame::Text(answered.reply.to_string().into())).await.is_err() {
            break;
        }
        if let (Some(action), Some((service, _))) = (answered.step, &episode) {
            service.metrics.step_took(action, read.elapsed());
        }
    }
    reader.abort();
    if let Some((service, episode)) = episode {
        detach(&service, episode);
    }
}

/// The close frame for a frame that could not be read: 1009 (too big) for one over
/// [`MAX_FRAME`], 1002 (protocol error) for any other.
fn unreadable(error: &axum::Error) -> CloseFrame {
    let error = error.to_string();
    let (code, reason) = if error.contains("too long") || error.contains("too big") {
        (1009, format!("a message is at most {} MiB", MAX_FRAME >> 20))
    } else {
        (1002, error.chars().take(100).collect())
    };
    CloseFrame { code, reason: reason.into() }
}

/// What a WebSocket frame is answered with.
struct Answered {
    reply: Value,
    /// The client closes the connection: nothing is sent back.
    close: bool,
    /// A step was played, its action of this kind.
    step: Option<Action>,
}

impl Answered {
    fn with(reply: Value) -> Answered {
        Answered { reply, close: false, step: None }
    }
}

/// Answers one WebSocket frame.
async fn answer(host: &Arc<Host>, episode: &mut Held, text: &str) -> Answered {
    let message: Value = match serde_json::from_str(text) {
        Ok(message) => message,
        Err(e) => {
            let data = json!({"message": format!("Invalid JSON: {e}"), "code": "INVALID_JSON"});
            return Answered::with(json!({"type": "error", "data": data}));
        }
    };
    let Some(fields) = message.as_object() else {
        let invalid =
            Invalid::new(vec![], "model_type", format!("a message is an object, not {}", wire::kind(&message)));
        return Answered::with(Refusal::Invalid(vec![invalid]).frame());
    };
    let kind = fields.get("type").and_then(Value::as_str).unwrap_or_default();
    let takes_data = matches!(kind, "reset" | "step");
    let extra: Vec<Invalid> = fields
        .keys()
        .filter(|k| *k != "type" && !(takes_data && *k == "data"))
        .map(|k| Invalid::new(vec![json!(k)], "extra_forbidden", format!("a `{kind}` message has no field `{k}`")))
        .collect();
    let known = matches!(kind, "reset" | "step" | "state" | "close");
    if known && !extra.is_empty() {
        return Answered::with(Refusal::Invalid(extra).frame());
    }
    let data = fields.get("data").unwrap_or(&Value::Null);
    match kind {
        "reset" => {
            // A reset ends this connection's hold on its session: one still going is left
            // resumable.
            if let Some((service, earlier)) = episode.take() {
                detach(&service, earlier);
            }
            match reset(host, data).await {
                Ok((service, started, observation)) => {
                    *episode = Some((service, started));
                    Answered::with(json!({"type": "observation", "data": observation}))
                }
                Err(refusal) => Answered::with(refusal.frame()),
            }
        }
        "step" => {
            let Some((_, current)) = episode.as_mut() else { return Answered::with(Refusal::NoEpisode.frame()) };
            if fields.get("data").is_none() {
                let invalid = Invalid::new(vec![json!("data")], "missing", "a step carries its action in `data`");
                return Answered::with(Refusal::Invalid(vec![invalid]).frame());
            }
            if current.is_done() {
                return Answered::with(Refusal::Done.frame());
            }
            let action = match wire::action(data, current.steps_taken()) {
                Ok(action) => action,
                Err(problems) => {
                    let problems = problems.into_iter().map(|p| p.under(&[json!("data")])).collect();
                    return Answered::with(Refusal::Invalid(problems).frame());
                }
            };
            let kind = Action::of(&action);
            match current.step(action).await {
                Ok(observation) => {
                    Answered { step: Some(kind), ..Answered::with(json!({"type": "observation", "data": observation})) }
                }
                Err(StepRefused::Done) => Answered::with(Refusal::Done.frame()),
            }
        }
        "state" => {
            let state =
                episode.as_ref().map_or_else(|| json!({"episode_id": null, "step_count": 0}), |(_, e)| e.state());
            Answered::with(json!({"type": "state", "data": state}))
        }
        "close" => Answered { close: true, ..Answered::with(Value::Null) },
        other => {
            let data = json!({"message": format!("Unknown message type: {other}"), "code": "UNKNOWN_TYPE"});
            Answered::with(json!({"type": "error", "data": data}))
        }
    }
}

/// Reads an HTTP body as JSON: an empty body is `null`.
fn body_json(body: &Bytes) -> Result<Value, Refusal> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(body)
        .map_err(|e| Refusal::Invalid(vec![Invalid::new(vec![], "json_invalid", format!("the body is not JSON: {e}"))]))
}

/// `POST /reset`: starts a session, held by id for `/step` and `/state`.
async fn http_reset(State(host): State<Arc<Host>>, body: Bytes) -> Response {
    let data = match body_json(&body) {
        Ok(data) => data,
        Err(refusal) => return refusal.response(&[json!("body")]),
    };
    let (service, episode, observation) = match reset(&host, &data).await {
        Ok(started) => started,
        Err(refusal) => return refusal.response(&[json!("body")]),
    };
    if let Ok(mut http) = service.hub.http.lock() {
        http.insert(episode.id(), Arc::new(tokio::sync::Mutex::new(episode)));
    }
    start_reaper(&service);
    axum::Json(observation).into_response()
}

/// `POST /step`: `{"action": {...}, "session_id": N}`, and OpenEnv's optional `timeout_s` and
/// `request_id`, which Parley reads and leaves alone.
async fn http_step(State(host): State<Arc<Host>>, body: Bytes) -> Response {
    let read = Instant::now();
    let under = [json!("body")];
    let data = match body_json(&body) {
        Ok(data) => data,
        Err(refusal) => return refusal.response(&under),
    };
    let Some(fields) = data.as_object() else {
        let invalid = Invalid::new(vec![], "dict_type", "a step's body is an object with `action` and `session_id`");
        return Refusal::Invalid(vec![invalid]).response(&under);
    };
    let mut problems = Vec::new();
    let known = ["action", "session_id", "session_key", "timeout_s", "request_id"];
    for key in fields.keys().filter(|k| !known.contains(&k.as_str())) {
        problems.push(Invalid::new(
            vec![json!(key)],
            "extra_forbidden",
            format!(
                "unknown field `{key}`: a step has `action`, `session_id`, `session_key`, `timeout_s` and `request_id`"
            ),
        ));
    }
    let given_key = fields.get("session_key").and_then(Value::as_str).unwrap_or_default().to_owned();
    let id = match fields.get("session_id") {
        Some(v) if v.as_i64().is_some() => v.as_i64(),
        Some(v) => {
            problems.push(Invalid::new(
                vec![json!("session_id")],
                "int_type",
                format!("`session_id` is the number the reset answered, not {v}"),
            ));
            None
        }
        None => {
            problems.push(Invalid::new(
                vec![json!("session_id")],
                "missing",
                "an HTTP step names its session: pass the `session_id` its reset answered (or drive one session per /ws connection)",
            ));
            None
        }
    };
    if !fields.contains_key("action") {
        problems.push(Invalid::new(
            vec![json!("action")],
            "missing",
            "a step carries its action: one assistant message",
        ));
    }
    if !problems.is_empty() {
        return Refusal::Invalid(problems).response(&under);
    }
    let Some(id) = id else { return Refusal::Invalid(problems).response(&under) };
    let Some((service, episode)) = held(&host, id) else {
        return Refusal::Unknown(format!("no session {id} is open over HTTP here; reset first")).response(&under);
    };
    let mut episode = episode.lock().await;
    if !episode.holds_key(&given_key) {
        return Refusal::Unknown(format!(
            "no session {id} with that `session_key` is open over HTTP here; reset first"
        ))
        .response(&under);
    }
    if episode.is_done() {
        return Refusal::Done.response(&under);
    }
    let action = match wire::action(&fields["action"], episode.steps_taken()) {
        Ok(action) => action,
        Err(problems) => {
            let problems = problems.into_iter().map(|p| p.under(&[json!("action")])).collect();
            return Refusal::Invalid(problems).response(&under);
        }
    };
    let kind = Action::of(&action);
    match episode.step(action).await {
        Ok(observation) => {
            let response = axum::Json(observation).into_response();
            service.metrics.step_took(kind, read.elapsed());
            response
        }
        Err(StepRefused::Done) => Refusal::Done.response(&under),
    }
}

/// `GET /state?session_id=N`; without a session, the state of none (OpenEnv's fresh one).
async fn http_state(State(host): State<Arc<Host>>, RawQuery(query): RawQuery) -> Response {
    let pairs = || query.as_deref().unwrap_or_default().split('&');
    let id = pairs().find_map(|pair| pair.strip_prefix("session_id="));
    let given_key = pairs().find_map(|pair| pair.strip_prefix("session_key=")).unwrap_or_default().to_owned();
    let Some(id) = id else { return axum::Json(json!({"episode_id": null, "step_count": 0})).into_response() };
    let Ok(id) = id.parse::<SessionId>() else {
        let invalid =
            Invalid::new(vec![json!("session_id")], "int_type", format!("`session_id` is a number, not `{id}`"));
        return Refusal::Invalid(vec![invalid]).response(&[json!("query")]);
    };
    let Some((_, episode)) = held(&host, id) else {
        return Refusal::Unknown(format!("no session {id} is open over HTTP here")).response(&[json!("query")]);
    };
    let episode = episode.lock().await;
    if !episode.holds_key(&given_key) {
        return Refusal::Unknown(format!("no session {id} with that `session_key` is open over HTTP here"))
            .response(&[json!("query")]);
    }
    axum::Json(episode.state()).into_response()
}

/// The HTTP session `id`, with the environment that holds it.
fn held(host: &Host, id: SessionId) -> Option<(Arc<Service>, Arc<tokio::sync::Mutex<Episode>>)> {
    host.hosted().iter().find_map(|service| {
        let episode = service.hub.http.lock().ok().and_then(|h| h.get(&id).cloned())?;
        Some((Arc::clone(service), episode))
    })
}

/// Starts, once, the task that forgets HTTP sessions a while after they end.
fn start_reaper(service: &Arc<Service>) {
    service.hub.reaper.get_or_init(|| {
        let weak = Arc::downgrade(service);
        let stop = service.stop.abort.clone();
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                loop {
                    tokio::select! {
                        () = tokio::time::sleep(ENDED_KEPT / 10) => {}
                        () = stop.cancelled() => return,
                    }
                    let Some(service) = weak.upgrade() else { return };
                    if let Ok(mut http) = service.hub.http.lock() {
                        http.retain(|_, episode| match episode.try_lock() {
                            Ok(e) => e.ended_at().is_none_or(|at| at.elapsed() < ENDED_KEPT),
                            Err(_) => true,
                        });
                    }
                }
            },
            tracing::info_span!("openenv_reaper"),
        ));
    });
}

/// The service's learnable sampler, made on first use from the store's outcomes of the
/// environment's tasks; `None` unless `--sampler learnable`.
async fn learnable(service: &Arc<Service>) -> Result<Option<&Mutex<Learnable>>, Refusal> {
    let settings = &service.runtime.settings;
    if settings.sampler != Sampler::Learnable {
        return Ok(None);
    }
    let made = service
        .hub
        .learnable
        .get_or_try_init(|| async {
            let history =
                service.runtime.store.pass_counts_by_task(&settings.env.to_string()).await.map_err(|e| {
                    Refusal::Failed(format!("reading the tasks' outcomes for --sampler learnable: {e}"))
                })?;
            let ids: Vec<String> = service.hub.tasks.iter().map(|t| t.id.clone()).collect();
            Ok::<_, Refusal>(Mutex::new(Learnable::new(&ids, &history, service.run as u64)))
        })
        .await?;
    Ok(Some(made))
}

/// An episode of catalogue task `task` ended: a learnable sampler takes its outcome.
pub(crate) fn ended(service: &Service, task: usize, outcome: &parley_core::SessionOutcome) {
    if let Some(learnable) = service.hub.learnable.get() {
        learnable.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take(task, outcome);
    }
}
