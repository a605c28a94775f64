//! The counters, through the handle and through `GET /stub/stats`.

use parley_stub::{StubConfig, conversation_key, router};
use serde_json::json;

use crate::support::{SYSTEM, USER, chat_request, get, post, send};

#[tokio::test]
async fn stats_count_requests_statuses_conversations_and_turns() {
    let (router, stats) = router(StubConfig::default());
    post(&router, "/v1/chat/completions", &chat_request(USER)).await;
    post(&router, "/v1/chat/completions", &chat_request(USER)).await;
    post(&router, "/v1/chat/completions", &chat_request("other")).await;
    send(&router, "POST", "/v1/responses", "nope").await;
    // Neither the model list nor the stats are model requests.
    get(&router, "/v1/models").await;

    let key = conversation_key(SYSTEM, USER);
    let other = conversation_key(SYSTEM, "other");
    assert_eq!(stats.requests(), 4);
    assert_eq!(stats.by_status(), vec![(200, 3), (400, 1)]);
    let mut expected = vec![(key.clone(), 2), (other.clone(), 1)];
    expected.sort();
    assert_eq!(stats.conversation_requests(), expected);
    assert_eq!(stats.repeated_turns(), vec![(key.clone(), 2, 2)]);

    let reply = get(&router, "/stub/stats").await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json(),
        json!({
            "requests": 4,
            "by_status": {"200": 3, "400": 1},
            "conversations": {key.clone(): 2, other.clone(): 1},
            "turns": {format!("{key}/2"): 2, format!("{other}/2"): 1},
        })
    );
    assert_eq!(reply.json(), stats.to_json());
}

#[test]
fn conversation_keys_are_short_stable_hex() {
    let key = conversation_key("system", "user");
    assert_eq!(key.len(), 16);
    assert!(key.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(key, conversation_key("system", "user"));
    // The separator keeps the two texts apart.
    assert_ne!(key, conversation_key("systemu", "ser"));
}
