//! Loading what was stored: runs, task rows, and sessions with their transcripts, for resume,
//! inspection and export.

use std::time::Duration;

use parley_core::{Message, Party, Role, RunId, SessionId, StoreError, ToolCall, ToolCallRecord, Usage};
use serde_json::Value;
use sqlx::Row;

use crate::{SqliteStore, db_error};

/// One run as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub id: RunId,
    pub created_at: String,
    pub environment: String,
    pub config: Value,
    pub status: String,
    pub finished_at: Option<String>,
}

/// One model call's figures, without its bodies.
#[derive(Debug, Clone, PartialEq)]
pub struct CallFigures {
    pub seq: u32,
    pub usage: Usage,
    pub latency_ms: f64,
    pub attempts: u32,
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
        let row = sqlx::query("SELECT id, created_at, environment, config, status, finished_at FROM runs WHERE id = ?")
            .bind(run)
            .fetch_optional(self.pool())
            .await
            .map_err(db_error)?
            .ok_or_else(|| StoreError::NotFound(format!("run {run}")))?;
        run_record(&row)
    }

    pub async fn runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query("SELECT id, created_at, environment, config, status, finished_at FROM runs ORDER BY id")
            .fetch_all(self.pool())
            .await
            .map_err(db_error)?;
        rows.iter().map(run_record).collect()
    }

    /// The run's task rows in task order.
    pub async fn task_rows(&self, run: RunId) -> Result<Vec<Value>, StoreError> {
        let rows: Vec<String> = sqlx::query_scalar("SELECT row FROM tasks WHERE run_id = ? ORDER BY task_index")
            .bind(run)
            .fetch_all(self.pool())
            .await
            .map_err(db_error)?;
        rows.iter()
            .map(|r| serde_json::from_str(r).map_err(|e| StoreError::Database(format!("a stored task row: {e}"))))
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
        .map_err(db_error)?;
        rows.into_iter()
            .map(|(index, row)| {
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
            .map_err(db_error)?
            .ok_or_else(|| StoreError::NotFound(format!("session {session}")))
    }

    /// Every committed message, tool call and model call of one session, in order.
    pub async fn transcript(&self, session: SessionId) -> Result<Transcript, StoreError> {
        let pool = self.pool();
        let rows = sqlx::query(
            "SELECT seq, role, content, tool_calls, tool_call_id FROM messages WHERE session_id = ? ORDER BY seq",
        )
        .bind(session)
        .fetch_all(pool)
        .await
        .map_err(db_error)?;
        let mut messages = Vec::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            let seq: i64 = row.get("seq");
            if seq != i as i64 {
                return Err(StoreError::Database(format!("session {session} has a gap in its messages at {i}")));
            }
            let role: String = row.get("role");
            let calls: Option<String> = row.get("tool_calls");
            let tool_calls: Vec<ToolCall> = match calls {
                Some(json) => serde_json::from_str(&json)
                    .map_err(|e| StoreError::Database(format!("session {session} message {seq}: {e}")))?,
                None => Vec::new(),
            };
            messages.push(Message {
                role: Role::parse(&role)
                    .ok_or_else(|| StoreError::Database(format!("session {session} message {seq}: role {role}")))?,
                content: row.get("content"),
                tool_calls,
                tool_call_id: row.get("tool_call_id"),
            });
        }
        let tool_calls = sqlx::query(
            "SELECT seq, party, call_id, name, arguments, output, is_error, is_write, malformed, truncated, duration_us
             FROM tool_calls WHERE session_id = ? ORDER BY seq",
        )
        .bind(session)
        .fetch_all(pool)
        .await
        .map_err(db_error)?
        .iter()
        .map(|r| ToolCallRecord {
            seq: r.get::<i64, _>("seq") as u32,
            party: Party::parse(r.get("party")).unwrap_or_default(),
            call_id: r.get("call_id"),
            name: r.get("name"),
            arguments: r.get("arguments"),
            output: r.get("output"),
            is_error: r.get("is_error"),
            write: r.get("is_write"),
            malformed: r.get("malformed"),
            truncated: r.get("truncated"),
            duration: Duration::from_micros(r.get::<i64, _>("duration_us") as u64),
        })
        .collect();
        let calls = sqlx::query(
            "SELECT seq, prompt_tokens, completion_tokens, latency_ms, attempts FROM model_calls
             WHERE session_id = ? ORDER BY seq",
        )
        .bind(session)
        .fetch_all(pool)
        .await
        .map_err(db_error)?
        .iter()
        .map(|r| CallFigures {
            seq: r.get::<i64, _>("seq") as u32,
            usage: Usage {
                prompt_tokens: r.get::<i64, _>("prompt_tokens") as u64,
                completion_tokens: r.get::<i64, _>("completion_tokens") as u64,
            },
            latency_ms: r.get("latency_ms"),
            attempts: r.get::<i64, _>("attempts") as u32,
        })
        .collect();
        Ok(Transcript { messages, tool_calls, calls })
    }
}

fn run_record(row: &sqlx::sqlite::SqliteRow) -> Result<RunRecord, StoreError> {
    let config: String = row.get("config");
    Ok(RunRecord {
        id: row.get("id"),
        created_at: row.get("created_at"),
        environment: row.get("environment"),
        config: serde_json::from_str(&config).map_err(|e| StoreError::Database(format!("a run's config: {e}")))?,
        status: row.get("status"),
        finished_at: row.get("finished_at"),
    })
}
