//! Single requests: the model list, bad requests, structured outputs and the final-text rules.

use parley_stub::{StubConfig, router};
use serde_json::{Value, json};

use crate::support::{USER, chat_request, chat_tools, get, post, responses_tools, send};

#[tokio::test]
async fn lists_one_model() {
    let (router, _) = router(StubConfig::default());
    let reply = get(&router, "/v1/models").await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json(),
        json!({"object": "list", "data": [
            {"id": "parley-stub", "object": "model", "created": 0, "owned_by": "parley"}
        ]})
    );
}

#[tokio::test]
async fn unknown_paths_get_an_openai_error() {
    let (router, _) = router(StubConfig::default());
    let reply = get(&router, "/v1/embeddings").await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.json()["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn bad_requests_get_400() {
    let (router, _) = router(StubConfig::default());
    let cases: [(&str, &str); 10] = [
        ("/v1/chat/completions", "{not json"),
        ("/v1/chat/completions", "[1, 2]"),
        ("/v1/chat/completions", r#"{"messages": [{"role": "user", "content": "hi"}]}"#),
        ("/v1/chat/completions", r#"{"model": "m"}"#),
        ("/v1/chat/completions", r#"{"model": "m", "messages": []}"#),
        ("/v1/chat/completions", r#"{"model": "m", "messages": [{"content": "hi"}]}"#),
        (
            "/v1/chat/completions",
            r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {}}]}"#,
        ),
        ("/v1/responses", r#"{"model": "m"}"#),
        ("/v1/responses", r#"{"model": "m", "input": [42]}"#),
        ("/v1/responses", r#"{"model": "m", "input": "hi", "text": {"format": {"type": "json_schema"}}}"#),
    ];
    for (path, body) in cases {
        let reply = send(&router, "POST", path, body).await;
        assert_eq!(reply.status, 400, "{path} {body}");
        let error = &reply.json()["error"];
        assert_eq!(error["type"], "invalid_request_error", "{body}");
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
        assert_eq!(error["param"], Value::Null);
        assert_eq!(error["code"], Value::Null);
    }
}

fn text_of(reply: &Value) -> &str {
    reply["choices"][0]["message"]["content"].as_str().unwrap()
}

#[tokio::test]
async fn chat_json_schema_synthesizes_the_document() {
    let (router, _) = router(StubConfig::default());
    let schema = json!({
        "type": "object",
        "properties": {
            "answer": {"type": "string"},
            "confidence": {"type": "number", "minimum": 0.5},
            "unit": {"type": "string", "enum": ["kg", "lb"]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["answer", "confidence", "unit", "tags"],
    });
    let request = json!({
        "model": "m",
        "messages": [{"role": "user", "content": USER}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": schema, "strict": true}},
    });
    let reply = post(&router, "/v1/chat/completions", &request).await.json();
    assert_eq!(reply["choices"][0]["finish_reason"], "stop");
    let document: Value = serde_json::from_str(text_of(&reply)).unwrap();
    assert_eq!(document, json!({"answer": "Answer", "confidence": 0.5, "unit": "kg", "tags": ["Tags"]}));
}

#[tokio::test]
async fn json_schema_with_tools_calls_tools_first() {
    let (router, _) = router(StubConfig { tool_calls: 1, ..StubConfig::default() });
    let format = json!({"type": "json_schema", "json_schema": {"name": "out",
        "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}});
    let mut request = chat_request(USER);
    request["response_format"] = format;
    let first = post(&router, "/v1/chat/completions", &request).await.json();
    assert_eq!(first["choices"][0]["finish_reason"], "tool_calls");
    let messages = request["messages"].as_array_mut().unwrap();
    messages.push(first["choices"][0]["message"].clone());
    messages.push(json!({"role": "tool", "tool_call_id": "x", "content": "1"}));
    let second = post(&router, "/v1/chat/completions", &request).await.json();
    assert_eq!(text_of(&second), r#"{"ok":true}"#);
}

#[tokio::test]
async fn responses_json_schema_synthesizes_the_document() {
    let (router, _) = router(StubConfig::default());
    let request = json!({
        "model": "m",
        "input": USER,
        "text": {"format": {"type": "json_schema", "name": "out",
            "schema": {"type": "object", "properties": {"count": {"type": "integer", "minimum": 2}}, "required": ["count"]}}},
    });
    let reply = post(&router, "/v1/responses", &request).await.json();
    assert_eq!(reply["output"][0]["content"][0]["text"], r#"{"count":2}"#);
}

#[tokio::test]
async fn final_text_rules() {
    // Without tools and tool results: the greeting.
    let (plain, _) = router(StubConfig::default());
    let request = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let reply = post(&plain, "/v1/chat/completions", &request).await.json();
    assert_eq!(text_of(&reply), "Hello from parley-stub.");

    // `tool_choice: "none"` turns tools off.
    let mut request = chat_request(USER);
    request["tool_choice"] = json!("none");
    let reply = post(&plain, "/v1/chat/completions", &request).await.json();
    assert_eq!(text_of(&reply), "Hello from parley-stub.");

    // A configured text wins over the echo, and zero tool calls answers at once.
    let (configured, _) =
        router(StubConfig { tool_calls: 0, final_text: Some("The answer is 42.".to_owned()), ..StubConfig::default() });
    let reply = post(&configured, "/v1/chat/completions", &chat_request(USER)).await.json();
    assert_eq!(text_of(&reply), "The answer is 42.");

    let request = json!({"model": "m", "input": "hi", "tools": responses_tools(), "tool_choice": "none"});
    let reply = post(&plain, "/v1/responses", &request).await.json();
    assert_eq!(reply["output"][0]["content"][0]["text"], "Hello from parley-stub.");
}

#[tokio::test]
async fn non_function_tools_are_ignored() {
    let (router, _) = router(StubConfig::default());
    let request = json!({
        "model": "m",
        "input": "search",
        "tools": [{"type": "web_search"}],
    });
    let reply = post(&router, "/v1/responses", &request).await.json();
    assert_eq!(reply["output"][0]["type"], "message");

    let mut tools = chat_tools();
    tools.as_array_mut().unwrap().insert(0, json!({"type": "custom", "custom": {"name": "x"}}));
    let request = json!({"model": "m", "messages": [{"role": "user", "content": "q"}], "tools": tools});
    let reply = post(&router, "/v1/chat/completions", &request).await.json();
    let call = &reply["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_synonym_value");
}

#[tokio::test]
async fn latency_delays_every_answer() {
    let latency = std::time::Duration::from_millis(60);
    let (router, _) = router(StubConfig { latency, ..StubConfig::default() });
    let started = std::time::Instant::now();
    let reply = send(&router, "POST", "/v1/chat/completions", "{bad").await;
    assert_eq!(reply.status, 400);
    assert!(started.elapsed() >= latency);
}

#[tokio::test]
async fn reasoning_comes_in_the_configured_field_and_as_a_responses_item() {
    use parley_stub::StubReasoning;
    let (rotating, _) =
        router(StubConfig { tool_calls: 1, reasoning: Some(StubReasoning::Rotate), ..StubConfig::default() });
    let mut request = chat_request(USER);
    let first = post(&rotating, "/v1/chat/completions", &request).await.json();
    let message = &first["choices"][0]["message"];
    assert_eq!(message["reasoning_content"], "Step 0: the task needs get_synonym_value, so I call it.");
    assert!(message.get("reasoning").is_none());
    let messages = request["messages"].as_array_mut().unwrap();
    messages.push(message.clone());
    messages.push(json!({"role": "tool", "tool_call_id": "x", "content": "1"}));
    let second = post(&rotating, "/v1/chat/completions", &request).await.json();
    assert_eq!(second["choices"][0]["message"]["reasoning"], "Step 1: I have what I need, so I answer.");
    assert!(second["choices"][0]["message"].get("reasoning_content").is_none());

    // Without the setting, no field at all: the answers are what they always were.
    let (plain, _) = router(StubConfig::default());
    let reply = post(&plain, "/v1/chat/completions", &chat_request(USER)).await.json();
    assert!(reply["choices"][0]["message"].get("reasoning_content").is_none());

    let (reasoning, _) = router(StubConfig { reasoning: Some(StubReasoning::Reasoning), ..StubConfig::default() });
    let request = json!({"model": "m", "input": USER, "tools": responses_tools()});
    let reply = post(&reasoning, "/v1/responses", &request).await.json();
    assert_eq!(reply["output"][0]["type"], "reasoning");
    assert!(reply["output"][0]["encrypted_content"].as_str().unwrap().starts_with("enc_"));
    assert_eq!(reply["output"][1]["type"], "function_call");
    assert!("sideways".parse::<StubReasoning>().unwrap_err().contains("rotate"));
}
