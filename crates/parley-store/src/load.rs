//! Loading what was stored, one for both stores: runs, task rows, and sessions' transcripts,
//! for resume, inspection and export. A value that cannot be read is an error naming its
//! table, the session (or run) and the column, in its store's words (`Unreadable`).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use parley_core::task_row::SharedTools;
use parley_core::{
    Message, Party, Role, RunId, RunStatus, Sampling, SessionId, StoreError, TaskRow, ToolCallRecord, Unusable, Usage,
};
use serde_json::Value;

use crate::dialect::both_stores;
use crate::row::{self, Unreadable, call_figure_columns, message_columns, run_columns, tool_call_columns};
use crate::{PgStore, SqliteStore, unusable};

impl Unreadable for SqliteStore {
    fn unreadable(&self, what: &str, error: &dyn std::fmt::Display) -> StoreError {
        self.damaged(what, error)
    }
}

impl Unreadable for PgStore {
    fn unreadable(&self, what: &str, error: &dyn std::fmt::Display) -> StoreError {
        StoreError::Database(format!("{}: cannot read {what}: {error}", self.name()))
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

both_stores! {
    /// One run as stored; [`StoreError::NotFound`] when there is none.
    pub async fn run(&self, run: RunId) -> Result<RunRecord, StoreError> {
        let row = sqlx::query(concat!("SELECT ", run_columns!(), " FROM runs WHERE id = $1"))
            .bind(run)
            .fetch_optional(self.pool())
            .await
            .map_err(|e| self.read_error(e, &format!("run {run} (table `runs`)")))?
            .ok_or_else(|| StoreError::NotFound(format!("run {run}")))?;
        row::run_record(self, &row)
    }

    /// Every run, in id order.
    pub async fn runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query(concat!("SELECT ", run_columns!(), " FROM runs ORDER BY id"))
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.read_error(e, "the runs (table `runs`)"))?;
        rows.iter().map(|r| row::run_record(self, r)).collect()
    }

    /// At most `limit` of the run's task rows from task `from` on, with their indexes, each
    /// whole: the rows that share a tool list share one copy of it.
    pub async fn task_rows_from(
        &self,
        run: RunId,
        from: i64,
        limit: usize,
    ) -> Result<Vec<(i64, TaskRow)>, StoreError> {
        let rows: Vec<(i64, String, Option<i64>, Option<String>)> = sqlx::query_as(
            "SELECT t.task_index, t.row, t.tools, l.tools FROM tasks t
             LEFT JOIN task_tools l ON l.run_id = t.run_id AND l.id = t.tools
             WHERE t.run_id = $1 AND t.task_index >= $2 ORDER BY t.task_index LIMIT $3",
        )
        .bind(run)
        .bind(from)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(self.pool())
        .await
        .map_err(|e| self.read_error(e, &format!("the tasks of run {run} (table `tasks`)")))?;
        let mut lists: HashMap<i64, Arc<SharedTools>> = HashMap::new();
        rows.into_iter()
            .map(|(index, row, tools, list)| {
                let row = serde_json::from_str(&row).map_err(|e| {
                    self.unreadable(&format!("column `row` of table `tasks` for run {run}, task {index}"), &e)
                })?;
                if let Some(id) = tools {
                    let what = || format!("tool list {id} of table `task_tools` for run {run}, task {index}");
                    let list = match lists.entry(id) {
                        Entry::Occupied(list) => list.into_mut(),
                        Entry::Vacant(slot) => {
                            let text = list.ok_or_else(|| self.unreadable(&what(), &"it is not there"))?;
                            let list = serde_json::from_str(&text).map_err(|e| self.unreadable(&what(), &e))?;
                            slot.insert(Arc::new(SharedTools::new(list)))
                        }
                    };
                    return Ok((index, TaskRow::with_tools(row, Arc::clone(list))));
                }
                Ok((index, TaskRow::from(row)))
            })
            .collect()
    }

    /// The run a session belongs to.
    pub async fn run_of(&self, session: SessionId) -> Result<RunId, StoreError> {
        sqlx::query_scalar("SELECT run_id FROM sessions WHERE id = $1")
            .bind(session)
            .fetch_optional(self.pool())
            .await
            .map_err(|e| self.read_error(e, &format!("the run of session {session} (table `sessions`)")))?
            .ok_or_else(|| StoreError::NotFound(format!("session {session}")))
    }

    /// Every committed message, tool call and model call of one session, in order. A row that
    /// cannot be read is an error naming its table, the session and the column.
    pub async fn transcript(&self, session: SessionId) -> Result<Transcript, StoreError> {
        let rows =
            sqlx::query(concat!(
                "SELECT ",
                message_columns!(),
                " FROM messages m LEFT JOIN texts x ON x.id = m.content_id WHERE m.session_id = $1 ORDER BY m.seq"
            ))
                .bind(session)
                .fetch_all(self.pool())
                .await
                .map_err(|e| self.read_error(e, &format!("the messages of session {session} (table `messages`)")))?;
        let mut messages = row::messages(self, &rows, session)?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            tool_call_columns!(),
            " FROM tool_calls WHERE session_id = $1 ORDER BY seq"
        ))
        .bind(session)
        .fetch_all(self.pool())
        .await
        .map_err(|e| self.read_error(e, &format!("the tool calls of session {session} (table `tool_calls`)")))?;
        let tool_calls: Vec<ToolCallRecord> =
            rows.iter().map(|r| row::tool_call(self, r, session)).collect::<Result<_, _>>()?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            call_figure_columns!(),
            " FROM model_calls WHERE session_id = $1 ORDER BY seq"
        ))
        .bind(session)
        .fetch_all(self.pool())
        .await
        .map_err(|e| self.read_error(e, &format!("the model calls of session {session} (table `model_calls`)")))?;
        let calls = rows.iter().map(|r| row::call_figures(self, r, session)).collect::<Result<_, _>>()?;
        row::retell_tool_results(&mut messages, &tool_calls);
        Ok(Transcript { messages, tool_calls, calls })
    }
}
