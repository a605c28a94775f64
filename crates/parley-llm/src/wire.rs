//! The Chat Completions wire format: requests built from borrowed transcripts (each message in
//! the form `parley_core`'s one writer gives it), replies read from whatever the endpoint sent.

use std::sync::Arc;

use parley_core::{ChatForm, ChatRequest, Message, Part, RawJson, Reasoning, Role, TokenIds, ToolCall, Usage};
use serde::Serialize;
use serde::ser::Serializer;
use serde_json::Value;
use serde_json::value::RawValue;

mod quick;

/// The request body, serialized once, straight from the borrowed transcript: no JSON tree is
/// built. Keys are written in sorted order, as a `serde_json::Value` would write them, so the
/// bytes (and a stub's answers that depend on them) are what they have always been.
///
/// `form` decides whether earlier assistant turns carry their reasoning, and whether the call
/// asks for token ids (and sends earlier turns' ids back). Each message is written the same way
/// on every turn, so a request is the previous one plus its new messages, which the store's
/// request deltas rely on.
pub(crate) fn request_body(request: &ChatRequest<'_>, form: ChatForm) -> RawJson {
    let sampling = request.sampling;
    let tokens = form.tokens.then_some(true);
    let body = Body {
        logprobs: tokens,
        max_tokens: sampling.max_tokens,
        messages: Messages(request.messages, form),
        model: request.model,
        response_format: request.response_format,
        return_tokens_as_token_ids: tokens,
        seed: sampling.seed,
        temperature: sampling.temperature,
        // Written once for every request that sends the list (see `ToolList`).
        tools: (!request.tools.is_empty()).then(|| request.tools.chat_json()),
        // Only the chosen token's log-prob: a server computes none without a number here.
        top_logprobs: form.tokens.then_some(0),
        top_p: sampling.top_p,
    };
    // Every field is a string, a number, a borrowed `Value` or a list of them: this cannot fail.
    RawJson::to_raw_sized(&body, body_len(request, form)).expect("a chat request serializes")
}

/// About how long a request's body comes out, from the lengths of its transcript's texts and
/// its tool list's: a little over, most often, so that its buffer is allocated once.
fn body_len(request: &ChatRequest<'_>, form: ChatForm) -> usize {
    let tools = if request.tools.is_empty() { 0 } else { request.tools.chat_json().get().len() };
    let messages: usize = request
        .messages
        .iter()
        .map(|m| {
            let calls: usize = m.tool_calls.iter().map(|c| c.id.len() + c.name.len() + c.arguments.len() + 64).sum();
            let reasoning = m.reasoning.as_ref().map_or(0, |r| r.text.len());
            // An id is at most ten digits and a comma; a log-prob about twenty bytes.
            let tokens = m
                .tokens
                .as_ref()
                .filter(|_| form.tokens)
                .map_or(0, |t| (t.prompt.len() + t.generation.len()) * 8 + t.log_probs.len() * 20);
            tokens
                + m.content.as_ref().map_or(0, String::len)
                + m.tool_call_id.as_ref().map_or(0, String::len)
                + reasoning
                + calls
                + 48
        })
        .sum();
    // The sampling fields, the model's name and the brackets; a message's escapes (a newline is
    // two bytes) a sixteenth more.
    tools + messages + messages / 16 + request.model.len() + 192
}

#[derive(Serialize)]
struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    messages: Messages<'a>,
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    return_tokens_as_token_ids: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_logprobs: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
}

/// The transcript, each message in the form the client asks for.
struct Messages<'a>(&'a [Message], ChatForm);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|m| m.chat(self.1)))
    }
}

/// [`parse_reply`] of a body's bytes. A reply of the usual shape is read straight from the
/// bytes; any other goes through a `Value` tree.
pub(crate) fn read_reply(body: &[u8], token_ids: bool) -> Result<(Message, Option<String>, Usage), String> {
    if let Some(reply) = quick::reply(body, token_ids) {
        return Ok(reply);
    }
    let body: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the body is not JSON ({e}): {}", parley_http::excerpt_bytes(body)))?;
    parse_reply(&body, token_ids).map_err(|why| format!("not a chat completion: {why}"))
}

/// The assistant message, finish reason and usage of a chat completion, or why it is not one.
/// With `token_ids`, the message keeps the tokens the reply carries (see [`token_ids`]).
pub(crate) fn parse_reply(body: &Value, token_ids: bool) -> Result<(Message, Option<String>, Usage), String> {
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
    let tokens = match token_ids {
        true => token_ids_of(body, choice, message)?.map(Arc::new),
        false => None,
    };
    let message = Message {
        content,
        parts,
        tool_calls,
        reasoning: reasoning.map(Box::new),
        tokens,
        ..Message::empty(Role::Assistant)
    };
    Ok((message, finish_reason, usage))
}

/// The tokens of a reply, in whichever spelling the server wrote them: the three fields on
/// `choices[0].message` (vLLM servers that serve RL trainers); vLLM's own `choices[0].token_ids`
/// with a top-level `prompt_token_ids`; or, for the generated ids alone, the log-prob entries'
/// tokens written `token_id:<n>`. Log-probs come from the message's field or from
/// `choices[0].logprobs.content`. `None` when the reply carries no token ids at all; an error when
/// it carries some that cannot be read or do not agree.
fn token_ids_of(body: &Value, choice: &Value, message: &Value) -> Result<Option<TokenIds>, String> {
    let ids = |value: &Value, field: &str| -> Result<Vec<u32>, String> {
        let list = value.as_array().ok_or_else(|| format!("`{field}` must be a list of token ids"))?;
        list.iter()
            .map(|id| id.as_u64().and_then(|id| u32::try_from(id).ok()))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| format!("`{field}` holds something that is not a token id"))
    };
    // The log-prob entries, as (token id if written `token_id:<n>`, log-prob).
    let entries = match choice.pointer("/logprobs/content") {
        Some(Value::Array(entries)) => Some(
            entries
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let logprob = e.get("logprob").and_then(Value::as_f64);
                    let logprob = logprob.ok_or_else(|| format!("`logprobs.content[{i}]` has no numeric `logprob`"))?;
                    let id = e.get("token").and_then(Value::as_str).and_then(|t| t.strip_prefix("token_id:"));
                    Ok((id.and_then(|id| id.parse::<u32>().ok()), logprob))
                })
                .collect::<Result<Vec<_>, String>>()?,
        ),
        _ => None,
    };
    let prompt = match (message.get("prompt_token_ids"), body.get("prompt_token_ids")) {
        (Some(p), _) if !p.is_null() => Some(ids(p, "message.prompt_token_ids")?),
        (_, Some(p)) if !p.is_null() => Some(ids(p, "prompt_token_ids")?),
        _ => None,
    };
    let generation = match (message.get("generation_token_ids"), choice.get("token_ids")) {
        (Some(g), _) if !g.is_null() => Some(ids(g, "message.generation_token_ids")?),
        (_, Some(g)) if !g.is_null() => Some(ids(g, "choices[0].token_ids")?),
        _ => None,
    };
    let log_probs = match message.get("generation_log_probs") {
        Some(Value::Array(list)) => Some(
            list.iter()
                .map(Value::as_f64)
                .collect::<Option<Vec<f64>>>()
                .ok_or("`message.generation_log_probs` holds something that is not a number")?,
        ),
        _ => None,
    };
    paired(prompt, generation, log_probs, entries)
}

/// A reply's tokens from what its spellings gave: the generated ids and log-probs, when no
/// field of their own held them, from the log-prob entries (as (token id if written
/// `token_id:<n>`, log-prob)). `None` when the reply has no token ids; an error when it has
/// generated ids without a prompt or a prompt without them, or a log-prob missing for an id.
fn paired(
    prompt: Option<Vec<u32>>,
    generation: Option<Vec<u32>>,
    log_probs: Option<Vec<f64>>,
    entries: Option<Vec<(Option<u32>, f64)>>,
) -> Result<Option<TokenIds>, String> {
    let generation = generation.or_else(|| entries.as_ref().and_then(|e| e.iter().map(|(id, _)| *id).collect()));
    let log_probs = log_probs.or_else(|| entries.map(|e| e.into_iter().map(|(_, logprob)| logprob).collect()));
    let (prompt, generation) = match (prompt, generation) {
        (None, None) => return Ok(None),
        (Some(prompt), Some(generation)) => (prompt, generation),
        (None, Some(_)) => return Err("the reply has generated token ids but no `prompt_token_ids`".into()),
        (Some(_), None) => return Err("the reply has `prompt_token_ids` but no generated token ids".into()),
    };
    let tokens = TokenIds { prompt, generation, log_probs: log_probs.unwrap_or_default() };
    tokens.check()?;
    Ok(Some(tokens))
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_core::{ReasoningField, ReasoningReplay, Sampling, ToolList, ToolSpec};
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

    /// A request of model `m` with no response format: most tests vary only these three.
    fn request<'a>(messages: &'a [Message], tools: &'a ToolList, sampling: &'a Sampling) -> ChatRequest<'a> {
        ChatRequest { model: "m", messages, tools, sampling, response_format: None, session: None, ready: None }
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
        let tools = ToolList::from(vec![
            ToolSpec {
                name: "f".into(),
                description: "d".into(),
                parameters: json!({"type": "object", "properties": {"z": {}, "a": {}}}),
                strict: false,
            },
            ToolSpec { name: "g".into(), description: String::new(), parameters: json!({}), strict: true },
        ]);
        let format = json!({"type": "json_schema", "json_schema": {"schema": {"type": "object"}}});
        let full = Sampling { temperature: Some(0.7), top_p: Some(0.95), max_tokens: Some(64), seed: Some(u64::MAX) };
        for (sampling, tools, format) in
            [(Sampling::default(), &tools, None), (full.clone(), &tools, Some(&format)), (full, ToolList::none(), None)]
        {
            let request = ChatRequest { response_format: format, ..request(&messages, tools, &sampling) };
            assert_eq!(request_body(&request, ChatForm::default()).get(), request_json(&request).to_string());
        }
    }

    #[test]
    fn a_bodys_buffer_is_allocated_once_and_shrinks_in_place() {
        // A multi-step session's transcripts, turn by turn: a long system prompt of many lines,
        // the user's question, then tool calls and their results; with and without token ids.
        let prompt =
            "# Instructions\nUse the tools.\n\n# Terms\n".to_owned() + &"- Term: \"Synonym\", Other\n".repeat(24);
        let mut messages = vec![Message::system(prompt), Message::user("Which term fits \"old\"?")];
        let tools = ToolList::from(vec![ToolSpec {
            name: "get_synonym_value".into(),
            description: "Get the value of a synonym.".into(),
            parameters: json!({"type": "object", "properties": {"synonym": {"type": "string"}}}),
            strict: true,
        }]);
        let sampling = Sampling { seed: Some(u64::MAX), ..Sampling::default() };
        for turn in 0..6 {
            for tokens in [false, true] {
                let request = request(&messages, &tools, &sampling);
                let form = ChatForm { tokens, ..ChatForm::default() };
                let (len, guess) = (request_body(&request, form).get().len(), body_len(&request, form));
                assert!(len <= guess && guess <= 2 * len, "turn {turn}, tokens {tokens}: {len} bytes, {guess} guessed");
            }
            let id = format!("call_{turn}");
            let mut call = Message::assistant_calls(
                None,
                vec![ToolCall {
                    id: id.clone(),
                    name: "get_synonym_value".into(),
                    arguments: "{\"synonym\":\"Old\"}".into(),
                }],
            );
            call.tokens = Some(Arc::new(TokenIds {
                prompt: (0..300).collect(),
                generation: vec![7; 12],
                log_probs: vec![-0.125; 12],
            }));
            messages.extend([call, Message::tool_result(id, "{\"synonym_value\":765}")]);
        }
    }

    #[test]
    fn request_carries_tools_sampling_and_tool_results() {
        let messages = [
            Message::user("hi"),
            Message::assistant_calls(None, vec![ToolCall { id: "c".into(), name: "f".into(), arguments: "{}".into() }]),
            Message::tool_result("c", "out"),
        ];
        let tools = ToolList::from(vec![ToolSpec {
            name: "f".into(),
            description: "d".into(),
            parameters: json!({}),
            strict: false,
        }]);
        let sampling = Sampling { temperature: Some(0.5), seed: Some(9), ..Sampling::default() };
        let body = request_body(&request(&messages, &tools, &sampling), ChatForm::default()).to_value();
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
        let (m, finish, usage) = parse_reply(&body, false).unwrap();
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

    /// A chat completion of the usual shape, every field of the type it has in one, with
    /// fields of any value beside them at each level: read straight, unbroken.
    fn usual_reply() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let text = || "[a-z\\\\\"{}é\n\u{1F600}]{0,8}";
        let call = (text(), text(), text())
            .prop_map(|(id, name, arguments)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}));
        let other = || prop::option::of(json_value());
        (
            prop::option::of(text()),
            prop::collection::vec(call, 0..3),
            prop::option::of(text()),
            (any::<u32>(), any::<u32>()),
            (other(), other(), other()),
            1..3usize,
        )
            .prop_map(
                |(content, calls, finish_reason, (prompt, completion), (top, in_choice, in_message), choices)| {
                    let mut message = json!({"role": "assistant", "content": content, "tool_calls": calls});
                    let mut choice = json!({"index": 0, "finish_reason": finish_reason, "logprobs": null});
                    let mut body = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": 0}});
                    for (object, other) in [(&mut message, in_message), (&mut choice, in_choice), (&mut body, top)] {
                        if let Some(other) = other {
                            object["other"] = other;
                        }
                    }
                    choice["message"] = message;
                    body["choices"] = json!(vec![choice; choices]);
                    body
                },
            )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// Whatever an endpoint sends, reading it gives a reply or a reason, never a panic.
        #[test]
        fn any_body_is_a_reply_or_a_reason(body in json_value()) {
            match parse_reply(&body, false) {
                Ok((message, _, _)) => proptest::prop_assert_eq!(message.role, Role::Assistant),
                Err(why) => proptest::prop_assert!(!why.is_empty()),
            }
        }
    }

    /// A field of a reply: mostly what endpoints send, sometimes anything at all.
    fn field_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![
            3 => Just(Value::Null),
            3 => "[a-z\\\\\"{}é]{0,6}".prop_map(Value::from),
            1 => any::<u32>().prop_map(Value::from),
            1 => json_value(),
        ]
    }

    /// A token field: mostly a list of ids or log-probs (of one of two lengths, so that some
    /// agree), sometimes anything at all.
    fn token_list() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![
            3 => prop::collection::vec(0u32..9, 1..3).prop_map(|ids| json!(ids)),
            2 => prop::collection::vec(-2.0f64..0.0, 1..3).prop_map(|lps| json!(lps)),
            2 => Just(Value::Null),
            1 => field_value(),
        ]
    }

    /// `choices[0].logprobs`: entries written `token_id:<n>` or not, with or without their
    /// log-prob, or anything at all.
    fn logprobs_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let entry = prop_oneof![
            4 => Just(json!({"token": "token_id:7", "logprob": -0.5, "top_logprobs": []})),
            1 => Just(json!({"token": "hi", "logprob": -1})),
            1 => Just(json!({"token": "token_id:7"})),
            1 => field_value(),
        ];
        prop_oneof![
            3 => prop::collection::vec(entry, 1..3).prop_map(|content| json!({"content": content})),
            2 => Just(Value::Null),
            1 => field_value(),
        ]
    }

    /// A chat completion whose fields are each [`field_value`], with token fields in each of
    /// their spellings.
    fn reply_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let call =
            (field_value(), field_value(), field_value(), any::<bool>()).prop_map(|(id, name, arguments, null)| {
                let function = if null { Value::Null } else { json!({"name": name, "arguments": arguments}) };
                json!({"id": id, "type": "function", "function": function})
            });
        let calls = prop_oneof![
            2 => prop::collection::vec(call, 0..3).prop_map(Value::Array),
            1 => field_value(),
        ];
        let usage = prop_oneof![
            2 => (any::<u32>(), field_value()).prop_map(|(p, c)| json!({"prompt_tokens": p, "completion_tokens": c})),
            1 => field_value(),
        ];
        let tokens = (token_list(), token_list(), token_list(), token_list(), token_list(), logprobs_value());
        (field_value(), calls, field_value(), field_value(), field_value(), usage, 0..3usize, tokens).prop_map(
            |(content, tool_calls, reasoning, reasoning_content, finish_reason, usage, choices, tokens)| {
                let (prompt, generation, log_probs, vllm_ids, vllm_prompt, logprobs) = tokens;
                let mut message = json!({"role": "assistant", "content": content, "tool_calls": tool_calls,
                    "reasoning": reasoning, "reasoning_content": reasoning_content});
                let mut choice = json!({"index": 0, "finish_reason": finish_reason});
                let mut body = json!({"id": "c", "usage": usage});
                // Each token field left out when null, else written where its spelling puts it.
                let put = |object: &mut Value, key: &str, value: Value| {
                    if !value.is_null() {
                        object[key] = value;
                    }
                };
                put(&mut message, "prompt_token_ids", prompt);
                put(&mut message, "generation_token_ids", generation);
                put(&mut message, "generation_log_probs", log_probs);
                put(&mut choice, "token_ids", vllm_ids);
                put(&mut choice, "logprobs", logprobs);
                put(&mut body, "prompt_token_ids", vllm_prompt);
                choice["message"] = message;
                body["choices"] = json!(vec![choice; choices]);
                body
            },
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// A reply read straight from its bytes is the one the tree read from the same bytes
        /// reads, or is left to it, with token ids asked for or not. The tree is read from the
        /// bytes, as `read_reply` reads it, not taken as generated: serde_json reads a float's
        /// shortest text back a unit in the last place off at times, on either way alike.
        #[test]
        fn a_reply_read_straight_is_the_trees(body in reply_value(), token_ids in proptest::prelude::any::<bool>()) {
            let bytes = serde_json::to_vec(&body).unwrap();
            if let Some(straight) = quick::reply(&bytes, token_ids) {
                let tree: Value = serde_json::from_slice(&bytes).unwrap();
                proptest::prop_assert_eq!(Ok(straight), parse_reply(&tree, token_ids));
            }
        }

        /// Whatever the bytes, a reply is read straight only where the tree reads it, and as it
        /// does: replies of the usual shape, compact or pretty, cut short, or with a byte put in,
        /// taken out or changed anywhere (bytes that matter to JSON most often).
        #[test]
        fn a_reply_read_straight_from_any_bytes_is_the_trees(
            body in proptest::prop_oneof![3 => usual_reply(), 1 => reply_value()],
            token_ids in proptest::prelude::any::<bool>(),
            pretty in proptest::prelude::any::<bool>(),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            byte in proptest::prop_oneof![
                3 => proptest::sample::select(b"{}[],:\"\\".to_vec()),
                2 => proptest::sample::select(b"/ \n0123456789-+.eEtrufalsnbu\x01\x7f\xc3\xa9".to_vec()),
                1 => proptest::prelude::any::<u8>(),
            ],
            how in 0..4u8,
        ) {
            let mut bytes = if pretty { serde_json::to_vec_pretty(&body) } else { serde_json::to_vec(&body) }.unwrap();
            // Half the time at a bracket, comma, colon or quote, where one byte breaks the most.
            let marks: Vec<usize> = (0..bytes.len()).filter(|&i| b"{}[],:\"".contains(&bytes[i])).collect();
            let i = match at.index(2) {
                0 if !marks.is_empty() => marks[at.index(marks.len())],
                _ => at.index(bytes.len() + 1),
            };
            match how {
                0 => bytes.truncate(i),
                1 => bytes.insert(i, byte),
                2 if i < bytes.len() => drop(bytes.remove(i)),
                _ if i < bytes.len() => bytes[i] = byte,
                _ => {}
            }
            if let Some(straight) = quick::reply(&bytes, token_ids) {
                let tree = serde_json::from_slice::<Value>(&bytes)
                    .map_err(|e| e.to_string())
                    .and_then(|v| parse_reply(&v, token_ids));
                proptest::prop_assert_eq!(Ok(straight), tree, "{}", String::from_utf8_lossy(&bytes));
            }
        }
    }

    proptest::proptest! {
        /// A reply of the usual shape is read straight, whatever its strings hold and whatever
        /// other fields it has: the tree is the fallback, not the rule.
        #[test]
        fn usual_replies_are_read_straight(body in usual_reply(), pretty in proptest::prelude::any::<bool>()) {
            let bytes = if pretty { serde_json::to_vec_pretty(&body) } else { serde_json::to_vec(&body) }.unwrap();
            let straight = quick::reply(&bytes, false);
            proptest::prop_assert!(straight.is_some(), "{}", String::from_utf8_lossy(&bytes));
            proptest::prop_assert_eq!(Ok(straight.unwrap()), parse_reply(&serde_json::from_slice(&bytes).unwrap(), false));
        }
    }

    /// Text at the edges of JSON: what the tree refuses is not read straight; what it reads is
    /// read straight as it reads it, or left to it.
    #[test]
    fn replies_at_the_edges_of_json_are_read_as_the_tree_reads_them() {
        let reply = |content: &str, extra: &str| {
            format!(r#"{{"choices": [{{"message": {{"content": {content}}}, "finish_reason": "stop"}}]{extra}}}"#)
        };
        let deep = format!(r#", "x": {}1{}"#, "[".repeat(100), "]".repeat(100));
        // Each body, and what the straight reading makes of it: its content (`Some`, read
        // straight), or `None`, left to the tree.
        let cases: [(String, Option<Option<&str>>); 19] = [
            // Read straight, escapes and all.
            (
                reply(r#""a\ud83d\ude00b\u00e9\/\b\f\n\r\t\"\\""#, ""),
                Some(Some("a\u{1F600}b\u{e9}/\x08\x0c\n\r\t\"\\")),
            ),
            (
                reply(r#""x""#, r#", "n": [-0, 0.5, 1e-3, -2E+2, 12345678901234567890], "t": true, "f": false"#),
                Some(Some("x")),
            ),
            (reply("null", ""), Some(None)),
            // Refused by the tree.
            (reply(r#""\ud83d""#, ""), None),
            (reply(r#""\ude00""#, ""), None),
            (reply(r#""\x41""#, ""), None),
            (reply("\"a\u{1}b\"", ""), None),
            (reply(r#""x""#, r#", "n": 01"#), None),
            (reply(r#""x""#, r#", "n": 1."#), None),
            (reply(r#""x""#, r#", "n": 1e400"#), None),
            (reply(r#""x""#, r#", "n": [1,]"#), None),
            (reply(r#""x""#, r#", "n": {"a": 1,}"#), None),
            (reply(r#""x""#, r#", "n": {"a" 1}"#), None),
            (reply(r#""x""#, r#", "n": tru"#), None),
            (reply(r#""x""#, r#", "n": NaN"#), None),
            (reply(r#""x""#, ","), None),
            (reply(r#""x""#, "") + " x", None),
            (reply(r#""x"#, ""), None),
            // Read by the tree, deeper than the straight reading goes: left to it.
            (reply(r#""x""#, &deep), None),
        ];
        for (body, straight) in cases {
            let tree =
                serde_json::from_str::<Value>(&body).map_err(|e| e.to_string()).and_then(|v| parse_reply(&v, false));
            let quick = quick::reply(body.as_bytes(), false);
            match straight {
                Some(content) => {
                    let (m, finish, _) = quick.clone().unwrap_or_else(|| panic!("read straight: {body}"));
                    assert_eq!((m.content.as_deref(), finish.as_deref()), (content, Some("stop")), "{body}");
                }
                None => assert!(quick.is_none(), "left to the tree: {body}"),
            }
            if let Some(quick) = quick {
                assert_eq!(Ok(quick), tree, "{body}");
            }
            assert_eq!(read_reply(body.as_bytes(), false).is_ok(), tree.is_ok(), "{body}");
        }
        // The tree reads the deep one; the straight reading leaves it, and the reply is still read.
        let deep = reply(r#""x""#, &deep);
        assert!(read_reply(deep.as_bytes(), false).is_ok());
    }

    #[test]
    fn token_ids_are_read_straight_in_each_spelling_and_in_the_trees_order() {
        let entries =
            json!({"content": [{"token": "token_id:5", "logprob": -0.5}, {"token": "token_id:6", "logprob": -1}]});
        fn merge(into: &mut Value, from: Value) {
            into.as_object_mut().unwrap().extend(from.as_object().unwrap().clone());
        }
        let reply = |message: Value, choice: Value, top: Value| {
            let mut m = json!({"content": "hi", "role": "assistant"});
            merge(&mut m, message);
            let mut c = json!({"logprobs": entries.clone(), "message": m});
            merge(&mut c, choice);
            let mut body = json!({"choices": [c]});
            merge(&mut body, top);
            serde_json::to_vec(&body).unwrap()
        };
        let three =
            json!({"prompt_token_ids": [1, 2], "generation_token_ids": [7, 8], "generation_log_probs": [-0.1, -0.2]});
        let cases = [
            // The message's three fields win over vLLM's and the entries.
            (
                three.clone(),
                json!({"token_ids": [9, 9]}),
                json!({"prompt_token_ids": [3]}),
                Some((vec![1, 2], vec![7, 8])),
            ),
            // vLLM's: ids on the choice, the prompt at the top, log-probs from the entries.
            (json!({}), json!({"token_ids": [5, 6]}), json!({"prompt_token_ids": [3]}), Some((vec![3], vec![5, 6]))),
            // The entries' ids, with the top-level prompt.
            (json!({}), json!({}), json!({"prompt_token_ids": [3]}), Some((vec![3], vec![5, 6]))),
        ];
        for (message, choice, top, expected) in cases {
            let body = reply(message, choice, top);
            let straight = quick::reply(&body, true).expect("read straight");
            let tokens = straight.0.tokens.as_deref().expect("token ids");
            assert_eq!(Some((tokens.prompt.clone(), tokens.generation.clone())), expected);
            assert_eq!(Ok(straight), parse_reply(&serde_json::from_slice(&body).unwrap(), true));
            assert_eq!(quick::reply(&body, false).unwrap().0.tokens, None, "not asked for, not read");
        }
        // An entry without its log-prob, ids without a prompt, and ids without their log-probs:
        // the tree refuses each, and the straight reading leaves each to it.
        let no_logprob = json!({"choices": [{"message": {"content": "hi"}, "logprobs": {"content": [{"token": "token_id:5"}]}}],
            "prompt_token_ids": [3]});
        let no_prompt = json!({"choices": [{"message": {"content": "hi", "generation_token_ids": [7], "generation_log_probs": [-1]}}]});
        let no_log_probs =
            json!({"choices": [{"message": {"content": "hi", "prompt_token_ids": [1], "generation_token_ids": [7]}}]});
        for body in [no_logprob, no_prompt, no_log_probs] {
            assert!(quick::reply(&serde_json::to_vec(&body).unwrap(), true).is_none(), "{body}");
            assert!(parse_reply(&body, true).is_err(), "{body}");
        }
    }

    #[test]
    fn usual_replies_are_read_straight_and_odd_ones_left_to_the_tree() {
        let usual = br#"{"id": "c", "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "x", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
            "logprobs": null, "finish_reason": "tool_calls"}, {"index": 1}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}"#;
        let (m, finish, usage) = quick::reply(usual, false).expect("the usual reply is read straight");
        assert_eq!(m.tool_calls[0].arguments, "{\"a\": 1}");
        assert_eq!((finish.as_deref(), usage), (Some("tool_calls"), Usage { prompt_tokens: 3, completion_tokens: 4 }));
        assert_eq!(read_reply(usual, false), parse_reply(&serde_json::from_slice(usual).unwrap(), false));
        let odd: [&[u8]; 7] = [
            // A list where `choices[0]` belongs: serde's derived readers would take it field by field.
            br#"{"choices": [[{"content": "hi"}, "stop"]]}"#,
            // A null message, which the tree reads as an empty one.
            br#"{"choices": [{"message": null}]}"#,
            br#"{"choices": [{"message": {"content": [{"type": "text", "text": "hi"}]}}]}"#,
            br#"{"choices": [{"message": {"tool_calls": [{"id": "x", "function": null}]}}]}"#,
            br#"{"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 1.5}}"#,
            br#"{"choices": []}"#,
            // Bytes that are not UTF-8 in a field the straight read skips.
            b"{\"choices\": [{\"message\": {\"content\": \"hi\"}}], \"id\": \"\xff\"}",
        ];
        for body in odd {
            assert!(quick::reply(body, false).is_none(), "{}", String::from_utf8_lossy(body));
            let tree =
                serde_json::from_slice::<Value>(body).map_err(|e| e.to_string()).and_then(|v| parse_reply(&v, false));
            assert_eq!(read_reply(body, false).is_ok(), tree.is_ok(), "{}", String::from_utf8_lossy(body));
        }
        // Escapes are read as the tree reads them; a name given twice keeps its last value.
        let twice =
            br#"{"choices": [{"message": {"content": "a\u00e9\n", "content": "b\"c"}, "finish_reason": "st\u006fp"}]}"#;
        let (m, finish, _) = quick::reply(twice, false).unwrap();
        assert_eq!((m.content.as_deref(), finish.as_deref()), (Some("b\"c"), Some("stop")));
        assert_eq!(read_reply(twice, false), parse_reply(&serde_json::from_slice(twice).unwrap(), false));
    }

    #[test]
    fn reasoning_is_read_in_either_spelling_and_sent_back_as_configured() {
        for field in ["reasoning_content", "reasoning"] {
            let body = json!({"choices": [{"message": {"role": "assistant", "content": "4", field: "2 + 2"}}]});
            let (m, _, _) = parse_reply(&body, false).unwrap();
            assert_eq!(m.reasoning.as_ref().unwrap().text, "2 + 2");
            let messages = [Message::user("2 + 2?"), m, Message::user("and 3 + 3?")];
            let sampling = Sampling::default();
            let request = request(&messages, ToolList::none(), &sampling);
            let sent = |replay| {
                request_body(&request, ChatForm { reasoning: ReasoningField::replayed(replay), tokens: false })
                    .to_value()["messages"][1]
                    .clone()
            };
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
        let request = request(&messages, ToolList::none(), &sampling);
        let body = request_body(&request, ChatForm::default()).to_value();
        assert_eq!(
            body["messages"][0]["content"],
            json!([{"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": image}}, {"type": "hologram", "x": 1}])
        );
        let reply = json!({"choices": [{"message": {"role": "assistant",
            "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "pixel"}]}}]});
        assert_eq!(parse_reply(&reply, false).unwrap().0.content.as_deref(), Some("a pixel"));
    }

    #[test]
    fn reply_without_choices_is_malformed() {
        assert!(parse_reply(&json!({"id": "x"}), false).unwrap_err().contains("choices"));
    }

    fn tokens(prompt: &[u32], generation: &[u32], log_probs: &[f64]) -> TokenIds {
        TokenIds { prompt: prompt.to_vec(), generation: generation.to_vec(), log_probs: log_probs.to_vec() }
    }

    #[test]
    fn token_ids_are_read_in_every_spelling() {
        let expected = tokens(&[1, 2, 3], &[7, 8], &[-0.25, -1.5]);
        // On the message, as vLLM servers serving RL trainers write them.
        let on_message = json!({"choices": [{"message": {"role": "assistant", "content": "hi",
            "prompt_token_ids": [1, 2, 3], "generation_token_ids": [7, 8], "generation_log_probs": [-0.25, -1.5]}}]});
        // vLLM's `return_token_ids`, with log-probs from the entries.
        let vllm = json!({"prompt_token_ids": [1, 2, 3], "choices": [{"token_ids": [7, 8],
            "logprobs": {"content": [{"token": "a", "logprob": -0.25}, {"token": "b", "logprob": -1.5}]},
            "message": {"role": "assistant", "content": "hi"}}]});
        // Generated ids only as `token_id:<n>` log-prob tokens.
        let as_tokens = json!({"prompt_token_ids": [1, 2, 3], "choices": [{"logprobs": {"content": [
            {"token": "token_id:7", "logprob": -0.25}, {"token": "token_id:8", "logprob": -1.5}]},
            "message": {"role": "assistant", "content": "hi"}}]});
        for body in [on_message, vllm, as_tokens] {
            let (m, _, _) = parse_reply(&body, true).unwrap();
            assert_eq!(m.tokens.as_deref(), Some(&expected), "{body}");
            // A client that did not ask for tokens keeps none, whatever the server sent.
            assert_eq!(parse_reply(&body, false).unwrap().0.tokens, None);
        }
    }

    #[test]
    fn token_ids_that_do_not_agree_are_a_malformed_reply() {
        let short = json!({"choices": [{"message": {"role": "assistant", "content": "hi",
            "prompt_token_ids": [1], "generation_token_ids": [7, 8], "generation_log_probs": [-0.25]}}]});
        assert!(parse_reply(&short, true).unwrap_err().contains("2 generated token ids but 1 log-probs"));
        let no_prompt = json!({"choices": [{"token_ids": [7], "logprobs": {"content": [{"token": "x", "logprob": -1.0}]},
            "message": {"role": "assistant", "content": "hi"}}]});
        assert!(parse_reply(&no_prompt, true).unwrap_err().contains("no `prompt_token_ids`"));
        let not_ids = json!({"prompt_token_ids": [1, "two"], "choices": [{"token_ids": [7],
            "message": {"role": "assistant", "content": "hi"}}]});
        assert!(parse_reply(&not_ids, true).unwrap_err().contains("not a token id"));
    }

    #[test]
    fn a_capturing_request_asks_for_tokens_and_sends_earlier_turns_back_with_theirs() {
        let mut earlier = Message::assistant("first");
        earlier.tokens = Some(Arc::new(tokens(&[1, 2], &[3], &[-0.5])));
        let messages = [Message::user("hi"), earlier, Message::user("again")];
        let sampling = Sampling::default();
        let request = request(&messages, ToolList::none(), &sampling);
        let capturing = request_body(&request, ChatForm { tokens: true, ..ChatForm::default() }).to_value();
        assert_eq!(capturing["logprobs"], true);
        assert_eq!(capturing["top_logprobs"], 0);
        assert_eq!(capturing["return_tokens_as_token_ids"], true);
        assert_eq!(capturing["messages"][1]["prompt_token_ids"], json!([1, 2]));
        assert_eq!(capturing["messages"][1]["generation_token_ids"], json!([3]));
        assert_eq!(capturing["messages"][1]["generation_log_probs"], json!([-0.5]));
        // The bytes are those of the same tree: keys in sorted order.
        let body = request_body(&request, ChatForm { tokens: true, ..ChatForm::default() });
        assert_eq!(body.get(), capturing.to_string());
        // Another client (a simulated user's, a judge's) neither asks nor sends them.
        let plain = request_body(&request, ChatForm::default()).to_value();
        assert!(plain.get("logprobs").is_none() && plain.get("return_tokens_as_token_ids").is_none());
        assert!(plain["messages"][1].get("prompt_token_ids").is_none());
    }
}
