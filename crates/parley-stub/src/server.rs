//! The HTTP surface: routes, the request flow shared by both model endpoints (parsing,
//! faults, answer, latency), and serving on a listener until shutdown.

use std::io;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, Uri, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::{StubConfig, StubReasoning};
use crate::error::ApiError;
use crate::fault::{Fault, FaultDice};
use crate::hash::{Fnv, fnv, hex, mix, unit};
use crate::stats::Stats;
use crate::token_ids::{self, TokenMode};
use crate::turn::{Answer, Turn, thought};
use crate::{chat, responses};

/// Long agent conversations are bigger than axum's default 2 MiB body limit.
const BODY_LIMIT: usize = 64 * 1024 * 1024;

/// Everything the handlers share.
#[derive(Debug)]
struct Shared {
    config: StubConfig,
    call_ids: CallIds,
    stats: Stats,
    dice: FaultDice,
    /// Turns `true` when [`serve`] is told to shut down, so hang faults stop sleeping and
    /// graceful shutdown does not wait an hour for them.
    shutdown: watch::Sender<bool>,
}

/// One of the two model APIs, as the shared request flow sees it.
trait Api {
    const MALFORMED: &'static str;
    fn parse(body: &Value) -> Result<Turn<'_>, ApiError>;
    fn render(turn: &Turn<'_>, answer: &Answer<'_>, body_hash: u64) -> Value;

    /// Adds the thought behind the answer to a rendered answer.
    fn add_reasoning(rendered: &mut Value, mode: StubReasoning, turn: &Turn<'_>, answer: &Answer<'_>);

    /// Adds token ids and log-probs to a rendered answer, when the request asked for them.
    fn add_token_ids(_rendered: &mut Value, _request: &Value, _mode: TokenMode) {}
}

struct Chat;

impl Api for Chat {
    const MALFORMED: &'static str = chat::MALFORMED;
    fn parse(body: &Value) -> Result<Turn<'_>, ApiError> {
        chat::parse(body)
    }
    fn render(turn: &Turn<'_>, answer: &Answer<'_>, body_hash: u64) -> Value {
        chat::render(turn, answer, body_hash)
    }
    fn add_reasoning(rendered: &mut Value, mode: StubReasoning, turn: &Turn<'_>, answer: &Answer<'_>) {
        let field = mode.chat_field(turn.tool_results);
        rendered["choices"][0]["message"][field] = Value::from(thought(answer, turn.tool_results));
    }
    fn add_token_ids(rendered: &mut Value, request: &Value, mode: TokenMode) {
        token_ids::add(rendered, request, mode);
    }
}

struct Responses;

impl Api for Responses {
    const MALFORMED: &'static str = responses::MALFORMED;
    fn parse(body: &Value) -> Result<Turn<'_>, ApiError> {
        responses::parse(body)
    }
    fn render(turn: &Turn<'_>, answer: &Answer<'_>, body_hash: u64) -> Value {
        responses::render(turn, answer, body_hash)
    }
    fn add_reasoning(rendered: &mut Value, _: StubReasoning, turn: &Turn<'_>, answer: &Answer<'_>) {
        let text = thought(answer, turn.tool_results);
        let digits = hex(fnv(text.as_bytes()));
        let item = serde_json::json!({"type": "reasoning", "id": format!("rs_{digits}"),
            "summary": [{"type": "summary_text", "text": text}], "encrypted_content": format!("enc_{digits}")});
        if let Some(output) = rendered["output"].as_array_mut() {
            output.insert(0, item);
        }
    }
}

/// The stub's routes and a handle on its counters. The configuration is used as given; call
/// [`StubConfig::validate`] first to reject fault fractions that make no sense. Hang faults
/// served through this router sleep their full duration even when the server shuts down;
/// [`serve`] cuts them short.
pub fn router(config: StubConfig) -> (Router, Stats) {
    let (router, shared) = build(config, CallIds::PerTurn);
    (router, shared.stats.clone())
}

/// Serves the stub on `listener` until `shutdown` completes, then stops accepting, ends
/// pending hang faults with a 503, and waits for the answers in flight.
///
/// Fails with [`io::ErrorKind::InvalidInput`] before serving anything when the configuration
/// does not pass [`StubConfig::validate`].
pub async fn serve(
    listener: TcpListener,
    config: StubConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_with(listener, config, CallIds::PerTurn, shutdown).await
}

/// How the stub names its tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CallIds {
    /// `call_` and a hash of the conversation and the turn's tool results (see the crate docs).
    #[default]
    PerTurn,
    /// `call_0000000000000000` on every call, as some local model servers do, for clients that
    /// must pair calls with results by position.
    Repeated,
}

/// [`serve`] with a choice of call ids.
pub async fn serve_with(
    listener: TcpListener,
    config: StubConfig,
    call_ids: CallIds,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    config.validate().map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
    let (router, shared) = build(config, call_ids);
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "parley-stub listening");
    }
    // Small answers on kept-alive connections would otherwise wait on Nagle's algorithm.
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown.await;
            shared.shutdown.send_replace(true);
        })
        .await
}

fn build(config: StubConfig, call_ids: CallIds) -> (Router, Arc<Shared>) {
    let shared = Arc::new(Shared {
        dice: FaultDice::new(config.faults, config.seed),
        config,
        call_ids,
        stats: Stats::default(),
        shutdown: watch::Sender::new(false),
    });
    let router = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(complete::<Chat>))
        .route("/v1/responses", post(complete::<Responses>))
        .route("/stub/stats", get(stats))
        .route("/pooling", post(pooling))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(Arc::clone(&shared));
    (router, shared)
}

async fn models() -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{"id": "parley-stub", "object": "model", "created": 0, "owned_by": "parley"}],
    }))
}

async fn stats(State(shared): State<Arc<Shared>>) -> Json<Value> {
    let mut stats = shared.stats.to_json();
    if let Some(learner) = shared.config.answers.as_ref().and_then(|key| key.learner_stats()) {
        stats["learner"] = learner;
    }
    Json(stats)
}

/// A reward model in vLLM's pooling shape: the score of the last assistant message is the
/// length of its text over 100, at most 1, so a test can predict it; anything without one
/// scores 0.
async fn pooling(body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return ApiError::invalid("the body must be a JSON object with `messages`").into_response();
    };
    let text = request
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.iter().rev().find(|m| m.get("role").and_then(Value::as_str) == Some("assistant")))
        .map(|m| crate::turn::text_of(m.get("content")).chars().count())
        .unwrap_or(0);
    let score = (text as f64 / 100.0).min(1.0);
    Json(json!({"object": "list", "data": [{"index": 0, "object": "pooling", "data": [score]}]})).into_response()
}

async fn not_found(uri: Uri) -> Response {
    ApiError::not_found(uri.path()).into_response()
}

/// The flow both model endpoints share: decide the answer, wait out the latency, send it. The
/// latency counts from the request's arrival, so the stub's own work does not add to it; the
/// answer's status is counted once it is sent.
async fn complete<A: Api>(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let arrived = Instant::now();
    let nth = shared.stats.record_request();
    let Decision { response, hang } = decide::<A>(&shared, &body);
    // Thousands of requests may be waiting out the latency at once; their bodies are done with.
    drop(body);
    let latency = latency_of(&shared.config, nth);
    if !latency.is_zero() {
        tokio::time::sleep_until(arrived + latency).await;
    }
    let response = if hang { hang_then(&shared, response).await } else { response };
    shared.stats.record_status(response.status().as_u16());
    response
}

/// The latency of the `nth` request: [`StubConfig::latency`], moved by up to half the spread
/// either way, evenly, by a hash of the seed and `nth` (drawn as the faults are: the same in every
/// run).
fn latency_of(config: &StubConfig, nth: u64) -> std::time::Duration {
    if config.latency_spread.is_zero() {
        return config.latency;
    }
    let unit = unit(mix(Fnv::new().u64(config.seed).u64(nth).finish()));
    let low = config.latency.saturating_sub(config.latency_spread / 2);
    low + config.latency_spread.mul_f64(unit)
}

/// The answer to a request, ready to send once the latency has passed.
struct Decision {
    response: Response,
    /// A hang fault: wait [`StubConfig::hang`] more before sending.
    hang: bool,
}

impl From<Response> for Decision {
    fn from(response: Response) -> Decision {
        Decision { response, hang: false }
    }
}

/// Sends `response` after the hang fault's wait, or a 503 as soon as the server shuts down.
async fn hang_then(shared: &Shared, response: Response) -> Response {
    let mut shutdown = shared.shutdown.subscribe();
    tokio::select! {
        () = tokio::time::sleep(shared.config.hang) => response,
        // `wait_for` only fails when the sender is gone, and `Shared` owns it.
        _ = shutdown.wait_for(|&stopping| stopping) => ApiError::shutting_down().into_response(),
    }
}

/// A 200 whose body fails before its first byte: the server drops the connection mid-answer.
fn reset() -> Response {
    let broken = futures::stream::once(async {
        Err::<Bytes, io::Error>(io::Error::new(io::ErrorKind::ConnectionReset, "a reset fault"))
    });
    ([(header::CONTENT_TYPE, "application/json")], axum::body::Body::from_stream(broken)).into_response()
}

/// A valid answer whose text is `bytes` long.
fn huge<A: Api>(turn: &Turn, bytes: usize, body_hash: u64) -> Response {
    let answer = Answer::Text("x".repeat(bytes));
    Json(A::render(turn, &answer, body_hash)).into_response()
}

fn decide<A: Api>(shared: &Shared, body: &[u8]) -> Decision {
    let value: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(error) => {
            return ApiError::invalid(format!("the request body is not valid JSON: {error}")).into_response().into();
        }
    };
    let turn = match A::parse(&value) {
        Ok(turn) => turn,
        Err(error) => return error.into_response().into(),
    };
    shared.stats.record_turn(turn.conversation, turn.messages);

    let body_hash = fnv(body);
    let fault = shared.dice.draw(body_hash);
    if let Some(fault) = fault {
        tracing::debug!(?fault, conversation = turn.conversation, "injecting fault");
    }
    let bad_arguments = match fault {
        None | Some(Fault::Hang) => None,
        Some(Fault::RateLimit) => {
            let mut response = ApiError::rate_limited().into_response();
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(shared.config.retry_after_secs));
            return response.into();
        }
        Some(Fault::ServerError) => return ApiError::server_error().into_response().into(),
        Some(Fault::Malformed) => {
            return ([(header::CONTENT_TYPE, "application/json")], A::MALFORMED).into_response().into();
        }
        Some(Fault::BadArguments(bad)) => Some(bad),
        Some(Fault::Reset) => return reset().into(),
        Some(Fault::Huge) => return huge::<A>(&turn, shared.config.huge_bytes, body_hash).into(),
    };
    let answer = turn.answer(&shared.config, bad_arguments, shared.call_ids);
    let mut rendered = A::render(&turn, &answer, body_hash);
    if let Some(mode) = shared.config.reasoning {
        A::add_reasoning(&mut rendered, mode, &turn, &answer);
    }
    if let Some(mode) = shared.config.token_ids {
        A::add_token_ids(&mut rendered, &value, mode);
    }
    Decision { response: Json(rendered).into_response(), hang: fault == Some(Fault::Hang) }
}

#[cfg(test)]
mod latency_tests {
    use std::time::Duration;

    use super::latency_of;
    use crate::StubConfig;

    #[test]
    fn a_spread_latency_is_drawn_evenly_around_the_latency_and_the_same_in_every_run() {
        let config = StubConfig {
            latency: Duration::from_millis(1000),
            latency_spread: Duration::from_millis(1000),
            ..StubConfig::default()
        };
        let drawn: Vec<Duration> = (0..10_000).map(|n| latency_of(&config, n)).collect();
        assert!(drawn.iter().all(|d| (Duration::from_millis(500)..Duration::from_millis(1500)).contains(d)));
        let mean = drawn.iter().sum::<Duration>() / 10_000;
        assert!(mean.abs_diff(Duration::from_millis(1000)) < Duration::from_millis(20), "mean {mean:?}");
        // Each tenth of the range gets about a tenth of the draws.
        for tenth in 0..10u64 {
            let low = Duration::from_millis(500 + 100 * tenth);
            let n = drawn.iter().filter(|d| (low..low + Duration::from_millis(100)).contains(*d)).count();
            assert!((800..1200).contains(&n), "{n} draws in tenth {tenth}");
        }
        assert_eq!(drawn, (0..10_000).map(|n| latency_of(&config, n)).collect::<Vec<_>>());
        let other = StubConfig { seed: 7, ..config.clone() };
        assert_ne!(drawn[..10], (0..10).map(|n| latency_of(&other, n)).collect::<Vec<_>>()[..]);
        let fixed = StubConfig { latency_spread: Duration::ZERO, ..config };
        assert!((0..100).all(|n| latency_of(&fixed, n) == Duration::from_millis(1000)));
    }
}
