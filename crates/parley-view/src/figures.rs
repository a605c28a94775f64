//! A run's figures: its summary over every session and every model call, computed a page of
//! sessions at a time and kept per run (or per list of runs shown together, a service's
//! environments say, each run's tasks its own as `parley metrics RUN RUN` counts them). A finished run's figures are computed once per viewer;
//! a running run's are computed again when its counts have moved, but no sooner than ten times
//! what the last computation took, so that the page of a very large run under way (whose model
//! calls take seconds to read) does not keep the store busy.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use parley_scoring::{SUCCESS, Summary, summarize};
use parley_store::{CallTotals, RunOutcomes, Store, TokenTotals};

use crate::error::PageError;

/// Everything the run's page shows about its sessions.
pub struct RunFigures {
    pub summary: Summary,
    pub failures: BTreeMap<String, usize>,
    /// Per task: trials that count (infrastructure failures left out) and successes.
    pub tasks: BTreeMap<i64, (usize, usize)>,
    pub rewards: Vec<f64>,
    pub total: usize,
    pub unfinished: usize,
    pub retries: i64,
    pub tokens: TokenTotals,
    /// Sorted latencies of the agent's and the user's model calls.
    pub latencies: Vec<f64>,
    pub user_latencies: Vec<f64>,
    /// When these were computed.
    pub at: Instant,
}

/// What a cached entry was computed from: the counts of sessions and finished sessions.
type Key = (u64, u64);

/// A run's figures with what they were computed from and how long they took.
type Entry = (Key, Duration, Arc<RunFigures>);

/// The most runs (or lists of runs) whose figures are kept. Past it the entry computed longest
/// ago makes room, so a client asking for many runs, or many lists of them, cannot grow the cache.
const KEPT: usize = 32;

#[derive(Default)]
pub struct FigureCache {
    runs: Mutex<HashMap<Vec<i64>, Entry>>,
}

impl FigureCache {
    /// The figures of `runs` together (one run, usually), from the cache when they still hold.
    pub async fn get(
        &self,
        store: &Store,
        runs: &[i64],
        trials: usize,
        running: bool,
    ) -> Result<Arc<RunFigures>, PageError> {
        let mut key = (0, 0);
        for &run in runs {
            let (sessions, finished) = store.session_counts(run).await?;
            key = (key.0 + sessions, key.1 + finished);
        }
        if let Some((cached, took, figures)) = self.runs.lock().unwrap_or_else(|e| e.into_inner()).get(runs).cloned()
            && (cached == key || (running && figures.at.elapsed() < took * 10))
        {
            return Ok(figures);
        }
        let start = Instant::now();
        let figures = Arc::new(compute(store, runs, trials).await?);
        // The key is read before the figures, so a session that finished in between makes the
        // next request compute again rather than be missed.
        let mut cache = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        remember(&mut cache, runs, (key, start.elapsed(), figures.clone()), |(_, _, f)| f.at);
        Ok(figures)
    }
}

/// Keeps `value` for `runs`, the entry computed longest ago (`at`) making room when [`KEPT`]
/// are kept already.
fn remember<V>(cache: &mut HashMap<Vec<i64>, V>, runs: &[i64], value: V, at: impl Fn(&V) -> Instant) {
    if cache.len() >= KEPT && !cache.contains_key(runs) {
        let oldest = cache.iter().min_by_key(|(_, v)| at(v)).map(|(k, _)| k.clone());
        if let Some(oldest) = oldest {
            cache.remove(&oldest);
        }
    }
    cache.insert(runs.to_vec(), value);
}

async fn compute(store: &Store, runs: &[i64], trials: usize) -> Result<RunFigures, PageError> {
    let mut each = Vec::with_capacity(runs.len());
    for &run in runs {
        each.push(store.run_outcomes(run).await?);
    }
    let (RunOutcomes { outcomes, failures, total, unfinished, retries }, _) = RunOutcomes::together(each);
    let mut tasks: BTreeMap<i64, (usize, usize)> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| !o.infrastructure) {
        let task = tasks.entry(o.task as i64).or_default();
        task.0 += 1;
        task.1 += usize::from(o.reward.is_some_and(|r| r >= SUCCESS));
    }
    let mut calls = CallTotals::default();
    for &run in runs {
        calls.merge(store.call_totals(run).await?);
    }
    let CallTotals { tokens, latencies, user_latencies } = calls.sorted();
    let rewards = outcomes.iter().filter(|o| !o.infrastructure).filter_map(|o| o.reward).collect();
    Ok(RunFigures {
        summary: summarize(&outcomes, trials),
        // By name, as the summary lists them.
        failures: failures.into_iter().map(|(f, n)| (f.as_str().to_owned(), n)).collect(),
        tasks,
        rewards,
        total,
        unfinished,
        retries,
        tokens,
        latencies,
        user_latencies,
        at: Instant::now(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_at_most_its_bound_and_lets_the_oldest_go() {
        let mut cache = HashMap::new();
        let start = Instant::now();
        let at = |v: &Instant| *v;
        for run in 0..(KEPT as i64 + 10) {
            remember(&mut cache, &[run, run + 1], start + Duration::from_millis(run as u64), at);
            assert!(cache.len() <= KEPT);
        }
        assert_eq!(cache.len(), KEPT);
        assert!(!cache.contains_key(&vec![0, 1]), "the oldest went");
        assert!(cache.contains_key(&vec![KEPT as i64 + 9, KEPT as i64 + 10]), "the newest is kept");
        // Computing a kept entry again replaces it in place.
        let kept = vec![20, 21];
        remember(&mut cache, &kept, start + Duration::from_secs(60), at);
        assert_eq!((cache.len(), cache[&kept]), (KEPT, start + Duration::from_secs(60)));
    }
}
