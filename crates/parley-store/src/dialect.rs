//! One store, two dialects: the statements SQLite and PostgreSQL share are written once, in SQL
//! both speak, and [`both_stores!`] makes each such method a method of both stores; [`Dialect`]
//! holds the little that differs in a shared statement's text.
//!
//! Both speak more alike than their mirrored code once showed: sqlx binds SQLite's `$1`, `$2`
//! by number as PostgreSQL does; both count with `COUNT(*) FILTER (WHERE ...)`, compare with
//! `IS NOT DISTINCT FROM`, `CAST` and upsert (`ON CONFLICT`) alike. What stays apart is
//! written beside its store with the reason: SQLite's one writer task against PostgreSQL's
//! pool of transactions, row locks (`FOR UPDATE`, `SKIP LOCKED` claims) that SQLite's single
//! writer makes needless, a damaged SQLite file read past page by page, and the clock.

use sqlx::{Postgres, QueryBuilder, Sqlite};

use crate::{PgStore, SqliteStore};

/// What a shared statement writes differently on each store.
pub(crate) trait Dialect {
    type Db: sqlx::Database;

    /// Writes ` IN (...)` of `ids`, bound as one parameter whatever their number: SQLite reads
    /// a JSON array (`json_each`), so that no list meets its limit on bound parameters;
    /// PostgreSQL an array (`= ANY`).
    fn push_in_ids(query: &mut QueryBuilder<Self::Db>, ids: &[i64]);
}

impl Dialect for SqliteStore {
    type Db = Sqlite;

    fn push_in_ids(query: &mut QueryBuilder<Sqlite>, ids: &[i64]) {
        query.push(" IN (SELECT value FROM json_each(");
        query.push_bind(serde_json::to_string(ids).unwrap_or_default());
        query.push("))");
    }
}

impl Dialect for PgStore {
    type Db = Postgres;

    fn push_in_ids(query: &mut QueryBuilder<Postgres>, ids: &[i64]) {
        query.push(" = ANY(").push_bind(ids.to_vec()).push(")");
    }
}

/// Methods written once for both stores: the items given become an `impl` block of
/// [`SqliteStore`](crate::SqliteStore) and one of [`PgStore`](crate::PgStore). A body may use what both have under one name:
/// `self.pool()`, `self.read_error(error, what)` (a failed read in its store's words), the
/// row mappers of `row` (both stores are `Unreadable`), and `Self::push_in_ids` ([`Dialect`]).
macro_rules! both_stores {
    ($($item:item)*) => {
        impl $crate::SqliteStore { $($item)* }
        impl $crate::PgStore { $($item)* }
    };
}
pub(crate) use both_stores;
