//! The session store on SQLite: runs, tasks, sessions, messages, model calls, tool calls and
//! scores, with the schema in the workspace's `migrations/` folder, applied at open.
//!
//! Invariants: one writer task owns the only writing connection and batches the turns of all
//! sessions into multi-row inserts, one transaction per batch; a caller's turn is acknowledged
//! only after its transaction commits, and the writer checkpoints the WAL between its
//! transactions, never inside one. A raw request is stored whole or as a delta against the
//! previous call of its session and party ([`reconstruct`] gives it back whole). Reads go
//! through a separate pool and never block the writer (WAL mode).

mod delta;
mod edit;
mod load;
mod read;
mod writer;

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parley_core::{RunId, RunSpec, SessionId, SessionOutcome, SessionSpec, SessionStore, StoreError, Task, TurnRecord};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, QueryBuilder, SqliteConnection, SqlitePool};

pub use delta::{DELTA_KEY, reconstruct};
pub use load::{CallFigures, RunRecord, Transcript};
pub use read::{SessionRow, TokenTotals, Tokens};
use writer::{Writer, WriterHandle};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Options for opening a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Keep the raw request and response bodies of model calls (usage and latency are always kept).
    pub raw_model_calls: bool,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions { raw_model_calls: true }
    }
}

/// The benchmark switch that turns per-turn persistence off: with this variable set to `1`,
/// turns are acknowledged without being written, and only each session's end (termination,
/// reward, score) is committed, so the run's summary still works. It exists to measure what
/// durability costs (`bench/run`); without stored turns an interrupted session starts over on
/// resume, so it is no flag of `parley run`, and the store warns on every open.
pub const NO_TURNS_VARIABLE: &str = "PARLEY_BENCH_NO_TURNS";

fn turns_persisted() -> bool {
    let off = std::env::var(NO_TURNS_VARIABLE).is_ok_and(|v| v == "1");
    if off {
        tracing::warn!("{NO_TURNS_VARIABLE}=1: turns are not stored, only how sessions end (a benchmark mode)");
    }
    !off
}

/// A SQLite file holding any number of runs.
#[derive(Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    writer: WriterHandle,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

pub(crate) fn db_error(e: sqlx::Error) -> StoreError {
    StoreError::Database(e.to_string())
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and applies pending migrations.
    pub async fn open(path: &Path, options: StoreOptions) -> Result<SqliteStore, StoreError> {
        let connect = SqliteConnectOptions::from_str("sqlite:")
            .map_err(db_error)?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(30));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(connect.clone())
            .await
            .map_err(|e| StoreError::Database(format!("cannot open {}: {e}", path.display())))?;
        MIGRATOR.run(&pool).await.map_err(|e| StoreError::Database(format!("migrating {}: {e}", path.display())))?;
        // The writer checkpoints the WAL itself, outside its commits (see `writer`).
        let conn =
            SqliteConnection::connect_with(&connect.pragma("wal_autocheckpoint", "0")).await.map_err(db_error)?;
        let writer = Writer::spawn(conn, options, turns_persisted());
        Ok(SqliteStore { pool, writer })
    }

    /// The pool for reads.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Waits until every write sent so far is committed and the WAL is checkpointed into the
    /// database file, then closes the read pool. The writer task ends when the last handle to
    /// the store is dropped.
    pub async fn close(&self) -> Result<(), StoreError> {
        self.writer.close().await?;
        self.pool.close().await;
        Ok(())
    }
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn create_run(
        &self,
        spec: &RunSpec,
        tasks: &[Arc<Task>],
        sessions: &[SessionSpec],
    ) -> Result<(RunId, Vec<SessionId>), StoreError> {
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        let config = spec.config.to_string();
        let run: RunId = sqlx::query_scalar("INSERT INTO runs (environment, config) VALUES (?, ?) RETURNING id")
            .bind(&spec.environment)
            .bind(config)
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error)?;
        for chunk in tasks.chunks(1000) {
            let mut insert = QueryBuilder::new("INSERT INTO tasks (run_id, task_index, task_id, row) ");
            insert.push_values(chunk, |mut b, task| {
                b.push_bind(run).push_bind(task.index as i64).push_bind(&task.id).push_bind(task.row.to_string());
            });
            insert.build().execute(&mut *tx).await.map_err(db_error)?;
        }
        // Ids are assigned here, inside the transaction, so they are known without reading back.
        let first: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) + 1 FROM sessions")
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error)?;
        let ids: Vec<SessionId> = (0..sessions.len() as i64).map(|i| first + i).collect();
        for (chunk, id_chunk) in sessions.chunks(1000).zip(ids.chunks(1000)) {
            let mut insert = QueryBuilder::new("INSERT INTO sessions (id, run_id, task_index, trial, seed) ");
            insert.push_values(chunk.iter().zip(id_chunk), |mut b, (s, id)| {
                // SQLite integers are signed: the seed's bits are kept, reinterpreted.
                b.push_bind(id)
                    .push_bind(run)
                    .push_bind(s.task_index as i64)
                    .push_bind(s.trial as i64)
                    .push_bind(s.seed as i64);
            });
            insert.build().execute(&mut *tx).await.map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok((run, ids))
    }

    async fn commit_turn(&self, session: SessionId, turn: TurnRecord) -> Result<(), StoreError> {
        self.writer.write(session, turn, None).await
    }

    async fn finish_session(
        &self,
        session: SessionId,
        last_turn: TurnRecord,
        outcome: &SessionOutcome,
    ) -> Result<(), StoreError> {
        self.writer.write(session, last_turn, Some(outcome.clone())).await
    }

    async fn finish_run(&self, run: RunId, status: &str) -> Result<(), StoreError> {
        self.writer.flush().await?;
        sqlx::query("UPDATE runs SET status = ?, finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?")
            .bind(status)
            .bind(run)
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(())
    }
}
