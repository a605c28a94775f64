//! A reward model behind an HTTP endpoint, in the shape of vLLM's pooling API: `POST
//! {base}/pooling` with `{"model", "messages"}` (the session's messages in the Chat Completions
//! form, written by `parley-core`'s one writer, reasoning left out as a chat template leaves it)
//! answers `{"data": [{"data": SCORE}]}`, where SCORE is a number or a list whose last number is
//! the reward (a reward model's last-token score).
//!
//! Its calls go through the one client stack of every remote call (`parley_http::Client`):
//! transport errors, timeouts, 408, 429, 5xx and a 2xx that holds no score are retried within
//! one budget, each attempt has a timeout, a body is read up to a bound, and its key (when it has
//! one) goes as a bearer header that no error or log line quotes.

use async_trait::async_trait;
use parley_core::message::ChatMessage;
use parley_core::{ChatForm, ReasoningField};
use parley_http::client::Limits;
use parley_http::{Client, ClientError, Failure, Retry, excerpt_bytes};
use serde::Serialize;
use serde_json::Value;

use crate::{Context, Score, ScoreError, Scorer};

/// Scores the transcript with a reward model.
#[derive(Debug, Clone)]
pub struct RewardModel {
    client: Client,
    model: String,
}

/// What the reward model reads of each message: what a chat template reads, reasoning left out.
const FORM: ChatForm = ChatForm { reasoning: ReasoningField::Omit, tokens: false };

/// The path of vLLM's pooling API, under the base URL.
const POOLING: &str = "/pooling";

impl RewardModel {
    /// A client for `base_url` (e.g. `http://host:8000`), calling it under `limits`, with
    /// `key` sent as a bearer token when given.
    pub fn new(base_url: &str, model: &str, limits: &Limits, key: Option<&str>) -> Result<RewardModel, ScoreError> {
        let client = Client::new(base_url, limits, key).map_err(|e| match e {
            ClientError::BadUrl(url) => ScoreError::Invalid(format!(
                "the reward model's base_url `{url}` is not an http(s) URL: use http://host:port"
            )),
            other => ScoreError::Invalid(format!("the reward model's HTTP client: {other}")),
        })?;
        Ok(RewardModel { client, model: model.into() })
    }

    fn url(&self) -> String {
        format!("{}{POOLING}", self.client.base_url())
    }
}

#[derive(Serialize)]
struct Request<'a> {
    messages: Vec<ChatMessage<'a>>,
    model: &'a str,
}

/// The reward in a pooling answer: `data[0].data`, a number or the last number of a list
/// (nested lists read by their last element).
pub fn reward_of(body: &Value) -> Option<f64> {
    let mut v = body.get("data")?.get(0)?.get("data")?;
    while let Value::Array(items) = v {
        v = items.last()?;
    }
    v.as_f64().filter(|x| x.is_finite())
}

/// Whether a 2xx answer holds a reward; one that does not is retried like a failed attempt.
fn accept(body: &[u8]) -> Result<(), String> {
    let parsed: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not JSON ({e})"))?;
    reward_of(&parsed).map(drop).ok_or_else(|| "no number at data[0].data".to_owned())
}

#[async_trait]
impl Scorer for RewardModel {
    async fn score(&self, cx: &Context<'_>) -> Result<Score, ScoreError> {
        let failed = |message: String| ScoreError::Endpoint { scorer: "reward-model", message };
        let request = Request { messages: cx.transcript.iter().map(|m| m.chat(FORM)).collect(), model: &self.model };
        let body = serde_json::to_vec(&request).map_err(|e| failed(format!("the request does not serialize: {e}")))?;
        let (result, attempts) =
            self.client.post_json(POOLING, body, Default::default(), Retry::Transient, Some(accept)).await;
        let answer = match result {
            Ok(answer) if answer.is_success() => answer,
            Ok(answer) => {
                let quoted = excerpt_bytes(&answer.body);
                let url = self.url();
                return Err(failed(format!(
                    "{url} answered HTTP {} after {attempts} attempt(s): {quoted}",
                    answer.status
                )));
            }
            Err(failure) => {
                // A 2xx without a reward is quoted, as a refusal is.
                let quoted = match &failure {
                    Failure::Unaccepted(unaccepted) => format!(": {}", excerpt_bytes(&unaccepted.body)),
                    _ => String::new(),
                };
                return Err(failed(format!("{}: {failure} after {attempts} attempt(s){quoted}", self.url())));
            }
        };
        // The stack accepted it as holding a reward, so it reads again.
        let value = serde_json::from_slice(&answer.body).ok().as_ref().and_then(reward_of);
        let value = value.ok_or_else(|| failed(format!("{}: no number at data[0].data in the answer", self.url())))?;
        Ok(Score::new(value))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use axum::Router;
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::post;
    use parley_core::{Message, Reasoning, ReasoningSpelling, ToolCall};
    use serde_json::json;

    use super::*;
    use crate::test_support::cx;

    const KEY: &str = "sk-reward-model-0123456789";

    fn quick(max_retries: u32) -> Limits {
        Limits { max_retries, backoff: Duration::from_millis(1), timeout: Duration::from_secs(10), ..Limits::default() }
    }

    /// Serves `router` on a loopback port and gives its base URL.
    async fn serve(router: Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        format!("http://{address}")
    }

    /// What each request carried: its `Authorization` header and its body.
    type Seen = Arc<Mutex<Vec<(Option<String>, Value)>>>;

    #[test]
    fn reads_numbers_and_lists() {
        assert_eq!(reward_of(&json!({"data": [{"data": 0.25}]})), Some(0.25));
        assert_eq!(reward_of(&json!({"data": [{"data": [0.1, 0.9]}]})), Some(0.9));
        assert_eq!(reward_of(&json!({"data": [{"data": [[0.3], [0.7]]}]})), Some(0.7));
        assert_eq!(reward_of(&json!({"data": []})), None);
        assert_eq!(reward_of(&json!({"data": [{"data": "x"}]})), None);
    }

    #[tokio::test]
    async fn a_failing_server_is_asked_again_with_the_key_as_a_bearer_and_the_chat_form() {
        let seen: Seen = Arc::default();
        let log = seen.clone();
        let router = Router::new().route(
            "/pooling",
            post(move |headers: HeaderMap, body: axum::Json<Value>| async move {
                let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
                let mut seen = log.lock().unwrap();
                seen.push((auth, body.0));
                match seen.len() {
                    1 => (StatusCode::SERVICE_UNAVAILABLE, "busy".to_owned()),
                    2 => (StatusCode::OK, json!({"object": "list", "data": []}).to_string()),
                    _ => (StatusCode::OK, json!({"data": [{"data": [0.1, 0.75]}]}).to_string()),
                }
            }),
        );
        let base = serve(router).await;
        let model = RewardModel::new(&base, "rm", &quick(3), Some(KEY)).unwrap();
        let mut owned = cx(&json!({}), "final");
        let mut thinking = Message::assistant_calls(
            None,
            vec![ToolCall { id: "c1".into(), name: "lookup".into(), arguments: "{}".into() }],
        );
        thinking.reasoning =
            Some(Box::new(Reasoning { text: "hmm".into(), spelling: ReasoningSpelling::Reasoning, items: Vec::new() }));
        owned.transcript.insert(1, thinking);
        owned.transcript.insert(2, Message::tool_result("c1", "found"));

        let score = model.score(&owned.as_cx()).await.unwrap();
        assert_eq!(score.value, 0.75);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 3, "a 503 and a 200 without a score are each asked again");
        let bearer = format!("Bearer {KEY}");
        assert!(seen.iter().all(|(auth, _)| auth.as_deref() == Some(bearer.as_str())), "{seen:?}");
        let body = &seen[2].1;
        assert_eq!(body["model"], "rm");
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 4, "every message, a call without text included: {body}");
        assert_eq!(messages[1]["tool_calls"][0]["function"]["name"], "lookup");
        assert!(messages[1].get("reasoning").is_none() && messages[1].get("reasoning_content").is_none());
        assert_eq!(messages[2]["tool_call_id"], "c1");
        assert_eq!(messages[3], json!({"role": "assistant", "content": "final"}));
    }

    #[tokio::test]
    async fn a_body_over_the_limit_fails_without_being_read_whole() {
        let router = Router::new().route("/pooling", post(|| async { "x".repeat(2 << 20) }));
        let base = serve(router).await;
        let limits = Limits { max_response_bytes: 1 << 20, ..quick(1) };
        let model = RewardModel::new(&base, "rm", &limits, None).unwrap();
        let error = model.score(&cx(&json!({}), "final").as_cx()).await.unwrap_err().to_string();
        assert!(error.contains("larger than the limit of 1048576 bytes"), "{error}");
        assert!(error.contains("after 2 attempt(s)"), "{error}");
        assert!(error.len() < 500, "{error}");
    }

    #[tokio::test]
    async fn the_key_is_never_in_an_error_or_a_log_line() {
        #[derive(Clone, Default)]
        struct Lines(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish();
        let _logging = tracing::subscriber::set_default(subscriber);

        // A server that quotes the header it was sent, as some error pages do.
        let router = Router::new().route(
            "/pooling",
            post(|headers: HeaderMap| async move {
                let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                (StatusCode::INTERNAL_SERVER_ERROR, format!("{{\"error\": \"bad key {auth}\"}}"))
            }),
        );
        let base = serve(router).await;
        let model = RewardModel::new(&base, "rm", &quick(2), Some(KEY)).unwrap();
        let error = model.score(&cx(&json!({}), "final").as_cx()).await.unwrap_err().to_string();
        assert!(error.contains("HTTP 500 after 3 attempt(s)"), "{error}");
        assert!(error.contains("Bearer [redacted]") && !error.contains(KEY), "{error}");
        assert!(!format!("{model:?}").contains(KEY));
        let logged = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert!(logged.contains("retrying an HTTP call"), "the retries were logged: {logged}");
        assert!(!logged.contains(KEY), "{logged}");
    }
}
