//! tau2's evaluation (`evaluate_simulation` with `EvaluationType.ALL`): a trajectory that did not
//! end in `agent_stop` or `user_stop` scores 0; otherwise every component is computed (DB and
//! env assertions, actions, communicated information, and the LLM-judged NL assertions when they
//! are in the basis), and the reward is the product of the components in the task's
//! `reward_basis`. Every component lands in `Reward.breakdown` under tau2's `RewardInfo` names.
//!
//! Two additions tau2 lacks, both diagnostics that never raise a score: `empty_criteria` marks a
//! task whose basis checks nothing (tau2 silently gives those 1.0), and an NL assertion in the
//! basis without a configured judge fails its component with an explanation instead of passing.
//! This module never changes the session's state: it rebuilds its own worlds.
//!
//! What keeps a score cheap: worlds share their base's records by pointer (copy-on-write
//! tables), so the DB check compares two worlds part by part (`view`), writing only the
//! records they do not share, and never dumps a whole database; a task's gold worlds depend on
//! the task alone, so they are built at its first score and kept with its spec ([`Gold`]) for
//! the scores of its later sessions. An airline score takes about 0.2 to 2 ms of one thread
//! (`examples/score_timing.rs` times it). `tests/e2e/tau2_fidelity.rs` re-scores sessions of
//! every domain with tau2's own `evaluate_simulation` and requires agreement on every component.

mod action;
mod communicate;
mod diff;
mod env;
pub use env::Gold;
mod nl;

use std::sync::Arc;

use parley_core::{EnvError, Message, ModelClient, Reward, Termination};
use serde_json::{Map, Value, json};

use crate::catalog::Catalog;
use crate::spec::{Criteria, TaskSpec};
use crate::toolkit::DomainState;

/// The LLM judge for NL assertions: any OpenAI-compatible endpoint and a model name.
#[derive(Clone)]
pub struct Judge {
    pub client: Arc<dyn ModelClient>,
    pub model: String,
}

/// What the scorer needs besides the transcript.
pub struct ScoreContext<'a> {
    pub base: &'a dyn DomainState,
    pub catalog: &'a Arc<Catalog>,
    pub spec: &'a TaskSpec,
    pub solo: bool,
    pub judge: Option<&'a Judge>,
}

const KNOWN_BASIS: [&str; 5] = ["DB", "ENV_ASSERTION", "NL_ASSERTION", "ACTION", "COMMUNICATE"];

pub async fn score(
    ctx: &ScoreContext<'_>,
    transcript: &[Message],
    termination: Termination,
) -> Result<Reward, EnvError> {
    if !matches!(termination, Termination::AgentStop | Termination::UserStop) {
        return Ok(Reward::new(0.0).with("reward_basis", Value::Null).with("termination", termination.as_str()).with(
            "info",
            json!({"note": format!("Simulation terminated prematurely. Termination reason: {}", termination.as_str())}),
        ));
    }
    let Some(criteria) = &ctx.spec.criteria else {
        return Ok(Reward::new(1.0)
            .with("reward_basis", Value::Null)
            .with("empty_criteria", true)
            .with("info", json!({"note": "No evaluation criteria"})));
    };
    if let Some(unknown) = criteria.reward_basis.iter().find(|b| !KNOWN_BASIS.contains(&b.as_str())) {
        return Err(EnvError::new(format!("task {}: unknown reward type `{unknown}` in reward_basis", ctx.spec.id)));
    }
    let basis = |kind: &str| criteria.reward_basis.iter().any(|b| b == kind);
    let failed = |error: String| {
        Reward::new(0.0).with("reward_basis", json!(criteria.reward_basis)).with("error", error.clone()).with(
            "info",
            json!({"error": error, "note": "Evaluation raised an error and was graded as reward=0.0, as tau2 does."}),
        )
    };

    let env = match env::evaluate(ctx, criteria, transcript) {
        Ok(env) => env,
        Err(error) => return Ok(failed(error)),
    };
    let action = action::evaluate(ctx, criteria, transcript);
    let communicate = communicate::evaluate(criteria, transcript);
    let nl = if basis("NL_ASSERTION") {
        match nl::evaluate(ctx.judge, criteria, transcript).await? {
            Ok(nl) => Some(nl),
            Err(error) => return Ok(failed(error)),
        }
    } else {
        None
    };

    let mut reward = 1.0;
    let mut breakdown = Map::new();
    if basis("DB") || basis("ENV_ASSERTION") {
        breakdown.extend(env.breakdown.clone());
        reward *= env.reward;
    }
    if basis("ACTION") {
        breakdown.extend(action.breakdown.clone());
        reward *= action.reward;
    }
    if let Some(nl) = &nl {
        breakdown.extend(nl.breakdown.clone());
        reward *= nl.reward;
    }
    if basis("COMMUNICATE") {
        breakdown.extend(communicate.breakdown.clone());
        reward *= communicate.reward;
    }
    let vacuous = vacuous_components(criteria);
    Ok(Reward::new(reward)
        .with("db_check", env.db_check)
        .with("db_diff", env.diff)
        .with("env_assertions", env.checks)
        .with("action_checks", action.checks)
        .with("nl_assertions", nl.as_ref().map(|n| n.checks.clone()).unwrap_or(Value::Null))
        .with("communicate_checks", communicate.checks)
        .with("reward_basis", json!(criteria.reward_basis))
        .with("reward_breakdown", Value::Object(breakdown))
        .with("empty_criteria", vacuous.len() == criteria.reward_basis.len())
        .with("vacuous_components", json!(vacuous))
        .with(
            "info",
            json!({
                "env": env.info,
                "nl": nl.as_ref().map(|n| n.info.clone()).unwrap_or(Value::Null),
                "communicate": communicate.info,
                "action": action.info,
            }),
        ))
}

/// The components of the basis that have nothing to check, so pass whatever the agent does.
fn vacuous_components(criteria: &Criteria) -> Vec<String> {
    let empty = |v: &Option<Vec<String>>| v.as_ref().is_none_or(Vec::is_empty);
    criteria
        .reward_basis
        .iter()
        .filter(|b| match b.as_str() {
            "DB" => criteria.actions.is_none() && criteria.env_assertions.is_none(),
            "ENV_ASSERTION" => criteria.env_assertions.as_ref().is_none_or(Vec::is_empty),
            "ACTION" => criteria.actions.as_ref().is_none_or(Vec::is_empty),
            "COMMUNICATE" => empty(&criteria.communicate_info),
            "NL_ASSERTION" => empty(&criteria.nl_assertions),
            _ => false,
        })
        .cloned()
        .collect()
}

/// One component's result.
pub(crate) struct Component {
    pub reward: f64,
    pub checks: Value,
    pub breakdown: Map<String, Value>,
    pub info: Value,
}

fn single(kind: &str, reward: f64) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(kind.to_owned(), json!(reward));
    m
}
