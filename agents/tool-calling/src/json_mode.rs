//! Tool selection through a JSON-schema response format, for endpoints that answer in text only
//! (a small local model behind llama.cpp, say). The model is shown the tools in its system
//! prompt and must answer with `{"action": <a tool name or "respond">, "arguments": {...},
//! "message": "..."}`, which the endpoint enforces by grammar; the answer becomes a tool call or
//! a text message. The stored transcript stays canonical (assistant tool calls, tool results);
//! only the request is rewritten.

use parley_core::{Message, Role, ToolCall, ToolSpec};
use serde_json::{Value, json};

/// The action that answers the other party in words rather than calling a tool.
pub const RESPOND: &str = "respond";

/// The `response_format` that constrains an answer to one action.
pub fn response_format(tools: &[ToolSpec]) -> Value {
    let mut actions: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    actions.push(RESPOND);
    json!({
        "type": "json_schema",
        "json_schema": {
            "name": "next_action",
            "strict": true,
            "schema": {
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": actions},
                    "arguments": {"type": "object"},
                    "message": {"type": "string"},
                },
                "required": ["action", "arguments", "message"],
            },
        },
    })
}

/// The transcript rewritten for a model without tool calling: the tools described in the system
/// prompt, its own calls as the JSON it wrote, and tool results as user messages.
pub fn rewrite(messages: &[Message], tools: &[ToolSpec]) -> Vec<Message> {
    let mut described = String::from(
        "You can use these tools. Answer with one JSON object: {\"action\": the tool's name, or \"respond\" to \
         write to the user, \"arguments\": the tool's arguments ({} when responding), \"message\": your words \
         to the user (\"\" when calling a tool)}.\n",
    );
    for t in tools {
        described.push_str(&format!("\n- {}: {} Arguments: {}", t.name, t.description, t.parameters));
    }
    let mut out = Vec::with_capacity(messages.len() + 1);
    let mut system_seen = false;
    for m in messages {
        match m.role {
            Role::System if !system_seen => {
                system_seen = true;
                out.push(Message::system(format!("{}\n\n{described}", m.content_str())));
            }
            Role::Assistant if !m.tool_calls.is_empty() => {
                for call in &m.tool_calls {
                    let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(json!({}));
                    let written = json!({"action": call.name, "arguments": arguments, "message": m.content_str()});
                    out.push(Message::assistant(written.to_string()));
                }
            }
            Role::Tool => out.push(Message::user(format!("Tool result: {}", m.content_str()))),
            // Other messages go as they are, with their image parts and reasoning.
            _ => out.push(m.clone()),
        }
    }
    if !system_seen {
        out.insert(0, Message::system(described));
    }
    out
}

/// Reads the model's JSON answer. Output that does not parse is kept as text: malformed output is
/// data, and the conversation shows it.
pub fn read(content: &str, call_id: String) -> Message {
    let Ok(answer) = serde_json::from_str::<Value>(content) else { return Message::assistant(content) };
    let action = answer.get("action").and_then(Value::as_str).unwrap_or(RESPOND);
    let message = answer.get("message").and_then(Value::as_str).unwrap_or_default();
    if action == RESPOND {
        return Message::assistant(message);
    }
    let arguments = answer.get("arguments").cloned().unwrap_or(json!({}));
    let text = (!message.is_empty()).then(|| message.to_owned());
    Message::assistant_calls(
        text,
        vec![ToolCall { id: call_id, name: action.to_owned(), arguments: arguments.to_string() }],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "get_weather".into(),
            description: "Weather.".into(),
            parameters: json!({"type": "object"}),
            strict: false,
        }]
    }

    #[test]
    fn the_format_lists_every_tool_and_respond() {
        let format = response_format(&tools());
        assert_eq!(format["json_schema"]["schema"]["properties"]["action"]["enum"], json!(["get_weather", "respond"]));
    }

    #[test]
    fn answers_become_calls_or_text() {
        let call = read(r#"{"action": "get_weather", "arguments": {"city": "Paris"}, "message": ""}"#, "c1".into());
        assert_eq!(call.tool_calls[0].name, "get_weather");
        assert_eq!(call.tool_calls[0].arguments, r#"{"city":"Paris"}"#);
        assert_eq!(call.content, None);
        let text = read(r#"{"action": "respond", "arguments": {}, "message": "It is sunny."}"#, "c2".into());
        assert_eq!(text, Message::assistant("It is sunny."));
        assert_eq!(read("not json", "c3".into()), Message::assistant("not json"));
    }

    #[test]
    fn the_history_is_rewritten_without_tool_roles() {
        let messages = vec![
            Message::system("Be helpful."),
            Message::user("Weather in Paris?"),
            Message::assistant_calls(
                None,
                vec![ToolCall { id: "c".into(), name: "get_weather".into(), arguments: r#"{"city":"Paris"}"#.into() }],
            ),
            Message::tool_result("c", "sunny"),
        ];
        let out = rewrite(&messages, &tools());
        assert!(
            out[0].content_str().starts_with("Be helpful.") && out[0].content_str().contains("- get_weather: Weather.")
        );
        assert_eq!(out[2].role, Role::Assistant);
        assert!(out[2].tool_calls.is_empty() && out[2].content_str().contains(r#""action":"get_weather""#));
        assert_eq!(out[3], Message::user("Tool result: sunny"));
    }
}
