//! The Responses client against the stub: tool calls and texts round-trip, faults are retried
//! within a bound, and failures name the endpoint.

use std::time::Duration;

use parley_core::{ChatRequest, Message, ModelClient, ModelFailureKind, Sampling, ToolList, ToolSpec};
use parley_remote::{ResponsesClient, ResponsesConfig};
use parley_stub::{Faults, StubConfig};
use serde_json::json;

use crate::peers;

fn tools() -> ToolList {
    ToolList::from(vec![ToolSpec {
        name: "get_synonym_value".into(),
        description: String::new(),
        parameters: json!({"type": "object", "properties": {"synonym": {"type": "string"}}, "required": ["synonym"]}),
        strict: true,
    }])
}

#[tokio::test]
async fn a_tool_call_then_a_text() {
    let (base, stop) = peers::stub(StubConfig { tool_calls: 1, ..StubConfig::default() }).await;
    let client = ResponsesClient::new(&ResponsesConfig { base_url: base, ..ResponsesConfig::default() }).unwrap();
    let tools = tools();
    let sampling = Sampling::default();
    let mut messages = vec![Message::user("hi")];
    let request = |messages: &[Message]| {
        let messages = messages.to_vec();
        (messages, &tools, &sampling)
    };
    let (m, t, s) = request(&messages);
    let reply = client
        .chat(ChatRequest {
            model: "stub",
            messages: &m,
            tools: t,
            sampling: s,
            response_format: None,
            session: None,
            ready: None,
        })
        .await
        .unwrap();
    let call = &reply.message.tool_calls[0];
    assert_eq!(call.name, "get_synonym_value");
    assert_eq!(call.arguments, "{\"synonym\":\"Synonym\"}");
    assert_eq!(reply.call.finish_reason.as_deref(), Some("tool_calls"));
    assert!(reply.call.usage.total() > 0);
    messages.push(reply.message.clone());
    messages.push(Message::tool_result(call.id.clone(), "407"));
    let reply = client
        .chat(ChatRequest {
            model: "stub",
            messages: &messages,
            tools: &tools,
            sampling: &sampling,
            response_format: None,
            session: None,
            ready: None,
        })
        .await
        .unwrap();
    assert_eq!(reply.message.content.as_deref(), Some("Result: 407"));
    let _ = stop.send(());
}

/// A reasoning model's item comes back with the answer, `encrypted_content` and all, and by
/// default goes back on the next turn exactly as it came.
#[tokio::test]
async fn encrypted_reasoning_is_kept_and_sent_back() {
    let config =
        StubConfig { tool_calls: 1, reasoning: Some(parley_stub::StubReasoning::Reasoning), ..StubConfig::default() };
    let (base, stop) = peers::stub(config).await;
    let client = ResponsesClient::new(&ResponsesConfig { base_url: base, ..ResponsesConfig::default() }).unwrap();
    let (tools, sampling) = (tools(), Sampling::default());
    let mut messages = vec![Message::user("hi")];
    let chat = |messages: &[Message]| {
        let messages = messages.to_vec();
        let client = client.clone();
        let (tools, sampling) = (tools.clone(), sampling.clone());
        async move {
            let request = ChatRequest {
                model: "stub",
                messages: &messages,
                tools: &tools,
                sampling: &sampling,
                response_format: None,
                session: None,
                ready: None,
            };
            client.chat(request).await.unwrap()
        }
    };
    let first = chat(&messages).await;
    let reasoning = first.message.reasoning.clone().expect("the reasoning item");
    assert_eq!(reasoning.text, "Step 0: the task needs get_synonym_value, so I call it.");
    assert!(reasoning.encrypted());
    let item = first.call.response.as_ref().unwrap().to_value()["output"][0].clone();
    assert_eq!(reasoning.items, std::slice::from_ref(&item));
    let call_id = first.message.tool_calls[0].id.clone();
    messages.push(first.message);
    messages.push(Message::tool_result(call_id, "407"));
    let second = chat(&messages).await;
    assert_eq!(second.call.request.to_value()["input"][1], item, "sent back before its call");
    assert_eq!(second.message.content.as_deref(), Some("Result: 407"));
    let _ = stop.send(());
}

#[tokio::test]
async fn rate_limits_are_retried_and_failures_are_bounded() {
    let faults = Faults { rate_limit: 0.5, ..Faults::default() };
    let (base, stop) = peers::stub(StubConfig { faults, retry_after_secs: 0, ..StubConfig::default() }).await;
    let client =
        ResponsesClient::new(&ResponsesConfig { base_url: base.clone(), max_retries: 8, ..ResponsesConfig::default() })
            .unwrap();
    let sampling = Sampling::default();
    for i in 0..10 {
        let messages = [Message::user(format!("question {i}"))];
        let request = ChatRequest {
            model: "stub",
            messages: &messages,
            tools: ToolList::none(),
            sampling: &sampling,
            response_format: None,
            session: None,
            ready: None,
        };
        client.chat(request).await.expect("retries get through");
    }
    let _ = stop.send(());

    // Nothing listens any more: a transport failure naming the endpoint, after bounded retries.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let client =
        ResponsesClient::new(&ResponsesConfig { base_url: base.clone(), max_retries: 1, ..ResponsesConfig::default() })
            .unwrap();
    let messages = [Message::user("hi")];
    let request = ChatRequest {
        model: "stub",
        messages: &messages,
        tools: ToolList::none(),
        sampling: &sampling,
        response_format: None,
        session: None,
        ready: None,
    };
    let failure = client.chat(request).await.unwrap_err();
    assert_eq!(failure.kind, ModelFailureKind::Transport);
    assert!(failure.message.contains(base.trim_end_matches('/')), "{}", failure.message);
}
