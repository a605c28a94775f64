//! Whole conversations: tool call, tool call, final text, in both wire formats.

use parley_stub::{StubConfig, conversation_key, router};
use serde_json::{Value, json};

use crate::support::{SYSTEM, USER, chat_request, post, responses_tools};

#[tokio::test]
async fn chat_conversation_calls_each_tool_then_answers() {
    let (router, stats) = router(StubConfig::default());
    let mut request = chat_request(USER);

    let first = post(&router, "/v1/chat/completions", &request).await;
    assert_eq!(first.status, 200);
    let first = first.json();
    assert_eq!(first["object"], "chat.completion");
    assert_eq!(first["model"], "policy");
    assert!(first["id"].as_str().unwrap().starts_with("chatcmpl-"));
    let choice = &first["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_synonym_value");
    assert_eq!(call["function"]["arguments"], r#"{"synonym":"Synonym"}"#);
    let first_id = call["id"].as_str().unwrap().to_owned();
    assert!(first_id.starts_with("call_"));
    let usage = &first["usage"];
    let total = usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap();
    assert_eq!(usage["total_tokens"], total);

    push_tool_round(&mut request, &choice["message"], &first_id, "42");
    let second = post(&router, "/v1/chat/completions", &request).await.json();
    let message = &second["choices"][0]["message"];
    let call = &message["tool_calls"][0];
    assert_eq!(call["function"]["name"], "extract_synonym_values");
    assert_eq!(call["function"]["arguments"], r#"{"synonym_values":[0]}"#);
    let second_id = call["id"].as_str().unwrap().to_owned();
    assert_ne!(second_id, first_id);

    push_tool_round(&mut request, message, &second_id, "[42]");
    let third = post(&router, "/v1/chat/completions", &request).await.json();
    let choice = &third["choices"][0];
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(choice["message"]["content"], "Result: [42]");
    assert!(choice["message"].get("tool_calls").is_none());

    let key = conversation_key(SYSTEM, USER);
    assert_eq!(stats.requests(), 3);
    assert_eq!(stats.conversation_requests(), vec![(key.clone(), 3)]);
    assert_eq!(stats.turn_requests(), vec![(key.clone(), 2, 1), (key.clone(), 4, 1), (key, 6, 1)]);
    assert!(stats.repeated_turns().is_empty());
}

fn push_tool_round(request: &mut Value, assistant: &Value, call_id: &str, result: &str) {
    let messages = request["messages"].as_array_mut().unwrap();
    messages.push(assistant.clone());
    messages.push(json!({"role": "tool", "tool_call_id": call_id, "content": result}));
}

#[tokio::test]
async fn responses_conversation_calls_each_tool_then_answers() {
    let (router, stats) = router(StubConfig::default());
    let mut request = json!({
        "model": "policy",
        "input": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": [{"type": "input_text", "text": USER}]},
        ],
        "tools": responses_tools(),
    });

    let mut call_ids = Vec::new();
    for (name, arguments, result) in [
        ("get_synonym_value", r#"{"synonym":"Synonym"}"#, "42"),
        ("extract_synonym_values", r#"{"synonym_values":[0]}"#, "[42]"),
    ] {
        let reply = post(&router, "/v1/responses", &request).await;
        assert_eq!(reply.status, 200);
        let response = reply.json();
        assert_eq!(response["object"], "response");
        assert_eq!(response["status"], "completed");
        assert_eq!(response["model"], "policy");
        assert_eq!(response["parallel_tool_calls"], false);
        assert!(response["id"].as_str().unwrap().starts_with("resp_"));
        let output = response["output"].as_array().unwrap();
        assert_eq!(output.len(), 1);
        let call = &output[0];
        assert_eq!(call["type"], "function_call");
        assert_eq!(call["name"], name);
        assert_eq!(call["arguments"], arguments);
        assert_eq!(call["status"], "completed");
        let call_id = call["call_id"].as_str().unwrap();
        assert!(call_id.starts_with("call_"));
        assert_eq!(call["id"], format!("fc_{}", &call_id["call_".len()..]));
        call_ids.push(call_id.to_owned());

        let input = request["input"].as_array_mut().unwrap();
        input.push(call.clone());
        input.push(json!({"type": "function_call_output", "call_id": call_id, "output": result}));
    }
    assert_ne!(call_ids[0], call_ids[1]);

    let response = post(&router, "/v1/responses", &request).await.json();
    let message = &response["output"][0];
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert!(message["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(message["content"], json!([{"type": "output_text", "text": "Result: [42]", "annotations": []}]));
    let usage = &response["usage"];
    assert_eq!(usage["input_tokens_details"]["cached_tokens"], 0);
    assert_eq!(usage["output_tokens_details"]["reasoning_tokens"], 0);
    assert_eq!(
        usage["total_tokens"],
        usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap()
    );

    // Both formats key the conversation by the same texts.
    let key = conversation_key(SYSTEM, USER);
    assert_eq!(stats.conversation_requests(), vec![(key, 3)]);
}

#[tokio::test]
async fn a_new_user_turn_starts_the_tool_calls_again() {
    let (router, _) = router(StubConfig { tool_calls: 1, ..StubConfig::default() });
    let request = json!({
        "model": "m",
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_synonym_value", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "7"},
            {"role": "assistant", "content": "Result: 7"},
            {"role": "user", "content": "again"},
        ],
        "tools": crate::support::chat_tools(),
    });
    let reply = post(&router, "/v1/chat/completions", &request).await.json();
    assert_eq!(reply["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn same_request_same_bytes() {
    let request = chat_request(USER);
    let (one, _) = router(StubConfig::default());
    let (two, _) = router(StubConfig::default());
    let a = post(&one, "/v1/chat/completions", &request).await.bytes;
    let b = post(&one, "/v1/chat/completions", &request).await.bytes;
    let c = post(&two, "/v1/chat/completions", &request).await.bytes;
    assert_eq!(a, b);
    assert_eq!(a, c);
    let other = post(&one, "/v1/chat/completions", &chat_request("another question")).await;
    assert_ne!(a, other.bytes);
}
