//! The session store: [`Store`], on SQLite ([`SqliteStore`]) or PostgreSQL ([`PgStore`]) as
//! `--db` names it ([`DbLocation`]). On SQLite: runs, tasks, sessions, messages, model calls, tool calls and
//! scores, with the schema in the workspace's `migrations/` folder, applied at open.
//!
//! Invariants: one writer task batches the turns of all sessions, one transaction per batch,
//! which its committing thread (`commit`) writes on a connection of its own; every other write
//! (runs, claims, scores, forks, verdicts) is sent to the same task and run on its connection
//! between batches, so the two connections never write at once. A caller's turn is acknowledged
//! only after its transaction commits, and the writer checkpoints the WAL between its transactions, never
//! inside one. A write is made under a claim and refused, whole, once another owner has claimed
//! the session since (fencing, checked in the writing transaction). A raw request is stored
//! whole (a long tool list of it kept once in `texts`) or as a delta against the previous call of
//! its session and party ([`reconstruct`] gives it back whole). Reads go through a separate pool,
//! opened `query_only`, and never block the writer (WAL mode).
//!
//! The two stores share every statement both databases speak, written once (`dialect`): reads,
//! claims, runs, re-scores and forks; the PostgreSQL store (`pg`) keeps its connection and its
//! turn writer, and where a shared write binds rows differently each store's way is a function
//! of its own beside the shared one (`claims`, `edit`).

mod claims;
mod commit;
mod delta;
mod dialect;
mod edit;
mod handle;
mod judge;
mod load;
mod location;
mod pg;
mod read;
mod row;
mod seam;
mod shared;
mod store;
mod turn_rows;
mod versions;
mod view;
mod writer;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use parley_core::{StoreError, Unusable};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, SqliteConnection, SqlitePool};

pub use claims::ClaimedSession;
pub use delta::{DELTA_KEY, reconstruct};
pub use judge::{VerdictCache, request_hash};
pub use load::{CallFigures, RunRecord, Transcript};
pub use location::{DbLocation, redact_url};
pub use pg::{PgStore, is_postgres_url};
pub use read::{CallTotals, RunOutcomes, SessionRead, SessionRow, SessionShape, TokenTotals, Tokens};
pub use store::Store;
pub use versions::{ScoreVersion, SessionScore, compare_versions, describe_reward};
pub use view::{PageAt, RunCounts, SessionFilter, SessionInfo};
use writer::{Writer, WriterHandle};

/// Rows a read may be ahead of its reader (see where the read pool is opened).
const READ_AHEAD_ROWS: usize = 4096;

/// The page size of a new database (one already made keeps its own). SQLite's 4 KiB default
/// writes a rollout's turns as more WAL frames (two `pwrite`s each) and more overflow pages for
/// its raw bodies: at 16 KiB a multi-step run's database is a fifth smaller and a persisted
/// rollout costs 3.5% less CPU (`docs/performance.md`); 32 and 64 KiB gained no more.
const PAGE_SIZE: u32 = 16 << 10;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Options for opening a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Keep the raw request and response bodies of model calls (usage and latency are always kept).
    pub raw_model_calls: bool,
    /// The size, in bytes, the SQLite write-ahead log is held near: once it is past it, the writer
    /// checkpoints the whole log between two commits so that the next commit starts it over, and
    /// a log file that grew past it is cut back to it ([`WAL_LIMIT`] by default; PostgreSQL
    /// ignores it).
    pub wal_limit: u64,
}

/// The default [`StoreOptions::wal_limit`]: 32 MiB. Smaller means more, shorter pauses of the
/// writer (each finishes the copy of the log into the database that the checkpointer began);
/// larger, more disk beside the database and more of the log written as new pages of its file,
/// which cost the kernel three times a page written over (see `writer`).
pub const WAL_LIMIT: u64 = 32 << 20;

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions { raw_model_calls: true, wal_limit: WAL_LIMIT }
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

/// How long a write waits for another process's lock before it fails, when the front end sets
/// it (`--busy-timeout`, which reads `PARLEY_BUSY_TIMEOUT`); 30 s by default. Process-wide, as
/// SQLite's lock is the file's whatever the store.
static BUSY_TIMEOUT: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();

/// Sets the busy timeout, once, before any store opens.
pub fn set_busy_timeout(timeout: Duration) {
    let _ = BUSY_TIMEOUT.set(timeout);
}

fn busy_timeout() -> Duration {
    BUSY_TIMEOUT.get().copied().unwrap_or(Duration::from_secs(30))
}

enum CheckError {
    Db(sqlx::Error),
    Refused(StoreError),
}

/// Refuses a database that holds tables but not Parley's, or Parley's at a newer version.
async fn check_schema(conn: &mut SqliteConnection, path: &Path) -> Result<(), CheckError> {
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
            .fetch_all(&mut *conn)
            .await
            .map_err(CheckError::Db)?;
    if tables.is_empty() {
        return Ok(());
    }
    if !tables.iter().any(|t| t == "_sqlx_migrations") {
        let shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
        return Err(CheckError::Refused(StoreError::Unusable {
            problem: Unusable::NotParley,
            message: format!(
                "{} is a SQLite database of another program (tables: {}); Parley leaves it untouched: pass --db \
                 with a Parley database, or a new file name to create one",
                path.display(),
                shown.join(", ")
            ),
        }));
    }
    let newest: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success")
        .fetch_one(&mut *conn)
        .await
        .map_err(CheckError::Db)?;
    let known = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    match newest {
        Some(newest) if newest > known => Err(CheckError::Refused(StoreError::Unusable {
            problem: Unusable::NewerSchema,
            message: format!(
                "{} was written by a newer Parley (schema version {newest}; this parley knows versions up to \
                 {known}): upgrade parley to read it",
                path.display()
            ),
        })),
        _ => Ok(()),
    }
}

/// An error opening or preparing the file at `path`, in the words of what the user can do
/// about it.
fn refusal(path: &Path, error: sqlx::Error) -> StoreError {
    sqlite_refusal(sqlite_code(&error), &error, path)
}

/// [`refusal`] for an error of any SQLite client: its result code, and what it says.
fn sqlite_refusal(code: Option<i32>, error: &dyn std::fmt::Display, path: &Path) -> StoreError {
    unusable_at(code, path).unwrap_or_else(|| StoreError::Database(format!("cannot open {}: {error}", path.display())))
}

/// Below this much free space, a disk counts as full: SQLite needs room for a transaction's WAL
/// frames and its shared-memory file, not only for a row.
const FULL_BELOW: u64 = 1 << 20;

/// Whether the file system holding `path` is full. SQLite reports a full disk in more ways than
/// `SQLITE_FULL`: an I/O error growing its shared-memory file (code 4874) when a WAL is
/// recovered, a busy recovery that cannot finish; so on such errors the disk itself is asked.
fn disk_full(path: &Path) -> bool {
    #[cfg(unix)]
    {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        rustix::fs::statvfs(dir).is_ok_and(|s| s.f_bavail.saturating_mul(s.f_frsize) < FULL_BELOW)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

/// [`unusable`] for the file at `path`, given SQLite's (extended) result code, however it was
/// read: it can also tell a full disk behind an I/O error or a lock.
fn unusable_at(code: Option<i32>, path: &Path) -> Option<StoreError> {
    let what = path.display().to_string();
    // Busy, locked, I/O error, full.
    if code.is_some_and(|c| matches!(c & 0xff, 5 | 6 | 10 | 13)) && disk_full(path) {
        return Some(StoreError::Unusable { problem: Unusable::DiskFull, message: full_disk(&what) });
    }
    unusable_code(code?, &what)
}

/// SQLite's (extended) result code of a database error.
fn sqlite_code(error: &sqlx::Error) -> Option<i32> {
    error.as_database_error().and_then(|e| e.code()).and_then(|c| c.parse::<i32>().ok())
}

/// Whether the process is at its open-files limit (`ulimit -n`): its open descriptors within a
/// few of the soft limit, or the reading of either failing for want of one (`EMFILE`, `ENFILE`).
/// The margin covers the descriptors SQLite closed again on its failed open.
fn out_of_files() -> bool {
    let wanting = |e: std::io::Error| matches!(e.raw_os_error(), Some(23 | 24));
    let limits = match std::fs::read_to_string("/proc/self/limits") {
        Ok(limits) => limits,
        Err(e) => return wanting(e),
    };
    let soft = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|soft| soft.parse::<usize>().ok());
    let Some(soft) = soft else { return false };
    match std::fs::read_dir("/proc/self/fd") {
        Ok(open) => open.count() + 16 >= soft,
        Err(e) => wanting(e),
    }
}

fn full_disk(what: &str) -> String {
    format!(
        "the disk holding {what} is full (or its quota is used up): {what} could not be written; free space and \
         run again, or pass --db on another disk"
    )
}

/// The answer to a SQLite error the user can act on (a file that is not a database, read-only,
/// not creatable, or locked past the busy timeout), naming the database as `what`.
fn unusable(error: &sqlx::Error, what: &str) -> Option<StoreError> {
    unusable_code(sqlite_code(error)?, what)
}

/// [`unusable`] for SQLite's (extended) result code.
fn unusable_code(code: i32, what: &str) -> Option<StoreError> {
    // Extended result codes keep the primary code in their low byte.
    let (problem, message) = match code & 0xff {
        26 => (
            Unusable::NotParley,
            format!(
                "{what} is not a SQLite database; pass --db with a Parley database, or a new file name to create one"
            ),
        ),
        8 => (
            Unusable::ReadOnly,
            format!(
                "{what} is read-only (the file, its folder or the disk); make it writable, or copy it elsewhere and \
                 pass --db COPY"
            ),
        ),
        // SQLite says only that it could not open the file; the process's open files against its
        // limit say whether it is out of descriptors, which no folder's permissions would mend.
        14 if out_of_files() => (
            Unusable::OutOfFiles,
            format!(
                "cannot open {what}: this process has as many files open as its limit allows (`ulimit -n`); raise \
                 the limit, or lower --concurrency or --endpoint-concurrency"
            ),
        ),
        14 => (Unusable::ReadOnly, format!("cannot open or create {what}: does its folder exist, and is it writable?")),
        13 => (Unusable::DiskFull, full_disk(what)),
        11 => (
            Unusable::Corrupt,
            format!(
                "{what} is damaged (SQLite found malformed pages); recover what is readable with `sqlite3 {what} \
                 .recover | sqlite3 RECOVERED.db` and pass --db RECOVERED.db"
            ),
        ),
        5 | 6 => (
            Unusable::Locked,
            format!(
                "{what} is locked by another process for more than {} s (another parley writing to it?); wait for \
                 it to finish, raise --busy-timeout, or pass another --db",
                busy_timeout().as_secs_f64()
            ),
        ),
        _ => return None,
    };
    Some(StoreError::Unusable { problem, message })
}

/// A write that failed on the database at `path`, in the words of what the user can do about it
/// (a full disk names the file it could not write).
pub(crate) fn write_error(error: sqlx::Error, path: &Path) -> StoreError {
    sqlite_write_error(sqlite_code(&error), &error, path)
}

/// [`write_error`] for an error of any SQLite client: its result code, and what it says.
pub(crate) fn sqlite_write_error(code: Option<i32>, error: &dyn std::fmt::Display, path: &Path) -> StoreError {
    unusable_at(code, path).unwrap_or_else(|| StoreError::Database(format!("writing {}: {error}", path.display())))
}

/// A SQLite file holding any number of runs.
#[derive(Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    writer: WriterHandle,
    path: Arc<PathBuf>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

/// A database error in the words of what the user can do about it (see [`unusable`]), or as
/// SQLite says it.
pub(crate) fn db_error(e: sqlx::Error) -> StoreError {
    unusable(&e, "the database").unwrap_or_else(|| StoreError::Database(e.to_string()))
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and applies pending migrations. A file
    /// that is not Parley's (not SQLite, or another program's SQLite), one written by a newer
    /// Parley, one that cannot be written or one locked by another process is refused with
    /// [`StoreError::Unusable`], untouched.
    pub async fn open(path: &Path, options: StoreOptions) -> Result<SqliteStore, StoreError> {
        // Two processes creating one database at once can find it locked at once, without
        // SQLite's busy wait (one switches the new file to WAL, or upgrades its lock, while the
        // other holds it): such a refusal, well inside the busy timeout, is tried again.
        let started = std::time::Instant::now();
        let mut attempt = 0u32;
        loop {
            match SqliteStore::open_once(path, options.clone()).await {
                Err(StoreError::Unusable { problem: Unusable::Locked, .. })
                    if attempt < 20 && started.elapsed() < busy_timeout() =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(25 * u64::from(attempt))).await;
                }
                opened => return opened,
            }
        }
    }

    async fn open_once(path: &Path, options: StoreOptions) -> Result<SqliteStore, StoreError> {
        if path.is_dir() {
            return Err(StoreError::Unusable {
                problem: Unusable::Directory,
                message: format!(
                    "{} is a directory; pass --db with a database file, such as {}",
                    path.display(),
                    path.join("parley.db").display()
                ),
            });
        }
        let busy = busy_timeout();
        let connect = SqliteConnectOptions::from_str("sqlite:")
            .map_err(db_error)?
            .filename(path)
            .create_if_missing(true)
            .page_size(PAGE_SIZE)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(busy);
        let refused = |e: sqlx::Error| refusal(path, e);
        if path.exists() {
            // Looked at read-only first, so that a file that is not Parley's is left as it was.
            let probe = SqliteConnectOptions::new().filename(path).read_only(true).busy_timeout(busy);
            let mut probe = SqliteConnection::connect_with(&probe).await.map_err(refused)?;
            let checked = check_schema(&mut probe, path).await;
            let _ = probe.close().await;
            checked.map_err(|e| match e {
                CheckError::Db(e) => refused(e),
                CheckError::Refused(e) => e,
            })?;
        }
        // The writer's connection is the only one that writes, migrations included. It
        // checkpoints the WAL itself, outside its commits (see `writer`), and it is the connection
        // that starts the log over, so it is the one that cuts a grown log file back to the limit
        // (SQLite does so at the first commit after a restart). A claim's page of sessions comes
        // back through it (`RETURNING`), so it reads ahead as the read pool does (see below).
        let writing = connect
            .clone()
            .row_buffer_size(READ_AHEAD_ROWS)
            .pragma("wal_autocheckpoint", "0")
            .pragma("journal_size_limit", options.wal_limit.min(i64::MAX as u64).to_string());
        let mut conn = SqliteConnection::connect_with(&writing).await.map_err(refused)?;
        // Two processes opening a new database at once both migrate it: SQLite's migrations
        // take no lock, so the second's may fail on what the first just did (a column already
        // added). Each migration is a transaction of its own, so the failed one left nothing;
        // run again, it finds the other's applied and goes on.
        let mut attempt = 0;
        loop {
            match MIGRATOR.run(&mut conn).await {
                Ok(()) => break,
                Err(_) if attempt < 5 => {
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(50 * attempt)).await;
                }
                Err(sqlx::migrate::MigrateError::Execute(e)) => return Err(refused(e)),
                Err(e) => return Err(StoreError::Database(format!("migrating {}: {e}", path.display()))),
            }
        }
        let committer = commit::Committer::open(path, options.wal_limit, options.raw_model_calls)?;
        let checkpointer = SqliteConnection::connect_with(&connect.clone().pragma("wal_autocheckpoint", "0"))
            .await
            .map_err(refused)?;
        // `query_only`: SQLite itself refuses a write on a reading connection. Rows come back
        // from a connection's thread through a channel; with sqlx's 50 rows, a reader slower than
        // SQLite parks the thread at every row once the channel is full (two thread switches a
        // row, most of a large read's CPU), so a page of sessions fits in it whole.
        let reading = connect.create_if_missing(false).pragma("query_only", "ON").row_buffer_size(READ_AHEAD_ROWS);
        let pool = SqlitePoolOptions::new().max_connections(4).connect_with(reading).await.map_err(refused)?;
        let writer = Writer::spawn(conn, committer, checkpointer, path.to_owned(), options, turns_persisted());
        Ok(SqliteStore { pool, writer, path: Arc::new(path.to_owned()) })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A write error on this store's file (see [`write_error`]).
    pub(crate) fn write_error(&self) -> impl Fn(sqlx::Error) -> StoreError + Send + Sync + Clone + 'static {
        let path = Arc::clone(&self.path);
        move |e| write_error(e, &path)
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
