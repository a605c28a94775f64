//! One store, two dialects: the statements SQLite and PostgreSQL share are written once, in SQL
//! both speak, and [`both_stores!`] makes each such method a method of both stores.
//!
//! Both speak more alike than their mirrored code once showed: sqlx binds SQLite's `$1`, `$2`
//! by number as PostgreSQL does; both count with `COUNT(*) FILTER (WHERE ...)`, compare with
//! `IS NOT DISTINCT FROM`, `CAST` and upsert (`ON CONFLICT`) alike. What stays apart is
//! written beside its store with the reason: SQLite's one writer task against PostgreSQL's
//! pool of transactions, row locks (`FOR UPDATE`, `SKIP LOCKED` claims) that SQLite's single
//! writer makes needless, a damaged SQLite file read past page by page, and the clock.

/// Methods written once for both stores: the items given become an `impl` block of
/// [`SqliteStore`](crate::SqliteStore) and one of [`PgStore`](crate::PgStore). A body may use what both have under one name:
/// `self.pool()`, `self.read_error(error, what)` (a failed read in its store's words), the
/// row mappers of `row` (both stores are `Unreadable`).
macro_rules! both_stores {
    ($($item:item)*) => {
        impl $crate::SqliteStore { $($item)* }
        impl $crate::PgStore { $($item)* }
    };
}
pub(crate) use both_stores;
