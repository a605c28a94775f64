//! tau2's `ActionEvaluator`: every gold action must be matched by some tool call of the
//! transcript (agent's or user's) with the same name and equal arguments over `compare_args`
//! (over the call's own arguments when that is null; any call of that name when it is empty).
//! The reward is 1 when all match, else 0.

use parley_core::{Message, Role};
use serde_json::{Map, Value, json};

use super::{Component, ScoreContext, single};
use crate::compare::py_eq;
use crate::spec::{Criteria, GoldAction};
use crate::toolkit::Requestor;

pub fn evaluate(ctx: &ScoreContext<'_>, criteria: &Criteria, transcript: &[Message]) -> Component {
    let gold = criteria.actions.as_deref().unwrap_or_default();
    if gold.is_empty() {
        // tau2 leaves `action_checks` unset (null) here, not empty.
        return Component {
            reward: 1.0,
            checks: Value::Null,
            breakdown: single("ACTION", 1.0),
            info: json!({"note": "No actions to evaluate"}),
        };
    }
    let calls: Vec<(&str, Map<String, Value>)> = transcript
        .iter()
        .filter(|m| matches!(m.role, Role::Assistant | Role::User))
        .flat_map(|m| &m.tool_calls)
        .filter_map(|c| match serde_json::from_str::<Value>(&c.arguments) {
            Ok(Value::Object(args)) => Some((c.name.as_str(), args)),
            _ => None,
        })
        .collect();
    let mut all = true;
    let checks: Vec<Value> = gold
        .iter()
        .map(|action| {
            let matched = calls.iter().any(|(name, args)| matches(action, name, args));
            all &= matched;
            let tool_type = [Requestor::Assistant, Requestor::User]
                .into_iter()
                .find_map(|r| ctx.catalog.find(r, &action.name))
                .map(|t| t.tool_type.clone());
            json!({
                "action": {
                    "action_id": action.action_id,
                    "requestor": action.requestor,
                    "name": action.name,
                    "arguments": action.arguments,
                    "info": action.info,
                    "compare_args": action.compare_args,
                },
                "action_match": matched,
                "action_reward": if matched { 1.0 } else { 0.0 },
                "tool_type": tool_type,
            })
        })
        .collect();
    let reward = if all { 1.0 } else { 0.0 };
    Component { reward, checks: Value::Array(checks), breakdown: single("ACTION", reward), info: Value::Null }
}

/// tau2's `Action.compare_with_tool_call`.
pub fn matches(action: &GoldAction, name: &str, args: &Map<String, Value>) -> bool {
    if action.name != name {
        return false;
    }
    let keys: Vec<&String> = match &action.compare_args {
        None => args.keys().collect(),
        Some(keys) => keys.iter().collect(),
    };
    if keys.is_empty() {
        return true;
    }
    let pick = |m: &Map<String, Value>| -> Map<String, Value> {
        m.iter().filter(|(k, _)| keys.contains(k)).map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    let gold = action.arguments.as_object().map(pick).unwrap_or_default();
    py_eq(&Value::Object(pick(args)), &Value::Object(gold))
}
