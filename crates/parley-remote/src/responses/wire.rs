//! Parley's messages and tools as an OpenAI Responses request, and a Responses object back as
//! an assistant message.

use parley_core::nemo_gym::responses_content;
use parley_core::{ChatRequest, Message, Reasoning, ReasoningReplay, Role, ToolCall, Usage};
use serde_json::{Map, Value, json};

/// The request body for `POST /responses`. Never sets `previous_response_id` or `store`:
/// every call carries the whole transcript, so a session can resume anywhere.
///
/// `replay` decides whether earlier turns' reasoning items go back (by default only those with
/// `encrypted_content`, which the provider needs to continue its reasoning).
pub fn request_json(request: &ChatRequest<'_>, replay: ReasoningReplay) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("input".into(), Value::Array(input_items(request.messages, replay)));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                let mut tool = json!({"type": "function", "name": t.name, "description": t.description,
                    "parameters": t.parameters});
                if t.strict {
                    tool["strict"] = Value::Bool(true);
                }
                tool
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    let sampling = request.sampling;
    if let Some(t) = sampling.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = sampling.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if let Some(m) = sampling.max_tokens {
        body.insert("max_output_tokens".into(), json!(m));
    }
    if let Some(seed) = sampling.seed {
        // The Responses API has no `seed`; servers that honour one (vLLM) read it from here.
        body.insert("metadata".into(), json!({"seed": seed.to_string()}));
    }
    if let Some(format) = request.response_format {
        body.insert("text".into(), json!({"format": text_format(format)}));
    }
    body.insert("store".into(), Value::Bool(false));
    Value::Object(body)
}

/// A Chat Completions `response_format` as a Responses `text.format`.
fn text_format(format: &Value) -> Value {
    match format.get("json_schema") {
        Some(schema) if format.get("type").and_then(Value::as_str) == Some("json_schema") => {
            let mut out = json!({"type": "json_schema", "name": schema.get("name").cloned().unwrap_or(json!("output")),
                "schema": schema.get("schema").cloned().unwrap_or(json!({}))});
            if let Some(strict) = schema.get("strict") {
                out["strict"] = strict.clone();
            }
            out
        }
        _ => format.clone(),
    }
}

/// The transcript as Responses input items.
pub fn input_items(messages: &[Message], replay: ReasoningReplay) -> Vec<Value> {
    let mut items = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        match m.role {
            Role::System | Role::User => {
                items.push(json!({"type": "message", "role": m.role.as_str(), "content": responses_content(m)}));
            }
            Role::Assistant => {
                if let Some(reasoning) = m.reasoning.as_ref().filter(|r| replay.sends(r, true)) {
                    items.extend(reasoning.responses_items(&format!("rs_{i}")));
                }
                if !m.parts.is_empty() {
                    let content: Vec<Value> = m.parts.iter().map(|p| p.to_responses_json(true)).collect();
                    items.push(json!({"type": "message", "role": "assistant", "content": content}));
                } else if let Some(text) = m.content.as_deref().filter(|t| !t.is_empty()) {
                    items.push(json!({"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}));
                }
                for call in &m.tool_calls {
                    items.push(json!({"type": "function_call", "call_id": call.id, "name": call.name,
                        "arguments": call.arguments}));
                }
            }
            Role::Tool => items.push(json!({"type": "function_call_output",
                "call_id": m.tool_call_id.as_deref().unwrap_or_default(), "output": m.content_str()})),
        }
    }
    items
}

/// A Responses object as an assistant message, its finish reason and usage.
pub fn parse_reply(response: &Value) -> Result<(Message, Option<String>, Usage), String> {
    if let Some(error) = response.get("error").filter(|e| !e.is_null()) {
        return Err(format!("the response carries an error: {error}"));
    }
    let output = response.get("output").and_then(Value::as_array).ok_or("no `output` list")?;
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut reasoning = Vec::new();
    for item in output {
        match item.get("type").and_then(Value::as_str) {
            // Kept whole, so that `encrypted_content` and ids go back exactly as they came.
            Some("reasoning") => reasoning.push(item.clone()),
            Some("message") => match item.get("content") {
                Some(Value::String(s)) => text.push_str(s),
                Some(Value::Array(parts)) => {
                    for part in parts {
                        if matches!(part.get("type").and_then(Value::as_str), Some("output_text" | "text")) {
                            text.push_str(part.get("text").and_then(Value::as_str).unwrap_or_default());
                        }
                    }
                }
                _ => {}
            },
            Some("function_call") => {
                let field = |k: &str| item.get(k).and_then(Value::as_str).map(str::to_owned);
                calls.push(ToolCall {
                    id: field("call_id").or_else(|| field("id")).ok_or("a `function_call` without `call_id`")?,
                    name: field("name").ok_or("a `function_call` without `name`")?,
                    arguments: field("arguments").unwrap_or_else(|| "{}".into()),
                });
            }
            // Other items (web searches, images generated) are not part of the transcript.
            _ => {}
        }
    }
    let usage = response.get("usage").map_or_else(Usage::default, |u| Usage {
        prompt_tokens: u.get("input_tokens").and_then(Value::as_u64).unwrap_or(0),
        completion_tokens: u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0),
    });
    let finish = match response.get("status").and_then(Value::as_str) {
        Some("incomplete") => response
            .pointer("/incomplete_details/reason")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or(Some("incomplete".into())),
        _ if !calls.is_empty() => Some("tool_calls".into()),
        Some(_) => Some("stop".into()),
        None => None,
    };
    let reasoning = Reasoning::from_responses_items(reasoning);
    let content = (!text.is_empty() || (calls.is_empty() && reasoning.is_none())).then_some(text);
    Ok((Message { reasoning: reasoning.map(Box::new), ..Message::assistant_calls(content, calls) }, finish, usage))
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_core::{Sampling, ToolList, ToolSpec};

    #[test]
    fn round_trips_a_tool_turn() {
        let call = ToolCall { id: "c1".into(), name: "f".into(), arguments: "{\"a\":1}".into() };
        let messages = [
            Message::system("sys"),
            Message::user("hi"),
            Message::assistant_calls(None, vec![call]),
            Message::tool_result("c1", "ok"),
        ];
        let tools = ToolList::from(vec![ToolSpec {
            name: "f".into(),
            description: "d".into(),
            parameters: json!({}),
            strict: true,
        }]);
        let sampling = Sampling { temperature: Some(0.0), ..Sampling::default() };
        let request = ChatRequest {
            model: "m",
            messages: &messages,
            tools: &tools,
            sampling: &sampling,
            response_format: None,
            session: None,
            ready: None,
        };
        let body = request_json(&request, ReasoningReplay::Auto);
        assert_eq!(body["input"][2]["type"], "function_call");
        assert_eq!(body["input"][3]["output"], "ok");
        assert_eq!(body["tools"][0]["strict"], true);
        assert_eq!(body["temperature"], 0.0);

        let reply = json!({"status": "completed", "output": [
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"}],
            "usage": {"input_tokens": 5, "output_tokens": 2}});
        let (message, finish, usage) = parse_reply(&reply).unwrap();
        assert_eq!(message.tool_calls[0].id, "c2");
        assert_eq!(message.content, None);
        assert_eq!(finish.as_deref(), Some("tool_calls"));
        assert_eq!(usage.total(), 7);
    }

    fn item() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let text = prop_oneof![Just(json!("t")), Just(json!(null)), Just(json!(3)), Just(json!([{"text": "s"}]))];
        (
            proptest::sample::select(vec!["message", "function_call", "reasoning", "web_search_call", "x"]),
            text.clone(),
            text,
            any::<bool>(),
        )
            .prop_map(|(kind, content, summary, encrypted)| {
                let mut item = json!({"type": kind, "content": content, "summary": summary, "call_id": "c",
                    "name": "f", "arguments": "{}"});
                if encrypted {
                    item["encrypted_content"] = json!("gAAA");
                }
                item
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1000))]

        /// Any output list reads as a message or a reason; a message with reasoning goes back
        /// as input items under every setting, without a panic.
        #[test]
        fn any_output_reads_and_goes_back(output in proptest::collection::vec(item(), 0..5)) {
            if let Ok((message, _, _)) = parse_reply(&json!({"status": "completed", "output": output})) {
                for replay in [ReasoningReplay::Auto, ReasoningReplay::Keep, ReasoningReplay::Drop] {
                    let _ = input_items(std::slice::from_ref(&message), replay);
                }
            }
        }
    }

    #[test]
    fn encrypted_reasoning_goes_back_by_default_and_images_as_input_images() {
        let item = json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA",
            "summary": [{"type": "summary_text", "text": "think"}]});
        let reply = json!({"status": "completed", "output": [item,
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}]});
        let (answer, _, _) = parse_reply(&reply).unwrap();
        assert_eq!(answer.reasoning.as_ref().unwrap().text, "think");
        let user = Message::with_parts(
            Role::User,
            vec![
                parley_core::Part::Text { text: "see".into() },
                parley_core::Part::Image { url: "https://x/a.png".into(), detail: None },
            ],
        );
        let messages = [user, answer];
        let auto = input_items(&messages, ReasoningReplay::Auto);
        assert_eq!(
            auto[0]["content"][1],
            json!({"type": "input_image", "image_url": "https://x/a.png", "detail": "auto"})
        );
        assert_eq!(auto[1], item);
        assert_eq!(auto[2]["content"][0]["text"], "hi");
        assert_eq!(input_items(&messages, ReasoningReplay::Drop).len(), 2);
        // Reasoning without `encrypted_content` is left out unless kept.
        let mut plain = messages[1].clone();
        plain.reasoning.as_mut().unwrap().items[0].as_object_mut().unwrap().remove("encrypted_content");
        assert_eq!(input_items(std::slice::from_ref(&plain), ReasoningReplay::Auto).len(), 1);
        assert_eq!(input_items(&[plain], ReasoningReplay::Keep).len(), 2);
    }
}
