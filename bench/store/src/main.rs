//! How many turn commits a second each store takes, for `bench/`:
//!
//!     cargo run --release -p parley-bench-store [-- --quick]
//!
//! 32 sessions commit 2 KB turns at once, each waiting for its commit before the next, as the
//! engine does; SQLite in a temporary file always, and PostgreSQL beside it in the same run when
//! `PARLEY_TEST_POSTGRES` names a server (`.ci/setup-postgres` starts one), in a schema of its
//! own that is dropped afterwards. It prints one row per store. `--quick` commits 20 turns a
//! session instead of 300: it checks that the program works, not how fast.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use parley_core::{Claim, Message, MessageRecord, Player, RunSpec, SessionSpec, SessionStore, Task, TurnRecord};
use parley_store::{PgStore, SqliteStore, StoreOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

const SESSIONS: usize = 32;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let turns: u32 = if std::env::args().any(|a| a == "--quick") { 20 } else { 300 };
    println!("{:<10} {:>8} {:>8} {:>9} {:>10}", "store", "sessions", "commits", "seconds", "commits/s");
    let dir = tempfile::tempdir()?;
    let sqlite = SqliteStore::open(&dir.path().join("bench.db"), StoreOptions::default()).await?;
    report("sqlite", turns, commit(Arc::new(sqlite.clone()), turns).await?);
    sqlite.close().await?;
    match std::env::var("PARLEY_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => {
            let (store, schema, admin) = postgres(&url).await?;
            let took = commit(Arc::new(store.clone()), turns).await;
            store.close().await?;
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&admin).await?;
            report("postgres", turns, took?);
        }
        _ => println!("{:<10} (PARLEY_TEST_POSTGRES names no server)", "postgres"),
    }
    Ok(())
}

fn report(store: &str, turns: u32, took: Duration) {
    let commits = SESSIONS as f64 * f64::from(turns);
    let seconds = took.as_secs_f64();
    println!("{store:<10} {SESSIONS:>8} {commits:>8} {seconds:>9.2} {:>10.0}", commits / seconds);
}

/// A store on a schema made for this run, the schema's name, and the pool that drops it.
async fn postgres(url: &str) -> anyhow::Result<(PgStore, String, sqlx::PgPool)> {
    let connect = PgConnectOptions::from_str(url).with_context(|| format!("PARLEY_TEST_POSTGRES={url}"))?;
    let admin = PgPoolOptions::new().max_connections(1).connect_with(connect.clone()).await?;
    // Digits only, never input.
    let schema = format!("bench_{}", std::process::id());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&admin).await?;
    let connect = connect.options([("search_path", schema.as_str())]);
    Ok((PgStore::connect_with(connect, StoreOptions::default()).await?, schema, admin))
}

/// The time `SESSIONS` sessions take to commit `turns` turns each, all at once.
async fn commit(store: Arc<dyn SessionStore>, turns: u32) -> anyhow::Result<Duration> {
    let task = Arc::new(Task {
        index: 0,
        id: "t".into(),
        messages: vec![],
        tools: Default::default(),
        row: serde_json::json!({}).into(),
    });
    let specs: Vec<SessionSpec> = (0..SESSIONS)
        .map(|i| SessionSpec { task_index: 0, trial: i as u32, seed: i as u64, player: Player::Run })
        .collect();
    let spec = RunSpec { environment: "bench".into(), config: serde_json::json!({}) };
    let (_, ids) = store.create_run(&spec, &[task], &specs).await?;
    let text = "word ".repeat(2048 / 5);
    let started = Instant::now();
    let sessions = ids.into_iter().map(|id| {
        let (store, text) = (Arc::clone(&store), text.clone());
        tokio::spawn(async move {
            for seq in 0..turns {
                let message = Message::assistant(text.clone());
                let turn =
                    TurnRecord { messages: vec![MessageRecord { seq, message, call: None }], tool_calls: vec![] };
                store.commit_turn(Claim::unclaimed(id), turn).await?;
            }
            anyhow::Ok(())
        })
    });
    for session in futures::future::join_all(sessions).await {
        session??;
    }
    Ok(started.elapsed())
}
