//! Rollouts spent where they teach. A task whose rollouts all pass, or all fail, gives a
//! policy-gradient trainer nothing to learn from; from a run's stored outcomes, each task's pass
//! rate, and the rows of the tasks whose rate lies in a band (an offline curriculum).

use std::collections::BTreeMap;
use std::io::Write;

use parley_core::{RunId, Termination};
use parley_scoring::training::Shaped;
use parley_store::{SessionShape, Store};

use crate::error::{UsageError, usage};

/// A stored session as the training metrics see it; `None` when it has no reward to count (an
/// infrastructure failure, or a session not scored).
pub fn shaped(s: &SessionShape) -> Option<Shaped> {
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
        for shape in page.iter().filter_map(shaped) {
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
