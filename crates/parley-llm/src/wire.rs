//! The Chat Completions wire format: requests built from borrowed transcripts, replies read
//! from whatever the endpoint sent.

use parley_core::{ChatRequest, Message, Part, RawJson, Reasoning, ReasoningReplay, Role, ToolCall, ToolSpec, Usage};
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;

/// The request body, serialized once, straight from the borrowed transcript: no JSON tree is
/// built. Keys are written in sorted order, as a `serde_json::Value` would write them, so the
/// bytes (and a stub's answers that depend on them) are what they have always been.
///
/// `replay` decides whether earlier assistant turns carry their reasoning. Each message is
/// written the same way on every turn, so a request is the previous one plus its new messages,
/// which the store's request deltas rely on.
pub(crate) fn request_body(request: &ChatRequest<'_>, replay: ReasoningReplay) -> RawJson {
    let sampling = request.sampling;
    let body = Body {
        max_tokens: sampling.max_tokens,
        messages: Messages(request.messages, replay),
        model: request.model,
        response_format: request.response_format,
        seed: sampling.seed,
        temperature: sampling.temperature,
        tools: (!request.tools.is_empty()).then_some(Seq(request.tools)),
        top_p: sampling.top_p,
    };
    // Every field is a string, a number, a borrowed `Value` or a list of them: this cannot fail.
    RawJson::to_raw(&body).expect("a chat request serializes")
}

#[derive(Serialize)]
struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    messages: Messages<'a>,
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Seq<'a, ToolSpec>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
}

/// A borrowed slice written as a JSON array, each item in its wire form.
struct Seq<'a, T>(&'a [T]);

impl<T> Serialize for Seq<'_, T>
where
    for<'b> Wire<'b, T>: Serialize,
{
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(Wire))
    }
}

/// One item in its Chat Completions form.
struct Wire<'a, T>(&'a T);

/// The transcript, each message with or without its reasoning as `replay` says.
struct Messages<'a>(&'a [Message], ReasoningReplay);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|m| ChatMessage(m, self.1)))
    }
}

struct ChatMessage<'a>(&'a Message, ReasoningReplay);

/// A message's content parts in their Chat Completions form.
struct Parts<'a>(&'a [Part]);

impl Serialize for Parts<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(Part::to_chat_json))
    }
}

impl Serialize for ChatMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let ChatMessage(m, replay) = *self;
        let mut map = serializer.serialize_map(None)?;
        if m.parts.is_empty() {
            map.serialize_entry("content", &m.content)?;
        } else {
            map.serialize_entry("content", &Parts(&m.parts))?;
        }
        // Keys stay in sorted order: `reasoning` and `reasoning_content` sort before `role`.
        if let Some(reasoning) = m.reasoning.as_ref().filter(|r| replay.sends(r, false)) {
            map.serialize_entry(reasoning.spelling.chat_field(), &reasoning.text)?;
        }
        map.serialize_entry("role", m.role.as_str())?;
        if let Some(id) = &m.tool_call_id {
            map.serialize_entry("tool_call_id", id)?;
        }
        if !m.tool_calls.is_empty() {
            map.serialize_entry("tool_calls", &Seq(&m.tool_calls))?;
        }
        map.end()
    }
}

impl Serialize for Wire<'_, ToolCall> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Function<'a> {
            arguments: &'a str,
            name: &'a str,
        }
        let c = self.0;
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("function", &Function { arguments: &c.arguments, name: &c.name })?;
        map.serialize_entry("id", &c.id)?;
        map.serialize_entry("type", "function")?;
        map.end()
    }
}

impl Serialize for Wire<'_, ToolSpec> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Function<'a> {
            description: &'a str,
            name: &'a str,
            parameters: &'a Value,
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            strict: bool,
        }
        let t = self.0;
        let function =
            Function { description: &t.description, name: &t.name, parameters: &t.parameters, strict: t.strict };
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("function", &function)?;
        map.serialize_entry("type", "function")?;
        map.end()
    }
}

/// The assistant message, finish reason and usage of a chat completion, or why it is not one.
pub(crate) fn parse_reply(body: &Value) -> Result<(Message, Option<String>, Usage), String> {
    let choice = body.get("choices").and_then(|c| c.get(0)).ok_or("the response has no `choices[0]`")?;
    let message = choice.get("message").ok_or("`choices[0]` has no `message`")?;
    // A list of parts is kept as parts (text-only lists become text); any other value is kept
    // as its JSON text, as before.
    let (content, parts) = match message.get("content") {
        Some(Value::String(s)) => (Some(s.clone()), Vec::new()),
        Some(Value::Null) | None => (None, Vec::new()),
        Some(list @ Value::Array(_)) => {
            let m = Message::with_parts(Role::Assistant, Part::list_from_json(list));
            (m.content, m.parts)
        }
        Some(other) => (Some(other.to_string()), Vec::new()),
    };
    let mut tool_calls = Vec::new();
    if let Some(Value::Array(calls)) = message.get("tool_calls") {
        for (i, call) in calls.iter().enumerate() {
            let function = call.get("function").ok_or_else(|| format!("tool call {i} has no `function`"))?;
            let arguments = match function.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                // Some servers send arguments as an object; keep it as the model's text would be.
                Some(other) => other.to_string(),
            };
            tool_calls.push(ToolCall {
                id: call.get("id").and_then(Value::as_str).map_or_else(|| format!("call_{i}"), str::to_owned),
                name: function.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
                arguments,
            });
        }
    }
    let finish_reason = choice.get("finish_reason").and_then(Value::as_str).map(str::to_owned);
    let usage = body.get("usage").map_or_else(Usage::default, |u| Usage {
        prompt_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        completion_tokens: u.get("completion_tokens").and_then(Value::as_u64).unwrap_or(0),
    });
    let reasoning = Reasoning::from_chat_message(message);
    Ok((Message { content, parts, tool_calls, reasoning, ..Message::empty(Role::Assistant) }, finish_reason, usage))
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_core::Sampling;
    use serde_json::{Map, json};

    /// The request as a `Value` tree, the way it was built before bodies were serialized once:
    /// the oracle that keeps the bytes on the wire unchanged.
    fn request_json(request: &ChatRequest<'_>) -> Value {
        let mut body = Map::with_capacity(8);
        body.insert("model".into(), Value::from(request.model));
        body.insert("messages".into(), Value::Array(request.messages.iter().map(message_json).collect()));
        if !request.tools.is_empty() {
            body.insert("tools".into(), Value::Array(request.tools.iter().map(|t| t.to_chat_json()).collect()));
        }
        let sampling = request.sampling;
        if let Some(t) = sampling.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(p) = sampling.top_p {
            body.insert("top_p".into(), json!(p));
        }
        if let Some(m) = sampling.max_tokens {
            body.insert("max_tokens".into(), json!(m));
        }
        if let Some(s) = sampling.seed {
            body.insert("seed".into(), json!(s));
        }
        if let Some(format) = request.response_format {
            body.insert("response_format".into(), format.clone());
        }
        Value::Object(body)
    }

    fn message_json(message: &Message) -> Value {
        let mut m = Map::with_capacity(4);
        m.insert("role".into(), Value::from(message.role.as_str()));
        m.insert("content".into(), message.content.as_deref().map_or(Value::Null, Value::from));
        if !message.tool_calls.is_empty() {
            let calls = message
                .tool_calls
                .iter()
                .map(
                    |c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}),
                )
                .collect();
            m.insert("tool_calls".into(), Value::Array(calls));
        }
        if let Some(id) = &message.tool_call_id {
            m.insert("tool_call_id".into(), Value::from(id.as_str()));
        }
        Value::Object(m)
    }

    #[test]
    fn the_body_is_byte_for_byte_the_value_tree() {
        let messages = [
            Message::system("policy \"quoted\" ünïcode"),
            Message::user("hi"),
            Message::assistant_calls(
                Some("thinking".into()),
                vec![ToolCall { id: "c".into(), name: "f".into(), arguments: "{\"a\": [1, 2]}".into() }],
            ),
            Message::tool_result("c", "out"),
            Message::assistant_calls(None, vec![ToolCall { id: "d".into(), name: "g".into(), arguments: "".into() }]),
        ];
        let tools = [
            ToolSpec {
                name: "f".into(),
                description: "d".into(),
                parameters: json!({"type": "object", "properties": {"z": {}, "a": {}}}),
                strict: false,
            },
            ToolSpec { name: "g".into(), description: String::new(), parameters: json!({}), strict: true },
        ];
        let format = json!({"type": "json_schema", "json_schema": {"schema": {"type": "object"}}});
        let full = Sampling { temperature: Some(0.7), top_p: Some(0.95), max_tokens: Some(64), seed: Some(u64::MAX) };
        for (sampling, tools, format) in
            [(Sampling::default(), &tools[..], None), (full.clone(), &tools[..], Some(&format)), (full, &[][..], None)]
        {
            let request =
                ChatRequest { model: "m", messages: &messages, tools, sampling: &sampling, response_format: format };
            assert_eq!(request_body(&request, ReasoningReplay::Auto).get(), request_json(&request).to_string());
        }
    }

    #[test]
    fn request_carries_tools_sampling_and_tool_results() {
        let messages = [
            Message::user("hi"),
            Message::assistant_calls(None, vec![ToolCall { id: "c".into(), name: "f".into(), arguments: "{}".into() }]),
            Message::tool_result("c", "out"),
        ];
        let tools = [ToolSpec { name: "f".into(), description: "d".into(), parameters: json!({}), strict: false }];
        let sampling = Sampling { temperature: Some(0.5), seed: Some(9), ..Sampling::default() };
        let body = request_body(
            &ChatRequest { model: "m", messages: &messages, tools: &tools, sampling: &sampling, response_format: None },
            ReasoningReplay::Auto,
        )
        .to_value();
        assert_eq!(body["messages"][1]["tool_calls"][0]["function"]["name"], "f");
        assert_eq!(body["messages"][2]["tool_call_id"], "c");
        assert_eq!(body["tools"][0]["function"]["name"], "f");
        assert_eq!(body["temperature"], 0.5);
        assert_eq!(body["seed"], 9);
        assert!(body.get("top_p").is_none());
    }

    #[test]
    fn reply_with_tool_calls_and_usage() {
        let body = json!({"choices": [{"message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "x", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
            "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3, "completion_tokens": 4}});
        let (m, finish, usage) = parse_reply(&body).unwrap();
        assert_eq!(m.tool_calls[0].arguments, "{\"a\":1}");
        assert_eq!(finish.as_deref(), Some("tool_calls"));
        assert_eq!(usage, Usage { prompt_tokens: 3, completion_tokens: 4 });
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let key = prop_oneof![
            Just("choices".to_owned()),
            Just("message".to_owned()),
            Just("content".to_owned()),
            Just("tool_calls".to_owned()),
            Just("function".to_owned()),
            Just("arguments".to_owned()),
            Just("name".to_owned()),
            Just("id".to_owned()),
            Just("usage".to_owned()),
            Just("prompt_tokens".to_owned()),
            Just("finish_reason".to_owned()),
            Just("reasoning".to_owned()),
            Just("reasoning_content".to_owned()),
            Just("type".to_owned()),
            Just("text".to_owned()),
            Just("image_url".to_owned()),
            "[a-z]{1,8}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            ".{0,16}".prop_map(Value::from),
        ];
        leaf.prop_recursive(6, 64, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((key.clone(), inner), 0..5)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// Whatever an endpoint sends, reading it gives a reply or a reason, never a panic.
        #[test]
        fn any_body_is_a_reply_or_a_reason(body in json_value()) {
            match parse_reply(&body) {
                Ok((message, _, _)) => proptest::prop_assert_eq!(message.role, Role::Assistant),
                Err(why) => proptest::prop_assert!(!why.is_empty()),
            }
        }
    }

    #[test]
    fn reasoning_is_read_in_either_spelling_and_sent_back_as_configured() {
        for field in ["reasoning_content", "reasoning"] {
            let body = json!({"choices": [{"message": {"role": "assistant", "content": "4", field: "2 + 2"}}]});
            let (m, _, _) = parse_reply(&body).unwrap();
            assert_eq!(m.reasoning.as_ref().unwrap().text, "2 + 2");
            let messages = [Message::user("2 + 2?"), m, Message::user("and 3 + 3?")];
            let sampling = Sampling::default();
            let request =
                ChatRequest { model: "m", messages: &messages, tools: &[], sampling: &sampling, response_format: None };
            let sent = |replay| request_body(&request, replay).to_value()["messages"][1].clone();
            assert_eq!(sent(ReasoningReplay::Keep)[field], "2 + 2", "{field}");
            assert_eq!(sent(ReasoningReplay::Keep)["content"], "4");
            for replay in [ReasoningReplay::Auto, ReasoningReplay::Drop] {
                assert_eq!(sent(replay), json!({"role": "assistant", "content": "4"}), "{field} {replay:?}");
            }
        }
    }

    #[test]
    fn content_parts_go_out_in_the_chat_form_and_come_back() {
        let image = "data:image/png;base64,iVBORw0KGgo=";
        let user = Message::with_parts(
            Role::User,
            vec![
                Part::Text { text: "what is this?".into() },
                Part::Image { url: image.into(), detail: None },
                Part::Raw { value: json!({"type": "hologram", "x": 1}) },
            ],
        );
        let sampling = Sampling::default();
        let messages = [user];
        let request =
            ChatRequest { model: "m", messages: &messages, tools: &[], sampling: &sampling, response_format: None };
        let body = request_body(&request, ReasoningReplay::Auto).to_value();
        assert_eq!(
            body["messages"][0]["content"],
            json!([{"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": image}}, {"type": "hologram", "x": 1}])
        );
        let reply = json!({"choices": [{"message": {"role": "assistant",
            "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "pixel"}]}}]});
        assert_eq!(parse_reply(&reply).unwrap().0.content.as_deref(), Some("a pixel"));
    }

    #[test]
    fn reply_without_choices_is_malformed() {
        assert!(parse_reply(&json!({"id": "x"})).unwrap_err().contains("choices"));
    }
}
