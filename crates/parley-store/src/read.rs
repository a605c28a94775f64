//! Reads for summaries and inspection, checked against the schema at compile time.

use parley_core::{RunId, StoreError};

use crate::{SqliteStore, db_error};

/// One session as stored, without its transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    pub id: i64,
    pub task_index: i64,
    pub trial: i64,
    pub status: String,
    pub termination: Option<String>,
    pub reward: Option<f64>,
    pub error: Option<String>,
    pub duration_ms: Option<f64>,
}

/// Token and call totals of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TokenTotals {
    pub model_calls: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
}

impl SqliteStore {
    pub async fn sessions(&self, run: RunId) -> Result<Vec<SessionRow>, StoreError> {
        sqlx::query_as!(
            SessionRow,
            "SELECT id, task_index, trial, status, termination, reward, error, duration_ms
             FROM sessions WHERE run_id = ? ORDER BY id",
            run
        )
        .fetch_all(self.pool())
        .await
        .map_err(db_error)
    }

    pub async fn token_totals(&self, run: RunId) -> Result<TokenTotals, StoreError> {
        let row = sqlx::query!(
            r#"SELECT COUNT(*) AS "calls!: i64",
                      COALESCE(SUM(m.prompt_tokens), 0) AS "prompt!: i64",
                      COALESCE(SUM(m.completion_tokens), 0) AS "completion!: i64"
               FROM model_calls m JOIN sessions s ON s.id = m.session_id WHERE s.run_id = ?"#,
            run
        )
        .fetch_one(self.pool())
        .await
        .map_err(db_error)?;
        Ok(TokenTotals { model_calls: row.calls, prompt_tokens: row.prompt, completion_tokens: row.completion })
    }

    /// Latencies of the model calls of a run, in milliseconds.
    pub async fn call_latencies(&self, run: RunId) -> Result<Vec<f64>, StoreError> {
        sqlx::query_scalar!(
            "SELECT m.latency_ms FROM model_calls m JOIN sessions s ON s.id = m.session_id WHERE s.run_id = ?",
            run
        )
        .fetch_all(self.pool())
        .await
        .map_err(db_error)
    }
}
