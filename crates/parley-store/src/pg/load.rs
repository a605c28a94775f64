//! Reading what was stored on PostgreSQL, as the SQLite store's `load` and `read` give it: a
//! session's transcript for resume, pages of a run's sessions, a run, its task rows, a score.
//! A value that cannot be read is an error naming its table, session (or run) and column.

use std::time::Duration;

use parley_core::{Message, Party, Reward, Role, RunId, SessionId, StoreError, ToolCall, ToolCallRecord, Usage};
use serde::de::DeserializeOwned;
use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::{PgRow, Postgres};

use super::PgStore;
use crate::row::{self, Unreadable, run_columns, session_columns};
use crate::{CallFigures, RunRecord, SessionRow, Transcript};

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

    pub(super) fn column<'r, T>(&self, row: &'r PgRow, at: At<'_>) -> Result<T, StoreError>
    where
        T: sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
    {
        row.try_get(at.2).map_err(|e| self.unreadable_at(at, &e))
    }

    /// A JSON column, `None` when NULL.
    fn json<T: DeserializeOwned>(&self, row: &PgRow, at: At<'_>) -> Result<Option<T>, StoreError> {
        match self.column::<Option<String>>(row, at)? {
            Some(text) => serde_json::from_str(&text).map(Some).map_err(|e| self.unreadable_at(at, &e)),
            None => Ok(None),
        }
    }

    /// An integer column that must fit `T` (a seq, a count).
    fn number<T: TryFrom<i64>>(&self, row: &PgRow, at: At<'_>) -> Result<T, StoreError> {
        let n: i64 = self.column(row, at)?;
        T::try_from(n).map_err(|_| self.unreadable_at(at, &format!("{n} is out of range")))
    }

    /// Every committed message, tool call and model call of one session, in order: the same
    /// [`Transcript`] as [`SqliteStore::transcript`](crate::SqliteStore::transcript).
    pub async fn transcript(&self, session: SessionId) -> Result<Transcript, StoreError> {
        let of = format!("session {session}");
        let rows = sqlx::query(
            "SELECT seq, role, content, tool_calls, tool_call_id, parts, reasoning, tokens FROM messages
             WHERE session_id = $1 ORDER BY seq",
        )
        .bind(session)
        .fetch_all(&self.pool)
        .await
        .map_err(self.error(&format!("reading the messages of {of} (table `messages`)")))?;
        let mut messages = Vec::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            let at = |column| ("messages", of.as_str(), column);
            let seq: i64 = self.column(row, at("seq"))?;
            if seq != i as i64 {
                return Err(StoreError::Database(format!("{}: {of} has a gap in its messages at {i}", self.name)));
            }
            let of = format!("{of} (seq {seq})");
            let at = |column| ("messages", of.as_str(), column);
            let role: String = self.column(row, at("role"))?;
            messages.push(Message {
                role: Role::parse(&role)
                    .ok_or_else(|| self.unreadable_at(at("role"), &format!("unknown role {role:?}")))?,
                content: self.column(row, at("content"))?,
                parts: self.json(row, at("parts"))?.unwrap_or_default(),
                tool_calls: self.json::<Vec<ToolCall>>(row, at("tool_calls"))?.unwrap_or_default(),
                tool_call_id: self.column(row, at("tool_call_id"))?,
                reasoning: self.json(row, at("reasoning"))?,
                tokens: self.json(row, at("tokens"))?,
            });
        }

        let rows = sqlx::query(
            "SELECT seq, party, call_id, name, arguments, output, is_error, is_write, malformed, truncated, duration_us
             FROM tool_calls WHERE session_id = $1 ORDER BY seq",
        )
        .bind(session)
        .fetch_all(&self.pool)
        .await
        .map_err(self.error(&format!("reading the tool calls of {of} (table `tool_calls`)")))?;
        let mut tool_calls = Vec::with_capacity(rows.len());
        for r in &rows {
            let at = |column| ("tool_calls", of.as_str(), column);
            let party: String = self.column(r, at("party"))?;
            tool_calls.push(ToolCallRecord {
                seq: self.number(r, at("seq"))?,
                party: Party::parse(&party).unwrap_or_default(),
                call_id: self.column(r, at("call_id"))?,
                name: self.column(r, at("name"))?,
                arguments: self.column(r, at("arguments"))?,
                output: self.column(r, at("output"))?,
                is_error: self.column(r, at("is_error"))?,
                write: self.column(r, at("is_write"))?,
                malformed: self.column(r, at("malformed"))?,
                truncated: self.column(r, at("truncated"))?,
                duration: Duration::from_micros(self.number(r, at("duration_us"))?),
            });
        }

        let rows = sqlx::query(
            "SELECT seq, prompt_tokens, completion_tokens, latency_ms, attempts, party, finish_reason, sampling
             FROM model_calls WHERE session_id = $1 ORDER BY seq",
        )
        .bind(session)
        .fetch_all(&self.pool)
        .await
        .map_err(self.error(&format!("reading the model calls of {of} (table `model_calls`)")))?;
        let mut calls = Vec::with_capacity(rows.len());
        for r in &rows {
            let at = |column| ("model_calls", of.as_str(), column);
            calls.push(CallFigures {
                seq: self.number(r, at("seq"))?,
                usage: Usage {
                    prompt_tokens: self.number(r, at("prompt_tokens"))?,
                    completion_tokens: self.number(r, at("completion_tokens"))?,
                },
                latency_ms: self.column(r, at("latency_ms"))?,
                attempts: self.number(r, at("attempts"))?,
                party: self.column::<Option<String>>(r, at("party"))?.as_deref().and_then(Party::parse),
                finish_reason: self.column(r, at("finish_reason"))?,
                sampling: self.json(r, at("sampling"))?,
            });
        }
        Ok(Transcript { messages, tool_calls, calls })
    }

    /// Sessions of a run with ids above `after`, in id order, at most `limit`.
    pub async fn sessions_page(&self, run: RunId, after: i64, limit: usize) -> Result<Vec<SessionRow>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            session_columns!(),
            " FROM sessions WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3"
        ))
        .bind(run)
        .bind(after)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(
            self.error(&format!("reading a page of the sessions of run {run} after {after} (table `sessions`)")),
        )?;
        rows.iter().map(|r| row::session_row(self, r)).collect()
    }

    /// Every session of a run, in id order.
    pub async fn sessions(&self, run: RunId) -> Result<Vec<SessionRow>, StoreError> {
        self.sessions_page(run, i64::MIN, usize::MAX).await
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

    /// The newest score of a session by its environment's scorer.
    pub async fn latest_score(&self, session: SessionId) -> Result<Option<Reward>, StoreError> {
        let row: Option<(f64, String)> = sqlx::query_as(
            "SELECT value, breakdown FROM scores WHERE session_id = $1 AND scorer = 'environment'
             ORDER BY version DESC LIMIT 1",
        )
        .bind(session)
        .fetch_optional(&self.pool)
        .await
        .map_err(self.error(&format!("reading the score of session {session} (table `scores`)")))?;
        row.map(|(value, breakdown)| {
            let breakdown = serde_json::from_str(&breakdown)
                .map_err(|e| self.unreadable_at(("scores", &format!("session {session}"), "breakdown"), &e))?;
            Ok(Reward { value, breakdown })
        })
        .transpose()
    }
}
