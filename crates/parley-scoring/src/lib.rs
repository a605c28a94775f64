//! Run metrics: reward means with 95% intervals, pass@k and pass^k over trials, and latency
//! percentiles. Pure functions over outcomes, so the same numbers come from a live run and from
//! the store alone.
//!
//! Invariant: sessions that ended in an infrastructure failure are counted by termination but
//! excluded from reward means, pass@k and pass^k.

use std::collections::BTreeMap;

use serde::Serialize;

pub mod training;
pub mod versions;

/// A reward at or above this counts as a success for pass@k and pass^k (tau2 counts reward 1).
pub const SUCCESS: f64 = 1.0 - 1e-6;

/// One finished session, as metrics see it: a few words, nothing on the heap, since a run's
/// summary holds one per session (a million for a million tasks).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    pub task: usize,
    pub termination: &'static str,
    /// Whether the termination is an infrastructure failure.
    pub infrastructure: bool,
    pub reward: Option<f64>,
    pub duration_ms: f64,
    /// The simulated user failed its part: the reward says more of the simulator than of the
    /// agent, so rewards, pass@k and pass^k leave the session out (it is counted apart).
    pub user_fault: bool,
}

/// A mean with the half-width of its 95% interval (normal approximation).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Mean {
    pub mean: f64,
    pub ci95: f64,
    pub n: usize,
}

pub fn mean(values: &[f64]) -> Option<Mean> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let ci95 = if n < 2 {
        0.0
    } else {
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        1.96 * (var / n as f64).sqrt()
    };
    Some(Mean { mean, ci95, n })
}

/// The value below which `q` of the values lie (nearest rank on sorted values).
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// pass@k (at least one of k trials succeeds) and pass^k (all k succeed), each estimated per
/// task from its n trials and c successes without bias, `1 - C(n-c,k)/C(n,k)` and
/// `C(c,k)/C(n,k)` as tau2 computes them, then averaged over tasks that have at least k trials.
pub fn pass_at_k(outcomes: &[Outcome], k: usize) -> (Option<f64>, Option<f64>) {
    match k {
        0 => (None, None),
        k => Tally::of(outcomes).pass(k).pop().map_or((None, None), |(_, at, hat)| (at, hat)),
    }
}

/// Each task's trials and successes (infrastructure failures left out), counted once for every k.
struct Tally(Vec<(usize, usize)>);

impl Tally {
    fn of(outcomes: &[Outcome]) -> Tally {
        let mut per_task: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
        for o in outcomes.iter().filter(|o| !o.infrastructure) {
            let entry = per_task.entry(o.task).or_default();
            entry.0 += 1;
            entry.1 += usize::from(o.reward.is_some_and(|r| r >= SUCCESS));
        }
        Tally(per_task.into_values().collect())
    }

    /// `(k, pass@k, pass^k)` ([`pass_at_k`]) of the outcomes counted, for k = 1..=`most`.
    ///
    /// Each task's two ratios are carried from one k to the next as running products,
    /// `C(m,k)/C(n,k) = C(m,k-1)/C(n,k-1) * (m-k+1)/(n-k+1)`: a task costs one step for each k,
    /// and no `C(n,k)` is formed, which past n of a thousand or so is more than an `f64` holds.
    fn pass(&self, most: usize) -> Vec<(usize, Option<f64>, Option<f64>)> {
        // For each k: the tasks with at least k trials, and the sums of their pass@k and pass^k.
        let mut sums = vec![(0usize, 0.0f64, 0.0f64); most];
        for &(n, c) in &self.0 {
            let (mut none, mut all) = (1.0f64, 1.0f64);
            for (k, sum) in (1..=n).zip(sums.iter_mut()) {
                let step = |m: usize| m.saturating_sub(k - 1) as f64 / (n - k + 1) as f64;
                none *= step(n - c);
                all *= step(c);
                *sum = (sum.0 + 1, sum.1 + (1.0 - none), sum.2 + all);
            }
        }
        let mean = |sum: f64, count: usize| (count > 0).then(|| sum / count as f64);
        (1..).zip(sums).map(|(k, (count, at, hat))| (k, mean(at, count), mean(hat, count))).collect()
    }
}

/// The whole summary of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub sessions: usize,
    pub terminations: BTreeMap<String, usize>,
    pub reward: Option<Mean>,
    /// (k, pass@k, pass^k) for k = 1..=trials, or up to the sessions most tasks have when that is
    /// more (a served run's prompt groups are as large as the trainer sent them).
    pub pass: Vec<(usize, Option<f64>, Option<f64>)>,
    /// The tasks scored two or more times, and those whose rewards were all equal.
    pub groups: Groups,
    pub session_ms_p50: Option<f64>,
    pub session_ms_p99: Option<f64>,
    /// Sessions left out of the reward and pass figures because their simulated user failed.
    pub user_faults: usize,
}

/// Tasks scored two or more times (prompt groups), and how many of them scored all alike: such
/// a group's advantages are all zero, so it teaches a policy-gradient trainer (GRPO) nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Groups {
    pub groups: usize,
    pub alike: usize,
}

impl Groups {
    /// Over the scored sessions (infrastructure failures left out).
    pub fn of(outcomes: &[Outcome]) -> Groups {
        let mut ranges: BTreeMap<usize, (usize, f64, f64)> = BTreeMap::new();
        for o in outcomes.iter().filter(|o| !o.infrastructure) {
            let Some(r) = o.reward else { continue };
            let (n, low, high) = ranges.entry(o.task).or_insert((0, r, r));
            *n += 1;
            (*low, *high) = (low.min(r), high.max(r));
        }
        let groups = ranges.values().filter(|(n, ..)| *n >= 2);
        Groups { groups: groups.clone().count(), alike: groups.filter(|(_, low, high)| low == high).count() }
    }

    /// The share of groups that scored all alike (`None` without groups).
    pub fn alike_share(self) -> Option<f64> {
        (self.groups > 0).then(|| self.alike as f64 / self.groups as f64)
    }
}

/// How many sessions most tasks have (the larger on a tie): a served run's prompt group size.
/// A task with a session more (a fork) does not move it.
fn usual_group(outcomes: &[Outcome]) -> usize {
    let mut sizes: BTreeMap<usize, usize> = BTreeMap::new();
    for o in outcomes {
        *sizes.entry(o.task).or_default() += 1;
    }
    let mut tasks_of_size: BTreeMap<usize, usize> = BTreeMap::new();
    for size in sizes.into_values() {
        *tasks_of_size.entry(size).or_default() += 1;
    }
    tasks_of_size.into_iter().max_by_key(|&(size, tasks)| (tasks, size)).map_or(1, |(size, _)| size)
}

pub fn summarize(outcomes: &[Outcome], trials: usize) -> Summary {
    let mut terminations: BTreeMap<&str, usize> = BTreeMap::new();
    for o in outcomes {
        *terminations.entry(o.termination).or_insert(0) += 1;
    }
    let terminations = terminations.into_iter().map(|(t, n)| (t.to_owned(), n)).collect();
    let mut durations: Vec<f64> = outcomes.iter().map(|o| o.duration_ms).collect();
    durations.sort_by(f64::total_cmp);
    // A session whose simulated user failed its part says more of the simulator than of the
    // agent: it is counted apart, not in the rewards or pass figures.
    // (Copied only when some are left out.)
    let counted: std::borrow::Cow<[Outcome]> = match outcomes.iter().any(|o| o.user_fault) {
        true => outcomes.iter().filter(|o| !o.user_fault).copied().collect(),
        false => outcomes.into(),
    };
    let rewards: Vec<f64> = counted.iter().filter(|o| !o.infrastructure).filter_map(|o| o.reward).collect();
    Summary {
        sessions: outcomes.len(),
        terminations,
        reward: mean(&rewards),
        pass: Tally::of(&counted).pass(trials.max(usual_group(&counted)).max(1)),
        session_ms_p50: percentile(&durations, 0.5),
        session_ms_p99: percentile(&durations, 0.99),
        groups: Groups::of(&counted),
        user_faults: outcomes.len() - counted.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(task: usize, reward: Option<f64>, infrastructure: bool) -> Outcome {
        Outcome {
            task,
            termination: if infrastructure { "infrastructure_error" } else { "agent_stop" },
            infrastructure,
            reward,
            duration_ms: 10.0 * (task + 1) as f64,
            user_fault: false,
        }
    }

    #[test]
    fn sessions_whose_user_failed_are_counted_apart_from_rewards_and_pass() {
        let mut faulty = outcome(0, Some(0.0), false);
        faulty.user_fault = true;
        let outcomes = [outcome(0, Some(1.0), false), faulty, outcome(1, Some(1.0), false)];
        let summary = summarize(&outcomes, 1);
        assert_eq!((summary.sessions, summary.user_faults), (3, 1));
        assert_eq!(summary.reward.map(|m| m.mean), Some(1.0), "the simulator's failure is not the agent's 0");
        assert_eq!(summary.pass[0].1, Some(1.0));
    }

    #[test]
    fn groups_that_scored_alike_are_counted_and_pass_k_reaches_the_largest_group() {
        let mut outcomes = Vec::new();
        for r in [1.0, 0.0, 1.0] {
            outcomes.push(outcome(0, Some(r), false));
        }
        for _ in 0..2 {
            outcomes.push(outcome(1, Some(0.0), false));
        }
        outcomes.push(outcome(1, None, true)); // an infrastructure failure is no rollout
        outcomes.push(outcome(2, Some(1.0), false)); // one rollout is no group
        let summary = summarize(&outcomes, 1);
        assert_eq!(summary.groups, Groups { groups: 2, alike: 1 });
        assert_eq!(summary.groups.alike_share(), Some(0.5));
        // Tasks have 3, 3 and 1 sessions (an infrastructure failure still counts as a session).
        assert_eq!(summary.pass.len(), 3, "k = 1..=3, the size most tasks have");
        // One task forked once more does not move k.
        outcomes.push(outcome(0, Some(1.0), false));
        outcomes.push(outcome(3, Some(1.0), false));
        outcomes.push(outcome(3, Some(1.0), false));
        outcomes.push(outcome(3, Some(1.0), false));
        assert_eq!(summarize(&outcomes, 1).pass.len(), 3, "tasks of 4, 3, 1 and 3 sessions");
        assert_eq!(Groups::of(&[]).alike_share(), None);
    }

    #[test]
    fn pass_k_follows_the_unbiased_estimator() {
        // Task 0: 2 of 4 succeed; task 1: 4 of 4.
        let mut outcomes = Vec::new();
        for r in [1.0, 0.0, 1.0, 0.0] {
            outcomes.push(outcome(0, Some(r), false));
        }
        for _ in 0..4 {
            outcomes.push(outcome(1, Some(1.0), false));
        }
        let (at1, hat1) = pass_at_k(&outcomes, 1);
        assert_eq!((at1, hat1), (Some(0.75), Some(0.75)));
        let (at2, hat2) = pass_at_k(&outcomes, 2);
        // Task 0: pass@2 = 1 - C(2,2)/C(4,2) = 5/6; pass^2 = C(2,2)/C(4,2) = 1/6.
        assert!((at2.unwrap() - (5.0 / 6.0 + 1.0) / 2.0).abs() < 1e-12);
        assert!((hat2.unwrap() - (1.0 / 6.0 + 1.0) / 2.0).abs() < 1e-12);
        assert_eq!(pass_at_k(&outcomes, 5), (None, None));
    }

    #[test]
    fn pass_k_holds_for_a_thousand_trials_and_more() {
        // 1,099 of 1,100 trials succeed: pass^k = C(1099,k)/C(1100,k) = (1100-k)/1100, and
        // pass@k = 1 - C(1,k)/C(1100,k), which is 1 from k = 2. C(1100,550) is past an f64.
        let mut outcomes = vec![outcome(0, Some(0.0), false)];
        outcomes.extend((0..1099).map(|_| outcome(0, Some(1.0), false)));
        let pass = summarize(&outcomes, 1100).pass;
        assert_eq!(pass.len(), 1100);
        for (k, at, hat) in pass {
            let (at, hat) = (at.unwrap(), hat.unwrap());
            let want = (1100 - k) as f64 / 1100.0;
            assert!((hat - want).abs() < 1e-9, "pass^{k}: {hat}, not {want}");
            let want = if k == 1 { 1.0 - 1.0 / 1100.0 } else { 1.0 };
            assert!((at - want).abs() < 1e-9, "pass@{k}: {at}, not {want}");
        }
    }

    #[test]
    fn infrastructure_failures_are_excluded() {
        let outcomes = vec![outcome(0, Some(1.0), false), outcome(0, None, true), outcome(1, Some(0.0), false)];
        let summary = summarize(&outcomes, 1);
        assert_eq!(summary.reward.unwrap().mean, 0.5);
        assert_eq!(summary.reward.unwrap().n, 2);
        assert_eq!(summary.terminations["infrastructure_error"], 1);
        assert_eq!(summary.pass[0].2, Some(0.5));
    }

    #[test]
    fn mean_interval_and_percentiles() {
        let m = mean(&[0.0, 1.0, 0.0, 1.0]).unwrap();
        assert_eq!(m.mean, 0.5);
        assert!((m.ci95 - 1.96 * (1.0f64 / 3.0 / 4.0).sqrt()).abs() < 1e-12);
        let sorted: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&sorted, 0.5), Some(50.0));
        assert_eq!(percentile(&sorted, 0.99), Some(99.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
