//! The Responses wire format (`POST /v1/responses`): request to [`Turn`], [`Answer`] to
//! response. The stub is stateless: it reads `input` and ignores `previous_response_id`.

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use crate::chat::model;
use crate::error::ApiError;
use crate::hash::hex;
use crate::stats::conversation_hash;
use crate::turn::{Answer, Tool, Turn, simulates_user, text_of, tokens};

/// The body of a `malformed` fault: valid up to where it stops.
pub(crate) const MALFORMED: &str = r#"{"id": "resp_broken", "output": ["#;

/// What one input item is, as far as the stub cares.
enum Item<'a> {
    Message { role: &'a str, text: Cow<'a, str> },
    ToolResult(Cow<'a, str>),
    Other,
}

/// Reads a Responses request.
pub(crate) fn parse(body: &Value) -> Result<Turn<'_>, ApiError> {
    let body = body.as_object().ok_or_else(|| ApiError::invalid("the request body must be a JSON object"))?;
    let model = model(body)?;
    let items = match body.get("input") {
        Some(Value::String(text)) => vec![Item::Message { role: "user", text: Cow::Borrowed(text) }],
        Some(Value::Array(items)) if !items.is_empty() => {
            items.iter().enumerate().map(|(i, item)| item_of(i, item)).collect::<Result<_, _>>()?
        }
        _ => {
            return Err(ApiError::invalid("'input' is required and must be a string or a non-empty array of items"));
        }
    };

    // `instructions` play the system message's part in the conversation key.
    let instructions = body.get("instructions").and_then(Value::as_str).filter(|text| !text.is_empty());
    let mut system = instructions.map(Cow::Borrowed);
    let mut first_user = None;
    let mut prompt_chars = instructions.map_or(0, |text| text.chars().count());
    for item in &items {
        match item {
            Item::Message { role, text } => {
                prompt_chars += text.chars().count();
                match *role {
                    "system" | "developer" if system.is_none() => system = Some(text.clone()),
                    "user" if first_user.is_none() => first_user = Some(text.clone()),
                    _ => {}
                }
            }
            Item::ToolResult(text) => prompt_chars += text.chars().count(),
            Item::Other => {}
        }
    }

    // Tool results of the current user turn: `function_call_output` items after the last
    // user message.
    let mut tool_results = 0;
    let mut tool_outputs = Vec::new();
    for item in items.iter().rev() {
        match item {
            Item::Message { role: "user", .. } => break,
            Item::ToolResult(text) => {
                tool_results += 1;
                tool_outputs.push(text.clone());
            }
            _ => {}
        }
    }

    // Read from the last backwards; kept in the order they came.
    tool_outputs.reverse();

    let user_turns = simulates_user(system.as_deref())
        .then(|| items.iter().filter(|i| matches!(i, Item::Message { role: "assistant", .. })).count());
    Ok(Turn {
        user_turns,
        model,
        conversation: conversation_hash(system.as_deref().unwrap_or(""), first_user.as_deref().unwrap_or("")),
        instructions: crate::hash::fnv(system.as_deref().unwrap_or("").as_bytes()),
        first_user,
        messages: items.len(),
        tool_results,
        tool_outputs,
        tools: tools(body)?,
        tools_disabled: body.get("tool_choice").and_then(Value::as_str) == Some("none"),
        json_schema: json_schema(body)?,
        prompt_chars,
        seed: body.get("seed").and_then(Value::as_u64),
        calls_made: items.iter().filter(|i| matches!(i, Item::ToolResult(_))).count(),
    })
}

fn item_of(i: usize, item: &Value) -> Result<Item<'_>, ApiError> {
    let item = item.as_object().ok_or_else(|| ApiError::invalid(format!("input[{i}] must be an object")))?;
    let kind = item.get("type").and_then(Value::as_str);
    match kind {
        // Easy input messages carry no type; full ones say "message".
        None | Some("message") => {
            let role = item
                .get("role")
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::invalid(format!("input[{i}].role must be a string")))?;
            Ok(Item::Message { role, text: text_of(item.get("content")) })
        }
        Some("function_call_output") => Ok(Item::ToolResult(text_of(item.get("output")))),
        // Function calls, reasoning and the rest only count towards the number of items.
        Some(_) => Ok(Item::Other),
    }
}

/// Function tools: `{"type": "function", "name", "parameters"}`. Hosted tools (web search,
/// file search, MCP) are skipped; the stub only calls functions.
fn tools(body: &Map<String, Value>) -> Result<Vec<Tool<'_>>, ApiError> {
    let tools = match body.get("tools") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(ApiError::invalid("'tools' must be an array")),
    };
    let mut functions = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            continue;
        }
        let name = tool
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::invalid(format!("tools[{i}].name must be a string")))?;
        functions.push(Tool { name, parameters: tool.get("parameters") });
    }
    Ok(functions)
}

/// The schema of `text: {"format": {"type": "json_schema", "schema": S}}`.
fn json_schema(body: &Map<String, Value>) -> Result<Option<&Value>, ApiError> {
    let Some(format) = body.get("text").and_then(|text| text.get("format")) else {
        return Ok(None);
    };
    if format.get("type").and_then(Value::as_str) != Some("json_schema") {
        return Ok(None);
    }
    format.get("schema").map(Some).ok_or_else(|| ApiError::invalid("text.format.schema is required"))
}

/// Writes the response for `answer`. `body_hash` names the response and its message, so the
/// same request always gets the same ids.
pub(crate) fn render(turn: &Turn<'_>, answer: &Answer<'_>, body_hash: u64) -> Value {
    let output = match answer {
        Answer::ToolCall { id, name, arguments } => json!({
            "type": "function_call",
            "id": format!("fc_{}", hex(*id)),
            "call_id": format!("call_{}", hex(*id)),
            "name": name,
            "arguments": arguments,
            "status": "completed",
        }),
        Answer::Text(text) => json!({
            "type": "message",
            "id": format!("msg_{}", hex(body_hash)),
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }),
    };
    let input_tokens = tokens(turn.prompt_chars);
    let output_tokens = tokens(answer.output_chars());
    json!({
        "id": format!("resp_{}", hex(body_hash)),
        "object": "response",
        "created_at": 0,
        "model": turn.model,
        "status": "completed",
        "error": null,
        "incomplete_details": null,
        "output": [output],
        "parallel_tool_calls": false,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    })
}
