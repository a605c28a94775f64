//! A run's score versions side by side: what `parley scores` lists and what `parley scores diff`
//! compares. A version is a whole scoring of the run (the one recorded as its sessions finished,
//! then one per `parley rescore`); a diff says, per session and in total, whose reward moved
//! between two of them, by how much, and in which of the reward's components.

use std::collections::{BTreeMap, BTreeSet};

use parley_core::{Reward, RunId, SessionId};
use parley_store::{ScoreVersion, SessionScore, Store};
use serde::Serialize;
use serde_json::Value;

use crate::durable::stored_settings;
use crate::error::usage;

/// A score version as `parley scores` lists it: the stored figures, and the reward it was scored
/// with (the run's own for version 1).
#[derive(Debug, Clone, Serialize)]
pub struct Version {
    pub version: i64,
    pub sessions: u64,
    pub mean: f64,
    pub created_at: String,
    /// The reward's settings: its components, min and max.
    pub reward: Value,
    /// Whether `reward` is the run's own settings' rather than one recorded with the version
    /// (version 1, or a version made before Parley recorded them).
    pub run_reward: bool,
}

/// Every score version of `run`, oldest first.
pub async fn versions(store: &Store, run: RunId) -> anyhow::Result<Vec<Version>> {
    let settings = stored_settings(store, run).await?;
    let own = serde_json::to_value(&settings.reward)?;
    let stored = store.score_versions(run).await?;
    Ok(stored
        .into_iter()
        .map(|ScoreVersion { version, sessions, mean, created_at, reward }| Version {
            version,
            sessions,
            mean,
            created_at,
            run_reward: reward.is_none(),
            reward: reward.unwrap_or_else(|| own.clone()),
        })
        .collect())
}

/// A component's value in each version, where it has one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComponentChange {
    pub name: String,
    pub before: Option<f64>,
    pub after: Option<f64>,
}

/// A session whose reward differs between the two versions.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub session: SessionId,
    pub task_index: i64,
    pub before: f64,
    pub after: f64,
    /// The components whose value moved, by name.
    pub components: Vec<ComponentChange>,
}

impl Change {
    pub fn delta(&self) -> f64 {
        self.after - self.before
    }
}

/// Two versions of a run compared.
#[derive(Debug, Clone, Serialize)]
pub struct Diff {
    pub run: RunId,
    pub before: i64,
    pub after: i64,
    /// Sessions scored in both.
    pub compared: usize,
    /// Sessions scored in only one of the two.
    pub only_before: usize,
    pub only_after: usize,
    /// Mean reward of the sessions compared, in each version.
    pub mean_before: f64,
    pub mean_after: f64,
    /// The sessions whose reward moved, the largest change first.
    pub changed: Vec<Change>,
    /// Per component, how many sessions it moved and by how much in all.
    pub by_component: Vec<ComponentTotal>,
}

/// What one component moved across the run.
#[derive(Debug, Clone, Serialize)]
pub struct ComponentTotal {
    pub name: String,
    pub sessions: usize,
    pub total_delta: f64,
}

/// Compares versions `before` and `after` of `run`. A version the run does not have is refused,
/// naming the ones it has.
pub async fn diff(store: &Store, run: RunId, before: i64, after: i64) -> anyhow::Result<Diff> {
    let known: Vec<i64> = store.score_versions(run).await?.iter().map(|v| v.version).collect();
    for version in [before, after] {
        if !known.contains(&version) {
            let have = known.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
            return Err(usage(format!(
                "run {run} has no score version {version}; its versions: {}; see `parley scores {run}`",
                if have.is_empty() { "none".to_owned() } else { have }
            ))
            .into());
        }
    }
    let a = store.scores_at(run, before).await?;
    let b = store.scores_at(run, after).await?;
    Ok(compare(run, before, after, &a, &b))
}

/// The comparison itself, on the scores read.
pub fn compare(run: RunId, before: i64, after: i64, a: &[SessionScore], b: &[SessionScore]) -> Diff {
    let earlier: BTreeMap<SessionId, &SessionScore> = a.iter().map(|s| (s.session, s)).collect();
    let later: BTreeMap<SessionId, &SessionScore> = b.iter().map(|s| (s.session, s)).collect();
    let (mut compared, mut sum_before, mut sum_after) = (0usize, 0.0, 0.0);
    let mut changed = Vec::new();
    for (session, old) in &earlier {
        let Some(new) = later.get(session) else { continue };
        compared += 1;
        sum_before += old.reward.value;
        sum_after += new.reward.value;
        let components = component_changes(&old.reward, &new.reward);
        if old.reward.value != new.reward.value || !components.is_empty() {
            changed.push(Change {
                session: *session,
                task_index: new.task_index,
                before: old.reward.value,
                after: new.reward.value,
                components,
            });
        }
    }
    changed.sort_by(|x, y| y.delta().abs().total_cmp(&x.delta().abs()).then(x.session.cmp(&y.session)));
    let mut totals: BTreeMap<String, (usize, f64)> = BTreeMap::new();
    for change in &changed {
        for c in &change.components {
            let entry = totals.entry(c.name.clone()).or_default();
            entry.0 += 1;
            entry.1 += c.after.unwrap_or(0.0) - c.before.unwrap_or(0.0);
        }
    }
    let mut by_component: Vec<ComponentTotal> = totals
        .into_iter()
        .map(|(name, (sessions, total_delta))| ComponentTotal { name, sessions, total_delta })
        .collect();
    by_component.sort_by(|x, y| y.total_delta.abs().total_cmp(&x.total_delta.abs()).then(x.name.cmp(&y.name)));
    let mean = |sum: f64| if compared == 0 { 0.0 } else { sum / compared as f64 };
    Diff {
        run,
        before,
        after,
        compared,
        only_before: earlier.keys().filter(|s| !later.contains_key(s)).count(),
        only_after: later.keys().filter(|s| !earlier.contains_key(s)).count(),
        mean_before: mean(sum_before),
        mean_after: mean(sum_after),
        changed,
        by_component,
    }
}

/// The reward's components (`reward_components`) whose values differ, a component present in
/// one version only included. A reward without components has none.
fn component_changes(old: &Reward, new: &Reward) -> Vec<ComponentChange> {
    let parts = |r: &Reward| -> BTreeMap<String, f64> {
        r.breakdown
            .get("reward_components")
            .and_then(Value::as_object)
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect())
            .unwrap_or_default()
    };
    let (a, b) = (parts(old), parts(new));
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| {
            let (before, after) = (a.get(name).copied(), b.get(name).copied());
            (before != after).then(|| ComponentChange { name: name.clone(), before, after })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scored(session: SessionId, value: f64, components: Value) -> SessionScore {
        let mut reward = Reward::new(value);
        if !components.is_null() {
            reward.breakdown.insert("reward_components".into(), components);
        }
        SessionScore { session, task_index: session, reward }
    }

    #[test]
    fn the_largest_changes_come_first_with_the_components_that_moved() {
        let a = [
            scored(1, 1.0, json!({"exact": 1.0})),
            scored(2, 0.0, json!({"exact": 0.0})),
            scored(3, 1.0, json!({"exact": 1.0})),
            scored(4, 0.5, Value::Null),
        ];
        let b = [
            scored(1, 0.9, json!({"exact": 1.0, "steps": -0.1})),
            scored(2, 0.0, json!({"exact": 0.0})),
            scored(3, 0.0, json!({"math": 0.0})),
            scored(5, 1.0, Value::Null),
        ];
        let d = compare(7, 1, 2, &a, &b);
        assert_eq!((d.compared, d.only_before, d.only_after), (3, 1, 1));
        let order: Vec<SessionId> = d.changed.iter().map(|c| c.session).collect();
        assert_eq!(order, [3, 1], "session 2 did not move; 3 moved by 1, 1 by 0.1");
        assert_eq!(
            d.changed[1].components,
            [ComponentChange { name: "steps".into(), before: None, after: Some(-0.1) }]
        );
        let names: Vec<&str> = d.changed[0].components.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["exact", "math"]);
        assert!((d.mean_before - 2.0 / 3.0).abs() < 1e-12 && (d.mean_after - 0.9 / 3.0).abs() < 1e-12);
        let exact = d.by_component.iter().find(|c| c.name == "exact").unwrap();
        assert_eq!((exact.sessions, exact.total_delta), (1, -1.0));
    }

    #[test]
    fn equal_versions_differ_nowhere() {
        let a = [scored(1, 1.0, json!({"exact": 1.0}))];
        let d = compare(1, 1, 2, &a, &a);
        assert!(d.changed.is_empty() && d.by_component.is_empty());
        assert_eq!(d.compared, 1);
    }
}
