//! Text scorers: the answer equals (or contains) the row's expected answer, or a regex pulls the
//! answer out of the reply first.

use async_trait::async_trait;
use regex::{Regex, RegexBuilder};
use serde_json::Value;

use crate::{Context, Score, ScoreError, Scorer, text_of};

/// Reward 1 when the agent's final text matches the row's expected answer (a string, a number,
/// or a list of acceptable answers), else 0.
#[derive(Debug, Clone)]
pub struct ExactMatch {
    /// The row field with the expected answer.
    pub field: String,
    /// Whether the answer may merely contain the expected text.
    pub contains: bool,
    pub case_sensitive: bool,
    /// When set, the answer is the last match of this regex (its first non-empty group, or the
    /// whole match) rather than the whole final text; no match scores 0.
    pub extract: Option<Regex>,
}

impl ExactMatch {
    pub fn new(field: &str) -> ExactMatch {
        ExactMatch { field: field.into(), contains: false, case_sensitive: false, extract: None }
    }

    /// Compiles an extraction pattern; a pattern that does not compile is an error naming it.
    pub fn with_pattern(mut self, pattern: &str) -> Result<ExactMatch, ScoreError> {
        self.extract = Some(compile(pattern)?);
        Ok(self)
    }

    fn matches(&self, answer: &str, expected: &str) -> bool {
        let norm = |s: &str| {
            let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
            if self.case_sensitive { s } else { s.to_lowercase() }
        };
        let (answer, expected) = (norm(answer), norm(expected));
        if self.contains { !expected.is_empty() && answer.contains(&expected) } else { answer == expected }
    }
}

/// Compiles a user's pattern case-insensitively, as NeMo Gym's verifiers apply theirs.
pub fn compile(pattern: &str) -> Result<Regex, ScoreError> {
    RegexBuilder::new(pattern)
        .case_insensitive(true)
        .multi_line(true)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| ScoreError::Invalid(format!("the pattern `{pattern}` does not compile: {e}")))
}

/// The last match of `regex` in `text`: its first non-empty group, else the whole match.
pub fn last_match<'t>(regex: &Regex, text: &'t str) -> Option<&'t str> {
    let caps = regex.captures_iter(text).last()?;
    caps.iter()
        .skip(1)
        .flatten()
        .map(|m| m.as_str())
        .find(|s| !s.is_empty())
        .or_else(|| caps.get(0).map(|m| m.as_str()))
}

#[async_trait]
impl Scorer for ExactMatch {
    fn field(&self) -> Option<&str> {
        Some(&self.field)
    }

    async fn score(&self, cx: &Context<'_>) -> Result<Score, ScoreError> {
        let expected = cx.task.row.get(&self.field).filter(|v| !v.is_null()).ok_or_else(|| {
            ScoreError::MissingField { task: cx.task.id.clone(), field: self.field.clone(), scorer: "exact" }
        })?;
        let candidates: Vec<String> = match expected {
            Value::Array(items) => items.iter().map(text_of).collect(),
            other => vec![text_of(other)],
        };
        let reply = cx.final_answer().unwrap_or_default();
        let answer = match &self.extract {
            Some(regex) => last_match(regex, reply),
            None => Some(reply),
        };
        let Some(answer) = answer else {
            return Ok(Score::new(0.0).with("extracted_answer", Value::Null).with("reason", "no_match"));
        };
        let matched = candidates.iter().any(|c| self.matches(answer, c));
        Ok(Score::hit(matched).with("extracted_answer", answer.trim()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::cx;
    use serde_json::json;

    #[tokio::test]
    async fn equals_contains_lists_and_case() {
        let row = json!({"expected_answer": "Paris"});
        let exact = ExactMatch::new("expected_answer");
        assert_eq!(exact.score(&cx(&row, "paris").as_cx()).await.unwrap().value, 1.0);
        assert_eq!(exact.score(&cx(&row, "It is Paris.").as_cx()).await.unwrap().value, 0.0);
        let contains = ExactMatch { contains: true, ..exact.clone() };
        assert_eq!(contains.score(&cx(&row, "It is Paris.").as_cx()).await.unwrap().value, 1.0);
        let strict = ExactMatch { case_sensitive: true, ..exact.clone() };
        assert_eq!(strict.score(&cx(&row, "paris").as_cx()).await.unwrap().value, 0.0);
        let list = json!({"expected_answer": ["Lyon", 42]});
        assert_eq!(exact.score(&cx(&list, "42").as_cx()).await.unwrap().value, 1.0);
    }

    #[tokio::test]
    async fn regex_takes_the_last_match_and_no_match_scores_zero() {
        let row = json!({"expected_answer": "B"});
        let scorer = ExactMatch::new("expected_answer").with_pattern(r"answer:\s*([A-D])").unwrap();
        let s = scorer.score(&cx(&row, "Answer: A... no wait. Answer: B").as_cx()).await.unwrap();
        assert_eq!((s.value, s.details["extracted_answer"].clone()), (1.0, json!("B")));
        let s = scorer.score(&cx(&row, "B").as_cx()).await.unwrap();
        assert_eq!((s.value, s.details["reason"].clone()), (0.0, json!("no_match")));
    }

    #[tokio::test]
    async fn bad_patterns_and_missing_fields_are_errors() {
        assert!(ExactMatch::new("x").with_pattern("(").is_err());
        let err = ExactMatch::new("gold").score(&cx(&json!({}), "a").as_cx()).await.unwrap_err();
        assert!(err.to_string().contains("gold"), "{err}");
    }
}
