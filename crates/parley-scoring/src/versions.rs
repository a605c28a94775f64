//! Two score versions of a run compared: per session and in total, whose reward moved, by how
//! much, and in which of the reward's components, the largest changes first. `parley scores
//! diff` and the viewer's page of a run's scores show it.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// One session's score in a version, as the comparison reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub session: i64,
    pub task_index: i64,
    pub value: f64,
    /// The reward's components by name (`reward_components`); empty for a reward without them.
    pub components: BTreeMap<String, f64>,
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
    pub session: i64,
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
    pub run: i64,
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

/// The comparison itself, on the scores read.
pub fn compare(run: i64, before: i64, after: i64, a: &[Scored], b: &[Scored]) -> Diff {
    let earlier: BTreeMap<i64, &Scored> = a.iter().map(|s| (s.session, s)).collect();
    let later: BTreeMap<i64, &Scored> = b.iter().map(|s| (s.session, s)).collect();
    let (mut compared, mut sum_before, mut sum_after) = (0usize, 0.0, 0.0);
    let mut changed = Vec::new();
    for (session, old) in &earlier {
        let Some(new) = later.get(session) else { continue };
        compared += 1;
        sum_before += old.value;
        sum_after += new.value;
        let components = component_changes(&old.components, &new.components);
        if old.value != new.value || !components.is_empty() {
            changed.push(Change {
                session: *session,
                task_index: new.task_index,
                before: old.value,
                after: new.value,
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

/// The components whose values differ, a component present in one version only included.
fn component_changes(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> Vec<ComponentChange> {
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

    fn scored(session: i64, value: f64, components: &[(&str, f64)]) -> Scored {
        let components = components.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
        Scored { session, task_index: session, value, components }
    }

    #[test]
    fn the_largest_changes_come_first_with_the_components_that_moved() {
        let a = [
            scored(1, 1.0, &[("exact", 1.0)]),
            scored(2, 0.0, &[("exact", 0.0)]),
            scored(3, 1.0, &[("exact", 1.0)]),
            scored(4, 0.5, &[]),
        ];
        let b = [
            scored(1, 0.9, &[("exact", 1.0), ("steps", -0.1)]),
            scored(2, 0.0, &[("exact", 0.0)]),
            scored(3, 0.0, &[("math", 0.0)]),
            scored(5, 1.0, &[]),
        ];
        let d = compare(7, 1, 2, &a, &b);
        assert_eq!((d.compared, d.only_before, d.only_after), (3, 1, 1));
        let order: Vec<i64> = d.changed.iter().map(|c| c.session).collect();
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
        let a = [scored(1, 1.0, &[("exact", 1.0)])];
        let d = compare(1, 1, 2, &a, &a);
        assert!(d.changed.is_empty() && d.by_component.is_empty());
        assert_eq!(d.compared, 1);
    }
}
