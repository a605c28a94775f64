//! The weighted combination of components. Every component's contribution (its value, capped,
//! times its weight) is kept in `reward_components`, and they sum to the reward, as trainers
//! expect: when the total is clamped, the difference is a component of its own, `clamp`.

use std::sync::Arc;

use parley_core::Reward;
use serde_json::{Map, Value, json};

use crate::spec::{Endpoints, RewardSpec, ScorerKind};
use crate::{Context, ScoreError, Scorer};

/// One weighted, capped scorer.
pub struct Component {
    pub name: String,
    pub weight: f64,
    pub cap: Option<f64>,
    /// Whether the component decides success (see [`RewardSpec::success`]).
    pub success: bool,
    pub scorer: Arc<dyn Scorer>,
    pub kind: ScorerKind,
}

impl std::fmt::Debug for Component {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Component").field("name", &self.name).field("weight", &self.weight).finish_non_exhaustive()
    }
}

/// A reward made of components, clamped to `[min, max]` where asked.
#[derive(Debug, Default)]
pub struct Composite {
    pub components: Vec<Component>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// The key of the clamp's adjustment in `reward_components`.
pub const CLAMP: &str = "clamp";

/// The breakdown's key saying whether the session succeeded, when a component decides it.
pub const SUCCESS: &str = "success";

impl Composite {
    /// Builds every component; names must be distinct, since they key `reward_components`.
    pub fn build(
        specs: &[RewardSpec],
        min: Option<f64>,
        max: Option<f64>,
        endpoints: &Endpoints,
    ) -> Result<Composite, ScoreError> {
        let mut components: Vec<Component> = Vec::with_capacity(specs.len());
        for spec in specs {
            let component = spec.build(endpoints)?;
            if components.iter().any(|c| c.name == component.name) || component.name == CLAMP {
                return Err(ScoreError::Invalid(format!(
                    "two reward components are named `{}`; give one a `name`",
                    component.name
                )));
            }
            components.push(component);
        }
        if let (Some(lo), Some(hi)) = (min, max)
            && lo > hi
        {
            return Err(ScoreError::Invalid(format!("the reward's clamp [{lo}, {hi}] is empty")));
        }
        Ok(Composite { components, min, max })
    }

    /// Whether a task row holds every field a component compares against.
    pub fn check(&self, task: &parley_core::Task) -> Result<(), String> {
        for c in &self.components {
            if let Some(field) = c.scorer.field()
                && task.row.get(field).is_none_or(serde_json::Value::is_null)
            {
                return Err(format!(
                    "the row has no `{field}`, which the reward's `{}` component compares against",
                    c.name
                ));
            }
        }
        Ok(())
    }

    /// Whether a component weighs the environment's own reward, which must then be asked for.
    pub fn needs_environment(&self) -> bool {
        self.components.iter().any(|c| c.kind == ScorerKind::Environment)
    }

    /// Scores every component and combines them. A component that cannot score fails the whole
    /// reward: a reward missing a part would mislead a trainer more than no reward.
    pub async fn score(&self, cx: &Context<'_>) -> Result<Reward, ScoreError> {
        let mut components = Map::new();
        let mut details = Map::new();
        let mut total = 0.0;
        let mut success = None;
        for c in &self.components {
            let score = c.scorer.score(cx).await?;
            if c.success {
                let hit = score.value >= 1.0 - 1e-6;
                success = Some(success.unwrap_or(true) && hit);
            }
            let value = match c.cap {
                Some(cap) => score.value.clamp(-cap, cap),
                None => score.value,
            };
            let contribution = c.weight * value;
            total += contribution;
            components.insert(c.name.clone(), json!(contribution));
            let mut detail = score.details;
            detail.insert("value".into(), json!(score.value));
            detail.insert("weight".into(), json!(c.weight));
            details.insert(c.name.clone(), Value::Object(detail));
        }
        let clamped = total.clamp(self.min.unwrap_or(f64::NEG_INFINITY), self.max.unwrap_or(f64::INFINITY));
        if clamped != total {
            components.insert(CLAMP.into(), json!(clamped - total));
        }
        let mut reward = Reward::new(clamped);
        // The environment's own fields (a NeMo Gym verifier's) stay where its rows put them.
        if let Some(env) = cx.env_reward {
            reward.breakdown.extend(env.breakdown.clone());
        }
        reward.breakdown.insert("reward_components".into(), Value::Object(components));
        reward.breakdown.insert("reward_details".into(), Value::Object(details));
        if let Some(success) = success {
            reward.breakdown.insert(SUCCESS.into(), json!(success));
        }
        Ok(reward)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::cx;
    use parley_core::Message;

    fn specs(text: &[&str]) -> Vec<RewardSpec> {
        text.iter().map(|t| t.parse().unwrap()).collect()
    }

    #[tokio::test]
    async fn components_are_weighted_capped_and_sum_to_the_reward() {
        let composite = Composite::build(
            &specs(&["math:weight=0.8", "format:pattern=boxed,weight=0.2", "steps:budget=1,weight=-0.1,cap=0.5"]),
            None,
            None,
            &Endpoints::default(),
        )
        .unwrap();
        let mut owned = cx(&json!({"expected_answer": "1/2"}), r"\boxed{0.5}");
        owned.transcript.insert(1, Message::assistant("thinking"));
        let reward = composite.score(&owned.as_cx()).await.unwrap();
        let parts = reward.breakdown["reward_components"].as_object().unwrap();
        // Two steps against a budget of one: 2.0, capped at 0.5, times -0.1.
        assert_eq!(parts["steps"], json!(-0.05));
        assert_eq!((parts["math"].clone(), parts["format"].clone()), (json!(0.8), json!(0.2)));
        let sum: f64 = parts.values().map(|v| v.as_f64().unwrap()).sum();
        assert!((sum - reward.value).abs() < 1e-12 && (reward.value - 0.95).abs() < 1e-12);
        assert_eq!(reward.breakdown["reward_details"]["math"]["extracted_answer"], json!("0.5"));
        assert!(reward.breakdown.get(SUCCESS).is_none(), "no component decides success");

        let decided = Composite::build(
            &specs(&["math:success=true,weight=0.9", "steps:budget=1,weight=-0.1"]),
            None,
            None,
            &Endpoints::default(),
        )
        .unwrap();
        let reward = decided.score(&owned.as_cx()).await.unwrap();
        assert!(reward.value < 1.0 && reward.breakdown[SUCCESS] == json!(true), "{reward:?}");
        let wrong = cx(&json!({"expected_answer": "2"}), r"\boxed{0.5}");
        assert_eq!(decided.score(&wrong.as_cx()).await.unwrap().breakdown[SUCCESS], json!(false));
    }

    #[tokio::test]
    async fn a_clamp_is_a_component_of_its_own() {
        let composite =
            Composite::build(&specs(&["math", "exact:weight=1"]), Some(0.0), Some(1.0), &Endpoints::default()).unwrap();
        let reward = composite.score(&cx(&json!({"expected_answer": "2"}), "2").as_cx()).await.unwrap();
        assert_eq!(reward.value, 1.0);
        assert_eq!(reward.breakdown["reward_components"][CLAMP], json!(-1.0));
    }

    #[test]
    fn duplicate_names_and_empty_clamps_are_refused() {
        let err = Composite::build(&specs(&["math", "math"]), None, None, &Endpoints::default()).unwrap_err();
        assert!(err.to_string().contains("`math`"), "{err}");
        assert!(Composite::build(&specs(&["math"]), Some(1.0), Some(0.0), &Endpoints::default()).is_err());
    }
}
