//! A simulated user's requests: the stub goes on for `user_turns` turns, then stops.

use parley_stub::{StubConfig, router};
use serde_json::json;

use crate::support::post;

fn user_request(own_turns: usize) -> serde_json::Value {
    let mut messages = vec![json!({"role": "system", "content": "You play a customer. End with ###STOP###."})];
    for i in 0..own_turns {
        messages.push(json!({"role": "user", "content": format!("agent says {i}")}));
        messages.push(json!({"role": "assistant", "content": "Yes, please go ahead."}));
    }
    messages.push(json!({"role": "user", "content": "agent says more"}));
    json!({"model": "user", "messages": messages})
}

#[tokio::test]
async fn a_simulated_user_goes_on_then_stops() {
    let (router, _) = router(StubConfig { user_turns: 2, ..StubConfig::default() });
    for (turns, expected) in
        [(0, "Yes, please go ahead."), (1, "Yes, please go ahead."), (2, "Thank you, that is all. ###STOP###")]
    {
        let reply = post(&router, "/v1/chat/completions", &user_request(turns)).await.json();
        assert_eq!(reply["choices"][0]["message"]["content"], expected, "after {turns} turns");
    }
}

#[tokio::test]
async fn an_agent_request_is_not_taken_for_a_user() {
    let (router, _) = router(StubConfig::default());
    let request = json!({"model": "m", "messages": [{"role": "system", "content": "Be helpful."}, {"role": "user", "content": "hi"}]});
    let reply = post(&router, "/v1/chat/completions", &request).await.json();
    assert_eq!(reply["choices"][0]["message"]["content"], "Hello from parley-stub.");
}
