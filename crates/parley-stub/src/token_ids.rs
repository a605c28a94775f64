//! Token ids and log-probs, as a vLLM server that serves an RL trainer writes them.
//!
//! Asked with `return_tokens_as_token_ids` (and `logprobs`), the answer's message carries
//! `prompt_token_ids`, `generation_token_ids` and `generation_log_probs`, and
//! `choices[0].logprobs.content` lists each generated token as `token_id:<n>` with its log-prob.
//! Asked with `return_token_ids`, the ids also come in vLLM's own spelling: `choices[0].token_ids`
//! and a top-level `prompt_token_ids`. A request that asks for neither gets no token fields.
//!
//! Tokens are deterministic: a message renders as its role's token, a hash of each whitespace
//! token of its text and of its tool calls' names and arguments, and an end-of-turn token; a
//! prompt is its messages rendered in order, then the assistant's role token (the generation
//! prompt). With [`TokenMode::Splice`], as a trainer's server does, the last assistant message
//! sent back with its token fields stands for everything up to it: its `prompt_token_ids` and
//! `generation_token_ids` are spliced in unchanged, so every prompt extends the one before it.
//! [`TokenMode::Retokenize`] renders every message from its text instead, and each generation
//! starts with a thinking token that a re-rendered message does not have, so prompts stop
//! extending earlier generations: a contiguity check must catch it.

use serde_json::{Value, json};

use crate::hash::Fnv;

/// How prompts are tokenized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenMode {
    /// Earlier generations' tokens are spliced back in as sent: prompts are contiguous.
    Splice,
    /// Every message is rendered from its text: prompts drift from earlier generations.
    Retokenize,
}

impl std::str::FromStr for TokenMode {
    type Err = String;

    fn from_str(s: &str) -> Result<TokenMode, String> {
        match s {
            "splice" => Ok(TokenMode::Splice),
            "retokenize" => Ok(TokenMode::Retokenize),
            other => Err(format!("unknown token mode `{other}`: use `splice` or `retokenize`")),
        }
    }
}

const SYSTEM: u32 = 1;
const USER: u32 = 2;
const ASSISTANT: u32 = 3;
const TOOL: u32 = 4;
const END_OF_TURN: u32 = 5;
const THINKING: u32 = 6;
/// Word tokens are hashed into ids from here up.
const FIRST_WORD: u32 = 1000;
const WORDS: u64 = 150_000;

/// Adds token ids to a rendered chat completion when the request asked for them.
pub(crate) fn add(rendered: &mut Value, request: &Value, mode: TokenMode) {
    let as_ids = request.get("return_tokens_as_token_ids").and_then(Value::as_bool) == Some(true);
    let vllm = request.get("return_token_ids").and_then(Value::as_bool) == Some(true);
    if !(as_ids || vllm) {
        return;
    }
    let messages = request.get("messages").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    let prompt = prompt(messages, mode);
    let mut generation = Vec::new();
    if mode == TokenMode::Retokenize {
        generation.push(THINKING);
    }
    generation.extend(body(&rendered["choices"][0]["message"]));
    generation.push(END_OF_TURN);
    let log_probs: Vec<f64> = generation.iter().enumerate().map(|(i, &id)| log_prob(id, i)).collect();
    let choice = &mut rendered["choices"][0];
    choice["logprobs"] = json!({"content": generation.iter().zip(&log_probs)
        .map(|(id, lp)| json!({"token": format!("token_id:{id}"), "logprob": lp, "top_logprobs": []}))
        .collect::<Vec<_>>()});
    if as_ids {
        let message = &mut choice["message"];
        message["prompt_token_ids"] = json!(prompt);
        message["generation_token_ids"] = json!(generation);
        message["generation_log_probs"] = json!(log_probs);
    }
    if vllm {
        choice["token_ids"] = json!(generation);
        rendered["prompt_token_ids"] = json!(prompt);
    }
}

/// The prompt's tokens: the messages, then the generation prompt.
fn prompt(messages: &[Value], mode: TokenMode) -> Vec<u32> {
    let spliced = match mode {
        TokenMode::Splice => messages.iter().rposition(|m| {
            m.get("role").and_then(Value::as_str) == Some("assistant") && ids(m, "prompt_token_ids").is_some()
        }),
        TokenMode::Retokenize => None,
    };
    let mut tokens = Vec::new();
    let rest = match spliced {
        Some(at) => {
            tokens.extend(ids(&messages[at], "prompt_token_ids").unwrap_or_default());
            tokens.extend(ids(&messages[at], "generation_token_ids").unwrap_or_default());
            &messages[at + 1..]
        }
        None => messages,
    };
    for message in rest {
        tokens.push(match message.get("role").and_then(Value::as_str) {
            Some("system" | "developer") => SYSTEM,
            Some("assistant") => ASSISTANT,
            Some("tool") => TOOL,
            _ => USER,
        });
        tokens.extend(body(message));
        tokens.push(END_OF_TURN);
    }
    tokens.push(ASSISTANT);
    tokens
}

/// A message's words: its text, then each tool call's name and arguments.
fn body(message: &Value) -> Vec<u32> {
    let mut text = crate::turn::text_of(message.get("content")).into_owned();
    for call in message.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        for field in ["name", "arguments"] {
            text.push(' ');
            text.push_str(call["function"][field].as_str().unwrap_or_default());
        }
    }
    text.split_whitespace().map(word).collect()
}

fn word(word: &str) -> u32 {
    FIRST_WORD + (Fnv::new().bytes(word.as_bytes()).finish() % WORDS) as u32
}

/// A log-prob in (-1, 0): the same for the same token at the same place.
fn log_prob(id: u32, at: usize) -> f64 {
    let h = Fnv::new().u64(u64::from(id)).u64(at as u64).finish();
    -((h % 999) as f64 + 1.0) / 1000.0
}

fn ids(message: &Value, field: &str) -> Option<Vec<u32>> {
    message.get(field)?.as_array()?.iter().map(|id| id.as_u64().map(|id| id as u32)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> Value {
        json!({"choices": [{"message": {"role": "assistant", "content": text}}]})
    }

    fn ask(messages: Value) -> Value {
        json!({"messages": messages, "logprobs": true, "top_logprobs": 0, "return_tokens_as_token_ids": true})
    }

    #[test]
    fn a_spliced_prompt_extends_the_generation_sent_back() {
        let mut first = answer("hello there");
        add(&mut first, &ask(json!([{"role": "user", "content": "hi"}])), TokenMode::Splice);
        let m = first["choices"][0]["message"].clone();
        let before: Vec<u32> =
            ids(&m, "prompt_token_ids").into_iter().chain(ids(&m, "generation_token_ids")).flatten().collect();
        let next = ask(json!([{"role": "user", "content": "hi"}, m, {"role": "user", "content": "more"}]));
        let mut second = answer("done");
        add(&mut second, &next, TokenMode::Splice);
        let prompt = ids(&second["choices"][0]["message"], "prompt_token_ids").unwrap();
        assert_eq!(&prompt[..before.len()], &before[..]);
        let log_probs = second["choices"][0]["message"]["generation_log_probs"].as_array().unwrap();
        assert_eq!(log_probs.len(), ids(&second["choices"][0]["message"], "generation_token_ids").unwrap().len());
    }

    #[test]
    fn a_retokenized_prompt_does_not() {
        let mut first = answer("hello there");
        add(&mut first, &ask(json!([{"role": "user", "content": "hi"}])), TokenMode::Retokenize);
        let m = first["choices"][0]["message"].clone();
        let before: Vec<u32> =
            ids(&m, "prompt_token_ids").into_iter().chain(ids(&m, "generation_token_ids")).flatten().collect();
        let mut second = answer("done");
        add(
            &mut second,
            &ask(json!([{"role": "user", "content": "hi"}, m, {"role": "user", "content": "more"}])),
            TokenMode::Retokenize,
        );
        let prompt = ids(&second["choices"][0]["message"], "prompt_token_ids").unwrap();
        assert_ne!(prompt.get(..before.len()), Some(&before[..]));
    }

    #[test]
    fn only_requests_that_ask_get_tokens_and_vllms_spelling_when_asked_so() {
        let mut plain = answer("x");
        add(&mut plain, &json!({"messages": [{"role": "user", "content": "hi"}]}), TokenMode::Splice);
        assert_eq!(plain, answer("x"));
        let mut vllm = answer("x");
        add(
            &mut vllm,
            &json!({"messages": [{"role": "user", "content": "hi"}], "return_token_ids": true, "logprobs": true}),
            TokenMode::Splice,
        );
        assert!(vllm["prompt_token_ids"].is_array() && vllm["choices"][0]["token_ids"].is_array());
        assert!(vllm["choices"][0]["message"].get("generation_token_ids").is_none());
        assert!(vllm["choices"][0]["logprobs"]["content"][0]["token"].as_str().unwrap().starts_with("token_id:"));
    }
}
