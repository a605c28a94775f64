//! The session store on PostgreSQL, for many machines sharing one store: the same tables,
//! claims and fencing as [`SqliteStore`](crate::SqliteStore), with the schema in the workspace's
//! `migrations/postgres/` folder, applied at open.
//!
//! Invariants: a turn is acknowledged only after the transaction that writes it commits; a write
//! is made under a claim and refused, whole, once another owner has claimed the session since
//! (its session's row is locked `FOR UPDATE` and its fence compared in the writing transaction).
//! Every statement that locks several session rows locks them in id order, so two of the store's
//! transactions never wait on each other in a cycle; claims skip rows another transaction holds
//! (`FOR UPDATE SKIP LOCKED`). Times are the server's clock, never a client's. Statements are
//! checked at run time (`sqlx::query`), so an offline build needs no query cache for them.

mod writer;

use std::str::FromStr;
use std::sync::Arc;

use parley_core::{StoreError, Unusable};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

use crate::StoreOptions;
use writer::PgWriter;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");

/// Now, in milliseconds since the Unix epoch, by the server's clock (see `claims`). A macro, so
/// that statements stay literals.
macro_rules! pg_now_ms {
    () => {
        "(extract(epoch from clock_timestamp()) * 1000)::bigint"
    };
}

/// Now as text in the form SQLite's `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')` writes, so that
/// both stores' times read alike.
macro_rules! pg_now_text {
    () => {
        r#"to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')"#
    };
}
pub(crate) use {pg_now_ms, pg_now_text};

/// Connections of one store's pool. Enough for the writer's tasks, the claims and a few readers
/// at once; many machines share one server, whose `max_connections` (100 by default) bounds them
/// all together.
const POOL_CONNECTIONS: u32 = 8;

/// How long the server lets one of the store's transactions sit idle before it ends the
/// connection, and with it the transaction's row locks. The store's transactions never wait on
/// the client between statements, so only a client that stopped (paused, or cut off from the
/// server, which may not notice for hours) holds one that long; its sessions' rows are then free
/// for the others to claim once its leases end (30 s by default), not when the server would
/// otherwise give the connection up.
const IDLE_IN_TRANSACTION: &str = "10s";

/// How long opening the store waits for the server to answer.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A PostgreSQL database (or one schema of it, by the URL's `options=-c search_path=...`) holding
/// any number of runs.
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    pub(crate) writer: PgWriter,
    /// The server and database without the password, named in errors.
    name: Arc<str>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("database", &self.name).finish_non_exhaustive()
    }
}

/// Whether `db` names a PostgreSQL database rather than a SQLite file.
pub fn is_postgres_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// The database `options` connect to, as a URL without its password.
fn display_name(options: &PgConnectOptions) -> String {
    let host = match options.get_socket() {
        Some(socket) => socket.display().to_string(),
        None => format!("{}:{}", options.get_host(), options.get_port()),
    };
    format!("postgres://{}@{host}/{}", options.get_username(), options.get_database().unwrap_or_default())
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`) and
    /// applies pending migrations. A database holding tables that are not Parley's, or Parley's
    /// at a newer schema version, is refused with [`StoreError::Unusable`], untouched.
    pub async fn open(url: &str, options: StoreOptions) -> Result<PgStore, StoreError> {
        let connect = PgConnectOptions::from_str(url).map_err(|e| {
            // The URL may hold a password: the error names only its form.
            StoreError::Database(format!(
                "cannot read the PostgreSQL URL ({e}); the form is postgres://USER:PASSWORD@HOST:PORT/DATABASE"
            ))
        })?;
        PgStore::connect_with(connect, options).await
    }

    /// [`open`](PgStore::open) with options already parsed (tests set a schema of their own).
    pub async fn connect_with(connect: PgConnectOptions, options: StoreOptions) -> Result<PgStore, StoreError> {
        let name: Arc<str> = display_name(&connect).into();
        let connect =
            connect.application_name("parley").options([("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION)]);
        // One connection first, given up after CONNECT_TIMEOUT: a pool would retry a refused
        // connection until its acquire timeout, and a wrong URL should be said at once.
        let unreachable = |e: &dyn std::fmt::Display| {
            StoreError::Database(format!(
                "cannot connect to {name}: {e}; is the server running and reachable, and does the database exist?"
            ))
        };
        let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&connect))
            .await
            .map_err(|_| unreachable(&format!("no answer in {} s", CONNECT_TIMEOUT.as_secs())))?
            .map_err(|e| unreachable(&e))?;
        check_schema(&mut conn, &name).await?;
        // Several machines may start at once: sqlx's migrator holds an advisory lock while it
        // applies migrations, so each is applied once.
        MIGRATOR
            .run(&mut conn)
            .await
            .map_err(|e| StoreError::Database(format!("migrating {name} (migrations/postgres): {e}")))?;
        let _ = conn.close().await;
        let pool = PgPoolOptions::new().max_connections(POOL_CONNECTIONS).connect_lazy_with(connect);
        let writer = writer::spawn(pool.clone(), Arc::clone(&name), options, crate::turns_persisted());
        Ok(PgStore { pool, writer, name })
    }

    /// The pool, for reads and for tests.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The database, as a URL without its password.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Closes the pool once every connection is returned. Commits are acknowledged after they
    /// are durable, so nothing acknowledged is left to flush.
    pub async fn close(&self) -> Result<(), StoreError> {
        self.pool.close().await;
        Ok(())
    }

    /// A failed read of `what`, named with the database: the PostgreSQL side of the stores'
    /// one `read_error` (see `dialect`).
    pub(crate) fn read_error(&self, error: sqlx::Error, what: &str) -> StoreError {
        StoreError::Database(format!("{}: reading {what}: {error}", self.name))
    }

    /// A failed statement about `what`, named with the database.
    pub(crate) fn error(&self, what: &str) -> impl Fn(sqlx::Error) -> StoreError + Send + Sync + Clone + 'static {
        let name = Arc::clone(&self.name);
        let what = what.to_owned();
        move |e| StoreError::Database(format!("{name}: {what}: {e}"))
    }
}

/// Refuses a database whose schema holds tables but not Parley's, or Parley's at a newer version.
async fn check_schema(conn: &mut PgConnection, name: &str) -> Result<(), StoreError> {
    let failed = |e: sqlx::Error| StoreError::Database(format!("{name}: reading its tables: {e}"));
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1")
            .fetch_all(&mut *conn)
            .await
            .map_err(failed)?;
    if tables.is_empty() {
        return Ok(());
    }
    if !tables.iter().any(|t| t == "_sqlx_migrations") {
        let shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
        return Err(StoreError::Unusable {
            problem: Unusable::NotParley,
            message: format!(
                "{name} holds another program's tables (tables: {}); Parley leaves them untouched: pass --db with a \
                 Parley database, or an empty one",
                shown.join(", ")
            ),
        });
    }
    let newest: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success")
        .fetch_one(&mut *conn)
        .await
        .map_err(failed)?;
    let known = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    match newest {
        Some(newest) if newest > known => Err(StoreError::Unusable {
            problem: Unusable::NewerSchema,
            message: format!(
                "{name} was written by a newer Parley (schema version {newest}; this parley knows versions up to \
                 {known}): upgrade parley to use it"
            ),
        }),
        _ => Ok(()),
    }
}
