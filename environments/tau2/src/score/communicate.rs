//! tau2's `CommunicateEvaluator` (the English, substring path): each `communicate_info` string
//! must occur, case-insensitively, in some assistant message once commas are removed from the
//! message. The reward is 1 when all are found, else 0.

use parley_core::{Message, Role};
use serde_json::{Value, json};

use super::{Component, single};
use crate::spec::Criteria;

pub fn evaluate(criteria: &Criteria, transcript: &[Message]) -> Component {
    let infos = criteria.communicate_info.as_deref().unwrap_or_default();
    if infos.is_empty() {
        // tau2 leaves `communicate_checks` unset (null) here, not empty.
        return Component {
            reward: 1.0,
            checks: Value::Null,
            breakdown: single("COMMUNICATE", 1.0),
            info: json!({"note": "No communicate_info to evaluate"}),
        };
    }
    let texts: Vec<&str> = transcript
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .filter_map(|m| m.content.as_deref())
        .filter(|c| !c.trim().is_empty())
        .collect();
    let mut all = true;
    let checks: Vec<Value> = infos
        .iter()
        .map(|info| {
            let wanted = info.to_lowercase();
            let found = texts.iter().find(|t| t.to_lowercase().replace(',', "").contains(&wanted));
            all &= found.is_some();
            let justification = match found {
                Some(text) => format!("Information '{info}' communicated in the message:\n '{text}'"),
                None => format!("Information '{info}' not communicated."),
            };
            json!({"info": info, "met": found.is_some(), "justification": justification})
        })
        .collect();
    let reward = if all { 1.0 } else { 0.0 };
    Component { reward, checks: Value::Array(checks), breakdown: single("COMMUNICATE", reward), info: Value::Null }
}
