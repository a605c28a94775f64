//! Reading what was stored on PostgreSQL, as the SQLite store's `load` and `read` give it: a
//! session's transcript for resume, pages of a run's sessions, a run, its task rows, a score.
//! A value that cannot be read is an error naming its table, session (or run) and column.

use parley_core::{RunId, SessionId, StoreError};
use serde_json::Value;

use super::PgStore;
use crate::row::{self, Unreadable, call_figure_columns, message_columns, run_columns, tool_call_columns};
use crate::{RunRecord, Transcript};

/// Where a value was read: table, the session or run it belongs to, and column.
type At<'a> = (&'a str, &'a str, &'a str);

impl Unreadable for PgStore {
    fn unreadable(&self, what: &str, error: &dyn std::fmt::Display) -> StoreError {
        StoreError::Database(format!("{}: cannot read {what}: {error}", self.name))
    }
}

impl PgStore {
    /// A value of `at` that could not be read or decoded.
    fn unreadable_at(&self, (table, of, column): At<'_>, error: &dyn std::fmt::Display) -> StoreError {
        Unreadable::unreadable(self, &format!("column `{column}` of table `{table}` for {of}"), error)
    }

    /// Every committed message, tool call and model call of one session, in order: the same
    /// [`Transcript`] as [`SqliteStore::transcript`](crate::SqliteStore::transcript).
    pub async fn transcript(&self, session: SessionId) -> Result<Transcript, StoreError> {
        let of = format!("session {session}");
        let rows =
            sqlx::query(concat!("SELECT ", message_columns!(), " FROM messages WHERE session_id = $1 ORDER BY seq"))
                .bind(session)
                .fetch_all(&self.pool)
                .await
                .map_err(self.error(&format!("reading the messages of {of} (table `messages`)")))?;
        let messages = row::messages(self, &rows, session)?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            tool_call_columns!(),
            " FROM tool_calls WHERE session_id = $1 ORDER BY seq"
        ))
        .bind(session)
        .fetch_all(&self.pool)
        .await
        .map_err(self.error(&format!("reading the tool calls of {of} (table `tool_calls`)")))?;
        let tool_calls = rows.iter().map(|r| row::tool_call(self, r, session)).collect::<Result<_, _>>()?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            call_figure_columns!(),
            " FROM model_calls WHERE session_id = $1 ORDER BY seq"
        ))
        .bind(session)
        .fetch_all(&self.pool)
        .await
        .map_err(self.error(&format!("reading the model calls of {of} (table `model_calls`)")))?;
        let calls = rows.iter().map(|r| row::call_figures(self, r, session)).collect::<Result<_, _>>()?;
        Ok(Transcript { messages, tool_calls, calls })
    }

    pub async fn run(&self, run: RunId) -> Result<RunRecord, StoreError> {
        let row = sqlx::query(concat!("SELECT ", run_columns!(), " FROM runs WHERE id = $1"))
            .bind(run)
            .fetch_optional(&self.pool)
            .await
            .map_err(self.error(&format!("reading run {run} (table `runs`)")))?
            .ok_or_else(|| StoreError::NotFound(format!("run {run}")))?;
        row::run_record(self, &row)
    }

    /// Every run, in id order.
    pub async fn runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query(concat!("SELECT ", run_columns!(), " FROM runs ORDER BY id"))
            .fetch_all(&self.pool)
            .await
            .map_err(self.error("reading the runs (table `runs`)"))?;
        rows.iter().map(|row| row::run_record(self, row)).collect()
    }

    /// The run a session belongs to.
    pub async fn run_of(&self, session: SessionId) -> Result<RunId, StoreError> {
        sqlx::query_scalar("SELECT run_id FROM sessions WHERE id = $1")
            .bind(session)
            .fetch_optional(&self.pool)
            .await
            .map_err(self.error(&format!("reading the run of session {session} (table `sessions`)")))?
            .ok_or_else(|| StoreError::NotFound(format!("session {session}")))
    }

    /// At most `limit` of the run's task rows from task `from` on, with their indexes.
    pub async fn task_rows_from(&self, run: RunId, from: i64, limit: usize) -> Result<Vec<(i64, Value)>, StoreError> {
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "SELECT task_index, row FROM tasks WHERE run_id = $1 AND task_index >= $2 ORDER BY task_index LIMIT $3",
        )
        .bind(run)
        .bind(from)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(self.error(&format!("reading the tasks of run {run} (table `tasks`)")))?;
        rows.into_iter()
            .map(|(index, row)| {
                let row = serde_json::from_str(&row)
                    .map_err(|e| self.unreadable_at(("tasks", &format!("run {run}, task {index}"), "row"), &e))?;
                Ok((index, row))
            })
            .collect()
    }
}
