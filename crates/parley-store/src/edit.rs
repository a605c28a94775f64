//! Changes to stored sessions after they ran: new score versions, forks, failed sessions
//! reopened. Each is one transaction, written once for both stores; a re-score locks its
//! sessions' rows in id order first (`Dialect::LOCK_ROWS`, on PostgreSQL), as the writer does.
//! What differs is how a re-score's rows go in, each store's in a function of its own at the end
//! of this file: PostgreSQL binds a score per session as arrays, SQLite inserts chunks of
//! `VALUES` under its limit on bound parameters.

use parley_core::{Reward, RunId, SessionId, SessionStatus, StoreError, Termination};
use sqlx::{PgConnection, QueryBuilder, Sqlite, SqliteConnection};

use crate::dialect::{Dialect, both_stores, literal};
use crate::{PgStore, SqliteStore};

/// Score rows per statement: four parameters each, under SQLite's 32,766.
const SCORES_PER_STATEMENT: usize = 4096;

/// A session's new score: its id, value and breakdown (JSON).
type ScoreRow = (SessionId, f64, String);

impl SqliteStore {
    /// Stores a new version of a session's score beside the old ones (the next after its own
    /// newest) and makes it the session's current reward. Returns the version written. A re-score
    /// of a whole run uses [`add_scores`](SqliteStore::add_scores), which lands all its versions
    /// at once.
    pub async fn add_score(&self, session: SessionId, reward: &Reward) -> Result<i64, StoreError> {
        let (value, breakdown) = (reward.value, serde_json::Value::Object(reward.breakdown.clone()).to_string());
        let what = format!("storing a score of session {session} (tables `scores`, `sessions`)");
        self.transact(&what, move |conn| {
            Box::pin(async move {
                let version: i64 = sqlx::query_scalar(
                    "SELECT COALESCE(MAX(version), 0) + 1 FROM scores WHERE session_id = $1 AND scorer = 'environment'",
                )
                .bind(session)
                .fetch_one(&mut *conn)
                .await?;
                sqlx::query(
                    "INSERT INTO scores (session_id, scorer, version, value, breakdown)
                     VALUES ($1, 'environment', $2, $3, $4)",
                )
                .bind(session)
                .bind(version)
                .bind(value)
                .bind(breakdown)
                .execute(&mut *conn)
                .await?;
                sqlx::query("UPDATE sessions SET reward = $1 WHERE id = $2")
                    .bind(value)
                    .bind(session)
                    .execute(conn)
                    .await?;
                Ok(Ok(version))
            })
        })
        .await
    }
}

both_stores! {
    /// Stores a re-score of a run: one new version, the same for every session given, written
    /// with the sessions' current rewards in one transaction. A re-score that is killed or fails
    /// leaves no version behind, so every session of the run is at the same version or none is
    /// new. Refuses (writing nothing) a session that is not of `run`. Returns the version.
    ///
    /// `reward` is what the version was scored with (the reward's settings as JSON), kept beside
    /// it in `score_versions`.
    pub async fn add_scores(
        &self,
        run: RunId,
        scores: &[(SessionId, Reward)],
        reward: &serde_json::Value,
    ) -> Result<i64, StoreError> {
        let reward = reward.to_string();
        let rows: Vec<ScoreRow> = scores
            .iter()
            .map(|(s, r)| (*s, r.value, serde_json::Value::Object(r.breakdown.clone()).to_string()))
            .collect();
        let what = format!("storing a re-score of run {run} (tables `scores`, `sessions`)");
        self.transact(&what, move |conn| {
            Box::pin(async move {
                let ids: Vec<i64> = rows.iter().map(|(s, _, _)| *s).collect();
                let mut lock = QueryBuilder::new("SELECT id FROM sessions WHERE id");
                Self::push_in_ids(&mut lock, &ids);
                lock.push(" AND run_id = ").push_bind(run).push(" ORDER BY id").push(Self::LOCK_ROWS);
                let locked: Vec<i64> = lock.build_query_scalar().fetch_all(&mut *conn).await?;
                if locked.len() != ids.len() {
                    // Rolled back: nothing of this re-score stays.
                    let strays: Vec<String> =
                        ids.iter().filter(|id| !locked.contains(id)).map(i64::to_string).collect();
                    return Ok(Err(StoreError::NotFound(format!(
                        "sessions {} are not sessions of run {run}; no score was written",
                        strays.join(", ")
                    ))));
                }
                // One version for the run: the next after the highest any of its sessions has.
                let version: i64 = sqlx::query_scalar(
                    "SELECT COALESCE(MAX(sc.version), 0) + 1 FROM scores sc JOIN sessions s ON s.id = sc.session_id
                     WHERE s.run_id = $1 AND sc.scorer = 'environment'",
                )
                .bind(run)
                .fetch_one(&mut *conn)
                .await?;
                Self::insert_scores(&mut *conn, version, &rows).await?;
                sqlx::query("INSERT INTO score_versions (run_id, version, reward) VALUES ($1, $2, $3)")
                    .bind(run)
                    .bind(version)
                    .bind(&reward)
                    .execute(conn)
                    .await?;
                Ok(Ok(version))
            })
        })
        .await
    }

    /// Creates a pending, unclaimed session in the same run that shares the first `at` messages
    /// of `source` (with their model calls and tool calls), and records where it came from.
    pub async fn fork_session(&self, source: SessionId, at: u32) -> Result<SessionId, StoreError> {
        let what = format!("forking session {source} at message {at}");
        self.transact(&what, move |conn| {
            Box::pin(async move {
                let id: Option<SessionId> = sqlx::query_scalar(
                    "INSERT INTO sessions (run_id, task_index, trial, seed, forked_from, fork_at)
                     SELECT run_id, task_index,
                            (SELECT MAX(trial) + 1 FROM sessions s2
                             WHERE s2.run_id = s.run_id AND s2.task_index = s.task_index),
                            seed, id, $1
                     FROM sessions s WHERE id = $2 RETURNING id",
                )
                .bind(i64::from(at))
                .bind(source)
                .fetch_optional(&mut *conn)
                .await?;
                let Some(id) = id else {
                    return Ok(Err(StoreError::NotFound(format!("session {source}"))));
                };
                const COPIES: [&str; 3] = [
                    "INSERT INTO messages (session_id, seq, role, content, tool_calls, tool_call_id, parts,
                                           reasoning, tokens, content_id)
                     SELECT $1, seq, role, content, tool_calls, tool_call_id, parts, reasoning, tokens, content_id
                     FROM messages WHERE session_id = $2 AND seq < $3",
                    "INSERT INTO model_calls (session_id, seq, endpoint, request, response, prompt_tokens,
                                              completion_tokens, latency_ms, attempts, error, party,
                                              finish_reason, sampling)
                     SELECT $1, seq, endpoint, request, response, prompt_tokens, completion_tokens, latency_ms,
                            attempts, error, party, finish_reason, sampling
                     FROM model_calls WHERE session_id = $2 AND seq < $3",
                    "INSERT INTO tool_calls (session_id, seq, party, call_id, name, arguments, output, is_error,
                                             is_write, malformed, truncated, duration_us)
                     SELECT $1, seq, party, call_id, name, arguments, output, is_error, is_write, malformed,
                            truncated, duration_us
                     FROM tool_calls WHERE session_id = $2 AND seq < $3",
                ];
                for copy in COPIES {
                    sqlx::query(copy).bind(id).bind(source).bind(i64::from(at)).execute(&mut *conn).await?;
                }
                Ok(Ok(id))
            })
        })
        .await
    }

    /// Makes the finished sessions of a run that failed for a reason outside the agent (an
    /// infrastructure or environment failure, with its class) pending again, keeping their
    /// committed turns, so that a resume continues each from its last turn. They are left
    /// unclaimed, for the resume to claim. Returns how many were reopened.
    pub async fn reopen_failed(&self, run: RunId) -> Result<u64, StoreError> {
        let what = format!("reopening the failed sessions of run {run} (table `sessions`)");
        self.write(&what, move |conn| {
            Box::pin(async move {
                let mut query = QueryBuilder::new("UPDATE sessions SET status = ");
                query.push(literal(SessionStatus::Pending.as_str()));
                query.push(
                    ", termination = NULL, reward = NULL, error = NULL, failure = NULL, finished_at = NULL,
                       attempt = attempt + 1
                     WHERE id IN (SELECT id FROM sessions WHERE run_id = ",
                );
                query.push_bind(run).push(" AND status = ").push(literal(SessionStatus::Finished.as_str()));
                query.push(" AND failure IS NOT NULL AND termination IN (");
                query.push(literal(Termination::InfrastructureError.as_str())).push(", ");
                query.push(literal(Termination::EnvironmentError.as_str())).push(") ORDER BY id");
                query.push(Self::LOCK_ROWS).push(")");
                Ok(query.build().execute(conn).await?.rows_affected())
            })
        })
        .await
    }

    /// Replaces the simulated user's faults recorded with each session given (a review whose
    /// rules changed, run again over stored transcripts by a rescore). Returns how many sessions
    /// were changed.
    pub async fn set_user_faults(
        &self,
        faults: &[(SessionId, Vec<parley_core::review::UserFault>)],
    ) -> Result<u64, StoreError> {
        let rows: Vec<(SessionId, Option<String>)> =
            faults.iter().map(|(id, f)| (*id, crate::row::faults_text(f))).collect();
        self.write("recording the simulated users' faults (table `sessions`)", move |conn| {
            Box::pin(async move {
                let mut changed = 0;
                for (id, text) in rows {
                    changed += sqlx::query("UPDATE sessions SET user_faults = $1 WHERE id = $2")
                        .bind(text)
                        .bind(id)
                        .execute(&mut *conn)
                        .await?
                        .rows_affected();
                }
                Ok(changed)
            })
        })
        .await
    }
}

// How a re-score's rows go in: the one difference between the stores in a re-score.

impl SqliteStore {
    /// Makes `rows` the sessions' current rewards and stores them as `version`, in chunks of
    /// `VALUES` under SQLite's limit on bound parameters.
    async fn insert_scores(conn: &mut SqliteConnection, version: i64, rows: &[ScoreRow]) -> Result<(), sqlx::Error> {
        for chunk in rows.chunks(SCORES_PER_STATEMENT) {
            let mut update = QueryBuilder::<Sqlite>::new("WITH v (id, value) AS (");
            update.push_values(chunk, |mut b, (session, value, _)| {
                b.push_bind(*session).push_bind(*value);
            });
            update.push(") UPDATE sessions SET reward = v.value FROM v WHERE sessions.id = v.id");
            update.build().execute(&mut *conn).await?;
            let mut insert =
                QueryBuilder::<Sqlite>::new("INSERT INTO scores (session_id, scorer, version, value, breakdown) ");
            insert.push_values(chunk, |mut b, (session, value, breakdown)| {
                b.push_bind(*session)
                    .push_bind("environment")
                    .push_bind(version)
                    .push_bind(*value)
                    .push_bind(breakdown);
            });
            insert.build().execute(&mut *conn).await?;
        }
        Ok(())
    }
}

impl PgStore {
    /// Makes `rows` the sessions' current rewards and stores them as `version`, as arrays bound
    /// whole: two statements of one shape for any number of rows.
    async fn insert_scores(conn: &mut PgConnection, version: i64, rows: &[ScoreRow]) -> Result<(), sqlx::Error> {
        let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
        let values: Vec<f64> = rows.iter().map(|r| r.1).collect();
        let breakdowns: Vec<&str> = rows.iter().map(|r| r.2.as_str()).collect();
        sqlx::query(
            "UPDATE sessions SET reward = v.value FROM UNNEST($1::bigint[], $2::float8[]) AS v (id, value)
             WHERE sessions.id = v.id",
        )
        .bind(&ids)
        .bind(&values)
        .execute(&mut *conn)
        .await?;
        sqlx::query(
            "INSERT INTO scores (session_id, scorer, version, value, breakdown)
             SELECT v.id, 'environment', $4, v.value, v.breakdown
             FROM UNNEST($1::bigint[], $2::float8[], $3::text[]) AS v (id, value, breakdown)",
        )
        .bind(&ids)
        .bind(&values)
        .bind(&breakdowns)
        .bind(version)
        .execute(conn)
        .await?;
        Ok(())
    }
}
