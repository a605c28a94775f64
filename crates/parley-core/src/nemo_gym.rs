//! NeMo Gym's row and rollout formats: task rows in (`responses_create_params` plus task fields)
//! and the OpenAI Responses objects that its verifiers and tools read.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::message::{Message, Role, ToolCall, ToolSpec};
use crate::task::Task;

/// Why a row could not be read as a task.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct RowError(pub String);

/// Reads one NeMo Gym JSONL row into a task.
pub fn task_from_row(index: usize, row: Value) -> Result<Task, RowError> {
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
        }
        _ => {
            return Err(RowError("`responses_create_params.input` must be a string or a list of items".into()));
        }
    }
    let tools = match params.get("tools") {
        None | Some(Value::Null) => Arc::from([]),
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
    Ok(Task { index, id, messages, tools, row })
}

fn message_from_item(item: &Value) -> Result<Message, String> {
    match item.get("type").and_then(Value::as_str) {
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
    let content = match item.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("")
        }
        _ => String::new(),
    };
    Ok(Message::text(role, content))
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
                if let Some(text) = m.content.as_deref().filter(|t| !t.is_empty() || m.tool_calls.is_empty()) {
                    items.push(json!({
                        "type": "message", "role": "assistant", "id": format!("msg_{i}"), "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}],
                    }));
                }
                for call in &m.tool_calls {
                    items.push(json!({
                        "type": "function_call", "call_id": call.id, "name": call.name,
                        "arguments": call.arguments, "id": format!("fc_{}", call.id), "status": "completed",
                    }));
                }
            }
            Role::Tool => items.push(json!({
                "type": "function_call_output",
                "call_id": m.tool_call_id.as_deref().unwrap_or_default(),
                "output": m.content_str(),
            })),
            Role::User => items.push(json!({"type": "message", "role": "user", "content": m.content_str()})),
            Role::System => items.push(json!({"type": "message", "role": "system", "content": m.content_str()})),
        }
    }
    items
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
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    })
}

/// The output row of one rollout: the task row, the response, the reward fields, and NeMo Gym's
/// `_ng_task_index` and `_ng_rollout_index`.
pub fn rollout_row(
    row: &Value,
    response: Value,
    reward: &crate::reward::Reward,
    task_index: usize,
    rollout_index: u32,
) -> Value {
    let mut out = match row {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    out.insert("response".into(), response);
    out.insert("reward".into(), json!(reward.value));
    out.entry("mask_sample").or_insert(json!(false));
    out.entry("failure_kind").or_insert(Value::Null);
    out.entry("failure_reason").or_insert(Value::Null);
    for (k, v) in &reward.breakdown {
        out.insert(k.clone(), v.clone());
    }
    out.insert("_ng_task_index".into(), json!(task_index));
    out.insert("_ng_rollout_index".into(), json!(rollout_index));
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
