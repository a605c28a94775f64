//! Helpers shared by the integration tests: requests through the router, and example bodies.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

/// A whole answer from the stub.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub bytes: Bytes,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).expect("the stub answered JSON")
    }
}

pub async fn send(router: &Router, method: &str, path: &str, body: impl Into<Body>) -> Reply {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Reply { status, headers, bytes }
}

pub async fn post(router: &Router, path: &str, body: &Value) -> Reply {
    send(router, "POST", path, body.to_string()).await
}

pub async fn get(router: &Router, path: &str) -> Reply {
    send(router, "GET", path, Body::empty()).await
}

pub const SYSTEM: &str = "You are a synonym lookup assistant.";
pub const USER: &str = "What are the synonym values for 'Warm'?";

/// NeMo Gym's example_multi_step tools in Chat Completions form.
pub fn chat_tools() -> Value {
    json!([
        {"type": "function", "function": {
            "name": "get_synonym_value",
            "description": "Get the synonym value for a synonym.",
            "parameters": {"type": "object", "properties": {"synonym": {"type": "string"}},
                           "required": ["synonym"], "additionalProperties": false},
            "strict": true}},
        {"type": "function", "function": {
            "name": "extract_synonym_values",
            "description": "Extract the synonym values you retrieved for the term that is relevant to the user query.",
            "parameters": {"type": "object",
                           "properties": {"synonym_values": {"type": "array", "items": {"type": "integer"}}},
                           "required": ["synonym_values"], "additionalProperties": false},
            "strict": true}}
    ])
}

/// The same tools in the Responses API's flat form.
pub fn responses_tools() -> Value {
    let tools = chat_tools();
    let flat = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| {
            let mut function = tool["function"].clone();
            function["type"] = json!("function");
            function
        })
        .collect();
    Value::Array(flat)
}

/// A chat request opening the example conversation.
pub fn chat_request(user: &str) -> Value {
    json!({
        "model": "policy",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
        "tools": chat_tools(),
    })
}
