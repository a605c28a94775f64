//! Prompt groups. A trainer sends each prompt several times at once (a GRPO group: copies of
//! one row sharing `_ng_task_index`); the copies are recorded as trials of one task of the
//! service run, so that the run's per-task figures (mean, variance, pass@k, and the groups
//! whose rollouts all scored alike, which teach a policy-gradient trainer nothing) are per
//! prompt. A row without the index is a task of its own.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use serde_json::Value;

/// Where a row's session goes in the service run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) task_index: usize,
    pub(crate) trial: u32,
    /// The first session of its task: the task is recorded with it.
    pub(crate) new_task: bool,
}

/// The service run's tasks so far, by prompt.
pub(crate) struct Groups {
    inner: Mutex<Inner>,
}

struct Inner {
    next_task: usize,
    /// Task index and trials so far, by the prompt's key.
    seen: HashMap<u64, (usize, u32)>,
}

impl Groups {
    /// Groups of a run whose first `tasks` task indexes are taken.
    pub(crate) fn new(tasks: usize) -> Groups {
        Groups { inner: Mutex::new(Inner { next_task: tasks, seen: HashMap::new() }) }
    }

    /// Places the session of a row with `key` (see [`key`]) and calls `then` with the place
    /// while the groups are held, so that what `then` queues is queued in the order the places
    /// were given.
    pub(crate) fn place<T>(&self, key: Option<u64>, then: impl FnOnce(Place) -> T) -> T {
        let mut inner = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let place = match key.and_then(|k| inner.seen.get(&k)) {
            Some(&(task_index, trials)) => Place { task_index, trial: trials, new_task: false },
            None => Place { task_index: inner.next_task, trial: 0, new_task: true },
        };
        let done = then(place);
        if place.new_task {
            inner.next_task += 1;
        }
        if let Some(key) = key {
            inner.seen.insert(key, (place.task_index, place.trial + 1));
        }
        done
    }

    /// A task index of its own, for a session of no group (an OpenEnv reset).
    pub(crate) fn fresh(&self) -> usize {
        let mut inner = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        inner.next_task += 1;
        inner.next_task - 1
    }
}

/// A prompt's key: the trainer's `_ng_task_index` with what the row asks (its id and input),
/// so that two datasets indexed from 0 are not taken for one. `None` for a row without the
/// index.
pub(crate) fn key(row: &Value) -> Option<u64> {
    let index = row.get("_ng_task_index")?.as_i64()?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    index.hash(&mut hasher);
    row.get("id").map(Value::to_string).hash(&mut hasher);
    row.get("responses_create_params").and_then(|p| p.get("input")).map(Value::to_string).hash(&mut hasher);
    Some(hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn placed(groups: &Groups, row: &Value) -> Place {
        groups.place(key(row), |place| place)
    }

    #[test]
    fn copies_of_a_row_are_trials_of_one_task_and_other_rows_tasks_of_their_own() {
        let groups = Groups::new(0);
        let copy = |rollout: i64| json!({"_ng_task_index": 7, "_ng_rollout_index": rollout, "responses_create_params": {"input": "2+2?"}});
        assert_eq!(placed(&groups, &copy(0)), Place { task_index: 0, trial: 0, new_task: true });
        assert_eq!(placed(&groups, &copy(1)), Place { task_index: 0, trial: 1, new_task: false });
        let other = json!({"_ng_task_index": 8, "responses_create_params": {"input": "3+3?"}});
        assert_eq!(placed(&groups, &other), Place { task_index: 1, trial: 0, new_task: true });
        assert_eq!(placed(&groups, &copy(2)), Place { task_index: 0, trial: 2, new_task: false });
        // Another prompt under the same index (another dataset) is a task of its own.
        let elsewhere = json!({"_ng_task_index": 7, "responses_create_params": {"input": "5+5?"}});
        assert_eq!(placed(&groups, &elsewhere).task_index, 2);
        let unindexed = json!({"responses_create_params": {"input": "2+2?"}});
        assert_eq!(placed(&groups, &unindexed), Place { task_index: 3, trial: 0, new_task: true });
        assert_eq!(placed(&groups, &unindexed).task_index, 4, "without the index every row is new");
    }
}
