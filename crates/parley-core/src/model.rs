//! The seam to a model endpoint: one chat call, with what it cost.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::message::{Message, ToolList};

/// Sampling settings sent with every call. `None` leaves the endpoint's default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_tokens: Option<u32>,
    pub seed: Option<u64>,
}

/// One chat call. Borrowed, so that building a request never copies the transcript.
#[derive(Debug, Clone, Copy)]
pub struct ChatRequest<'a> {
    pub model: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a ToolList,
    pub sampling: &'a Sampling,
    /// An OpenAI `response_format`, for endpoints that constrain output by a JSON schema.
    pub response_format: Option<&'a Value>,
    /// The session the call belongs to, when it belongs to one: a policy served on several
    /// ranks keeps every call of a session on one rank. Never sent to the endpoint.
    pub session: Option<crate::SessionId>,
    /// The place among the endpoint's calls in flight the caller took before it built the
    /// request ([`ModelClient::ready`]); the call takes one itself when this holds none of its
    /// endpoint's.
    pub ready: Option<&'a Ready>,
}

/// A place among an endpoint's calls in flight, taken before a request is built
/// ([`ModelClient::ready`]) and given back when dropped. A caller whose request is a copy of
/// the transcript (a simulated user's, its roles flipped) builds it once it has one, so that a
/// session queued behind the endpoint's bound holds no request.
#[derive(Default)]
pub struct Ready(Option<Box<dyn std::any::Any + Send + Sync>>);

impl Ready {
    /// A place a client holds as `held`, its own type.
    pub fn new(held: impl std::any::Any + Send + Sync) -> Ready {
        Ready(Some(Box::new(held)))
    }

    /// What the client that made it holds, when it is of type `T`.
    pub fn held<T: 'static>(&self) -> Option<&T> {
        self.0.as_ref()?.downcast_ref()
    }
}

impl std::fmt::Debug for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Ready(held)" } else { "Ready(none)" })
    }
}

/// Token counts reported by the endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Usage {
    pub fn total(self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
    }
}

/// A JSON document kept as its text. A request body is serialized once, sent as those bytes and
/// stored as the same text; a response is kept as it arrived. No tree is built to be thrown away,
/// which matters because a request holds the whole transcript and is sent on every turn.
///
/// The text is one JSON document: checked when it came from elsewhere ([`RawJson::from_string`]),
/// written as serde_json writes it ([`RawJson::to_raw`], through [`crate::json`]), or known to be
/// one ([`RawJson::known`]: a reply the model client read whole, which is a check of its own, or a
/// request's delta put together from its body's values): a reply is not parsed a second time to
/// be kept. Serializing a
/// `RawJson` into a document checks the text again, so that nothing but JSON is ever written out
/// as JSON.
#[derive(Clone)]
pub struct RawJson(Box<str>);

impl RawJson {
    /// Serializes `value` straight to text (no intermediate tree).
    pub fn to_raw<T: Serialize + ?Sized>(value: &T) -> Result<RawJson, serde_json::Error> {
        // serde_json's own first buffer.
        RawJson::to_raw_sized(value, 128)
    }

    /// [`RawJson::to_raw`] into a buffer of `capacity` bytes to start with: a writer that knows
    /// about how long its text comes out (a request body, about as long as its transcript's
    /// texts) spares the buffer its doublings, each a copy of all written so far. A guess up to
    /// twice the text's length costs nothing more: the allocator shrinks the buffer in place.
    pub fn to_raw_sized<T: Serialize + ?Sized>(value: &T, capacity: usize) -> Result<RawJson, serde_json::Error> {
        let text = crate::json::to_vec_sized(value, capacity)?;
        // Only whole strings and ASCII are written, so this check cannot fail.
        let text = String::from_utf8(text).map_err(<serde_json::Error as serde::ser::Error>::custom)?;
        Ok(RawJson::known(text))
    }

    /// Takes text that must be one JSON document; it is checked, not rebuilt.
    pub fn from_string(text: String) -> Result<RawJson, serde_json::Error> {
        RawValue::from_string(text).map(RawJson::from_raw)
    }

    /// Takes text known to be one JSON document, not checked again: text a JSON reader has just
    /// read whole without an error, every byte of it and as UTF-8 (the reply a model client
    /// accepted), or text put together from such a document's parts as its structure allows (a
    /// request's delta, written from the texts of the body's own values).
    pub fn known(text: String) -> RawJson {
        RawJson(text.into_boxed_str())
    }

    /// Wraps text that serde_json has already checked.
    pub fn from_raw(raw: Box<RawValue>) -> RawJson {
        RawJson(raw.into())
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        &self.0
    }

    /// The document as a tree, for readers that need one (tests, inspection).
    pub fn to_value(&self) -> Value {
        // The text was valid JSON when this value was made, so it parses.
        serde_json::from_str(self.get()).unwrap_or(Value::Null)
    }
}

/// Written as the document it holds, checked as it is written.
impl Serialize for RawJson {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw: &RawValue = serde_json::from_str(self.get()).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<RawJson, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(RawJson::from_raw)
    }
}

impl Default for RawJson {
    fn default() -> RawJson {
        RawJson::from(&Value::Null)
    }
}

impl From<&Value> for RawJson {
    fn from(value: &Value) -> RawJson {
        // Serializing a `Value` cannot fail: its keys are strings and its numbers finite.
        RawJson::to_raw(value).expect("a serde_json::Value serializes")
    }
}

impl From<Value> for RawJson {
    fn from(value: Value) -> RawJson {
        RawJson::from(&value)
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &RawJson) -> bool {
        self.get() == other.get()
    }
}

impl std::fmt::Debug for RawJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

impl std::fmt::Display for RawJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

/// The record of one model call as it goes to the store: the raw request and response bodies
/// (never headers, so never a key), and what the call cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelCall {
    pub endpoint: String,
    /// The request body exactly as sent.
    pub request: RawJson,
    /// The response body as received, when it was JSON.
    pub response: Option<RawJson>,
    pub usage: Usage,
    pub latency: Duration,
    /// Attempts made, retries included.
    pub attempts: u32,
    pub error: Option<String>,
    /// Why the model stopped (`stop`, `tool_calls`, `length`), as the endpoint said.
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// The sampling settings the request carried.
    #[serde(default)]
    pub sampling: Option<Sampling>,
}

/// A successful call: the assistant message and its record.
#[derive(Debug, Clone)]
pub struct ChatReply {
    pub message: Message,
    pub call: ModelCall,
}

/// Why a call failed after its retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFailureKind {
    /// Connection refused, reset, or any transport error.
    Transport,
    /// The endpoint answered with an error status that retries did not fix.
    Status(u16),
    /// No answer within the per-call timeout.
    Timeout,
    /// The body was not a chat completion.
    MalformedResponse,
    /// The endpoint says the prompt is longer than the model's context.
    ContextWindowExceeded,
}

impl ModelFailureKind {
    /// The class a session that ends on this failure is recorded with.
    pub fn class(self) -> crate::FailureClass {
        use crate::FailureClass;
        match self {
            ModelFailureKind::Transport => FailureClass::Connection,
            ModelFailureKind::Status(429) => FailureClass::RateLimited,
            ModelFailureKind::Status(400..=499) => FailureClass::Rejected,
            ModelFailureKind::Status(_) => FailureClass::ServerError,
            ModelFailureKind::Timeout => FailureClass::Timeout,
            ModelFailureKind::MalformedResponse => FailureClass::MalformedResponse,
            ModelFailureKind::ContextWindowExceeded => FailureClass::ContextWindowExceeded,
        }
    }
}

/// A call that failed after every retry allowed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ModelFailure {
    pub kind: ModelFailureKind,
    pub message: String,
    pub call: ModelCall,
}

/// One OpenAI-compatible endpoint. Implementations own retries, timeouts and concurrency limits
/// for their endpoint, and record every call.
#[async_trait]
pub trait ModelClient: Send + Sync {
    /// The base URL, for logs and per-endpoint limits.
    fn endpoint(&self) -> &str;

    /// Waits until a call to the endpoint can start at once, and keeps its place for the call
    /// whose request names the returned [`Ready`]. A client without a bound on calls in flight
    /// is ready at once.
    async fn ready(&self) -> Ready {
        Ready::default()
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatReply, ModelFailure>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_json_is_written_as_its_document_and_never_as_text_that_is_not_one() {
        #[derive(Serialize)]
        struct Row<'a> {
            response: &'a RawJson,
        }
        let read = RawJson::known(r#"{"b": [1, 2], "a":"x"}"#.to_owned());
        assert_eq!(serde_json::to_string(&Row { response: &read }).unwrap(), r#"{"response":{"b": [1, 2], "a":"x"}}"#);
        // Text taken on trust that is not JSON fails the document it would have broken.
        let broken = RawJson::known(r#"{"a": "#.to_owned());
        assert!(serde_json::to_string(&Row { response: &broken }).is_err());
        // What is read back is what was written, byte for byte.
        let back: RawJson = serde_json::from_str(r#" {"b": [1, 2]} "#).unwrap();
        assert_eq!(back.get(), r#"{"b": [1, 2]}"#);
        assert!(RawJson::from_string("[1,".to_owned()).is_err());
    }
}
