//! A reward model behind an HTTP endpoint, in the shape of vLLM's pooling API: `POST
//! {base}/pooling` with `{"model", "messages"}` (the session's chat messages) answers
//! `{"data": [{"data": SCORE}]}`, where SCORE is a number or a list whose last number is the
//! reward (a reward model's last-token score).

use std::time::Duration;

use async_trait::async_trait;
use parley_core::Message;
use serde_json::{Value, json};

use crate::{Context, Score, ScoreError, Scorer};

/// Scores the transcript with a reward model.
#[derive(Debug, Clone)]
pub struct RewardModel {
    client: reqwest::Client,
    url: String,
    model: String,
}

impl RewardModel {
    /// A client for `base_url` (e.g. `http://host:8000`, with or without `/v1`).
    pub fn new(base_url: &str, model: &str, timeout: Duration) -> Result<RewardModel, ScoreError> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| ScoreError::Invalid(format!("the reward model's HTTP client: {e}")))?;
        let base = base_url.trim_end_matches('/');
        Ok(RewardModel { client, url: format!("{base}/pooling"), model: model.into() })
    }
}

/// The wire form of a chat message, as vLLM's chat template reads it.
fn wire(message: &Message) -> Value {
    json!({"role": message.role.as_str(), "content": message.content_str()})
}

/// The reward in a pooling answer: `data[0].data`, a number or the last number of a list
/// (nested lists read by their last element).
pub fn reward_of(body: &Value) -> Option<f64> {
    let mut v = body.get("data")?.get(0)?.get("data")?;
    while let Value::Array(items) = v {
        v = items.last()?;
    }
    v.as_f64().filter(|x| x.is_finite())
}

#[async_trait]
impl Scorer for RewardModel {
    async fn score(&self, cx: &Context<'_>) -> Result<Score, ScoreError> {
        let failed = |message: String| ScoreError::Endpoint { scorer: "reward-model", message };
        let messages: Vec<Value> = cx.transcript.iter().filter(|m| m.content.is_some()).map(wire).collect();
        let body = json!({"model": self.model, "messages": messages});
        let answer =
            self.client.post(&self.url).json(&body).send().await.map_err(|e| failed(format!("{}: {e}", self.url)))?;
        let status = answer.status();
        let text = answer.text().await.map_err(|e| failed(format!("{}: {e}", self.url)))?;
        if !status.is_success() {
            let cut = text.char_indices().nth(300).map_or(text.len(), |(i, _)| i);
            return Err(failed(format!("{} answered {status}: {}", self.url, &text[..cut])));
        }
        let parsed: Value = serde_json::from_str(&text).map_err(|e| failed(format!("{}: not JSON: {e}", self.url)))?;
        let value = reward_of(&parsed)
            .ok_or_else(|| failed(format!("{}: no number at data[0].data in the answer", self.url)))?;
        Ok(Score::new(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_numbers_and_lists() {
        assert_eq!(reward_of(&json!({"data": [{"data": 0.25}]})), Some(0.25));
        assert_eq!(reward_of(&json!({"data": [{"data": [0.1, 0.9]}]})), Some(0.9));
        assert_eq!(reward_of(&json!({"data": [{"data": [[0.3], [0.7]]}]})), Some(0.7));
        assert_eq!(reward_of(&json!({"data": []})), None);
        assert_eq!(reward_of(&json!({"data": [{"data": "x"}]})), None);
    }
}
