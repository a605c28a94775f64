//! The one writer of messages and tools in the OpenAI Chat Completions form: the model client's
//! requests, OpenEnv's observations, the chat export and the reward model's requests all write
//! them here, and differ only in the [`ChatForm`] they ask for.
//!
//! A message is written straight from the borrowed value, no JSON tree built, with its keys in
//! sorted order, as a `serde_json::Value` writes them: a request body costs one pass over the
//! transcript, and its bytes are those of the tree a reader builds from it.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use super::{Message, Role, ToolCall, ToolSpec};
use crate::content::{Part, ReasoningReplay};

/// What a message's Chat Completions form carries besides its role, content, tool calls and
/// call id, which every form carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChatForm {
    /// Where an assistant message's reasoning goes, if anywhere.
    pub reasoning: ReasoningField,
    /// Whether an assistant message carries the token ids and log-probs it was generated with
    /// (`prompt_token_ids`, `generation_token_ids`, `generation_log_probs`), unchanged: the
    /// fields vLLM servers that serve RL trainers write, read back to splice a turn's exact
    /// tokens into the next prompt, and NeMo RL reads per generation.
    pub tokens: bool,
}

/// Where an assistant message's reasoning is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReasoningField {
    /// Left out: what chat templates do with earlier turns' reasoning, so what a model gets back
    /// by default and what a reward model scores.
    #[default]
    Omit,
    /// In the field it came in (`reasoning` or `reasoning_content`; Responses reasoning as
    /// `reasoning_content`): for the party that wrote it, which reads back its own field (vLLM
    /// from 0.11 reads `reasoning`, and some of its versions ignore `reasoning_content`).
    AsReceived,
    /// Always `reasoning_content`, the field chat templates read, whichever field it came in:
    /// for datasets, where every row should name it alike.
    Template,
}

impl ReasoningField {
    /// What a Chat Completions request sends back of earlier turns' reasoning under `replay`:
    /// the field it came in when [`ReasoningReplay::sends`] it to Chat Completions (`keep`
    /// only), else nothing.
    pub fn replayed(replay: ReasoningReplay) -> ReasoningField {
        match replay {
            ReasoningReplay::Keep => ReasoningField::AsReceived,
            ReasoningReplay::Auto | ReasoningReplay::Drop => ReasoningField::Omit,
        }
    }
}

/// A message in its Chat Completions form; see [`Message::chat`].
#[derive(Debug, Clone, Copy)]
pub struct ChatMessage<'a> {
    message: &'a Message,
    form: ChatForm,
}

/// A tool in its Chat Completions form; see [`ToolSpec::chat`].
#[derive(Debug, Clone, Copy)]
pub struct ChatTool<'a>(&'a ToolSpec);

impl Message {
    /// This message in the Chat Completions form `form` asks for, to serialize.
    pub fn chat(&self, form: ChatForm) -> ChatMessage<'_> {
        ChatMessage { message: self, form }
    }

    /// This message in the Chat Completions form, as a JSON value.
    pub fn to_chat_json(&self, form: ChatForm) -> Value {
        to_value(&self.chat(form))
    }
}

impl ToolSpec {
    /// This tool in the Chat Completions form, to serialize:
    /// `{"type": "function", "function": {...}}`.
    pub fn chat(&self) -> ChatTool<'_> {
        ChatTool(self)
    }

    /// This tool in the Chat Completions form, as a JSON value.
    pub fn to_chat_json(&self) -> Value {
        to_value(&self.chat())
    }
}

/// Strings, numbers and borrowed values only: writing them into a tree cannot fail.
fn to_value(value: &impl Serialize) -> Value {
    serde_json::to_value(value).expect("a Chat Completions form is plain JSON")
}

impl Serialize for ChatMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let ChatMessage { message: m, form } = *self;
        let mut map = serializer.serialize_map(None)?;
        if m.parts.is_empty() {
            map.serialize_entry("content", &m.content)?;
        } else {
            map.serialize_entry("content", &Parts(&m.parts))?;
        }
        let tokens = m.tokens.as_deref().filter(|_| form.tokens && m.role == Role::Assistant);
        if let Some(tokens) = tokens {
            map.serialize_entry("generation_log_probs", &tokens.log_probs)?;
            map.serialize_entry("generation_token_ids", &tokens.generation)?;
            map.serialize_entry("prompt_token_ids", &tokens.prompt)?;
        }
        let reasoning_field = match (&m.reasoning, form.reasoning) {
            (None, _) | (_, ReasoningField::Omit) => None,
            (Some(r), ReasoningField::AsReceived) => Some((r.spelling.chat_field(), r)),
            (Some(r), ReasoningField::Template) => Some(("reasoning_content", r)),
        };
        if let Some((field, reasoning)) = reasoning_field {
            map.serialize_entry(field, &reasoning.text)?;
        }
        map.serialize_entry("role", m.role.as_str())?;
        if let Some(id) = &m.tool_call_id {
            map.serialize_entry("tool_call_id", id)?;
        }
        if !m.tool_calls.is_empty() {
            map.serialize_entry("tool_calls", &Calls(&m.tool_calls))?;
        }
        map.end()
    }
}

/// A message's content parts in their Chat Completions form.
struct Parts<'a>(&'a [Part]);

impl Serialize for Parts<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(Part::to_chat_json))
    }
}

/// A message's tool calls: `{"function": {"arguments", "name"}, "id", "type": "function"}`, the
/// arguments as the model wrote them.
struct Calls<'a>(&'a [ToolCall]);

impl Serialize for Calls<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Function<'a> {
            arguments: &'a str,
            name: &'a str,
        }
        struct Call<'a>(&'a ToolCall);
        impl Serialize for Call<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let c = self.0;
                let mut map = serializer.serialize_map(Some(3))?;
                map.serialize_entry("function", &Function { arguments: &c.arguments, name: &c.name })?;
                map.serialize_entry("id", &c.id)?;
                map.serialize_entry("type", "function")?;
                map.end()
            }
        }
        serializer.collect_seq(self.0.iter().map(Call))
    }
}

/// A list of tools in their Chat Completions form; see [`crate::message::ToolList::chat_json`].
pub(super) struct ChatTools<'a>(pub(super) &'a [ToolSpec]);

impl Serialize for ChatTools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(ToolSpec::chat))
    }
}

impl Serialize for ChatTool<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::{Reasoning, ReasoningSpelling, TokenIds};

    fn thinking(spelling: ReasoningSpelling) -> Message {
        let mut m = Message::assistant_calls(
            Some("4".into()),
            vec![ToolCall { id: "c".into(), name: "f".into(), arguments: "{\"a\": 1}".into() }],
        );
        m.reasoning = Some(Box::new(Reasoning { text: "2 + 2".into(), spelling, items: Vec::new() }));
        m.tokens = Some(Arc::new(TokenIds { prompt: vec![1, 2], generation: vec![3], log_probs: vec![-0.5] }));
        m
    }

    #[test]
    fn the_form_says_where_reasoning_goes_and_whether_tokens_do() {
        let m = thinking(ReasoningSpelling::Reasoning);
        let base = json!({"role": "assistant", "content": "4",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]});
        assert_eq!(m.to_chat_json(ChatForm::default()), base);
        let mut as_received = base.clone();
        as_received["reasoning"] = json!("2 + 2");
        let form = ChatForm { reasoning: ReasoningField::AsReceived, tokens: false };
        assert_eq!(m.to_chat_json(form), as_received);
        let mut template = base.clone();
        template["reasoning_content"] = json!("2 + 2");
        template["prompt_token_ids"] = json!([1, 2]);
        template["generation_token_ids"] = json!([3]);
        template["generation_log_probs"] = json!([-0.5]);
        let form = ChatForm { reasoning: ReasoningField::Template, tokens: true };
        assert_eq!(m.to_chat_json(form), template);
        let from_responses = thinking(ReasoningSpelling::Responses);
        let form = ChatForm { reasoning: ReasoningField::AsReceived, tokens: false };
        assert_eq!(from_responses.to_chat_json(form)["reasoning_content"], "2 + 2");
    }

    #[test]
    fn the_bytes_are_those_of_the_tree() {
        let parts = Message::with_parts(
            Role::User,
            vec![
                Part::Text { text: "what is \"this\"?".into() },
                Part::Image { url: "data:image/png;base64,iVBORw0KGgo=".into(), detail: None },
            ],
        );
        let form = ChatForm { reasoning: ReasoningField::Template, tokens: true };
        for m in [parts, Message::tool_result("c", "out"), thinking(ReasoningSpelling::ReasoningContent)] {
            let bytes = serde_json::to_string(&m.chat(form)).unwrap();
            assert_eq!(bytes, m.to_chat_json(form).to_string());
        }
        let tool = ToolSpec { name: "g".into(), description: String::new(), parameters: json!({"z": 1}), strict: true };
        assert_eq!(
            tool.to_chat_json(),
            json!({"type": "function", "function": {"name": "g", "description": "", "parameters": {"z": 1}, "strict": true}})
        );
    }

    #[test]
    fn tokens_go_only_with_assistant_messages_and_replay_maps_to_a_field() {
        let mut user = Message::user("hi");
        user.tokens = Some(Arc::new(TokenIds { prompt: vec![1], generation: vec![], log_probs: vec![] }));
        let form = ChatForm { reasoning: ReasoningField::Omit, tokens: true };
        assert_eq!(user.to_chat_json(form), json!({"role": "user", "content": "hi"}));
        assert_eq!(ReasoningField::replayed(ReasoningReplay::Keep), ReasoningField::AsReceived);
        assert_eq!(ReasoningField::replayed(ReasoningReplay::Auto), ReasoningField::Omit);
        assert_eq!(ReasoningField::replayed(ReasoningReplay::Drop), ReasoningField::Omit);
    }
}
