//! Changes to stored sessions after they ran: new score versions and forks.

use parley_core::{Reward, SessionId, StoreError};

use crate::{SqliteStore, db_error};

impl SqliteStore {
    /// Stores a new version of a session's score beside the old ones and makes it the
    /// session's current reward. Returns the version written.
    pub async fn add_score(&self, session: SessionId, reward: &Reward) -> Result<i64, StoreError> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let version: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(version), 0) + 1 FROM scores WHERE session_id = ? AND scorer = 'environment'",
        )
        .bind(session)
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error)?;
        sqlx::query(
            "INSERT INTO scores (session_id, scorer, version, value, breakdown) VALUES (?, 'environment', ?, ?, ?)",
        )
        .bind(session)
        .bind(version)
        .bind(reward.value)
        .bind(serde_json::Value::Object(reward.breakdown.clone()).to_string())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        sqlx::query("UPDATE sessions SET reward = ? WHERE id = ?")
            .bind(reward.value)
            .bind(session)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(version)
    }

    /// Creates a pending session in the same run that shares the first `at` messages of
    /// `source` (with their model calls and tool calls), and records where it came from.
    pub async fn fork_session(&self, source: SessionId, at: u32) -> Result<SessionId, StoreError> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let id: SessionId = sqlx::query_scalar(
            "INSERT INTO sessions (run_id, task_index, trial, seed, forked_from, fork_at)
             SELECT run_id, task_index,
                    (SELECT MAX(trial) + 1 FROM sessions s2 WHERE s2.run_id = s.run_id AND s2.task_index = s.task_index),
                    seed, id, ?
             FROM sessions s WHERE id = ? RETURNING id",
        )
        .bind(i64::from(at))
        .bind(source)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?
        .ok_or_else(|| StoreError::NotFound(format!("session {source}")))?;
        const COPIES: [&str; 3] = [
            "INSERT INTO messages (session_id, seq, role, content, tool_calls, tool_call_id)
             SELECT ?, seq, role, content, tool_calls, tool_call_id FROM messages WHERE session_id = ? AND seq < ?",
            "INSERT INTO model_calls (session_id, seq, endpoint, request, response, prompt_tokens, completion_tokens,
                                      latency_ms, attempts, error)
             SELECT ?, seq, endpoint, request, response, prompt_tokens, completion_tokens, latency_ms, attempts, error
             FROM model_calls WHERE session_id = ? AND seq < ?",
            "INSERT INTO tool_calls (session_id, seq, party, call_id, name, arguments, output, is_error, is_write, malformed,
                                     truncated, duration_us)
             SELECT ?, seq, party, call_id, name, arguments, output, is_error, is_write, malformed, truncated, duration_us
             FROM tool_calls WHERE session_id = ? AND seq < ?",
        ];
        for copy in COPIES {
            sqlx::query(copy).bind(id).bind(source).bind(i64::from(at)).execute(&mut *tx).await.map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(id)
    }

    /// Makes the finished sessions of a run that failed for a reason outside the agent (an
    /// infrastructure or environment failure, with its class) pending again, keeping their committed turns, so that a resume
    /// continues each from its last turn. Returns how many were reopened.
    pub async fn reopen_failed(&self, run: parley_core::RunId) -> Result<u64, StoreError> {
        let reopened = sqlx::query(
            "UPDATE sessions SET status = 'pending', termination = NULL, reward = NULL, error = NULL,
                                 failure = NULL, finished_at = NULL, attempt = attempt + 1
             WHERE run_id = ? AND status = 'finished' AND failure IS NOT NULL
               AND termination IN ('infrastructure_error', 'environment_error')",
        )
        .bind(run)
        .execute(self.pool())
        .await
        .map_err(db_error)?;
        Ok(reopened.rows_affected())
    }
}
