//! A run's score versions: version 1 recorded as its sessions finished, and one more for each
//! `parley rescore`, with the reward each was scored with (`score_versions`). The queries are
//! the same on both backends (`$N` placeholders, which SQLite reads as well as PostgreSQL), so
//! they are written once here (`both_stores!`) and each store runs them on its own pool.

use parley_core::{Reward, RunId, SessionId, StoreError};
use serde_json::Value;

use crate::dialect::both_stores;

/// One score version of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreVersion {
    pub version: i64,
    /// Sessions scored in it.
    pub sessions: u64,
    /// Their mean reward.
    pub mean: f64,
    /// When its first score was written (RFC 3339, UTC).
    pub created_at: String,
    /// The reward's settings it was scored with, as `parley rescore` recorded them; `None` for
    /// version 1 (the run's own) and for versions made before Parley kept them.
    pub reward: Option<Value>,
}

/// One session's score in a version.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionScore {
    pub session: SessionId,
    pub task_index: i64,
    pub reward: Reward,
}

const VERSIONS: &str = "SELECT sc.version, COUNT(*), AVG(sc.value), MIN(sc.created_at), MIN(v.reward)
     FROM scores sc JOIN sessions s ON s.id = sc.session_id
     LEFT JOIN score_versions v ON v.run_id = s.run_id AND v.version = sc.version
     WHERE s.run_id = $1 AND sc.scorer = 'environment'
     GROUP BY sc.version ORDER BY sc.version";

const SCORES_AT: &str = "SELECT s.id, s.task_index, sc.value, sc.breakdown
     FROM scores sc JOIN sessions s ON s.id = sc.session_id
     WHERE s.run_id = $1 AND sc.scorer = 'environment' AND sc.version = $2 ORDER BY s.id";

type VersionRow = (i64, i64, f64, String, Option<String>);
type ScoreRow = (i64, i64, f64, String);

fn version((version, sessions, mean, created_at, reward): VersionRow) -> ScoreVersion {
    ScoreVersion {
        version,
        sessions: u64::try_from(sessions).unwrap_or_default(),
        mean,
        created_at,
        reward: reward.and_then(|text| serde_json::from_str(&text).ok()),
    }
}

fn score((session, task_index, value, breakdown): ScoreRow) -> SessionScore {
    SessionScore {
        session,
        task_index,
        reward: Reward { value, breakdown: serde_json::from_str(&breakdown).unwrap_or_default() },
    }
}

both_stores! {
    /// The run's score versions, oldest first, with what each was scored with.
    pub async fn score_versions(&self, run: RunId) -> Result<Vec<ScoreVersion>, StoreError> {
        let rows: Vec<VersionRow> = sqlx::query_as(VERSIONS)
            .bind(run)
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.read_error(e, &format!("the score versions of run {run} (table `scores`)")))?;
        Ok(rows.into_iter().map(version).collect())
    }

    /// Every score of version `version` of the run, by session.
    pub async fn scores_at(&self, run: RunId, version: i64) -> Result<Vec<SessionScore>, StoreError> {
        let rows: Vec<ScoreRow> = sqlx::query_as(SCORES_AT)
            .bind(run)
            .bind(version)
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.read_error(e, &format!("version {version} of run {run}'s scores (table `scores`)")))?;
        Ok(rows.into_iter().map(score).collect())
    }

    /// Each task's passed and scored sessions, by task id, over every run of `environment`.
    pub async fn pass_counts_by_task(&self, environment: &str) -> Result<Vec<(String, u64, u64)>, StoreError> {
        let rows: Vec<PassRow> = sqlx::query_as(PASS_COUNTS)
            .bind(environment)
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.read_error(e, "the pass counts of the store's tasks (tables `sessions`, `tasks`)"))?;
        Ok(rows.into_iter().map(pass).collect())
    }
}

impl SessionScore {
    /// The score as a comparison of versions reads it: its value and its components by name.
    pub fn scored(&self) -> parley_scoring::versions::Scored {
        let components = self.reward.breakdown.get("reward_components").and_then(Value::as_object);
        parley_scoring::versions::Scored {
            session: self.session,
            task_index: self.task_index,
            value: self.reward.value,
            components: components.into_iter().flatten().filter_map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect(),
        }
    }
}

/// Versions `before` and `after` of `run` compared, session by session (see
/// `parley_scoring::versions`): what `parley scores diff` and the viewer show.
pub async fn compare_versions(
    store: &crate::Store,
    run: RunId,
    before: i64,
    after: i64,
) -> Result<parley_scoring::versions::Diff, StoreError> {
    let read = |scores: Vec<SessionScore>| scores.iter().map(SessionScore::scored).collect::<Vec<_>>();
    let earlier = read(store.scores_at(run, before).await?);
    let later = read(store.scores_at(run, after).await?);
    Ok(parley_scoring::versions::compare(run, before, after, &earlier, &later))
}

/// A version's reward in one line, from the settings stored with it (or the run's): its
/// components with their weights (`0.8·math + 0.1·format`), then its bounds.
pub fn describe_reward(reward: &Value) -> String {
    let components: Vec<String> = reward["components"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let name = c["name"].as_str().or_else(|| c["scorer"].as_str()).unwrap_or("?");
            match c["weight"].as_f64() {
                Some(w) if w != 1.0 => format!("{w}·{name}"),
                _ => name.to_owned(),
            }
        })
        .collect();
    let mut text = if components.is_empty() { "the environment's own".to_owned() } else { components.join(" + ") };
    for (key, word) in [("min", "at least"), ("max", "at most")] {
        if let Some(bound) = reward.get(key).and_then(Value::as_f64) {
            text.push_str(&format!(", {word} {bound}"));
        }
    }
    text
}

/// How often each task passed, by task id, over every run of the store that recorded it with
/// `environment`: (task id, passed, scored). A session counts when it finished without an
/// infrastructure failure and was scored; it passed when its reward is 1 (within 1e-6).
const PASS_COUNTS: &str = "SELECT t.task_id,
            COUNT(*) FILTER (WHERE s.reward >= 0.999999),
            COUNT(*)
     FROM sessions s
     JOIN tasks t ON t.run_id = s.run_id AND t.task_index = s.task_index
     JOIN runs r ON r.id = s.run_id
     WHERE r.environment = $1 AND s.status = 'finished' AND s.failure IS NULL AND s.reward IS NOT NULL
     GROUP BY t.task_id";

type PassRow = (String, i64, i64);

fn pass((task, passed, scored): PassRow) -> (String, u64, u64) {
    (task, u64::try_from(passed).unwrap_or_default(), u64::try_from(scored).unwrap_or_default())
}
