//! One suite of store cases, run against both stores: SQLite always, PostgreSQL where
//! `PARLEY_TEST_POSTGRES` names a server (`.ci/setup-postgres` starts one and prints its URL).
//! Every case gets a database of its own (a SQLite file in a temporary folder, or a PostgreSQL
//! schema made for it), so cases run in parallel. Under `PARLEY_REQUIRE_PEERS=1`, as in CI, a
//! PostgreSQL case without a reachable server fails instead of passing vacuously.

mod cases;
mod postgres_only;

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use parley_core::{RunId, SessionId, SessionStore};
use parley_store::{PgStore, SessionRow, SqliteStore, StoreOptions};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

/// The variable naming the PostgreSQL server of the tests, as a URL.
const POSTGRES_VARIABLE: &str = "PARLEY_TEST_POSTGRES";

#[derive(Debug, Clone, Copy)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A fresh, empty database for one case.
pub struct Db {
    place: Place,
}

enum Place {
    Sqlite(tempfile::TempDir),
    Postgres { connect: Box<PgConnectOptions>, admin: PgPool, schema: String },
}

/// A store of either kind, as the front ends hold it.
pub use parley_store::Store;

impl Db {
    /// A database of `backend`, or `None` for PostgreSQL when no server is named and none is
    /// required (the case then passes without running, and says so).
    pub async fn new(backend: Backend) -> Option<Db> {
        match backend {
            Backend::Sqlite => Some(Db { place: Place::Sqlite(tempfile::tempdir().unwrap()) }),
            Backend::Postgres => Db::postgres().await,
        }
    }

    async fn postgres() -> Option<Db> {
        let required = std::env::var("PARLEY_REQUIRE_PEERS").is_ok_and(|v| v == "1");
        let how = "start one with `url=$(.ci/setup-postgres) && export PARLEY_TEST_POSTGRES=$url`";
        let url = match std::env::var(POSTGRES_VARIABLE) {
            Ok(url) if !url.is_empty() => url,
            _ if required => panic!("PARLEY_REQUIRE_PEERS=1 but {POSTGRES_VARIABLE} names no PostgreSQL server: {how}"),
            _ => {
                eprintln!("skipped: {POSTGRES_VARIABLE} is not set ({how})");
                return None;
            }
        };
        let connect = PgConnectOptions::from_str(&url).unwrap_or_else(|e| panic!("{POSTGRES_VARIABLE}={url}: {e}"));
        let admin = match PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(connect.clone())
            .await
        {
            Ok(admin) => admin,
            Err(e) if required => panic!("the PostgreSQL server at {url} cannot be reached ({e}): {how}"),
            Err(e) => {
                eprintln!("skipped: the PostgreSQL server at {url} cannot be reached ({e}); {how}");
                return None;
            }
        };
        // Unique across the test processes nextest runs at once, and across the cases of one.
        static MADE: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let schema = format!("test_{}_{}_{nanos}", std::process::id(), MADE.fetch_add(1, Ordering::Relaxed));
        // The name is made of digits here, never of input.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&admin).await.unwrap();
        let connect = connect.options([("search_path", schema.as_str())]);
        Some(Db { place: Place::Postgres { connect: Box::new(connect), admin, schema } })
    }

    /// A store on this database; each call opens another, as another process would.
    pub async fn open(&self) -> Store {
        match &self.place {
            Place::Sqlite(dir) => {
                SqliteStore::open(&dir.path().join("parley.db"), StoreOptions::default()).await.unwrap().into()
            }
            Place::Postgres { connect, .. } => {
                PgStore::connect_with((**connect).clone(), StoreOptions::default()).await.unwrap().into()
            }
        }
    }

    /// What a PostgreSQL database's stores connect with; `None` for SQLite.
    pub fn connect_options(&self) -> Option<PgConnectOptions> {
        match &self.place {
            Place::Postgres { connect, .. } => Some((**connect).clone()),
            Place::Sqlite(_) => None,
        }
    }

    /// Removes the database. (A failed case leaves its PostgreSQL schema behind, to look at.)
    pub async fn remove(self) {
        if let Place::Postgres { admin, schema, .. } = self.place {
            let drop = format!("DROP SCHEMA {schema} CASCADE");
            sqlx::query(sqlx::AssertSqlSafe(drop)).execute(&admin).await.unwrap();
            admin.close().await;
        }
    }
}

/// The store as the runtime holds it.
pub fn seam(store: &Store) -> Arc<dyn SessionStore> {
    Arc::new(store.clone())
}

/// One session's row.
pub async fn session(store: &Store, run: RunId, session: SessionId) -> SessionRow {
    let page = store.sessions_page(run, session - 1, 1).await.unwrap();
    page.into_iter().find(|s| s.id == session).unwrap_or_else(|| panic!("session {session} of run {run}"))
}

/// Each case as two tests, `backends::sqlite::CASE` and `backends::postgres::CASE`.
macro_rules! on_both {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $case() {
                    let Some(db) = super::Db::new(super::Backend::Sqlite).await else { return };
                    super::cases::$case(&db).await;
                    db.remove().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $case() {
                    let Some(db) = super::Db::new(super::Backend::Postgres).await else { return };
                    super::cases::$case(&db).await;
                    db.remove().await;
                }
            )*
        }
    };
}

on_both!(
    turns_and_outcomes_come_back_exactly,
    pages_of_sessions_come_in_id_order,
    owners_claiming_at_once_never_get_the_same_session,
    a_lease_holds_while_renewed_and_is_taken_over_once_it_expires,
    a_fenced_write_is_left_out_of_its_batch_and_the_others_are_written,
    a_write_for_a_session_not_in_the_table_is_refused_alone,
    a_finished_session_is_released_and_never_claimed_again,
    one_released_claim_is_taken_at_once_and_a_stale_one_is_left_alone,
    who_plays_each_session_is_kept,
    a_failed_batch_keeps_nothing_and_the_next_is_written,
    commits_renewals_and_claims_at_once_all_go_through,
    a_rescore_lands_one_version_for_the_run_or_nothing,
    a_runs_outcomes_count_each_session_as_its_row_says,
    a_fork_shares_its_prefix_and_failed_sessions_reopen,
    a_runs_tool_lists_are_stored_once_and_its_rows_come_back_whole,
    long_system_prompts_are_stored_once_and_transcripts_come_back_whole,
    a_first_requests_long_tool_list_is_stored_once_and_comes_back_whole,
    a_runs_call_totals_read_each_calls_party_or_else_its_messages_role,
    a_runs_call_totals_sum_every_call_and_keep_each_latency,
);
