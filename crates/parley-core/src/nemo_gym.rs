//! NeMo Gym's row and rollout formats: task rows in (`responses_create_params` plus task fields)
//! and the OpenAI Responses objects that its verifiers and tools read.

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::{Map, Value, json};

use crate::content::{Part, Reasoning};
use crate::message::{Message, Role, ToolCall, ToolList, ToolSpec};
use crate::task::Task;
use crate::task_row::{Field, TaskRow};

/// Why a row could not be read as a task.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct RowError(pub String);

/// Reads one NeMo Gym JSONL row into a task.
pub fn task_from_row(index: usize, row: impl Into<TaskRow>) -> Result<Task, RowError> {
    let row = row.into();
    let params = row
        .get("responses_create_params")
        .ok_or_else(|| RowError("the row has no `responses_create_params` object".into()))?;
    let mut messages = Vec::new();
    if let Some(instructions) = params.get("instructions").and_then(Value::as_str) {
        messages.push(Message::system(instructions));
    }
    match params.get("input") {
        Some(Value::String(text)) => messages.push(Message::user(text.clone())),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                messages.push(message_from_item(item).map_err(|e| RowError(format!("input item {i}: {e}")))?);
            }
            messages = attach_reasoning(messages);
        }
        _ => {
            return Err(RowError("`responses_create_params.input` must be a string or a list of items".into()));
        }
    }
    let tools = match row.tools() {
        None | Some(Value::Null) => ToolList::default(),
        Some(Value::Array(tools)) => tools
            .iter()
            .enumerate()
            .map(|(i, t)| ToolSpec::from_openai_json(t).ok_or_else(|| RowError(format!("tool {i} has no `name`"))))
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(RowError("`responses_create_params.tools` must be a list".into()));
        }
    };
    let id = match row.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => index.to_string(),
    };
    // The messages are read from the input: the row keeps it as text from here on.
    let mut row = row;
    row.hold_input();
    Ok(Task { index, id, messages, tools, row })
}

/// One input item as a message; an assistant item from an earlier generation keeps its token
/// fields, so that it goes back to the policy with them.
fn message_from_item(item: &Value) -> Result<Message, String> {
    let mut message = message_of_item(item)?;
    if message.role == Role::Assistant && item.get("generation_token_ids").is_some() {
        let tokens: crate::TokenIds = serde_json::from_value(item.clone())
            .map_err(|e| format!("an assistant item's token fields cannot be read: {e}"))?;
        tokens.check()?;
        message.tokens = Some(std::sync::Arc::new(tokens));
    }
    Ok(message)
}

fn message_of_item(item: &Value) -> Result<Message, String> {
    match item.get("type").and_then(Value::as_str) {
        // A prior turn's reasoning, carried here as an assistant message of its own until
        // `attach_reasoning` joins it to the answer that follows it.
        Some("reasoning") => {
            let reasoning = Reasoning::from_responses_items(vec![item.clone()]).map(Box::new);
            return Ok(Message { reasoning, ..Message::empty(Role::Assistant) });
        }
        Some("function_call") => {
            let call = ToolCall {
                id: str_field(item, "call_id")?.to_owned(),
                name: str_field(item, "name")?.to_owned(),
                arguments: str_field(item, "arguments")?.to_owned(),
            };
            return Ok(Message::assistant_calls(None, vec![call]));
        }
        Some("function_call_output") => {
            return Ok(Message::tool_result(str_field(item, "call_id")?, str_field(item, "output")?));
        }
        _ => {}
    }
    let role = item.get("role").and_then(Value::as_str).ok_or("an input message needs a `role`")?;
    let role = Role::parse(role).ok_or_else(|| format!("unknown role `{role}`"))?;
    // Text parts become plain text; a row with an image or audio part keeps every part, and a
    // part of a type Parley does not know is kept raw rather than dropped.
    Ok(match item.get("content") {
        Some(Value::String(s)) => Message::text(role, s.clone()),
        Some(content @ Value::Array(_)) => Message::with_parts(role, Part::list_from_json(content)),
        _ => Message::text(role, String::new()),
    })
}

/// Joins each reasoning-only assistant message read from a row onto the assistant message after
/// it, where the reasoning belongs (Responses lists reasoning as an item before the answer).
fn attach_reasoning(messages: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    let mut pending: Option<Box<Reasoning>> = None;
    for mut m in messages {
        let reasoning_only =
            m.role == Role::Assistant && m.content.is_none() && m.parts.is_empty() && m.tool_calls.is_empty();
        if reasoning_only && let Some(r) = m.reasoning.take() {
            pending = Some(match pending.take() {
                Some(mut before) => {
                    let Reasoning { text, items, .. } = *r;
                    before.items.extend(items);
                    before.text = [std::mem::take(&mut before.text), text].join("\n");
                    before
                }
                None => r,
            });
            continue;
        }
        if m.role == Role::Assistant
            && let Some(r) = pending.take()
        {
            m.reasoning = Some(r);
        }
        out.push(m);
    }
    // Reasoning with no answer after it stays an assistant message of its own.
    if let Some(r) = pending {
        out.push(Message { reasoning: Some(r), ..Message::empty(Role::Assistant) });
    }
    out
}

fn str_field<'a>(item: &'a Value, key: &str) -> Result<&'a str, String> {
    item.get(key).and_then(Value::as_str).ok_or_else(|| format!("a `{}` item needs a string `{key}`", item["type"]))
}

/// The Responses `output` items for the part of a transcript that the session produced.
pub fn output_items(messages: &[Message]) -> Vec<Value> {
    let mut items = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        match m.role {
            Role::Assistant => {
                let first = items.len();
                // Reasoning comes first, as a Responses model writes it: the provider's own items
                // when it gave them (with their `encrypted_content`), else one made from the text.
                if let Some(reasoning) = &m.reasoning {
                    items.extend(reasoning.responses_items(&format!("rs_{i}")));
                }
                let content: Option<Vec<Value>> = if m.parts.is_empty() {
                    m.content
                        .as_deref()
                        .filter(|t| !t.is_empty() || (m.tool_calls.is_empty() && m.reasoning.is_none()))
                        .map(|text| vec![json!({"type": "output_text", "text": text, "annotations": []})])
                } else {
                    Some(m.parts.iter().map(|p| p.to_responses_json(true)).collect())
                };
                if let Some(content) = content {
                    items.push(json!({
                        "type": "message", "role": "assistant", "id": format!("msg_{i}"), "status": "completed",
                        "content": content,
                    }));
                }
                for call in &m.tool_calls {
                    items.push(json!({
                        "type": "function_call", "call_id": call.id, "name": call.name,
                        "arguments": call.arguments, "id": format!("fc_{}", call.id), "status": "completed",
                    }));
                }
                // A turn's tokens go on its last item, where trainers look for them.
                if let Some(tokens) = &m.tokens
                    && items.len() > first
                    && let Some(Value::Object(last)) = items.last_mut()
                {
                    put_tokens(last, tokens);
                }
            }
            Role::Tool => items.push(json!({
                "type": "function_call_output",
                "call_id": m.tool_call_id.as_deref().unwrap_or_default(),
                "output": m.content_str(),
            })),
            Role::User | Role::System => items.push(json!({"type": "message", "role": m.role.as_str(),
                "content": responses_content(m)})),
        }
    }
    items
}

/// Writes a generation's three token fields into an output item or a chat message.
pub fn put_tokens(item: &mut serde_json::Map<String, Value>, tokens: &crate::TokenIds) {
    item.insert("prompt_token_ids".into(), json!(tokens.prompt));
    item.insert("generation_token_ids".into(), json!(tokens.generation));
    item.insert("generation_log_probs".into(), json!(tokens.log_probs));
}

/// A user or system message's Responses `content`: its text, or its parts as input parts
/// (`input_text`, `input_image`, `input_audio`).
pub fn responses_content(m: &Message) -> Value {
    if m.parts.is_empty() {
        return Value::from(m.content_str());
    }
    Value::Array(m.parts.iter().map(|p| p.to_responses_json(false)).collect())
}

/// A `NeMoGymResponse` for a finished session: the produced items and the summed usage.
pub fn response_object(model: &str, produced: &[Message], usage: crate::model::Usage) -> Value {
    json!({
        "id": "resp_parley",
        "object": "response",
        "created_at": 0,
        "model": model,
        "status": "completed",
        "output": output_items(produced),
        "parallel_tool_calls": false,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": usage.prompt_tokens,
            "output_tokens": usage.completion_tokens,
            "total_tokens": usage.total(),
            "input_tokens_details": {"cached_tokens": 0},
            // Endpoints report reasoning tokens inside the completion tokens, and Parley does not
            // count them apart.
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    })
}

/// [`response_object`] written straight from the transcript, with no tree built: the same
/// bytes, for transcripts of text and tool calls. A transcript with parts, reasoning or token
/// ids has none ([`ResponseObject::of`]), and its response is built whole.
#[derive(Clone, Copy)]
pub struct ResponseObject<'a> {
    model: &'a str,
    produced: &'a [Message],
    usage: crate::model::Usage,
}

impl<'a> ResponseObject<'a> {
    pub fn of(model: &'a str, produced: &'a [Message], usage: crate::model::Usage) -> Option<ResponseObject<'a>> {
        let plain = |m: &Message| m.parts.is_empty() && m.reasoning.is_none() && m.tokens.is_none();
        produced.iter().all(plain).then_some(ResponseObject { model, produced, usage })
    }

    pub fn to_value(self) -> Value {
        response_object(self.model, self.produced, self.usage)
    }
}

// Each object below writes its keys in the order a `Value` map does: sorted.

impl Serialize for ResponseObject<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let usage = self.usage;
        let mut map = serializer.serialize_map(Some(10))?;
        map.serialize_entry("created_at", &0)?;
        map.serialize_entry("id", "resp_parley")?;
        map.serialize_entry("model", self.model)?;
        map.serialize_entry("object", "response")?;
        map.serialize_entry("output", &OutputItems(self.produced))?;
        map.serialize_entry("parallel_tool_calls", &false)?;
        map.serialize_entry("status", "completed")?;
        map.serialize_entry("tool_choice", "auto")?;
        map.serialize_entry("tools", &[(); 0])?;
        map.serialize_entry(
            "usage",
            &UsageFields {
                input_tokens: usage.prompt_tokens,
                input_tokens_details: CachedTokens { cached_tokens: 0 },
                output_tokens: usage.completion_tokens,
                output_tokens_details: ReasoningTokens { reasoning_tokens: 0 },
                total_tokens: usage.total(),
            },
        )?;
        map.end()
    }
}

/// [`output_items`] of a transcript of text and tool calls.
struct OutputItems<'a>(&'a [Message]);

impl Serialize for OutputItems<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut items = serializer.serialize_seq(None)?;
        for (i, m) in self.0.iter().enumerate() {
            match m.role {
                Role::Assistant => {
                    if let Some(text) = m.content.as_deref().filter(|t| !t.is_empty() || m.tool_calls.is_empty()) {
                        items.serialize_element(&TextItem {
                            content: [OutputText { annotations: [(); 0], text, kind: "output_text" }],
                            id: ItemId("msg_", &i),
                            role: "assistant",
                            status: "completed",
                            kind: "message",
                        })?;
                    }
                    for call in &m.tool_calls {
                        items.serialize_element(&FunctionCall {
                            arguments: &call.arguments,
                            call_id: &call.id,
                            id: ItemId("fc_", &call.id),
                            name: &call.name,
                            status: "completed",
                            kind: "function_call",
                        })?;
                    }
                }
                Role::Tool => items.serialize_element(&CallOutput {
                    call_id: m.tool_call_id.as_deref().unwrap_or_default(),
                    output: m.content_str(),
                    kind: "function_call_output",
                })?,
                Role::User | Role::System => items.serialize_element(&InputItem {
                    content: m.content_str(),
                    role: m.role.as_str(),
                    kind: "message",
                })?,
            }
        }
        items.end()
    }
}

/// An item's id: a prefix and what follows it (`msg_3`, `fc_call_1`).
struct ItemId<'a, T: std::fmt::Display + ?Sized>(&'static str, &'a T);

impl<T: std::fmt::Display + ?Sized> Serialize for ItemId<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_args!("{}{}", self.0, self.1))
    }
}

#[derive(Serialize)]
struct TextItem<'a> {
    content: [OutputText<'a>; 1],
    id: ItemId<'a, usize>,
    role: &'static str,
    status: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct OutputText<'a> {
    annotations: [(); 0],
    text: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct FunctionCall<'a> {
    arguments: &'a str,
    call_id: &'a str,
    id: ItemId<'a, str>,
    name: &'a str,
    status: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct CallOutput<'a> {
    call_id: &'a str,
    output: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct InputItem<'a> {
    content: &'a str,
    role: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct UsageFields {
    input_tokens: u64,
    input_tokens_details: CachedTokens,
    output_tokens: u64,
    output_tokens_details: ReasoningTokens,
    total_tokens: u64,
}

#[derive(Serialize)]
struct CachedTokens {
    cached_tokens: u64,
}

#[derive(Serialize)]
struct ReasoningTokens {
    reasoning_tokens: u64,
}

/// The output row of one rollout: the task row, the response, the reward fields, and NeMo Gym's
/// `_ng_task_index` and `_ng_rollout_index`.
pub fn rollout_row(
    row: &TaskRow,
    response: Value,
    reward: &crate::reward::Reward,
    task_index: usize,
    rollout_index: u32,
) -> Value {
    RolloutRow::new(row, response, reward, task_index, rollout_index).into_value()
}

/// A rollout row ([`rollout_row`]) that borrows its task row: it serializes to the same bytes
/// without copying the task's fields, which a run writes for every rollout.
pub struct RolloutRow<'a> {
    task: &'a TaskRow,
    /// What the row adds to the task's fields or puts in their place, in key order.
    added: Map<String, Value>,
    /// The `response`, when it is written straight from the transcript rather than held in
    /// `added`.
    response: Option<ResponseObject<'a>>,
}

impl<'a> RolloutRow<'a> {
    pub fn new(
        task: &'a TaskRow,
        response: Value,
        reward: &crate::reward::Reward,
        task_index: usize,
        rollout_index: u32,
    ) -> RolloutRow<'a> {
        RolloutRow::with(task, Some(response), reward, task_index, rollout_index)
    }

    /// The row's fields but, when `response` is `None`, its response.
    fn with(
        task: &'a TaskRow,
        response: Option<Value>,
        reward: &crate::reward::Reward,
        task_index: usize,
        rollout_index: u32,
    ) -> RolloutRow<'a> {
        let mut added = Map::new();
        // Defaults, where the task row has none of its own.
        for (key, default) in
            [("mask_sample", json!(false)), ("failure_kind", Value::Null), ("failure_reason", Value::Null)]
        {
            if task.get(key).is_none() {
                added.insert(key.into(), default);
            }
        }
        if let Some(response) = response {
            added.insert("response".into(), response);
        }
        added.insert("reward".into(), json!(reward.value));
        for (k, v) in &reward.breakdown {
            added.insert(k.clone(), v.clone());
        }
        added.insert("_ng_task_index".into(), json!(task_index));
        added.insert("_ng_rollout_index".into(), json!(rollout_index));
        RolloutRow { task, added, response: None }
    }

    /// [`RolloutRow::new`] with the [`response_object`] of what a session produced, written
    /// straight from the transcript where it can be ([`ResponseObject`]).
    pub fn produced(
        task: &'a TaskRow,
        model: &'a str,
        produced: &'a [Message],
        usage: crate::model::Usage,
        reward: &crate::reward::Reward,
        task_index: usize,
        rollout_index: u32,
    ) -> RolloutRow<'a> {
        let straight = ResponseObject::of(model, produced, usage);
        let tree = straight.is_none().then(|| response_object(model, produced, usage));
        let mut row = RolloutRow::with(task, tree, reward, task_index, rollout_index);
        // A reward field named `response` takes the response's place, as it does in the tree.
        if !row.added.contains_key("response") {
            row.response = straight;
        }
        row
    }

    /// Adds a field, or puts it in the place of the task's own.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        if key == "response" {
            self.response = None;
        }
        self.added.insert(key, value);
    }

    fn masked(&self) -> bool {
        let field = self.added.get("mask_sample").or_else(|| self.task.get("mask_sample"));
        field == Some(&Value::Bool(true))
    }

    /// The row as a value, masked ([`mask`]) when its `mask_sample` is true.
    pub fn into_value(mut self) -> Value {
        if let Some(response) = self.response.take() {
            self.added.insert("response".into(), response.to_value());
        }
        let masked = self.masked();
        let mut out = match self.task.to_value() {
            Value::Object(task) => task,
            _ => Map::new(),
        };
        out.extend(self.added);
        if masked {
            mask(&mut out);
        }
        Value::Object(out)
    }
}

impl serde::Serialize for RolloutRow<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // A masked row changes the task's `instance_config`: rare enough to build whole.
        if self.masked() {
            let whole = RolloutRow { task: self.task, added: self.added.clone(), response: self.response };
            return whole.into_value().serialize(serializer);
        }
        // Both iterate in key order (serde_json's `Map` is ordered by key), so merging them
        // writes the keys in the order the built row's map would.
        let mut map = serializer.serialize_map(None)?;
        let mut task = self.task.entries().map(|(k, v)| (k.as_str(), Entry::Task(v))).peekable();
        let mut added: Vec<(&str, Entry)> =
            self.added.iter().map(|(k, v)| (k.as_str(), Entry::Task(Field::Plain(v)))).collect();
        if let Some(response) = self.response {
            let at = added.partition_point(|(k, _)| *k < "response");
            added.insert(at, ("response", Entry::Response(response)));
        }
        let mut added = added.into_iter().peekable();
        loop {
            let next = match (task.peek(), added.peek()) {
                (Some((t, _)), Some((a, _))) if t < a => task.next(),
                (Some((t, _)), Some((a, _))) if t == a => {
                    task.next();
                    added.next()
                }
                (Some(_), Some(_)) | (None, Some(_)) => added.next(),
                (Some(_), None) => task.next(),
                (None, None) => break,
            };
            let (key, value) = next.expect("one of the two had an entry");
            map.serialize_entry(key, &value)?;
        }
        map.end()
    }
}

/// A value of a rollout row being written: the task's or an added field's, or the response
/// written straight.
enum Entry<'a> {
    Task(Field<'a>),
    Response(ResponseObject<'a>),
}

impl Serialize for Entry<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Entry::Task(field) => field.serialize(serializer),
            Entry::Response(response) => response.serialize(serializer),
        }
    }
}

/// Marks a rollout row to be left out of training where NeMo RL reads it:
/// `instance_config.mask_sample` (its `_extract_mask_sample_flags`), and the top-level
/// `mask_sample` NeMo Gym's verifiers write.
pub fn mask(row: &mut Map<String, Value>) {
    row.insert("mask_sample".into(), Value::Bool(true));
    let config = row.entry("instance_config").or_insert_with(|| json!({}));
    if !config.is_object() {
        *config = json!({});
    }
    if let Some(config) = config.as_object_mut() {
        config.insert("mask_sample".into(), Value::Bool(true));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_masked_verdict_reaches_instance_config_beside_the_rows_own_settings() {
        let row = TaskRow::from(json!({"id": 1, "instance_config": {"difficulty": 3}}));
        let mut reward = crate::reward::Reward::new(0.0);
        reward.breakdown.insert("mask_sample".into(), json!(true));
        let out = rollout_row(&row, json!({}), &reward, 0, 0);
        assert_eq!(out["instance_config"], json!({"difficulty": 3, "mask_sample": true}));
        assert_eq!(out["mask_sample"], json!(true));
        let plain = rollout_row(&row, json!({}), &crate::reward::Reward::new(1.0), 0, 0);
        assert_eq!(plain["instance_config"], json!({"difficulty": 3}), "an unmasked row's config is its own");
        assert_eq!(plain["mask_sample"], json!(false));
    }

    #[test]
    fn a_rollout_row_written_from_its_task_row_is_the_row_built_whole() {
        let mut masked = crate::reward::Reward::new(0.25);
        masked.breakdown.insert("mask_sample".into(), json!(true));
        let mut components = crate::reward::Reward::new(1.0);
        components.breakdown.insert("accuracy".into(), json!(true));
        components.breakdown.insert("zz_last".into(), json!(2));
        let rows = [
            json!({"id": 1, "instance_config": {"difficulty": 3}, "reward": 9, "zeta": [1, 2]}),
            json!({"responses_create_params": {"input": "q"}, "mask_sample": false, "failure_kind": "x", "a": null}),
            json!({"responses_create_params": {"input": "q", "tools": [{"name": "f"}], "top_p": 1}, "zeta": 1}),
            json!({}),
            json!("not an object"),
        ];
        for row in &rows {
            let mut shared = TaskRow::from(row.clone());
            if let Some(list) = shared.own_tools() {
                assert!(shared.share_tools(&list));
            }
            let built = rollout_row(&TaskRow::from(row.clone()), json!({"output": []}), &masked, 4, 2);
            for reward in [&masked, &components, &crate::reward::Reward::new(0.0)] {
                let mut written = RolloutRow::new(&shared, json!({"output": []}), reward, 4, 2);
                written.insert("_parley_token_contiguity", json!("why"));
                let bytes = serde_json::to_string(&written).unwrap();
                let whole = serde_json::to_string(&written.into_value()).unwrap();
                assert_eq!(bytes, whole, "{row}");
                if let Some(params) = row.get("responses_create_params") {
                    let back: Value = serde_json::from_str(&bytes).unwrap();
                    assert_eq!(back["responses_create_params"], *params, "the shared tool list goes back in");
                }
            }
            assert_eq!(built, rollout_row(&shared, json!({"output": []}), &masked, 4, 2));
        }
    }

    /// A message of a transcript of text and tool calls, with text that needs escaping.
    fn plain_message() -> impl proptest::strategy::Strategy<Value = Message> {
        use proptest::prelude::*;
        let text = "[a-z \"\\\\\u{1}\n\u{e9}\u{1F600}]{0,6}";
        let call = (text, text, text).prop_map(|(id, name, arguments)| ToolCall { id, name, arguments });
        let role = prop_oneof![Just(Role::System), Just(Role::User), Just(Role::Assistant), Just(Role::Tool)];
        (role, proptest::option::of(text), prop::collection::vec(call, 0..3), proptest::option::of(text)).prop_map(
            |(role, content, tool_calls, tool_call_id)| Message {
                content,
                tool_calls: if role == Role::Assistant { tool_calls } else { Vec::new() },
                tool_call_id,
                ..Message::empty(role)
            },
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

        /// A rollout row whose response is written straight from the transcript is the row
        /// built whole as a tree, byte for byte.
        #[test]
        fn a_response_written_straight_is_the_tree(
            produced in proptest::collection::vec(plain_message(), 0..6),
            prompt_tokens in 0..u64::MAX / 4,
            masked in proptest::prelude::any::<bool>(),
        ) {
            let task = TaskRow::from(json!({"id": 1, "responses_create_params": {"input": "q"}, "zeta": 2}));
            let mut reward = crate::reward::Reward::new(0.5);
            if masked {
                reward.breakdown.insert("mask_sample".into(), json!(true));
            }
            let usage = crate::model::Usage { prompt_tokens, completion_tokens: 7 };
            proptest::prop_assert!(ResponseObject::of("m\"odel", &produced, usage).is_some());
            let straight = RolloutRow::produced(&task, "m\"odel", &produced, usage, &reward, 3, 1);
            let tree = rollout_row(&task, response_object("m\"odel", &produced, usage), &reward, 3, 1);
            proptest::prop_assert_eq!(serde_json::to_string(&straight).unwrap(), serde_json::to_string(&tree).unwrap());
            proptest::prop_assert_eq!(straight.into_value(), tree);
        }
    }

    #[test]
    fn a_response_with_reasoning_or_a_reward_field_named_response_is_the_trees() {
        let task = TaskRow::from(json!({"id": 1}));
        let mut thought = Message::assistant("4");
        thought.reasoning = Some(Box::new(Reasoning { text: "2 + 2".into(), ..Reasoning::default() }));
        let produced = [Message::user("2 + 2?"), thought];
        let usage = crate::model::Usage { prompt_tokens: 3, completion_tokens: 4 };
        assert!(ResponseObject::of("m", &produced, usage).is_none(), "reasoning is built as a tree");
        let mut named = crate::reward::Reward::new(1.0);
        named.breakdown.insert("response".into(), json!("the scorer's"));
        for (produced, reward) in
            [(&produced[..], &named), (&produced[..1], &named), (&produced[..], &crate::reward::Reward::new(0.0))]
        {
            let row = RolloutRow::produced(&task, "m", produced, usage, reward, 0, 0);
            let tree = rollout_row(&task, response_object("m", produced, usage), reward, 0, 0);
            assert_eq!(serde_json::to_string(&row).unwrap(), serde_json::to_string(&tree).unwrap());
        }
        let mut row = RolloutRow::produced(&task, "m", &produced[..1], usage, &crate::reward::Reward::new(0.0), 0, 0);
        row.insert("response", json!(1));
        assert_eq!(serde_json::to_value(&row).unwrap()["response"], json!(1), "an inserted response wins");
    }

    #[test]
    fn reads_a_multi_step_row() {
        let row = json!({"id": 7, "responses_create_params": {
            "input": [{"role": "system", "content": "sys"}, {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
            "tools": [{"type": "function", "name": "get_synonym_value", "parameters": {"type": "object"}, "strict": true}]},
            "expected_synonym_values": [1]});
        let task = task_from_row(3, row).unwrap();
        assert_eq!(task.id, "7");
        assert_eq!(task.messages, vec![Message::system("sys"), Message::user("hi")]);
        assert_eq!(task.tools[0].name, "get_synonym_value");
        assert!(task.tools[0].strict);
    }

    #[test]
    fn a_row_with_an_image_keeps_every_part_and_prior_reasoning() {
        let image = "data:image/png;base64,iVBORw0KGgo=";
        let row = json!({"responses_create_params": {"input": [
            {"role": "user", "content": [{"type": "input_text", "text": "what is this?"},
                {"type": "input_image", "image_url": image, "detail": "low"}, {"type": "hologram"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "a png"}],
                "encrypted_content": "gAAA"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "A pixel."}]},
            {"role": "user", "content": "thanks"}]}});
        let task = task_from_row(0, row).unwrap();
        assert_eq!(task.messages.len(), 3);
        let user = &task.messages[0];
        assert_eq!(user.parts[1], Part::Image { url: image.into(), detail: Some("low".into()) });
        assert_eq!(user.text_content(), "what is this?");
        assert_eq!(user.part_problems().len(), 1);
        let answer = &task.messages[1];
        assert_eq!((answer.content_str(), answer.reasoning.as_ref().unwrap().text.as_str()), ("A pixel.", "a png"));
        // Written back, the reasoning item and the image part are what the row held.
        let items = output_items(&task.messages);
        assert_eq!(items[0]["content"][1], json!({"type": "input_image", "image_url": image, "detail": "low"}));
        assert_eq!(items[1]["encrypted_content"], "gAAA");
        assert_eq!(items[2]["content"][0]["text"], "A pixel.");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

        /// A row whose input items hold any content and any item types reads as a task or a
        /// reason, and the task's messages write back as Responses items, never a panic.
        #[test]
        fn any_row_content_reads_and_writes_back(
            contents in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::prelude::Just(json!("text")),
                    proptest::prelude::Just(json!(null)),
                    proptest::prelude::Just(json!([{"type": "input_image", "image_url": "data:image/png;base64,@"}])),
                    proptest::prelude::Just(json!([{"type": "input_image"}, {"type": "input_audio", "input_audio": {}}])),
                    proptest::prelude::Just(json!({"type": "input_text", "text": "x"})),
                    proptest::prelude::Just(json!(7)),
                ],
                0..5,
            ),
            kinds in proptest::collection::vec(
                proptest::sample::select(vec!["user", "assistant", "reasoning", "system", "alien"]),
                5,
            ),
        ) {
            let input: Vec<Value> = contents
                .into_iter()
                .zip(kinds)
                .map(|(content, kind)| match kind {
                    "reasoning" => json!({"type": "reasoning", "summary": content}),
                    role => json!({"role": role, "content": content}),
                })
                .collect();
            if let Ok(task) = task_from_row(0, json!({"responses_create_params": {"input": input}})) {
                let _ = output_items(&task.messages);
                for m in &task.messages {
                    let _ = (m.text_content(), m.part_problems());
                }
            }
        }
    }

    #[test]
    fn rejects_a_row_without_params() {
        let err = task_from_row(0, json!({"input": "x"})).unwrap_err();
        assert!(err.0.contains("responses_create_params"));
    }

    #[test]
    fn output_items_follow_the_responses_shape() {
        let call = ToolCall { id: "c1".into(), name: "f".into(), arguments: "{}".into() };
        let items = output_items(&[
            Message::assistant_calls(None, vec![call]),
            Message::tool_result("c1", "ok"),
            Message::assistant("done"),
        ]);
        assert_eq!(items[0]["type"], "function_call");
        assert_eq!(items[1]["type"], "function_call_output");
        assert_eq!(items[2]["content"][0]["text"], "done");
        assert_eq!(items.len(), 3);
    }

    #[test]
    fn a_turns_tokens_go_on_its_last_item_and_are_read_back_from_a_row() {
        let tokens = crate::TokenIds { prompt: vec![1, 2], generation: vec![3, 4], log_probs: vec![-0.5, -0.25] };
        let calls = ["c1", "c2"].map(|id| ToolCall { id: id.into(), name: "f".into(), arguments: "{}".into() });
        let mut turn = Message::assistant_calls(Some("checking".into()), calls.to_vec());
        turn.tokens = Some(std::sync::Arc::new(tokens.clone()));
        let items = output_items(&[Message::user("hi"), turn]);
        let types: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["message", "message", "function_call", "function_call"]);
        let carrying: Vec<usize> =
            (0..items.len()).filter(|&i| items[i].get("generation_token_ids").is_some()).collect();
        assert_eq!(carrying, [3], "only the turn's last item carries its tokens");
        assert_eq!(items[3]["prompt_token_ids"], json!([1, 2]));
        assert_eq!(items[3]["generation_log_probs"], json!([-0.5, -0.25]));
        // A row whose input holds that item reads its tokens back, to send them to the policy.
        let row = json!({"responses_create_params": {"input": [{"role": "user", "content": "hi"}, items[3].clone(),
            {"type": "function_call_output", "call_id": "c2", "output": "ok"}]}});
        let task = task_from_row(0, row).unwrap();
        assert_eq!(task.messages[1].tokens.as_deref(), Some(&tokens));
        let bad = json!({"responses_create_params": {"input": [{"type": "function_call", "call_id": "c", "name": "f",
            "arguments": "{}", "prompt_token_ids": [1], "generation_token_ids": [2, 3], "generation_log_probs": [-1.0]}]}});
        assert!(task_from_row(0, bad).unwrap_err().0.contains("log-probs"));
    }
}
