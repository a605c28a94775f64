//! Re-scores land for a whole run or not at all; judge verdicts are answered from the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use parley_core::{
    ChatReply, ChatRequest, Claim, Message, ModelCall, ModelClient, ModelFailure, Reward, SessionOutcome, SessionStore,
    Termination, ToolList, TurnRecord, Usage,
};
use parley_store::{SqliteStore, StoreOptions, VerdictCache, request_hash};

use crate::writer::store_with_sessions;

async fn versions(store: &SqliteStore) -> Vec<(i64, i64, f64)> {
    sqlx::query_as("SELECT session_id, version, value FROM scores ORDER BY session_id, version")
        .fetch_all(store.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_rescore_lands_one_version_for_the_whole_run_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (store, ids) = store_with_sessions(&dir, 3).await;
    let outcome = SessionOutcome {
        termination: Termination::AgentStop,
        reward: Some(Reward::new(0.0)),
        error: None,
        failure: None,
        steps: 1,
        retries: 0,
        duration: Duration::from_millis(1),
        token_contiguity: None,
        user_faults: Vec::new(),
    };
    for &id in &ids {
        store.finish_session(Claim::unclaimed(id), TurnRecord::default(), &outcome).await.unwrap();
    }
    let run = store.run_of(ids[0]).await.unwrap();

    // A re-score that names a session of no such run fails, and writes nothing at all.
    let mut scores: Vec<_> = ids.iter().map(|&id| (id, Reward::new(0.5).with("judge", "yes"))).collect();
    scores.push((9_999, Reward::new(1.0)));
    let failed = store.add_scores(run, &scores, &serde_json::json!({})).await;
    assert!(failed.is_err());
    assert_eq!(versions(&store).await.len(), 3, "only the first versions");
    assert_eq!(store.sessions(run).await.unwrap()[0].reward, Some(0.0));

    scores.pop();
    assert_eq!(store.add_scores(run, &scores, &serde_json::json!({})).await.unwrap(), 2);
    // A later re-score of part of the run still takes one version above every session's.
    assert_eq!(store.add_scores(run, &scores[..1], &serde_json::json!({})).await.unwrap(), 3);
    let stored = versions(&store).await;
    let expected: Vec<(i64, i64, f64)> = vec![
        (ids[0], 1, 0.0),
        (ids[0], 2, 0.5),
        (ids[0], 3, 0.5),
        (ids[1], 1, 0.0),
        (ids[1], 2, 0.5),
        (ids[2], 1, 0.0),
        (ids[2], 2, 0.5),
    ];
    assert_eq!(stored, expected);
    assert_eq!(store.latest_score(ids[1]).await.unwrap().unwrap().breakdown["judge"], "yes");
    assert!(store.sessions(run).await.unwrap().iter().all(|s| s.reward == Some(0.5)));
    store.close().await.unwrap();
}

/// A judge that answers "yes" and counts what it is asked.
struct Judge {
    asked: AtomicU64,
}

#[async_trait]
impl ModelClient for Judge {
    fn endpoint(&self) -> &str {
        "http://judge.invalid/v1"
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatReply, ModelFailure> {
        let n = self.asked.fetch_add(1, Ordering::Relaxed);
        Ok(ChatReply {
            message: Message::assistant(format!("yes ({n})")),
            call: ModelCall {
                endpoint: self.endpoint().into(),
                request: parley_core::RawJson::from(serde_json::json!({"model": request.model})),
                response: None,
                usage: Usage { prompt_tokens: 10, completion_tokens: 2 },
                latency: Duration::from_millis(30),
                attempts: 1,
                finish_reason: Some("stop".into()),
                ..ModelCall::default()
            },
        })
    }
}

#[tokio::test]
async fn a_verdict_is_asked_once_and_answered_from_the_store_after() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = store_with_sessions(&dir, 1).await;
    let judge = Arc::new(Judge { asked: AtomicU64::new(0) });
    let sampling = parley_core::Sampling { temperature: Some(0.0), ..Default::default() };
    let messages = [Message::user("Did the agent refund the order?")];
    let request = ChatRequest {
        model: "judge",
        messages: &messages,
        tools: ToolList::none(),
        sampling: &sampling,
        response_format: None,
        session: None,
        ready: None,
    };

    let cache = VerdictCache::new(judge.clone(), store.clone());
    let first = cache.chat(request).await.unwrap();
    let again = cache.chat(request).await.unwrap();
    assert_eq!((cache.calls(), cache.reused()), (1, 1));
    assert_eq!(again.message, first.message, "the stored verdict");
    assert_eq!((again.call.attempts, again.call.usage), (0, Usage::default()), "no call was made for it");

    // Stored for later runs too, and keyed by the whole request: another prompt or other
    // sampling is asked.
    store.close().await.unwrap();
    let store = SqliteStore::open(&dir.path().join("parley.db"), StoreOptions::default()).await.unwrap();
    let cache = VerdictCache::new(judge.clone(), store.clone());
    assert_eq!(cache.chat(request).await.unwrap().message, first.message);
    let other = [Message::user("Did the agent cancel the order?")];
    cache.chat(ChatRequest { messages: &other, ..request }).await.unwrap();
    let warmer = parley_core::Sampling { temperature: Some(1.0), ..Default::default() };
    cache.chat(ChatRequest { sampling: &warmer, ..request }).await.unwrap();
    assert_eq!((cache.calls(), cache.reused()), (2, 1));
    assert_eq!(judge.asked.load(Ordering::Relaxed), 3, "the endpoint saw three calls in all");
    assert_ne!(request_hash(&request), request_hash(&ChatRequest { sampling: &warmer, ..request }));
    store.close().await.unwrap();
}
