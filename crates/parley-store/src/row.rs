//! Stored rows read the same way on both stores: a column read and decoded, or an error naming
//! the column, its table and what the row belongs to (a session, a run), in the words of the
//! store it came from (SQLite: damage, and how to recover the rest of the file; PostgreSQL: the
//! server). The mappers from rows to the store's types are written once, here, over either row.

use std::fmt::Display;

use parley_core::{FailureClass, RunStatus, SessionStatus, StoreError, Termination};
use serde::de::DeserializeOwned;
use sqlx::postgres::{PgRow, Postgres};
use sqlx::sqlite::{Sqlite, SqliteRow};

use crate::{RunRecord, SessionRow, SessionShape};

/// A column type both stores decode.
pub(crate) trait Value:
    for<'r> sqlx::Decode<'r, Sqlite> + sqlx::Type<Sqlite> + for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>
{
}

impl<T> Value for T where
    T: for<'r> sqlx::Decode<'r, Sqlite>
        + sqlx::Type<Sqlite>
        + for<'r> sqlx::Decode<'r, Postgres>
        + sqlx::Type<Postgres>
{
}

/// A row of either store.
pub(crate) trait StoredRow {
    fn value<T: Value>(&self, column: &str) -> Result<T, sqlx::Error>;
}

impl StoredRow for SqliteRow {
    fn value<T: Value>(&self, column: &str) -> Result<T, sqlx::Error> {
        sqlx::Row::try_get(self, column)
    }
}

impl StoredRow for PgRow {
    fn value<T: Value>(&self, column: &str) -> Result<T, sqlx::Error> {
        sqlx::Row::try_get(self, column)
    }
}

/// How a store says that something it holds cannot be read: `what` names it (a column, its
/// table and its row), `error` says why.
pub(crate) trait Unreadable {
    fn unreadable(&self, what: &str, error: &dyn Display) -> StoreError;
}

/// One row of `table`, belonging to `of` ("session 4", "run 2"), read column by column.
pub(crate) struct Columns<'a, R> {
    pub row: &'a R,
    pub table: &'a str,
    pub of: String,
    pub store: &'a dyn Unreadable,
}

impl<'a, R: StoredRow> Columns<'a, R> {
    pub fn new(store: &'a dyn Unreadable, row: &'a R, table: &'a str, of: String) -> Columns<'a, R> {
        Columns { row, table, of, store }
    }

    /// The error for `column` of this row.
    pub fn unreadable(&self, column: &str, error: &dyn Display) -> StoreError {
        self.store.unreadable(&format!("column `{column}` of table `{}` for {}", self.table, self.of), error)
    }

    pub fn get<T: Value>(&self, column: &str) -> Result<T, StoreError> {
        self.row.value(column).map_err(|e| self.unreadable(column, &e))
    }

    /// A JSON column, `None` when NULL.
    pub fn json<T: DeserializeOwned>(&self, column: &str) -> Result<Option<T>, StoreError> {
        match self.get::<Option<String>>(column)? {
            Some(text) => serde_json::from_str(&text).map(Some).map_err(|e| self.unreadable(column, &e)),
            None => Ok(None),
        }
    }

    /// A column holding one of a closed set of names, `None` when NULL; a name this build does
    /// not know is an error of the column.
    pub fn named<T>(&self, column: &str, parse: fn(&str) -> Option<T>) -> Result<Option<T>, StoreError> {
        match self.get::<Option<String>>(column)? {
            Some(name) => match parse(&name) {
                Some(value) => Ok(Some(value)),
                None => Err(self.unreadable(column, &format!("unknown {column} {name:?}"))),
            },
            None => Ok(None),
        }
    }

    /// A column that must hold one of a closed set of names.
    pub fn required<T>(&self, column: &str, parse: fn(&str) -> Option<T>) -> Result<T, StoreError> {
        self.named(column, parse)?.ok_or_else(|| self.unreadable(column, &"NULL"))
    }
}

/// The columns of a [`SessionRow`], as a macro so that statements stay literals.
macro_rules! session_columns {
    () => {
        "id, task_index, trial, seed, status, termination, reward, error, failure, retries, duration_ms, \
         token_contiguity"
    };
}
pub(crate) use session_columns;

/// The id of a row of [`session_columns!`].
pub(crate) fn session_id(store: &dyn Unreadable, row: &impl StoredRow) -> Result<i64, StoreError> {
    Columns::new(store, row, "sessions", "a session".into()).get("id")
}

/// A row of [`session_columns!`] as a [`SessionRow`].
pub(crate) fn session_row(store: &dyn Unreadable, row: &impl StoredRow) -> Result<SessionRow, StoreError> {
    session_fields(store, row, session_id(store, row)?)
}

/// A row of [`session_columns!`] whose id is known as a [`SessionRow`]: a column that cannot be
/// read is named with the session.
pub(crate) fn session_fields(store: &dyn Unreadable, row: &impl StoredRow, id: i64) -> Result<SessionRow, StoreError> {
    let c = Columns::new(store, row, "sessions", format!("session {id}"));
    Ok(SessionRow {
        id,
        task_index: c.get("task_index")?,
        trial: c.get("trial")?,
        seed: c.get("seed")?,
        status: c.required("status", SessionStatus::parse)?,
        termination: c.named("termination", Termination::parse)?,
        reward: c.get("reward")?,
        error: c.get("error")?,
        failure: c.named("failure", FailureClass::parse)?,
        retries: c.get("retries")?,
        duration_ms: c.get("duration_ms")?,
        token_contiguity: c.get("token_contiguity")?,
    })
}

/// The columns of a [`RunRecord`], as a macro so that statements stay literals.
macro_rules! run_columns {
    () => {
        "id, created_at, environment, config, status, finished_at"
    };
}
pub(crate) use run_columns;

/// A row of [`run_columns!`] as a [`RunRecord`].
pub(crate) fn run_record(store: &dyn Unreadable, row: &impl StoredRow) -> Result<RunRecord, StoreError> {
    let id = Columns::new(store, row, "runs", "a run".into()).get("id")?;
    let c = Columns::new(store, row, "runs", format!("run {id}"));
    Ok(RunRecord {
        id,
        created_at: c.get("created_at")?,
        environment: c.get("environment")?,
        config: c.json("config")?.unwrap_or_default(),
        status: c.required("status", RunStatus::parse)?,
        finished_at: c.get("finished_at")?,
    })
}

/// A row of a session-shapes page (`id, task_index, termination, failure, reward, steps,
/// breakdown`) as a [`SessionShape`].
pub(crate) fn session_shape(store: &dyn Unreadable, row: &impl StoredRow) -> Result<SessionShape, StoreError> {
    let id = session_id(store, row)?;
    let c = Columns::new(store, row, "sessions", format!("session {id}"));
    Ok(SessionShape {
        id,
        task_index: c.get("task_index")?,
        termination: c.named("termination", Termination::parse)?,
        failure: c.named("failure", FailureClass::parse)?,
        reward: c.get("reward")?,
        steps: c.get("steps")?,
        breakdown: c.get("breakdown")?,
    })
}
