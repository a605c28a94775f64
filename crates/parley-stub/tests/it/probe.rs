//! Probe mode through the router: a probe's script answers agent requests on both APIs (tool
//! calls first where it makes them, then its text, the tool outputs copied), reads the right
//! answer from the answer key, and leaves a simulated user's requests to the user rules.

use std::sync::Arc;

use parley_stub::{AnswerKey, Probe, StubConfig, router};
use serde_json::{Value, json};

use crate::support::{SYSTEM, chat_tools, post};

const QUESTION: &str = "Multiply 6 by 7. Put the answer in \\boxed{}.";

fn config(probe: Probe) -> StubConfig {
    let row = json!({"responses_create_params": {"input": QUESTION}, "expected_answer": "42"});
    let mut key = AnswerKey::from_rows([&row], "expected_answer");
    key.format = "\\boxed{{answer}}".into();
    StubConfig { probe: Some(probe), answers: Some(Arc::new(key)), ..StubConfig::default() }
}

fn chat(messages: Value, tools: bool) -> Value {
    let mut body = json!({"model": "m", "messages": messages});
    if tools {
        body["tools"] = chat_tools();
    }
    body
}

fn message(reply: &Value) -> &Value {
    &reply["choices"][0]["message"]
}

#[tokio::test]
async fn a_probe_answers_by_its_script_on_both_apis() {
    let (app, _) = router(config(Probe::Hedges));
    let body = chat(json!([{"role": "user", "content": QUESTION}]), false);
    let reply = post(&app, "/v1/chat/completions", &body).await.json();
    let hedged = "I am not sure. It might be \\boxed{43}, or \\boxed{42}, or perhaps \\boxed{41}.";
    assert_eq!(message(&reply)["content"], json!(hedged));
    let reply = post(&app, "/v1/responses", &json!({"model": "m", "input": QUESTION})).await.json();
    assert_eq!(reply["output"][0]["content"][0]["text"], json!(hedged));
    // A question the key does not hold has no right answer to hedge.
    let other = chat(json!([{"role": "user", "content": "Something else?"}]), false);
    assert_eq!(message(&post(&app, "/v1/chat/completions", &other).await.json())["content"], json!(""));
}

#[tokio::test]
async fn copy_tool_outputs_calls_each_tool_then_copies_the_results() {
    let (app, _) = router(config(Probe::CopyToolOutputs));
    let mut messages = vec![json!({"role": "user", "content": QUESTION})];
    for expected in ["get_synonym_value", "extract_synonym_values"] {
        let reply = post(&app, "/v1/chat/completions", &chat(Value::from(messages.clone()), true)).await.json();
        let call = &message(&reply)["tool_calls"][0];
        assert_eq!(call["function"]["name"], json!(expected));
        messages.push(message(&reply).clone());
        messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": format!("out of {expected}")}));
    }
    let reply = post(&app, "/v1/chat/completions", &chat(Value::from(messages), true)).await.json();
    assert_eq!(message(&reply)["content"], json!("out of get_synonym_value\nout of extract_synonym_values"));
}

#[tokio::test]
async fn a_simulated_users_requests_are_not_probed() {
    let (app, _) = router(config(Probe::Empty));
    let user = chat(
        json!([{"role": "system", "content": "Play the user. Say ###STOP### when done."},
                           {"role": "user", "content": QUESTION}]),
        false,
    );
    let reply = post(&app, "/v1/chat/completions", &user).await.json();
    assert_eq!(message(&reply)["content"], json!("Yes, please go ahead."));
    let agent = chat(json!([{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]), false);
    assert_eq!(message(&post(&app, "/v1/chat/completions", &agent).await.json())["content"], json!(""));
}
