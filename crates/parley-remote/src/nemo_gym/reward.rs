//! A `/verify` answer as a [`Reward`]: `reward`, and every other field the server added (or
//! changed) beside the task row's own, so that an output row can be NeMo Gym's shape.

use parley_core::Reward;
use serde_json::{Map, Value};

/// Fields of the verify answer that are the request echoed back, not results.
const ECHOED: [&str; 3] = ["reward", "response", "responses_create_params"];

/// Reads `reward` (a number, or a boolean as 0/1) and the diagnostic fields of a verify answer.
pub fn reward_from_verify(verify: &Value, row: &Value) -> Result<Reward, String> {
    let object = verify.as_object().ok_or("the verify answer is not a JSON object")?;
    let value = match object.get("reward") {
        Some(Value::Number(n)) => n.as_f64().ok_or("`reward` is not a finite number")?,
        Some(Value::Bool(b)) => f64::from(u8::from(*b)),
        Some(other) => {
            return Err(format!("`reward` is not a number: {}", parley_http::excerpt(&other.to_string())));
        }
        None => return Err("the verify answer has no `reward`".into()),
    };
    let empty = Map::new();
    let row = row.as_object().unwrap_or(&empty);
    let breakdown = object
        .iter()
        .filter(|(k, v)| !ECHOED.contains(&k.as_str()) && row.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(Reward { value, breakdown })
}

/// A verifier's report of its own failure: NeMo Gym's `judge_failsafe` answers a verify whose
/// judge failed with `mask_sample: true` and a `failure_kind` (`judge_failed`), so that the
/// sample is left out of training. Such a score is no reward: the session fails, classified, and
/// stays out of the means.
pub fn verifier_failure(verify: &Value) -> Option<String> {
    if verify.get("mask_sample").and_then(Value::as_bool) != Some(true) {
        return None;
    }
    let kind = verify.get("failure_kind").and_then(Value::as_str).filter(|k| !k.is_empty())?;
    let reason = verify.get("failure_reason").and_then(Value::as_str).unwrap_or("no reason given");
    Some(format!("the verifier reports its own failure ({kind}, mask_sample): {}", parley_http::excerpt(reason)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_masked_sample_with_a_failure_kind_is_the_verifiers_failure() {
        let failed =
            json!({"reward": 0.0, "mask_sample": true, "failure_kind": "judge_failed", "failure_reason": "429"});
        assert!(verifier_failure(&failed).unwrap().contains("judge_failed"));
        assert_eq!(
            verifier_failure(&json!({"reward": 0.0, "mask_sample": false, "failure_kind": "judge_failed"})),
            None
        );
        assert_eq!(verifier_failure(&json!({"reward": 1.0, "mask_sample": true})), None);
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_what_verify_added() {
        let row = json!({"responses_create_params": {}, "expected": [1], "id": 0});
        let verify = json!({"responses_create_params": {"input": []}, "response": {}, "expected": [1], "id": 0,
            "reward": 1.0, "accuracy": true, "mask_sample": false});
        let reward = reward_from_verify(&verify, &row).unwrap();
        assert_eq!(reward.value, 1.0);
        assert_eq!(Value::Object(reward.breakdown), json!({"accuracy": true, "mask_sample": false}));
    }

    #[test]
    fn a_missing_reward_is_an_error() {
        assert!(reward_from_verify(&json!({"accuracy": 1}), &json!({})).unwrap_err().contains("no `reward`"));
    }
}
