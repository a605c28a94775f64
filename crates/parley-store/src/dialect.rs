//! One store, two dialects: the statements SQLite and PostgreSQL share are written once, in SQL
//! both speak, and [`both_stores!`] makes each such method a method of both stores; [`Dialect`]
//! holds the little that differs in a shared statement's text: how a list of ids is bound,
//! the clock, row locks and how a writing transaction begins.
//!
//! Both speak more alike than their mirrored code once showed: sqlx binds SQLite's `$1`, `$2`
//! by number as PostgreSQL does; both count with `COUNT(*) FILTER (WHERE ...)`, compare with
//! `IS NOT DISTINCT FROM`, `CAST` and upsert (`ON CONFLICT`) alike. What stays apart is
//! written beside its store with the reason: SQLite's one writer task against PostgreSQL's
//! pool of transactions, row locks (`FOR UPDATE`, `SKIP LOCKED` claims) that SQLite's single
//! writer makes needless, a damaged SQLite file read past page by page, and the clock.

use parley_core::StoreError;
use sqlx::{PgConnection, Postgres, QueryBuilder, Sqlite, SqliteConnection};

use crate::claims::now_ms;
use crate::pg::{pg_now_ms, pg_now_text};
use crate::writer::BoxFuture;
use crate::{PgStore, SqliteStore};

/// What a shared statement writes differently on each store.
pub(crate) trait Dialect {
    type Db: sqlx::Database;

    /// Now, in milliseconds since the Unix epoch, by the database's clock: every owner
    /// measures leases with the same clock, whatever its own says.
    const NOW_MS: &str;
    /// Now as text, `2025-01-31T12:00:00.000Z` on both.
    const NOW_TEXT: &str;
    /// What a subquery picking rows to update ends with, so that it locks them in its order
    /// (by id): PostgreSQL's `FOR UPDATE`, so that two of its transactions never wait on each
    /// other in a cycle; nothing on SQLite, whose one writer holds the only write lock.
    const LOCK_ROWS: &str;
    /// What a subquery picking sessions to claim ends with: PostgreSQL's `FOR UPDATE SKIP
    /// LOCKED`, so that machines claiming at once pass over each other's rows instead of waiting
    /// on them; nothing on SQLite, whose one writer serialises claimers.
    const SKIP_LOCKED: &str;
    /// How a writing transaction begins: SQLite's `BEGIN IMMEDIATE` takes the write lock before
    /// the transaction's first read (no other process can write between what it reads and what
    /// it writes); PostgreSQL's plain `BEGIN`, as its statements lock the rows they need.
    const BEGIN: &str;
    /// An aggregate of `m.latency_ms` over a group's rows as one text, in whole microseconds
    /// separated by commas: a read of every call's latency returns a row per party, not a row
    /// per call, and an integer is written as text at a fraction of a float's cost.
    const LATENCIES: &str;

    /// Writes ` IN (...)` of `ids`, bound as one parameter whatever their number: SQLite reads
    /// a JSON array (`json_each`), so that no list meets its limit on bound parameters;
    /// PostgreSQL an array (`= ANY`).
    fn push_in_ids(query: &mut QueryBuilder<Self::Db>, ids: &[i64]);
}

impl Dialect for SqliteStore {
    type Db = Sqlite;
    const NOW_MS: &str = now_ms!();
    const NOW_TEXT: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";
    const LOCK_ROWS: &str = "";
    const SKIP_LOCKED: &str = "";
    const BEGIN: &str = "BEGIN IMMEDIATE";
    const LATENCIES: &str = "group_concat(CAST(round(m.latency_ms * 1000) AS INTEGER), ',')";

    fn push_in_ids(query: &mut QueryBuilder<Sqlite>, ids: &[i64]) {
        query.push(" IN (SELECT value FROM json_each(");
        query.push_bind(serde_json::to_string(ids).unwrap_or_default());
        query.push("))");
    }
}

impl Dialect for PgStore {
    type Db = Postgres;
    const NOW_MS: &str = pg_now_ms!();
    const NOW_TEXT: &str = pg_now_text!();
    const LOCK_ROWS: &str = " FOR UPDATE";
    const SKIP_LOCKED: &str = " FOR UPDATE SKIP LOCKED";
    const BEGIN: &str = "BEGIN";
    const LATENCIES: &str = "string_agg(round(m.latency_ms * 1000)::bigint::text, ',')";

    fn push_in_ids(query: &mut QueryBuilder<Postgres>, ids: &[i64]) {
        query.push(" = ANY(").push_bind(ids.to_vec()).push(")");
    }
}

/// A stored enum's value as an SQL literal (`'pending'`), from the enum (`SessionStatus::Pending`):
/// a statement names the value it means rather than its text, and still holds it as a literal,
/// which PostgreSQL's planner weighs (a claim looks for the few pending sessions of a run mostly
/// finished) where a bound value would be hidden from a generic plan. The values are
/// `as_str()`'s, plain identifiers: nothing to escape.
pub(crate) fn literal(value: &'static str) -> String {
    debug_assert!(value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'), "{value}");
    format!("'{value}'")
}

// A write outside the turns, under one name on both stores; where it runs is the real
// difference between them.

impl SqliteStore {
    /// Runs `f` on the writer's connection, the only one that writes, after every write sent
    /// before it. A failure names the file rather than `what`: on SQLite what the user can do
    /// about it (a full disk, a lock) is the file's.
    pub(crate) async fn write<T, F>(&self, what: &str, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, Result<T, sqlx::Error>> + Send + 'static,
    {
        let _ = what;
        let error = self.write_error();
        self.writer.exec(move |conn| Box::pin(async move { f(conn).await.map_err(error) })).await
    }
}

impl PgStore {
    /// Runs `f` on a connection of the pool: PostgreSQL takes writes from many connections at
    /// once. A failure names the database and `what`.
    pub(crate) async fn write<T, F>(&self, what: &str, f: F) -> Result<T, StoreError>
    where
        F: for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, Result<T, sqlx::Error>>,
    {
        let error = self.error(what);
        let mut conn = self.pool().acquire().await.map_err(&error)?;
        f(&mut conn).await.map_err(error)
    }
}

/// Methods written once for both stores: the items given become an `impl` block of
/// [`SqliteStore`](crate::SqliteStore) and one of [`PgStore`](crate::PgStore). A body may use what both have under one name:
/// `self.pool()`, `self.read_error(error, what)` (a failed read in its store's words),
/// `self.write(what, f)` (a write, on the store's writing connection), `self.transact(what, f)`
/// (a write in one transaction, begun as [`Dialect::BEGIN`] says), the row mappers of
/// `row` (both stores are `Unreadable`), and [`Dialect`]'s items on `Self`.
macro_rules! both_stores {
    ($($item:item)*) => {
        impl $crate::SqliteStore { $($item)* }
        impl $crate::PgStore { $($item)* }
    };
}
pub(crate) use both_stores;

both_stores! {
    /// Runs `f` in one transaction on the store's writing connection (see `write`): it commits
    /// when `f` answers `Ok(Ok(_))`, and rolls back, writing nothing, when `f` refuses the write
    /// (`Ok(Err(_))`, an answer in the store's words) or a statement fails.
    pub(crate) async fn transact<T, F>(&self, what: &str, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(
                &'c mut <<Self as Dialect>::Db as sqlx::Database>::Connection,
            ) -> BoxFuture<'c, Result<Result<T, StoreError>, sqlx::Error>>
            + Send
            + 'static,
    {
        self.write(what, move |conn| {
            Box::pin(async move {
                let mut tx = sqlx::Connection::begin_with(conn, Self::BEGIN).await?;
                let done = f(&mut tx).await?;
                if done.is_ok() {
                    tx.commit().await?;
                }
                Ok(done)
            })
        })
        .await?
    }
}
