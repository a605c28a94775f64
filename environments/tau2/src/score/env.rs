//! tau2's `EnvironmentEvaluator`: the predicted world (initial state plus a strict replay of the
//! transcript's mutating calls) against the gold world (initial state plus the gold actions, not
//! synced, errors swallowed), compared by the hashes of both databases; then the env assertions
//! on the predicted world. A gold action that raises is only logged, as in tau2: the DB check
//! compares with the gold world as the actions left it (the failures are listed in `info`).

use std::fmt;
use std::sync::OnceLock;

use parley_core::Message;
use serde_json::{Map, Value, json};

use super::ScoreContext;
use super::diff::Comparison;
use crate::spec::Criteria;
use crate::toolkit::Requestor;
use crate::world::World;

pub struct EnvOutcome {
    pub reward: f64,
    pub db_check: Value,
    /// How the session changed the databases (`initial_to_final`) and, when they differ from
    /// the gold ones, how (`final_to_gold`): see [`super::diff`]. Parley's own, not tau2's.
    pub diff: Value,
    pub checks: Value,
    pub breakdown: Map<String, Value>,
    pub info: Value,
}

/// The gold side of a task's DB check: the task's initial state, the world its gold actions
/// leave, and the mutating gold actions that raised. It depends on the task alone, so every
/// session of the task shares one, built at its first score (a session of a task read from its
/// row, not the domain's, builds its own). A copied spec starts without one.
#[derive(Default)]
pub struct Gold(OnceLock<GoldWorlds>);

struct GoldWorlds {
    initial: World,
    after: World,
    failed: Vec<Value>,
}

impl Clone for Gold {
    fn clone(&self) -> Gold {
        Gold::default()
    }
}

impl fmt::Debug for Gold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gold").field("built", &self.0.get().is_some()).finish()
    }
}

impl Gold {
    fn get<'s>(&'s self, ctx: &ScoreContext<'_>, criteria: &Criteria) -> Result<&'s GoldWorlds, String> {
        if let Some(gold) = self.0.get() {
            return Ok(gold);
        }
        let built = GoldWorlds::build(ctx, criteria)?;
        // Two first scores at once both build it; the worlds are the same, one is kept.
        Ok(self.0.get_or_init(|| built))
    }
}

impl GoldWorlds {
    fn build(ctx: &ScoreContext<'_>, criteria: &Criteria) -> Result<GoldWorlds, String> {
        let mut gold = World::new(ctx.base.clone_box(), ctx.catalog.clone(), false);
        gold.set_state(ctx.spec, &ctx.spec.history).map_err(|e| format!("building the gold state: {e}"))?;
        // Before the gold actions, the gold world is the session's initial state (a clone shares
        // every record with it, so keeping it costs nothing).
        let initial = gold.clone();
        let mut failed = Vec::new();
        for action in criteria.actions.iter().flatten() {
            let Some(requestor) = Requestor::parse(&action.requestor) else { continue };
            let mutating = ctx.catalog.is_mutating(&action.name);
            if let Err(e) = gold.make_tool_call(requestor, &action.name, &action.arguments)
                && mutating
            {
                failed.push(json!({
                    "action_id": action.action_id,
                    "tool_name": action.name,
                    "requestor": action.requestor,
                    "error_type": "ValueError",
                    "error": e.0,
                }));
            }
        }
        Ok(GoldWorlds { initial, after: gold, failed })
    }
}

pub fn evaluate(ctx: &ScoreContext<'_>, criteria: &Criteria, transcript: &[Message]) -> Result<EnvOutcome, String> {
    if criteria.actions.is_none() && criteria.env_assertions.is_none() {
        return Ok(EnvOutcome {
            reward: 1.0,
            db_check: json!({"db_match": true, "db_reward": 1.0}),
            diff: Value::Null,
            // tau2 leaves `env_assertions` unset (null) here, not empty.
            checks: Value::Null,
            breakdown: Map::new(),
            info: json!({"note": "No expected actions or env assertions"}),
        });
    }
    let mut predicted = World::new(ctx.base.clone_box(), ctx.catalog.clone(), ctx.solo);
    predicted.set_state(ctx.spec, transcript)?;

    let GoldWorlds { initial, after: gold, failed } = ctx.spec.gold.get(ctx, criteria)?;

    // tau2 compares the hashes of the databases' dumps; the three worlds come from one base and
    // share every record none of them changed, so only the others are written and compared.
    let compare = |from: &World, to: &World| {
        [Requestor::Assistant, Requestor::User]
            .map(|toolkit| super::diff::compare(from.view(toolkit).as_ref(), to.view(toolkit).as_ref()))
    };
    let diffs = |[db, user_db]: [Comparison; 2]| json!({"db": db.diff, "user_db": user_db.diff});
    let to_gold = compare(&predicted, gold);
    let db_match = to_gold.iter().all(|c| c.same);
    let diff = json!({
        "initial_to_final": diffs(compare(initial, &predicted)),
        "final_to_gold": if db_match { Value::Null } else { diffs(to_gold) },
    });
    let db_reward = if db_match { 1.0 } else { 0.0 };
    let db_check = json!({"db_match": db_match, "db_reward": db_reward});
    let info = if failed.is_empty() { Value::Null } else { json!({"failed_mutating_actions": failed}) };

    let mut checks = Vec::new();
    let mut assertion_reward = 1.0;
    for assertion in criteria.env_assertions.iter().flatten() {
        let met = predicted
            .run_env_assertion(assertion)
            .map_err(|e| format!("env assertion {}: {}", assertion.call.func_name, e.0))?;
        let reward = if met { 1.0 } else { 0.0 };
        assertion_reward *= reward;
        checks.push(json!({
            "env_assertion": {
                "env_type": assertion.call.env_type,
                "func_name": assertion.call.func_name,
                "arguments": assertion.call.arguments,
                "assert_value": assertion.assert_value,
                "message": assertion.message,
            },
            "met": met,
            "reward": reward,
        }));
    }

    let mut reward = 1.0;
    let mut breakdown = Map::new();
    let basis = |kind: &str| criteria.reward_basis.iter().any(|b| b == kind);
    if basis("DB") {
        breakdown.insert("DB".into(), json!(db_reward));
        reward *= db_reward;
    }
    if basis("ENV_ASSERTION") {
        breakdown.insert("ENV_ASSERTION".into(), json!(assertion_reward));
        reward *= assertion_reward;
    }
    Ok(EnvOutcome { reward, db_check, diff, checks: Value::Array(checks), breakdown, info })
}
