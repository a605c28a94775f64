//! The web viewer's reads on PostgreSQL, giving what the SQLite store's `view` gives: every
//! run's counts in one query, filtered keyset pages of sessions, a session with its fork origin
//! and related sessions, and a run's model-call figures. Never writes.

use parley_core::{RunId, SessionId, StoreError};
use sqlx::{Postgres, QueryBuilder};

use super::PgStore;
use crate::row::{self, session_columns};
use crate::view::{filtered_page, in_id_order, push_filter};
use crate::{CallFigure, PageAt, RunCounts, SessionFilter, SessionInfo, SessionRow};

impl PgStore {
    /// Every run's session counts and mean reward, in one pass over the sessions.
    pub async fn run_counts(&self) -> Result<Vec<RunCounts>, StoreError> {
        let rows: Vec<(RunId, i64, i64, i64, Option<f64>, i64)> = sqlx::query_as(
            "SELECT run_id, COUNT(*),
                    COUNT(*) FILTER (WHERE status = 'finished'),
                    COUNT(*) FILTER (WHERE status = 'finished' AND failure IS NOT NULL),
                    AVG(reward) FILTER (WHERE status = 'finished' AND failure IS NULL),
                    COUNT(*) FILTER (WHERE status = 'finished' AND failure IS NULL AND reward IS NOT NULL)
             FROM sessions GROUP BY run_id ORDER BY run_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(self.error("reading the sessions of every run (table `sessions`)"))?;
        Ok(rows
            .into_iter()
            .map(|(run, sessions, finished, failed, mean_reward, scored)| RunCounts {
                run,
                sessions,
                finished,
                failed,
                mean_reward,
                scored,
            })
            .collect())
    }

    /// At most `limit` sessions of a run that pass `filter`, in id order, from `at`.
    pub async fn sessions_filtered(
        &self,
        run: RunId,
        filter: &SessionFilter,
        at: PageAt,
        limit: usize,
    ) -> Result<Vec<SessionRow>, StoreError> {
        let rows = filtered_page::<Postgres>(run, filter, at, limit)
            .build()
            .fetch_all(&self.pool)
            .await
            .map_err(self.error(&format!("reading a page of the sessions of run {run} (table `sessions`)")))?;
        in_id_order(at, rows.iter().map(|r| row::session_row(self, r)).collect())
    }

    /// How many sessions of a run pass `filter`.
    pub async fn sessions_matching(&self, run: RunId, filter: &SessionFilter) -> Result<u64, StoreError> {
        let mut query = QueryBuilder::<Postgres>::new("SELECT COUNT(*) FROM sessions WHERE run_id = ");
        query.push_bind(run);
        push_filter(&mut query, filter);
        let count: i64 = query
            .build_query_scalar()
            .fetch_one(&self.pool)
            .await
            .map_err(self.error(&format!("counting the sessions of run {run} (table `sessions`)")))?;
        Ok(count as u64)
    }

    /// One session with its run and fork origin; [`StoreError::NotFound`] when there is none.
    pub async fn session_info(&self, session: SessionId) -> Result<SessionInfo, StoreError> {
        let row = sqlx::query(concat!(
            "SELECT ",
            session_columns!(),
            ", run_id, forked_from, fork_at, finished_at FROM sessions WHERE id = $1"
        ))
        .bind(session)
        .fetch_optional(&self.pool)
        .await
        .map_err(self.error(&format!("reading session {session} (table `sessions`)")))?
        .ok_or_else(|| StoreError::NotFound(format!("session {session}")))?;
        row::session_info(self, &row)
    }

    /// The other trials of the session's task in its run and the sessions forked from it, as
    /// (id, trial, whether it is a fork of this one) in id order.
    pub async fn related_sessions(&self, session: SessionId) -> Result<Vec<(SessionId, i64, bool)>, StoreError> {
        sqlx::query_as(
            "SELECT id, trial, forked_from IS NOT DISTINCT FROM $1 FROM sessions
             WHERE run_id = (SELECT run_id FROM sessions WHERE id = $1)
               AND task_index = (SELECT task_index FROM sessions WHERE id = $1) AND id <> $1
             UNION
             SELECT id, trial, true FROM sessions WHERE forked_from = $1
             ORDER BY 1 LIMIT 100",
        )
        .bind(session)
        .fetch_all(&self.pool)
        .await
        .map_err(self.error(&format!("reading the sessions related to session {session} (table `sessions`)")))
    }

    /// The id a run's task was stored under.
    pub async fn task_id(&self, run: RunId, task_index: i64) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar("SELECT task_id FROM tasks WHERE run_id = $1 AND task_index = $2")
            .bind(run)
            .bind(task_index)
            .fetch_optional(&self.pool)
            .await
            .map_err(self.error(&format!("reading task {task_index} of run {run} (table `tasks`)")))
    }

    /// Every model call of a run, in one pass.
    pub async fn call_figures(&self, run: RunId) -> Result<Vec<CallFigure>, StoreError> {
        let rows: Vec<(bool, f64, i64, i64)> = sqlx::query_as(
            "SELECT msg.role = 'user', m.latency_ms, m.prompt_tokens, m.completion_tokens
             FROM model_calls m
             JOIN sessions s ON s.id = m.session_id
             JOIN messages msg ON msg.session_id = m.session_id AND msg.seq = m.seq
             WHERE s.run_id = $1",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await
        .map_err(self.error(&format!("reading the model calls of run {run} (table `model_calls`)")))?;
        Ok(rows
            .into_iter()
            .map(|(user, latency_ms, prompt_tokens, completion_tokens)| CallFigure {
                user,
                latency_ms,
                prompt_tokens,
                completion_tokens,
            })
            .collect())
    }
}
