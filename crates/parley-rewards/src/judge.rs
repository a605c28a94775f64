//! An LLM judge of answer equivalence, with the swap check of NeMo Gym's
//! `equivalence_llm_judge`: the judge compares the expected answer with the given one, and, when
//! it finds them equal, is asked again with the two swapped; the answer is right only when both
//! verdicts say equal. The judge is any [`ModelClient`]; the runtime puts the store's verdict
//! cache in front of it, so a rescore with the same prompt asks nothing again.

use std::fmt::Write as _;
use std::sync::Arc;

use async_trait::async_trait;
use parley_core::{ChatRequest, Message, ModelClient, Role, Sampling, ToolList};
use regex::Regex;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::text::last_match;
use crate::{Context, Score, ScoreError, Scorer};

/// The default prompt. `{question}`, `{expected_answer}` and `{generated_answer}` are filled in.
pub const DEFAULT_PROMPT: &str = "You grade answers. Decide whether the CANDIDATE answer is equivalent to the \
GOLD answer for the question: the same facts, values or choices, in any wording or notation. A candidate \
that adds a wrong or conflicting claim is not equivalent.\n\nGive one line of reasons, then end with \
exactly one verdict:\n[[A=B]] they are equivalent\n[[A!=B]] they are not equivalent\n\n\
QUESTION:\n{question}\n\nGOLD:\n{expected_answer}\n\nCANDIDATE:\n{generated_answer}";

/// Judges the final answer against the row's expected answer.
pub struct Judge {
    pub client: Arc<dyn ModelClient>,
    pub model: String,
    /// The user prompt; see [`DEFAULT_PROMPT`].
    pub prompt: String,
    pub system: Option<String>,
    pub equal_label: String,
    pub not_equal_label: String,
    /// Whether an "equal" verdict is checked again with the answers swapped.
    pub swap: bool,
    /// The reward when the swapped verdict disagrees (NeMo Gym's `reward_if_swap_fails`).
    pub reward_if_swap_fails: f64,
    /// When set, the answer judged is this regex's last match in the reply.
    pub extract: Option<Regex>,
    pub field: String,
}

impl std::fmt::Debug for Judge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Judge").field("model", &self.model).field("swap", &self.swap).finish_non_exhaustive()
    }
}

impl Judge {
    pub fn new(client: Arc<dyn ModelClient>, model: &str) -> Judge {
        Judge {
            client,
            model: model.into(),
            prompt: DEFAULT_PROMPT.into(),
            system: None,
            equal_label: "[[A=B]]".into(),
            not_equal_label: "[[A!=B]]".into(),
            swap: true,
            reward_if_swap_fails: 0.0,
            extract: None,
            field: "expected_answer".into(),
        }
    }

    /// The SHA-256 of the prompt and labels, kept with every verdict: a rescore whose prompt hash
    /// is unchanged asks the same requests, which the verdict cache answers.
    pub fn prompt_hash(&self) -> String {
        let mut hasher = Sha256::new();
        for part in [self.system.as_deref().unwrap_or(""), &self.prompt, &self.equal_label, &self.not_equal_label] {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
        hasher.finalize().iter().fold(String::new(), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
    }

    /// One judgement: whether the judge said equal, and its last verdict label.
    async fn ask(&self, question: &str, expected: &str, generated: &str) -> Result<(bool, Value), ScoreError> {
        let prompt = self
            .prompt
            .replace("{question}", question)
            .replace("{expected_answer}", expected)
            .replace("{generated_answer}", generated);
        let mut messages = Vec::with_capacity(2);
        if let Some(system) = self.system.as_deref().filter(|s| !s.is_empty()) {
            messages.push(Message::system(system));
        }
        messages.push(Message::user(prompt));
        let sampling = Sampling { temperature: Some(0.0), ..Sampling::default() };
        let request = ChatRequest {
            model: &self.model,
            messages: &messages,
            tools: ToolList::none(),
            sampling: &sampling,
            response_format: None,
            session: None,
            ready: None,
        };
        let reply = self
            .client
            .chat(request)
            .await
            .map_err(|e| ScoreError::Endpoint { scorer: "judge", message: e.message.clone() })?;
        let text = reply.message.content.as_deref().unwrap_or_default();
        let label = last_verdict(text, &self.equal_label, &self.not_equal_label);
        let equal = self.equal_label != self.not_equal_label && label.as_deref() == Some(self.equal_label.as_str());
        Ok((equal, json!({"verdict_label": label, "judge_text": excerpt(text)})))
    }
}

/// The last verdict label in the judge's text, labels consumed left to right so that one label
/// inside the other is not counted twice; the longer wins where both start.
pub fn last_verdict(text: &str, equal: &str, not_equal: &str) -> Option<String> {
    let mut last = None;
    let mut i = 0;
    while i < text.len() {
        let eq = (!equal.is_empty()).then(|| text[i..].find(equal).map(|p| p + i)).flatten();
        let ne = (!not_equal.is_empty()).then(|| text[i..].find(not_equal).map(|p| p + i)).flatten();
        let (label, at) = match (eq, ne) {
            (None, None) => break,
            (Some(e), Some(n)) if e == n => (if equal.len() > not_equal.len() { equal } else { not_equal }, e),
            (Some(e), Some(n)) if e < n => (equal, e),
            (Some(e), None) => (equal, e),
            (_, Some(n)) => (not_equal, n),
        };
        last = Some(label.to_owned());
        i = at + label.len();
    }
    last
}

fn excerpt(text: &str) -> String {
    let mut end = text.len().min(300);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The question: the row's `question` field, else the last user message of the opening.
fn question(cx: &Context<'_>) -> String {
    if let Some(q) = cx.row_text("question") {
        return q;
    }
    cx.task.messages.iter().rev().find(|m| m.role == Role::User).map(|m| m.content_str().to_owned()).unwrap_or_default()
}

#[async_trait]
impl Scorer for Judge {
    fn field(&self) -> Option<&str> {
        Some(&self.field)
    }

    async fn score(&self, cx: &Context<'_>) -> Result<Score, ScoreError> {
        let expected = cx.required_text(&self.field, "judge")?;
        let hash = self.prompt_hash();
        let Some(reply) = cx.final_answer() else {
            return Ok(Score::new(0.0).with("failure_reason", "empty_final_answer").with("judge_prompt_sha256", hash));
        };
        let generated = match &self.extract {
            Some(regex) => last_match(regex, reply).unwrap_or("[NO VALID ANSWER EXTRACTED]"),
            None => reply,
        };
        let question = question(cx);
        let (first, first_verdict) = self.ask(&question, &expected, generated).await?;
        let mut verdicts = vec![first_verdict];
        let value = if !first {
            0.0
        } else if !self.swap {
            1.0
        } else {
            let (second, second_verdict) = self.ask(&question, generated, &expected).await?;
            verdicts.push(second_verdict);
            if second { 1.0 } else { self.reward_if_swap_fails }
        };
        Ok(Score::new(value).with("judge_verdicts", verdicts).with("judge_prompt_sha256", hash))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{Scripted, cx};

    #[test]
    fn the_last_label_wins_and_labels_are_consumed() {
        assert_eq!(last_verdict("x [[A=B]] y [[A!=B]]", "[[A=B]]", "[[A!=B]]").as_deref(), Some("[[A!=B]]"));
        assert_eq!(last_verdict("[[A!=B]] then [[A=B]]", "[[A=B]]", "[[A!=B]]").as_deref(), Some("[[A=B]]"));
        assert_eq!(last_verdict("INCORRECT", "CORRECT", "INCORRECT").as_deref(), Some("INCORRECT"));
        assert_eq!(last_verdict("nothing", "[[A=B]]", "[[A!=B]]"), None);
    }

    #[tokio::test]
    async fn both_orders_must_agree() {
        let row = serde_json::json!({"expected_answer": "Paris", "question": "Capital of France?"});
        // Equal, then equal: right.
        let judge = Judge::new(Scripted::new(&["ok [[A=B]]", "ok [[A=B]]"]), "j");
        let s = judge.score(&cx(&row, "Paris").as_cx()).await.unwrap();
        assert_eq!(s.value, 1.0);
        assert_eq!(s.details["judge_verdicts"].as_array().unwrap().len(), 2);
        // Equal, then not equal when swapped: the swap check fails.
        let judge = Judge::new(Scripted::new(&["[[A=B]]", "[[A!=B]]"]), "j");
        assert_eq!(judge.score(&cx(&row, "Paris").as_cx()).await.unwrap().value, 0.0);
        let judge = Judge { reward_if_swap_fails: -1.0, ..Judge::new(Scripted::new(&["[[A=B]]", "[[A!=B]]"]), "j") };
        assert_eq!(judge.score(&cx(&row, "Paris").as_cx()).await.unwrap().value, -1.0);
        // Not equal: no second call.
        let client = Scripted::new(&["[[A!=B]]"]);
        let judge = Judge::new(client.clone(), "j");
        assert_eq!(judge.score(&cx(&row, "Lyon").as_cx()).await.unwrap().value, 0.0);
        assert_eq!(client.calls(), 1);
        // The swapped request puts the answers the other way round.
        let client = Scripted::new(&["[[A=B]]", "[[A=B]]"]);
        Judge::new(client.clone(), "j").score(&cx(&row, "paris!").as_cx()).await.unwrap();
        let prompts = client.prompts();
        assert!(prompts[0].find("Paris").unwrap() < prompts[0].find("paris!").unwrap());
        assert!(prompts[1].find("paris!").unwrap() < prompts[1].find("Paris").unwrap());
    }

    #[tokio::test]
    async fn a_failed_judge_is_an_error_and_the_hash_follows_the_prompt() {
        let row = serde_json::json!({"expected_answer": "Paris"});
        let judge = Judge::new(Scripted::new(&[]), "j");
        assert!(matches!(judge.score(&cx(&row, "Paris").as_cx()).await, Err(ScoreError::Endpoint { .. })));
        let other = Judge { prompt: "{generated_answer}?".into(), ..Judge::new(Scripted::new(&[]), "j") };
        assert_ne!(judge.prompt_hash(), other.prompt_hash());
        assert_eq!(judge.prompt_hash().len(), 64);
    }
}
