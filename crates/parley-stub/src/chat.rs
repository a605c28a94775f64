//! The Chat Completions wire format (`POST /v1/chat/completions`): request to [`Turn`],
//! [`Answer`] to response.

use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::hash::hex;
use crate::stats::conversation_hash;
use crate::turn::{Answer, Tool, Turn, simulates_user, text_of, tokens};

/// The body of a `malformed` fault: valid up to where it stops.
pub(crate) const MALFORMED: &str = r#"{"id": "chatcmpl-broken", "choices": ["#;

/// Reads a Chat Completions request.
pub(crate) fn parse(body: &Value) -> Result<Turn<'_>, ApiError> {
    let body = body.as_object().ok_or_else(|| ApiError::invalid("the request body must be a JSON object"))?;
    let model = model(body)?;
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .filter(|messages| !messages.is_empty())
        .ok_or_else(|| ApiError::invalid("'messages' is required and must be a non-empty array"))?;

    let mut roles = Vec::with_capacity(messages.len());
    let mut system = None;
    let mut first_user = None;
    let mut prompt_chars = 0;
    for (i, message) in messages.iter().enumerate() {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::invalid(format!("messages[{i}].role must be a string")))?;
        let text = text_of(message.get("content"));
        prompt_chars += text.chars().count();
        match role {
            "system" | "developer" if system.is_none() => system = Some(text),
            "user" if first_user.is_none() => first_user = Some(text),
            _ => {}
        }
        roles.push(role);
    }

    // Tool results of the current user turn: the `tool` messages after the last user message.
    let mut tool_results = 0;
    let mut tool_outputs = Vec::new();
    for (message, role) in messages.iter().zip(&roles).rev() {
        match *role {
            "user" => break,
            "tool" => {
                tool_results += 1;
                tool_outputs.push(text_of(message.get("content")));
            }
            _ => {}
        }
    }

    // Read from the last backwards; kept in the order they came.
    tool_outputs.reverse();

    let user_turns = simulates_user(system.as_deref()).then(|| roles.iter().filter(|r| **r == "assistant").count());
    Ok(Turn {
        user_turns,
        model,
        conversation: conversation_hash(system.as_deref().unwrap_or(""), first_user.as_deref().unwrap_or("")),
        instructions: crate::hash::fnv(system.as_deref().unwrap_or("").as_bytes()),
        first_user,
        messages: messages.len(),
        tool_results,
        tool_outputs,
        tools: tools(body)?,
        tools_disabled: body.get("tool_choice").and_then(Value::as_str) == Some("none"),
        json_schema: json_schema(body)?,
        prompt_chars,
        seed: body.get("seed").and_then(Value::as_u64),
        calls_made: roles.iter().filter(|r| **r == "tool").count(),
    })
}

pub(crate) fn model(body: &Map<String, Value>) -> Result<&str, ApiError> {
    body.get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid("'model' is required and must be a string"))
}

/// Function tools: `{"type": "function", "function": {"name", "parameters"}}`. Other tool
/// kinds (`custom`) are skipped; the stub only calls functions.
fn tools(body: &Map<String, Value>) -> Result<Vec<Tool<'_>>, ApiError> {
    let tools = match body.get("tools") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(ApiError::invalid("'tools' must be an array")),
    };
    let mut functions = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        if !matches!(tool.get("type").and_then(Value::as_str), None | Some("function")) {
            continue;
        }
        let function = tool.get("function");
        let name = function
            .and_then(|function| function.get("name"))
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::invalid(format!("tools[{i}].function.name must be a string")))?;
        let parameters = function.and_then(|function| function.get("parameters"));
        functions.push(Tool { name, parameters });
    }
    Ok(functions)
}

/// The schema of `response_format: {"type": "json_schema", "json_schema": {"schema": S}}`.
fn json_schema(body: &Map<String, Value>) -> Result<Option<&Value>, ApiError> {
    let Some(format) = body.get("response_format") else {
        return Ok(None);
    };
    if format.get("type").and_then(Value::as_str) != Some("json_schema") {
        return Ok(None);
    }
    format
        .get("json_schema")
        .and_then(|json_schema| json_schema.get("schema"))
        .map(Some)
        .ok_or_else(|| ApiError::invalid("response_format.json_schema.schema is required"))
}

/// Writes the chat completion for `answer`. `body_hash` names the completion, so the same
/// request always gets the same id.
pub(crate) fn render(turn: &Turn<'_>, answer: &Answer<'_>, body_hash: u64) -> Value {
    let (message, finish_reason) = match answer {
        Answer::ToolCall { id, name, arguments } => (
            json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{
                    "id": format!("call_{}", hex(*id)),
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }],
            }),
            "tool_calls",
        ),
        Answer::Text(text) => (json!({"role": "assistant", "content": text}), "stop"),
    };
    let prompt_tokens = tokens(turn.prompt_chars);
    let completion_tokens = tokens(answer.output_chars());
    json!({
        "id": format!("chatcmpl-{}", hex(body_hash)),
        "object": "chat.completion",
        "created": 0,
        "model": turn.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason,
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    })
}
