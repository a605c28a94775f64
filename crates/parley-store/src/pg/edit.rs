//! Changes to stored sessions after they ran, on PostgreSQL, where they differ from SQLite's
//! (`edit`): re-scores and forks. Each is one transaction; one that locks several session rows
//! locks them in id order first, as the writer does.

use parley_core::{Reward, RunId, SessionId, StoreError};

use super::PgStore;

impl PgStore {
    /// Stores a re-score of a run: one new version, the same for every session given, written
    /// with the sessions' current rewards in one transaction, or nothing (see
    /// [`SqliteStore::add_scores`](crate::SqliteStore::add_scores)). Refuses a session that is
    /// not of `run`. Returns the version.
    pub async fn add_scores(
        &self,
        run: RunId,
        scores: &[(SessionId, Reward)],
        reward: &serde_json::Value,
    ) -> Result<i64, StoreError> {
        let error = self.error(&format!("storing a re-score of run {run} (tables `scores`, `sessions`)"));
        let ids: Vec<i64> = scores.iter().map(|(s, _)| *s).collect();
        let values: Vec<f64> = scores.iter().map(|(_, r)| r.value).collect();
        let breakdowns: Vec<String> =
            scores.iter().map(|(_, r)| serde_json::Value::Object(r.breakdown.clone()).to_string()).collect();
        let mut tx = self.pool.begin().await.map_err(&error)?;
        let locked: Vec<i64> =
            sqlx::query_scalar("SELECT id FROM sessions WHERE id = ANY($1) AND run_id = $2 ORDER BY id FOR UPDATE")
                .bind(&ids)
                .bind(run)
                .fetch_all(&mut *tx)
                .await
                .map_err(&error)?;
        if locked.len() != ids.len() {
            // Dropping the transaction rolls it back: nothing of this re-score stays.
            let strays: Vec<String> = ids.iter().filter(|id| !locked.contains(id)).map(i64::to_string).collect();
            return Err(StoreError::NotFound(format!(
                "sessions {} are not sessions of run {run}; no score was written",
                strays.join(", ")
            )));
        }
        // One version for the run: the next after the highest any of its sessions has.
        let version: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(sc.version), 0) + 1 FROM scores sc JOIN sessions s ON s.id = sc.session_id
             WHERE s.run_id = $1 AND sc.scorer = 'environment'",
        )
        .bind(run)
        .fetch_one(&mut *tx)
        .await
        .map_err(&error)?;
        sqlx::query(
            "UPDATE sessions SET reward = v.value FROM UNNEST($1::bigint[], $2::float8[]) AS v (id, value)
             WHERE sessions.id = v.id",
        )
        .bind(&ids)
        .bind(&values)
        .execute(&mut *tx)
        .await
        .map_err(&error)?;
        sqlx::query(
            "INSERT INTO scores (session_id, scorer, version, value, breakdown)
             SELECT v.id, 'environment', $4, v.value, v.breakdown
             FROM UNNEST($1::bigint[], $2::float8[], $3::text[]) AS v (id, value, breakdown)",
        )
        .bind(&ids)
        .bind(&values)
        .bind(&breakdowns)
        .bind(version)
        .execute(&mut *tx)
        .await
        .map_err(&error)?;
        sqlx::query("INSERT INTO score_versions (run_id, version, reward) VALUES ($1, $2, $3)")
            .bind(run)
            .bind(version)
            .bind(reward.to_string())
            .execute(&mut *tx)
            .await
            .map_err(&error)?;
        tx.commit().await.map_err(&error)?;
        Ok(version)
    }

    /// Creates a pending, unclaimed session in the same run that shares the first `at` messages
    /// of `source` (with their model calls and tool calls), and records where it came from.
    pub async fn fork_session(&self, source: SessionId, at: u32) -> Result<SessionId, StoreError> {
        let error = self.error(&format!("forking session {source} at message {at}"));
        let mut tx = self.pool.begin().await.map_err(&error)?;
        let id: SessionId = sqlx::query_scalar(
            "INSERT INTO sessions (run_id, task_index, trial, seed, forked_from, fork_at)
             SELECT run_id, task_index,
                    (SELECT MAX(trial) + 1 FROM sessions s2 WHERE s2.run_id = s.run_id AND s2.task_index = s.task_index),
                    seed, id, $1
             FROM sessions s WHERE id = $2 RETURNING id",
        )
        .bind(i64::from(at))
        .bind(source)
        .fetch_optional(&mut *tx)
        .await
        .map_err(&error)?
        .ok_or_else(|| StoreError::NotFound(format!("session {source}")))?;
        const COPIES: [&str; 3] = [
            "INSERT INTO messages (session_id, seq, role, content, tool_calls, tool_call_id, parts, reasoning, tokens)
             SELECT $1, seq, role, content, tool_calls, tool_call_id, parts, reasoning, tokens
             FROM messages WHERE session_id = $2 AND seq < $3",
            "INSERT INTO model_calls (session_id, seq, endpoint, request, response, prompt_tokens, completion_tokens,
                                      latency_ms, attempts, error, party, finish_reason, sampling)
             SELECT $1, seq, endpoint, request, response, prompt_tokens, completion_tokens, latency_ms, attempts,
                    error, party, finish_reason, sampling
             FROM model_calls WHERE session_id = $2 AND seq < $3",
            "INSERT INTO tool_calls (session_id, seq, party, call_id, name, arguments, output, is_error, is_write,
                                     malformed, truncated, duration_us)
             SELECT $1, seq, party, call_id, name, arguments, output, is_error, is_write, malformed, truncated,
                    duration_us
             FROM tool_calls WHERE session_id = $2 AND seq < $3",
        ];
        for copy in COPIES {
            sqlx::query(copy).bind(id).bind(source).bind(i64::from(at)).execute(&mut *tx).await.map_err(&error)?;
        }
        tx.commit().await.map_err(&error)?;
        Ok(id)
    }
}
