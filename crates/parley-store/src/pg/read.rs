//! Reads for summaries, inspection and export on PostgreSQL, giving what the SQLite store's
//! `read` gives: pages of sessions (by id, by run), counts, token totals, latencies and the
//! training metrics' session shapes.

use std::collections::{HashMap, HashSet};

use parley_core::{Player, RunId, SessionId, StoreError};

use super::PgStore;
use crate::row::{self, session_columns};
use crate::{RunOutcomes, SessionRead, SessionRow, SessionShape, TokenTotals, Tokens};

impl PgStore {
    /// [`sessions_page`](PgStore::sessions_page), each session as its own read. PostgreSQL
    /// keeps its pages whole or reports the failure itself, so a page here is read or not; the
    /// shape is the SQLite store's, whose pages can be damaged one session at a time.
    pub async fn sessions_page_checked(
        &self,
        run: RunId,
        after: i64,
        limit: usize,
    ) -> Result<Vec<SessionRead>, StoreError> {
        let page = self.sessions_page(run, after, limit).await?;
        Ok(page.into_iter().map(|row| SessionRead { id: row.id, row: Ok(row) }).collect())
    }

    /// Those of these sessions with anything committed (a message, a tool call or a model
    /// call): the others have no transcript to read. One query for a page of claimed sessions,
    /// where reading each transcript would be three round trips.
    pub async fn sessions_with_turns(&self, ids: &[i64]) -> Result<HashSet<SessionId>, StoreError> {
        let rows: Vec<(i64,)> = sqlx::query_as(
            "SELECT id FROM UNNEST($1::bigint[]) AS ids (id)
             WHERE EXISTS (SELECT 1 FROM messages WHERE session_id = ids.id)
                OR EXISTS (SELECT 1 FROM tool_calls WHERE session_id = ids.id)
                OR EXISTS (SELECT 1 FROM model_calls WHERE session_id = ids.id)",
        )
        .bind(ids)
        .fetch_all(&self.pool)
        .await
        .map_err(self.error(&format!("reading which of {} sessions have turns (table `messages`)", ids.len())))?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    pub async fn played_elsewhere(&self, ids: &[i64]) -> Result<HashMap<SessionId, Player>, StoreError> {
        let rows: Vec<(i64, String)> =
            sqlx::query_as("SELECT id, player FROM sessions WHERE id = ANY($1) AND player IS NOT NULL")
                .bind(ids)
                .fetch_all(&self.pool)
                .await
                .map_err(self.error(&format!("reading who plays {} sessions (table `sessions`)", ids.len())))?;
        Ok(rows.into_iter().map(|(id, player)| (id, Player::from_stored(Some(&player)))).collect())
    }

    /// The sessions with these ids, in id order (those that exist).
    pub async fn sessions_by_id(&self, ids: &[i64]) -> Result<Vec<SessionRow>, StoreError> {
        let rows = sqlx::query(concat!("SELECT ", session_columns!(), " FROM sessions WHERE id = ANY($1) ORDER BY id"))
            .bind(ids)
            .fetch_all(&self.pool)
            .await
            .map_err(self.error(&format!("reading {} sessions by id (table `sessions`)", ids.len())))?;
        rows.iter().map(|r| row::session_row(self, r)).collect()
    }

    /// How many sessions the run has, and how many of them are finished.
    pub async fn session_counts(&self, run: RunId) -> Result<(u64, u64), StoreError> {
        let (total, finished): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), COUNT(*) FILTER (WHERE status = 'finished') FROM sessions WHERE run_id = $1",
        )
        .bind(run)
        .fetch_one(&self.pool)
        .await
        .map_err(self.error(&format!("counting the sessions of run {run} (table `sessions`)")))?;
        Ok((total as u64, finished as u64))
    }

    /// The run's outcomes, read a page at a time (see
    /// [`SqliteStore::run_outcomes`](crate::SqliteStore::run_outcomes)).
    pub async fn run_outcomes(&self, run: RunId) -> Result<RunOutcomes, StoreError> {
        crate::read::outcomes_by_pages(|after| self.sessions_page(run, after, 4096)).await
    }

    pub async fn token_totals(&self, run: RunId) -> Result<TokenTotals, StoreError> {
        // A model call belongs to whoever wrote the message it produced.
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
            "SELECT msg.role, COUNT(*), COALESCE(SUM(m.prompt_tokens), 0)::bigint,
                    COALESCE(SUM(m.completion_tokens), 0)::bigint
             FROM model_calls m
             JOIN sessions s ON s.id = m.session_id
             JOIN messages msg ON msg.session_id = m.session_id AND msg.seq = m.seq
             WHERE s.run_id = $1 GROUP BY msg.role",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await
        .map_err(self.error(&format!("reading the model calls of run {run} (table `model_calls`)")))?;
        let mut totals = TokenTotals::default();
        for (role, calls, prompt, completion) in rows {
            let tokens = Tokens { model_calls: calls, prompt_tokens: prompt, completion_tokens: completion };
            match role.as_str() {
                "user" => totals.user = tokens,
                _ => totals.agent = tokens,
            }
        }
        Ok(totals)
    }

    /// Latencies of the model calls of a run, in milliseconds, of the party whose messages
    /// have `role` (`assistant` for the agent, `user` for the simulated user).
    pub async fn call_latencies(&self, run: RunId, role: &str) -> Result<Vec<f64>, StoreError> {
        sqlx::query_scalar(
            "SELECT m.latency_ms FROM model_calls m
             JOIN sessions s ON s.id = m.session_id
             JOIN messages msg ON msg.session_id = m.session_id AND msg.seq = m.seq
             WHERE s.run_id = $1 AND msg.role = $2",
        )
        .bind(run)
        .bind(role)
        .fetch_all(&self.pool)
        .await
        .map_err(self.error(&format!("reading the model-call latencies of run {run} (table `model_calls`)")))
    }

    /// Finished sessions of a run with ids above `after`, in id order, at most `limit`, as the
    /// training metrics read them.
    pub async fn session_shapes(&self, run: RunId, after: i64, limit: usize) -> Result<Vec<SessionShape>, StoreError> {
        let rows = sqlx::query(
            "SELECT s.id, s.task_index, s.termination, s.failure, s.reward,
                    (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id AND m.role = 'assistant') AS steps,
                    (SELECT breakdown FROM scores c WHERE c.session_id = s.id AND c.scorer = 'environment'
                     ORDER BY c.version DESC LIMIT 1) AS breakdown
             FROM sessions s WHERE s.run_id = $1 AND s.id > $2 AND s.status = 'finished' ORDER BY s.id LIMIT $3",
        )
        .bind(run)
        .bind(after)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(self.error(&format!("reading the session shapes of run {run} after {after} (table `sessions`)")))?;
        rows.iter().map(|r| row::session_shape(self, r)).collect()
    }
}
