//! The verifier of `example_multi_step`, field for field.

use parley_core::{EnvError, Message, Reward, Role};
use serde_json::Value;

/// The row's list of expected values.
const EXPECTED: &str = "expected_synonym_values";
/// The row's fields that a reported value must not be.
const MINEFIELD: [&str; 2] = ["minefield_label", "minefield_label_value"];

/// What [`verify`] reads of a task row, held by a session from its start to its score: a few
/// values, not a map of them (a session in flight holds it).
#[derive(Debug, Clone)]
pub(crate) struct Scored {
    expected: Option<Vec<Value>>,
    mines: Vec<Value>,
}

impl Scored {
    pub(crate) fn of(row: &Value) -> Scored {
        Scored {
            expected: row.get(EXPECTED).and_then(Value::as_array).cloned(),
            mines: MINEFIELD.iter().filter_map(|k| row.get(*k)).cloned().collect(),
        }
    }

    /// Scores a transcript: see [`verify`].
    pub(crate) fn verify(&self, transcript: &[Message]) -> Result<Reward, EnvError> {
        let expected = self
            .expected
            .as_deref()
            .ok_or_else(|| EnvError::new("the task row has no `expected_synonym_values` list"))?;
        let actual = last_extraction(transcript);
        let accuracy = same_numbers(expected, &actual);
        // NeMo Gym divides the size of the set intersection by the length of the expected list.
        let shared = distinct(expected.iter().filter(|e| actual.iter().any(|a| same_number(a, e))));
        let set_overlap = if expected.is_empty() { 0.0 } else { shared as f64 / expected.len() as f64 };
        let minefield_hit = self.mines.iter().any(|mine| actual.iter().any(|a| same_number(a, mine) || a == mine));
        Ok(Reward::new(if accuracy { 1.0 } else { 0.0 })
            .with("parsed_synonym_values", Value::Array(actual))
            .with("accuracy", accuracy)
            .with("set_overlap", set_overlap)
            .with("original_term_minefield_hit", minefield_hit)
            .with("order_instruction_following_failure", !accuracy && set_overlap == 1.0))
    }
}

/// Whether a row holds what [`verify`] reads: `expected_synonym_values`, a list of numbers.
pub(crate) fn check(row: &Value) -> Result<(), String> {
    match row.get(EXPECTED) {
        None | Some(Value::Null) => {
            Err(format!("the row has no `{EXPECTED}`, the list of numbers its answer is scored by"))
        }
        Some(Value::Array(values)) if values.iter().all(Value::is_number) => Ok(()),
        Some(Value::Array(_)) => Err(format!("`{EXPECTED}` must be a list of numbers, and some are not")),
        Some(other) => Err(format!("`{EXPECTED}` must be a list of numbers, not {other}")),
    }
}

/// Scores a transcript against a task row. The reported list is the arguments of the last
/// `extract_synonym_values` call; the reward is 1 when it equals the expected list, in order.
pub fn verify(row: &Value, transcript: &[Message]) -> Result<Reward, EnvError> {
    Scored::of(row).verify(transcript)
}

fn last_extraction(transcript: &[Message]) -> Vec<Value> {
    transcript
        .iter()
        .rev()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(|m| m.tool_calls.iter().rev())
        .find(|c| c.name == "extract_synonym_values")
        .and_then(|c| serde_json::from_str::<Value>(&c.arguments).ok())
        .and_then(|args| args.get("synonym_values").and_then(Value::as_array).cloned())
        .unwrap_or_default()
}

fn same_number(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

fn same_numbers(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_number(x, y))
}

fn distinct<'a>(values: impl Iterator<Item = &'a Value>) -> usize {
    let mut seen: Vec<f64> = Vec::new();
    for v in values.filter_map(Value::as_f64) {
        if !seen.contains(&v) {
            seen.push(v);
        }
    }
    seen.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_core::ToolCall;
    use serde_json::json;

    /// The verify fields NeMo Gym returned for the row and response in its notes (reward 1.0,
    /// accuracy true, set overlap 1.0), kept as a fixture for the test below.
    fn nemo_gym_example() -> (Value, Value) {
        (
            json!({"expected_synonym_values": [711, 407], "expected_synonyms": ["Blazing", "Warm"],
                   "minefield_label": "Hot", "minefield_label_value": 299}),
            json!({"reward": 1.0, "accuracy": true, "set_overlap": 1.0, "parsed_synonym_values": [711, 407],
                   "original_term_minefield_hit": false, "order_instruction_following_failure": false}),
        )
    }

    fn extraction(args: &str) -> Vec<Message> {
        vec![Message::assistant_calls(
            None,
            vec![ToolCall { id: "c".into(), name: "extract_synonym_values".into(), arguments: args.into() }],
        )]
    }

    #[test]
    fn matches_nemo_gym_on_its_example() {
        let (row, expected) = nemo_gym_example();
        let reward = verify(&row, &extraction(r#"{"synonym_values":[711,407]}"#)).unwrap();
        assert_eq!(reward.value, expected["reward"].as_f64().unwrap());
        for key in [
            "accuracy",
            "set_overlap",
            "parsed_synonym_values",
            "original_term_minefield_hit",
            "order_instruction_following_failure",
        ] {
            assert_eq!(reward.breakdown[key], expected[key], "{key}");
        }
    }

    #[test]
    fn wrong_order_is_an_order_failure() {
        let (row, _) = nemo_gym_example();
        let reward = verify(&row, &extraction(r#"{"synonym_values":[407,711]}"#)).unwrap();
        assert_eq!(reward.value, 0.0);
        assert_eq!(reward.breakdown["set_overlap"], 1.0);
        assert_eq!(reward.breakdown["order_instruction_following_failure"], true);
    }

    #[test]
    fn partial_answer_and_minefield() {
        let (row, _) = nemo_gym_example();
        let reward = verify(&row, &extraction(r#"{"synonym_values":[407,299]}"#)).unwrap();
        assert_eq!(reward.breakdown["set_overlap"], 0.5);
        assert_eq!(reward.breakdown["original_term_minefield_hit"], true);
        assert_eq!(reward.breakdown["order_instruction_following_failure"], false);
    }

    #[test]
    fn last_extraction_wins_and_none_scores_zero() {
        let (row, _) = nemo_gym_example();
        let mut transcript = extraction(r#"{"synonym_values":[711,407]}"#);
        transcript.extend(extraction(r#"{"synonym_values":[1]}"#));
        assert_eq!(verify(&row, &transcript).unwrap().value, 0.0);
        let none = verify(&row, &[Message::assistant("no tools")]).unwrap();
        assert_eq!(none.breakdown["parsed_synonym_values"], json!([]));
        assert_eq!(none.breakdown["set_overlap"], 0.0);
    }
}
