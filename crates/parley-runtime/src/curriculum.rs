//! Rollouts spent where they teach. A task whose rollouts all pass, or all fail, gives a
//! policy-gradient trainer nothing to learn from. Offline: from a run's stored outcomes, each
//! task's pass rate, and the rows of the tasks whose rate lies in a band. Online: a [`Learnable`]
//! sampler that draws the next sessions' tasks by their outcomes so far (unseen tasks first,
//! tasks that always pass or always fail less often, never not at all), updated as sessions end.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use parley_core::rng::SplitMix;
use parley_core::{RunId, Termination};
use parley_scoring::training::Shaped;
use parley_store::{SessionShape, Store};
use serde::{Deserialize, Serialize};

use crate::error::{UsageError, usage};

/// A stored session as the training metrics see it; `None` when it has no reward to count (an
/// infrastructure failure, a session not scored, or, unless `keep_user_faults`, one whose
/// simulated user failed its part: its reward says more of the simulator than of the agent).
pub fn shaped(s: &SessionShape, keep_user_faults: bool) -> Option<Shaped> {
    if s.user_faulted && !keep_user_faults {
        return None;
    }
    let infrastructure = s.failure.is_some() || s.termination.is_none_or(Termination::is_infrastructure);
    let reward = s.reward.filter(|_| !infrastructure)?;
    let breakdown: serde_json::Value =
        s.breakdown.as_deref().and_then(|b| serde_json::from_str(b).ok()).unwrap_or_default();
    let components = breakdown
        .get("reward_components")
        .and_then(serde_json::Value::as_object)
        .map(|parts| parts.iter().filter_map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect())
        .unwrap_or_default();
    let success = breakdown.get("success").and_then(serde_json::Value::as_bool);
    Some(Shaped { task: s.task_index as usize, reward, steps: s.steps.max(0) as u64, components, success })
}

/// Each task's (passed, scored) sessions in run `run`, by task index.
pub async fn pass_counts(store: &Store, run: RunId) -> anyhow::Result<BTreeMap<usize, (usize, usize)>> {
    let mut counts: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let mut after = 0;
    loop {
        let page = store.session_shapes(run, after, 4096).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        for shape in page.iter().filter_map(|s| shaped(s, false)) {
            let entry = counts.entry(shape.task).or_default();
            entry.0 += usize::from(shape.succeeded());
            entry.1 += 1;
        }
    }
    Ok(counts)
}

/// A band of pass rates, both ends included.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Band(f64, f64);

impl Band {
    pub fn new(low: f64, high: f64) -> Result<Band, UsageError> {
        if !(0.0..=1.0).contains(&low) || !(0.0..=1.0).contains(&high) || low > high {
            return Err(usage(format!("--pass-between {low} {high}: a band is two rates in [0, 1], the lower first")));
        }
        Ok(Band(low, high))
    }

    fn holds(self, rate: f64) -> bool {
        (self.0..=self.1).contains(&rate)
    }
}

/// What a selection wrote, and what it left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Selected {
    /// Tasks whose pass rate lies in the band: their rows were written.
    pub written: usize,
    pub below: usize,
    pub above: usize,
    /// Tasks of the run with no scored session: no rate to judge them by.
    pub unscored: usize,
}

/// Writes to `out`, one JSON line each, the task rows of run `run` whose pass rate lies in
/// `band`, in task order.
pub async fn select(store: &Store, run: RunId, band: Band, out: &mut impl Write) -> anyhow::Result<Selected> {
    let counts = pass_counts(store, run).await?;
    if counts.is_empty() {
        return Err(usage(format!("run {run} has no scored sessions to take pass rates from")).into());
    }
    let mut selected = Selected::default();
    let mut from = 0;
    loop {
        let rows = store.task_rows_from(run, from, 1000).await?;
        let Some(&(last, _)) = rows.last() else { break };
        from = last + 1;
        for (index, row) in rows {
            match counts.get(&(index as usize)) {
                None => selected.unscored += 1,
                Some(&(passed, scored)) => {
                    let rate = passed as f64 / scored as f64;
                    if band.holds(rate) {
                        serde_json::to_writer(&mut *out, &row)?;
                        out.write_all(b"\n")?;
                        selected.written += 1;
                    } else if rate < band.0 {
                        selected.below += 1;
                    } else {
                        selected.above += 1;
                    }
                }
            }
        }
    }
    Ok(selected)
}

/// How a run spends its sessions on its tasks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Sampler {
    /// Every task alike: each task × trial, or with a budget, the tasks in turn.
    #[default]
    Uniform,
    /// By the tasks' outcomes so far, in this run and every run of the store with the same
    /// environment (see [`Learnable`]).
    Learnable,
}

/// The least weight a task keeps: one that always passes or always fails is drawn less, never
/// not at all (its outcomes may change as the policy does).
pub const FLOOR: f64 = 0.05;

/// How much older outcomes of a task still count beside a new one: the policy changes as it
/// trains, so a task's recent outcomes say more of it than its first ones. Outcomes count with
/// weights 1, 0.9, 0.81, ..., so at most about ten outcomes' worth at any time.
pub const MEMORY: f64 = 0.9;

/// How much a task with `passed` of `scored` (recent, see [`MEMORY`]) outcomes is worth drawing:
/// 4·p·(1−p) for the pass rate p smoothed by half a pass and half a failure (so that a few
/// outcomes alike are not yet certainty), at least [`FLOOR`]; 1 for a task with no outcome.
pub fn weight(passed: f64, scored: f64) -> f64 {
    let p = (passed + 0.5) / (scored + 1.0);
    (4.0 * p * (1.0 - p)).max(FLOOR)
}

/// Draws tasks by [`weight`]: every task no session has been drawn for yet first, in task
/// order, then each task with a chance in proportion to its weight. Weights are kept in a
/// Fenwick tree, so a draw and an update cost O(log tasks).
#[derive(Debug, Clone)]
pub struct Learnable {
    /// Each task's recent (passed, scored) outcomes, older ones counting less (see [`MEMORY`]).
    counts: Vec<(f64, f64)>,
    /// Whether a session has been drawn for each task, this run or before.
    drawn: Vec<bool>,
    next_unseen: usize,
    tree: Fenwick,
    rng: SplitMix,
}

impl Learnable {
    /// A sampler over `tasks` task ids, starting from what earlier runs found (`history`: task
    /// id, passed, scored). Seeded, so that a run's draws can be made again.
    pub fn new(tasks: &[String], history: &[(String, u64, u64)], seed: u64) -> Learnable {
        // Earlier runs' outcomes count as at most the recent memory holds, their rate kept.
        let most = 1.0 / (1.0 - MEMORY);
        let known: HashMap<&str, (f64, f64)> = history
            .iter()
            .map(|(id, p, s)| {
                let scale = if (*s as f64) > most { most / *s as f64 } else { 1.0 };
                (id.as_str(), (*p as f64 * scale, *s as f64 * scale))
            })
            .collect();
        let counts: Vec<(f64, f64)> =
            tasks.iter().map(|id| known.get(id.as_str()).copied().unwrap_or_default()).collect();
        let drawn: Vec<bool> = counts.iter().map(|&(_, scored)| scored > 0.0).collect();
        let mut tree = Fenwick::new(tasks.len());
        for (i, &(passed, scored)) in counts.iter().enumerate() {
            tree.add(i, weight(passed, scored));
        }
        Learnable { counts, drawn, next_unseen: 0, tree, rng: SplitMix::new(seed) }
    }

    /// The next task to draw a session for.
    pub fn draw(&mut self) -> usize {
        while self.next_unseen < self.drawn.len() {
            let task = self.next_unseen;
            self.next_unseen += 1;
            if !self.drawn[task] {
                self.drawn[task] = true;
                return task;
            }
        }
        let at = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * self.tree.total();
        self.tree.find(at)
    }

    /// A session of `task` ended as `outcome`: one that failed outside the agent says nothing of
    /// the task and is left out; any other passed when its reward is 1 (as the store's pass
    /// counts read it).
    pub fn take(&mut self, task: usize, outcome: &parley_core::SessionOutcome) {
        if outcome.failure.is_none() {
            self.record(task, outcome.reward.as_ref().is_some_and(|r| r.value >= parley_scoring::SUCCESS));
        }
    }

    /// A session of `task` ended, passing or not: its weight moves.
    pub fn record(&mut self, task: usize, passed: bool) {
        let Some(&(p, s)) = self.counts.get(task) else { return };
        let (np, ns) = (p * MEMORY + f64::from(u8::from(passed)), s * MEMORY + 1.0);
        self.tree.add(task, weight(np, ns) - weight(p, s));
        self.counts[task] = (np, ns);
    }

    /// Each task's recent (passed, scored) outcomes, earlier runs' included.
    pub fn counts(&self) -> &[(f64, f64)] {
        &self.counts
    }
}

/// Prefix sums of task weights: add to one, find the task a point of the total falls in.
#[derive(Debug, Clone)]
struct Fenwick {
    sums: Vec<f64>,
}

impl Fenwick {
    fn new(len: usize) -> Fenwick {
        Fenwick { sums: vec![0.0; len + 1] }
    }

    fn add(&mut self, index: usize, delta: f64) {
        let mut i = index + 1;
        while i < self.sums.len() {
            self.sums[i] += delta;
            i += i & i.wrapping_neg();
        }
    }

    fn total(&self) -> f64 {
        let mut i = self.sums.len() - 1;
        let mut sum = 0.0;
        while i > 0 {
            sum += self.sums[i];
            i -= i & i.wrapping_neg();
        }
        sum
    }

    /// The task whose share of the total holds `at` (0 ≤ at < total).
    fn find(&self, mut at: f64) -> usize {
        let len = self.sums.len() - 1;
        let (mut pos, mut step) = (0, len.next_power_of_two());
        while step > 0 {
            if pos + step <= len && self.sums[pos + step] <= at {
                pos += step;
                at -= self.sums[pos];
            }
            step /= 2;
        }
        pos.min(len.saturating_sub(1))
    }
}

#[cfg(test)]
mod sampler_tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("t{i}")).collect()
    }

    #[test]
    fn a_task_seen_alike_weighs_less_the_more_it_is_seen_and_never_nothing() {
        assert_eq!(weight(0.0, 0.0), 1.0);
        assert!(weight(1.0, 2.0) > weight(4.0, 4.0) && weight(4.0, 4.0) > weight(40.0, 40.0));
        assert_eq!(weight(1000.0, 1000.0), FLOOR);
        assert!((weight(5.0, 10.0) - 1.0).abs() < 1e-12, "a task passed half the time is worth the most");
    }

    #[test]
    fn unseen_tasks_come_first_in_order_then_draws_follow_the_weights() {
        let history = [("t1".to_owned(), 3, 3)];
        let mut s = Learnable::new(&ids(4), &history, 7);
        assert_eq!([s.draw(), s.draw(), s.draw()], [0, 2, 3], "t1 was seen in an earlier run");
        // t0 passes always, t2 fails always, t3 half the time: t3 is drawn most, the others
        // less but still drawn.
        for _ in 0..20 {
            s.record(0, true);
            s.record(2, false);
        }
        for i in 0..20 {
            s.record(3, i % 2 == 0);
        }
        let mut drawn = [0usize; 4];
        for _ in 0..10_000 {
            drawn[s.draw()] += 1;
        }
        assert!(drawn[3] > 2 * drawn[0] && drawn[3] > 2 * drawn[2], "{drawn:?}");
        assert!(drawn.iter().all(|&n| n > 0), "never excluded: {drawn:?}");
        let c = s.counts().to_vec();
        let w: Vec<f64> = c.iter().map(|&(p, n)| weight(p, n)).collect();
        let expected = w[1] / w.iter().sum::<f64>();
        assert!((drawn[1] as f64 / 10_000.0 - expected).abs() < 0.02, "{drawn:?} against {expected}");
        assert_eq!(c[1], (3.0, 3.0), "an earlier run's three passes count whole");
    }

    #[test]
    fn the_same_seed_draws_the_same_tasks() {
        let draws = |seed| {
            let mut s = Learnable::new(&ids(50), &[], seed);
            (0..200).map(|_| s.draw()).collect::<Vec<_>>()
        };
        assert_eq!(draws(3), draws(3));
        assert_ne!(draws(3), draws(4));
    }
}
