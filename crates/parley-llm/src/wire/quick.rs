//! Replies of the usual shape read without a `Value` tree: each field straight from the body,
//! strings borrowed where they hold no escapes, token ids and log-probs straight into their
//! lists. A reply of any other shape (content as a list of parts, a field of an unexpected type,
//! a list where an object belongs, token ids that do not agree) is declined, and the tree reads
//! or refuses it as before, so both ways give the same reply.
//!
//! Objects are read by name only: serde's derived readers would also take a JSON list for an
//! object, field by field in order, and so accept replies the tree refuses.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use parley_core::{Message, Reasoning, Role, TokenIds, ToolCall, Usage};
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The reply in `body` if it has the usual shape, with its token ids when `token_ids` (see
/// [`token_ids_of`]); `None` sends it to the tree.
pub(super) fn reply(body: &[u8], token_ids: bool) -> Option<(Message, Option<String>, Usage)> {
    // The whole body checked for UTF-8 once, as the tree checks every string (skipped fields'
    // strings among them); read as text, no string of it is checked again.
    let body = std::str::from_utf8(body).ok()?;
    let Object(Reply { choice, usage, prompt_token_ids }) = serde_json::from_str(body).ok()?;
    let Choice { message, finish_reason, token_ids: choice_ids, logprobs } = choice?;
    let Fields { content, tool_calls, reasoning, reasoning_content, tokens } = message?;
    let tokens = match token_ids {
        true => token_ids_of(tokens, prompt_token_ids, choice_ids, logprobs)?.map(Arc::new),
        false => None,
    };
    let tool_calls = tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, Object(Call { id, function }))| {
            let Function { name, arguments } = function?;
            Some(ToolCall {
                id: id.map_or_else(|| format!("call_{i}"), Text::owned),
                name: name.map(Text::owned).unwrap_or_default(),
                arguments: arguments.map(Text::owned).unwrap_or_default(),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let reasoning =
        Reasoning::from_chat_fields(reasoning.as_ref().map(Text::as_str), reasoning_content.as_ref().map(Text::as_str))
            .map(Box::new);
    let message =
        Message { content: content.map(Text::owned), tool_calls, reasoning, tokens, ..Message::empty(Role::Assistant) };
    let usage = usage.map_or_else(Usage::default, |Object(u)| Usage {
        prompt_tokens: u.prompt_tokens.unwrap_or(0),
        completion_tokens: u.completion_tokens.unwrap_or(0),
    });
    Some((message, finish_reason.map(Text::owned), usage))
}

/// The tokens of a reply, in the tree's order of spellings (see `wire::token_ids_of`): the
/// message's three fields first, then vLLM's `choices[0].token_ids` and top-level
/// `prompt_token_ids`, then the log-prob entries' `token_id:<n>`. `Some(None)` for a reply with
/// no token ids; `None` (declined) for ids the tree would refuse: a log-prob entry without its
/// number, or what `wire::paired` refuses.
fn token_ids_of(
    message: MessageTokens,
    top_prompt: Option<Vec<u32>>,
    choice_ids: Option<Vec<u32>>,
    logprobs: Option<Object<Logprobs>>,
) -> Option<Option<TokenIds>> {
    let entries = match logprobs.and_then(|Object(l)| l.content) {
        Some(entries) => Some(
            entries
                .into_iter()
                .map(|Object(e)| {
                    let id = e.token.as_ref().and_then(|t| t.as_str().strip_prefix("token_id:")?.parse::<u32>().ok());
                    Some((id, e.logprob?))
                })
                .collect::<Option<Vec<_>>>()?,
        ),
        None => None,
    };
    let prompt = message.prompt_token_ids.or(top_prompt);
    let generation = message.generation_token_ids.or(choice_ids);
    super::paired(prompt, generation, message.generation_log_probs, entries).ok()
}

/// A string, borrowed from the body unless it had escapes.
struct Text<'de>(Cow<'de, str>);

impl Text<'_> {
    fn owned(self) -> String {
        self.0.into_owned()
    }

    fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Strings;
        impl<'de> Visitor<'de> for Strings {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
        }
        deserializer.deserialize_str(Strings)
    }
}

/// An object's fields, read by name: unknown names are skipped, and a name given twice keeps
/// its last value, as the tree keeps it.
trait Named<'de>: Default {
    fn field<A: MapAccess<'de>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error>;
}

/// A JSON object read into `T`, and nothing but an object.
struct Object<T>(T);

impl<'de, T: Named<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Objects<T>(PhantomData<T>);
        impl<'de, T: Named<'de>> Visitor<'de> for Objects<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Object<T>, A::Error> {
                let mut fields = T::default();
                while let Some(name) = map.next_key::<Text<'de>>()? {
                    fields.field(&name.0, &mut map)?;
                }
                Ok(Object(fields))
            }
        }
        deserializer.deserialize_map(Objects(PhantomData))
    }
}

/// The first item of a list, the rest skipped.
struct First<T>(Option<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for First<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Lists<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Lists<T> {
            type Value = First<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<First<T>, A::Error> {
                let first = seq.next_element()?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(First(first))
            }
        }
        deserializer.deserialize_seq(Lists(PhantomData))
    }
}

#[derive(Default)]
struct Reply<'de> {
    /// `choices[0]`, when `choices` is a list that has one.
    choice: Option<Choice<'de>>,
    usage: Option<Object<Counts>>,
    /// vLLM's spelling of the prompt's tokens.
    prompt_token_ids: Option<Vec<u32>>,
}

impl<'de> Named<'de> for Reply<'de> {
    fn field<A: MapAccess<'de>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        match name {
            "choices" => self.choice = map.next_value::<First<Object<Choice<'de>>>>()?.0.map(|o| o.0),
            "usage" => self.usage = map.next_value()?,
            "prompt_token_ids" => self.prompt_token_ids = map.next_value()?,
            _ => drop(map.next_value::<IgnoredAny>()?),
        }
        Ok(())
    }
}

#[derive(Default)]
struct Choice<'de> {
    /// `None` when absent; a `message` that is not an object is declined.
    message: Option<Fields<'de>>,
    finish_reason: Option<Text<'de>>,
    /// vLLM's spelling of the generated tokens.
    token_ids: Option<Vec<u32>>,
    logprobs: Option<Object<Logprobs<'de>>>,
}

impl<'de> Named<'de> for Choice<'de> {
    fn field<A: MapAccess<'de>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        match name {
            "message" => self.message = Some(map.next_value::<Object<Fields<'de>>>()?.0),
            "finish_reason" => self.finish_reason = map.next_value()?,
            "token_ids" => self.token_ids = map.next_value()?,
            "logprobs" => self.logprobs = map.next_value()?,
            _ => drop(map.next_value::<IgnoredAny>()?),
        }
        Ok(())
    }
}

/// The fields of `choices[0].message` that a reply is read from.
#[derive(Default)]
struct Fields<'de> {
    content: Option<Text<'de>>,
    tool_calls: Option<Vec<Object<Call<'de>>>>,
    reasoning: Option<Text<'de>>,
    reasoning_content: Option<Text<'de>>,
    tokens: MessageTokens,
}

/// The three token fields of `choices[0].message` (vLLM servers that serve RL trainers).
#[derive(Default)]
struct MessageTokens {
    prompt_token_ids: Option<Vec<u32>>,
    generation_token_ids: Option<Vec<u32>>,
    generation_log_probs: Option<Vec<f64>>,
}

impl<'de> Named<'de> for Fields<'de> {
    fn field<A: MapAccess<'de>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        match name {
            "content" => self.content = map.next_value()?,
            "tool_calls" => self.tool_calls = map.next_value()?,
            "reasoning" => self.reasoning = map.next_value()?,
            "reasoning_content" => self.reasoning_content = map.next_value()?,
            "prompt_token_ids" => self.tokens.prompt_token_ids = map.next_value()?,
            "generation_token_ids" => self.tokens.generation_token_ids = map.next_value()?,
            "generation_log_probs" => self.tokens.generation_log_probs = map.next_value()?,
            _ => drop(map.next_value::<IgnoredAny>()?),
        }
        Ok(())
    }
}

#[derive(Default)]
struct Call<'de> {
    id: Option<Text<'de>>,
    /// `None` when absent (the tree refuses the reply) or null (the tree reads a nameless
    /// call): either way declined.
    function: Option<Function<'de>>,
}

impl<'de> Named<'de> for Call<'de> {
    fn field<A: MapAccess<'de>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        match name {
            "id" => self.id = map.next_value()?,
            "function" => self.function = map.next_value::<Option<Object<Function<'de>>>>()?.map(|o| o.0),
            _ => drop(map.next_value::<IgnoredAny>()?),
        }
        Ok(())
    }
}

#[derive(Default)]
struct Function<'de> {
    name: Option<Text<'de>>,
    arguments: Option<Text<'de>>,
}

impl<'de> Named<'de> for Function<'de> {
    fn field<A: MapAccess<'de>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        match name {
            "name" => self.name = map.next_value()?,
            "arguments" => self.arguments = map.next_value()?,
            _ => drop(map.next_value::<IgnoredAny>()?),
        }
        Ok(())
    }
}

/// `usage`'s token counts.
#[derive(Default)]
struct Counts {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

impl<'de> Named<'de> for Counts {
    fn field<A: MapAccess<'de>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        match name {
            "prompt_tokens" => self.prompt_tokens = map.next_value()?,
            "completion_tokens" => self.completion_tokens = map.next_value()?,
            _ => drop(map.next_value::<IgnoredAny>()?),
        }
        Ok(())
    }
}

/// `choices[0].logprobs`.
#[derive(Default)]
struct Logprobs<'de> {
    content: Option<Vec<Object<Entry<'de>>>>,
}

impl<'de> Named<'de> for Logprobs<'de> {
    fn field<A: MapAccess<'de>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        match name {
            "content" => self.content = map.next_value()?,
            _ => drop(map.next_value::<IgnoredAny>()?),
        }
        Ok(())
    }
}

/// A log-prob entry: the token (`token_id:<n>` when the server writes ids) and its log-prob.
#[derive(Default)]
struct Entry<'de> {
    token: Option<Text<'de>>,
    logprob: Option<f64>,
}

impl<'de> Named<'de> for Entry<'de> {
    fn field<A: MapAccess<'de>>(&mut self, name: &str, map: &mut A) -> Result<(), A::Error> {
        match name {
            "token" => self.token = map.next_value()?,
            "logprob" => self.logprob = map.next_value()?,
            _ => drop(map.next_value::<IgnoredAny>()?),
        }
        Ok(())
    }
}
