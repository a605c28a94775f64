//! Loading what was stored: runs, task rows, and sessions with their transcripts, for resume,
//! inspection and export.

use std::time::Duration;

use parley_core::{
    Message, Party, Role, RunId, RunStatus, Sampling, SessionId, StoreError, ToolCall, ToolCallRecord, Unusable, Usage,
};
use serde_json::Value;
use sqlx::Row;
use sqlx::sqlite::{Sqlite, SqliteRow};

use crate::row::{self, Unreadable, run_columns};
use crate::{SqliteStore, unusable};

/// Reads one column of a stored row, or says which table, session and column could not be read,
/// and how to recover the rest of the file: a decoding error (text that is not UTF-8) is how a
/// damaged page usually shows.
pub(crate) fn column<'r, T>(
    row: &'r SqliteRow,
    (store, table, session, name): (&SqliteStore, &str, SessionId, &str),
) -> Result<T, StoreError>
where
    T: sqlx::Decode<'r, Sqlite> + sqlx::Type<Sqlite>,
{
    row.try_get(name)
        .map_err(|e| store.damaged(&format!("column `{name}` of table `{table}` for session {session}"), &e))
}

impl Unreadable for SqliteStore {
    fn unreadable(&self, what: &str, error: &dyn std::fmt::Display) -> StoreError {
        self.damaged(what, error)
    }
}

impl SqliteStore {
    /// The error for something of the file that cannot be read, naming it as `what`.
    pub(crate) fn damaged(&self, what: &str, error: &dyn std::fmt::Display) -> StoreError {
        let db = self.path().display();
        StoreError::Unusable {
            problem: Unusable::Corrupt,
            message: format!(
                "{db}: cannot read {what} ({error}); the file may be damaged: recover what is readable with \
                 `sqlite3 {db} .recover | sqlite3 RECOVERED.db` and pass --db RECOVERED.db"
            ),
        }
    }

    /// A failed read of `what`, in the words of what the user can do about it.
    pub(crate) fn read_error(&self, error: sqlx::Error, what: &str) -> StoreError {
        match unusable(&error, &self.path().display().to_string()) {
            Some(StoreError::Unusable { problem: Unusable::Corrupt, .. }) => self.damaged(what, &error),
            Some(e) => e,
            None if matches!(error, sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_)) => {
                self.damaged(what, &error)
            }
            None => StoreError::Database(format!("reading {what}: {error}")),
        }
    }
}

/// One run as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub id: RunId,
    pub created_at: String,
    pub environment: String,
    pub config: Value,
    pub status: RunStatus,
    pub finished_at: Option<String>,
}

/// One model call's figures, without its bodies.
#[derive(Debug, Clone, PartialEq)]
pub struct CallFigures {
    pub seq: u32,
    pub usage: Usage,
    pub latency_ms: f64,
    pub attempts: u32,
    /// Who made the call; `None` for calls recorded before Parley kept it.
    pub party: Option<Party>,
    pub finish_reason: Option<String>,
    /// The sampling settings the request carried.
    pub sampling: Option<Sampling>,
}

/// A session's committed transcript and what was recorded beside it.
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    pub messages: Vec<Message>,
    pub tool_calls: Vec<ToolCallRecord>,
    pub calls: Vec<CallFigures>,
}

impl Transcript {
    /// Tokens of the agent's model calls: those whose answer is an assistant message. The
    /// simulated user's calls are the user's own (they answer with user messages).
    pub fn agent_usage(&self) -> Usage {
        let mut usage = Usage::default();
        for c in &self.calls {
            if self.messages.get(c.seq as usize).is_some_and(|m| m.role == Role::Assistant) {
                usage += c.usage;
            }
        }
        usage
    }
}

impl SqliteStore {
    pub async fn run(&self, run: RunId) -> Result<RunRecord, StoreError> {
        let row = sqlx::query(concat!("SELECT ", run_columns!(), " FROM runs WHERE id = ?"))
            .bind(run)
            .fetch_optional(self.pool())
            .await
            .map_err(|e| self.read_error(e, &format!("run {run}")))?
            .ok_or_else(|| StoreError::NotFound(format!("run {run}")))?;
        row::run_record(self, &row)
    }

    pub async fn runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query(concat!("SELECT ", run_columns!(), " FROM runs ORDER BY id"))
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.read_error(e, "the table `runs`"))?;
        rows.iter().map(|r| row::run_record(self, r)).collect()
    }

    /// The run's task rows in task order.
    pub async fn task_rows(&self, run: RunId) -> Result<Vec<Value>, StoreError> {
        let rows: Vec<String> = sqlx::query_scalar("SELECT row FROM tasks WHERE run_id = ? ORDER BY task_index")
            .bind(run)
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.read_error(e, &format!("column `row` of table `tasks` for run {run}")))?;
        rows.iter()
            .map(|r| {
                serde_json::from_str(r)
                    .map_err(|e| self.damaged(&format!("column `row` of table `tasks` for run {run}"), &e))
            })
            .collect()
    }

    /// At most `limit` of the run's task rows from task `from` on, with their indexes.
    pub async fn task_rows_from(&self, run: RunId, from: i64, limit: usize) -> Result<Vec<(i64, Value)>, StoreError> {
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "SELECT task_index, row FROM tasks WHERE run_id = ? AND task_index >= ? ORDER BY task_index LIMIT ?",
        )
        .bind(run)
        .bind(from)
        .bind(limit as i64)
        .fetch_all(self.pool())
        .await
        .map_err(|e| self.read_error(e, &format!("the tasks of run {run} (table `tasks`)")))?;
        rows.into_iter()
            .map(|(index, row): (i64, String)| {
                let row = serde_json::from_str(&row)
                    .map_err(|e| StoreError::Database(format!("run {run}'s stored task {index}: {e}")))?;
                Ok((index, row))
            })
            .collect()
    }

    /// The run a session belongs to.
    pub async fn run_of(&self, session: SessionId) -> Result<RunId, StoreError> {
        sqlx::query_scalar("SELECT run_id FROM sessions WHERE id = ?")
            .bind(session)
            .fetch_optional(self.pool())
            .await
            .map_err(|e| self.read_error(e, &format!("column `run_id` of table `sessions` for session {session}")))?
            .ok_or_else(|| StoreError::NotFound(format!("session {session}")))
    }

    /// Every committed message, tool call and model call of one session, in order. A row that
    /// cannot be read is an error naming its table, the session and the column.
    pub async fn transcript(&self, session: SessionId) -> Result<Transcript, StoreError> {
        let pool = self.pool();
        let at = |table| (self, table, session);
        let rows = sqlx::query(
            "SELECT seq, role, content, tool_calls, tool_call_id, parts, reasoning, tokens FROM messages
             WHERE session_id = ? ORDER BY seq",
        )
        .bind(session)
        .fetch_all(pool)
        .await
        .map_err(|e| self.read_error(e, &format!("the messages of session {session}")))?;
        let mut messages = Vec::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            let get = |name| (self, "messages", session, name);
            let seq: i64 = column(row, get("seq"))?;
            if seq != i as i64 {
                return Err(StoreError::Database(format!("session {session} has a gap in its messages at {i}")));
            }
            let role: String = column(row, get("role"))?;
            let calls: Option<String> = column(row, get("tool_calls"))?;
            let tool_calls: Vec<ToolCall> = match calls {
                Some(json) => serde_json::from_str(&json).map_err(|e| {
                    self.damaged(
                        &format!("column `tool_calls` of table `messages` for session {session} (seq {seq})"),
                        &e,
                    )
                })?,
                None => Vec::new(),
            };
            let damaged = |name: &str, e: serde_json::Error| {
                self.damaged(&format!("column `{name}` of table `messages` for session {session} (seq {seq})"), &e)
            };
            let parts_json: Option<String> = column(row, get("parts"))?;
            let reasoning_json: Option<String> = column(row, get("reasoning"))?;
            let parts = match parts_json {
                Some(json) => serde_json::from_str(&json).map_err(|e| damaged("parts", e))?,
                None => Vec::new(),
            };
            let reasoning = match reasoning_json {
                Some(json) => Some(serde_json::from_str(&json).map_err(|e| damaged("reasoning", e))?),
                None => None,
            };
            let tokens = match column::<Option<String>>(row, get("tokens"))? {
                Some(json) => Some(serde_json::from_str(&json).map_err(|e| damaged("tokens", e))?),
                None => None,
            };
            messages.push(Message {
                role: Role::parse(&role)
                    .ok_or_else(|| StoreError::Database(format!("session {session} message {seq}: role {role}")))?,
                content: column(row, get("content"))?,
                parts,
                tool_calls,
                tool_call_id: column(row, get("tool_call_id"))?,
                reasoning,
                tokens,
            });
        }
        let rows = sqlx::query(
            "SELECT seq, party, call_id, name, arguments, output, is_error, is_write, malformed, truncated, duration_us
             FROM tool_calls WHERE session_id = ? ORDER BY seq",
        )
        .bind(session)
        .fetch_all(pool)
        .await
        .map_err(|e| self.read_error(e, &format!("the tool calls of session {session}")))?;
        let mut tool_calls = Vec::with_capacity(rows.len());
        for r in &rows {
            let (s, t, id) = at("tool_calls");
            let get = |name| (s, t, id, name);
            let party: String = column(r, get("party"))?;
            tool_calls.push(ToolCallRecord {
                seq: column::<i64>(r, get("seq"))? as u32,
                party: Party::parse(&party).unwrap_or_default(),
                call_id: column(r, get("call_id"))?,
                name: column(r, get("name"))?,
                arguments: column(r, get("arguments"))?,
                output: column(r, get("output"))?,
                is_error: column(r, get("is_error"))?,
                write: column(r, get("is_write"))?,
                malformed: column(r, get("malformed"))?,
                truncated: column(r, get("truncated"))?,
                duration: Duration::from_micros(column::<i64>(r, get("duration_us"))? as u64),
            });
        }
        let rows = sqlx::query(
            "SELECT seq, prompt_tokens, completion_tokens, latency_ms, attempts, party, finish_reason, sampling
             FROM model_calls
             WHERE session_id = ? ORDER BY seq",
        )
        .bind(session)
        .fetch_all(pool)
        .await
        .map_err(|e| self.read_error(e, &format!("the model calls of session {session}")))?;
        let mut calls = Vec::with_capacity(rows.len());
        for r in &rows {
            let get = |name| (self, "model_calls", session, name);
            calls.push(CallFigures {
                seq: column::<i64>(r, get("seq"))? as u32,
                usage: Usage {
                    prompt_tokens: column::<i64>(r, get("prompt_tokens"))? as u64,
                    completion_tokens: column::<i64>(r, get("completion_tokens"))? as u64,
                },
                latency_ms: column(r, get("latency_ms"))?,
                attempts: column::<i64>(r, get("attempts"))? as u32,
                party: column::<Option<String>>(r, get("party"))?.as_deref().and_then(Party::parse),
                finish_reason: column(r, get("finish_reason"))?,
                sampling: match column::<Option<String>>(r, get("sampling"))? {
                    Some(json) => Some(serde_json::from_str(&json).map_err(|e| {
                        self.damaged(&format!("column `sampling` of table `model_calls` for session {session}"), &e)
                    })?),
                    None => None,
                },
            });
        }
        Ok(Transcript { messages, tool_calls, calls })
    }
}
