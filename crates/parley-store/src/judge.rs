//! Judge verdicts kept in the store: a [`ModelClient`] in front of a judge that answers a request
//! it has seen from the store, records every new answer, and counts the calls it made.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use parley_core::{ChatReply, ChatRequest, Message, ModelCall, ModelClient, ModelFailure, Usage};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use parley_core::StoreError;

use crate::Store;
use crate::dialect::both_stores;

/// The SHA-256, in hex, of everything in a request that shapes the answer: the model, the
/// messages, the tools, the sampling settings and the response format. Serialized by serde_json
/// from Parley's own types, whose field order is fixed, so the same request hashes the same in
/// every run.
pub fn request_hash(request: &ChatRequest<'_>) -> String {
    #[derive(Serialize)]
    struct Key<'a> {
        model: &'a str,
        messages: &'a [Message],
        tools: &'a [parley_core::ToolSpec],
        sampling: &'a parley_core::Sampling,
        response_format: Option<&'a serde_json::Value>,
    }
    let key = Key {
        model: request.model,
        messages: request.messages,
        tools: request.tools,
        sampling: request.sampling,
        response_format: request.response_format,
    };
    // Serializing Parley's types to a byte vector cannot fail: their maps have string keys.
    let bytes = serde_json::to_vec(&key).unwrap_or_default();
    Sha256::digest(&bytes).iter().fold(String::with_capacity(64), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    })
}

/// A stored answer.
#[derive(Serialize, Deserialize)]
struct StoredReply {
    message: Message,
    /// Where verdicts stored before the call's record had it keep the finish reason.
    #[serde(default, skip_serializing)]
    finish_reason: Option<String>,
    call: ModelCall,
}

/// A judge behind the store. A request whose hash has a stored verdict is answered from it,
/// without a call (its record says so: no attempts, no usage, no latency); any other goes to the
/// judge, and a successful answer is stored. A failure is never stored, so it is asked again.
pub struct VerdictCache {
    judge: Arc<dyn ModelClient>,
    store: Store,
    calls: AtomicU64,
    reused: AtomicU64,
}

impl VerdictCache {
    pub fn new(judge: Arc<dyn ModelClient>, store: impl Into<Store>) -> VerdictCache {
        VerdictCache { judge, store: store.into(), calls: AtomicU64::new(0), reused: AtomicU64::new(0) }
    }

    /// Calls made to the judge's endpoint so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Requests answered from stored verdicts so far.
    pub fn reused(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }

    async fn stored(&self, hash: &str) -> Option<ChatReply> {
        let found = self.store.verdict(hash).await;
        let text = match found {
            Ok(text) => text?,
            Err(e) => {
                // The judge can still answer: a store that cannot be read costs a call, not the score.
                tracing::warn!(error = %e, "could not read stored judge verdicts; asking the judge");
                return None;
            }
        };
        match serde_json::from_str::<StoredReply>(&text) {
            Ok(r) => Some(ChatReply {
                message: r.message,
                call: ModelCall {
                    usage: Usage::default(),
                    latency: Duration::ZERO,
                    attempts: 0,
                    finish_reason: r.call.finish_reason.or(r.finish_reason),
                    ..r.call
                },
            }),
            Err(e) => {
                tracing::warn!(error = %e, hash, "a stored judge verdict does not parse; asking the judge again");
                None
            }
        }
    }

    async fn record(&self, hash: String, model: String, reply: &ChatReply) {
        let stored = StoredReply { message: reply.message.clone(), finish_reason: None, call: reply.call.clone() };
        let Ok(text) = serde_json::to_string(&stored) else { return };
        let written = self.store.record_verdict(hash, model, text).await;
        if let Err(e) = written {
            tracing::warn!(error = %e, "could not store a judge verdict; it will be asked again next time");
        }
    }
}

#[async_trait]
impl ModelClient for VerdictCache {
    fn endpoint(&self) -> &str {
        self.judge.endpoint()
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatReply, ModelFailure> {
        let hash = request_hash(&request);
        if let Some(reply) = self.stored(&hash).await {
            self.reused.fetch_add(1, Ordering::Relaxed);
            return Ok(reply);
        }
        self.calls.fetch_add(1, Ordering::Relaxed);
        let reply = self.judge.chat(request).await?;
        self.record(hash, request.model.to_owned(), &reply).await;
        Ok(reply)
    }
}

both_stores! {
    /// The stored judge reply for a request's hash.
    pub(crate) async fn verdict(&self, hash: &str) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar("SELECT reply FROM judge_verdicts WHERE request_hash = $1")
            .bind(hash)
            .fetch_optional(self.pool())
            .await
            .map_err(|e| self.read_error(e, "a judge verdict (table `judge_verdicts`)"))
    }

    /// Stores a judge reply; two scorers asking the same question at once store one.
    pub(crate) async fn record_verdict(&self, hash: String, model: String, reply: String) -> Result<(), StoreError> {
        self.write("storing a judge verdict (table `judge_verdicts`)", move |conn| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO judge_verdicts (request_hash, model, reply) VALUES ($1, $2, $3)
                     ON CONFLICT (request_hash) DO NOTHING",
                )
                .bind(hash)
                .bind(model)
                .bind(reply)
                .execute(conn)
                .await?;
                Ok(())
            })
        })
        .await
    }
}
