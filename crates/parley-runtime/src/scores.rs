//! A run's score versions: what `parley scores` lists, and two of them read and compared for
//! `parley scores diff` (the comparison is `parley_scoring::versions`). A version is a whole
//! scoring of the run: the one recorded as its sessions finished, then one per `parley rescore`.

use parley_core::RunId;
use parley_scoring::versions::Diff;
use parley_store::{ScoreVersion, Store};
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
    Ok(parley_store::compare_versions(store, run, before, after).await?)
}
