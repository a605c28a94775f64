//! The write-ahead log stays near the store's limit while turns are committed without pause and
//! a reader holds snapshots now and then, and the turns are all there afterwards.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parley_core::{Claim, Message, MessageRecord, Player, RunSpec, SessionSpec, SessionStore, Task, TurnRecord};
use parley_store::{SqliteStore, StoreOptions};
use serde_json::json;
use sqlx::{Connection, SqliteConnection};

const LIMIT: u64 = 1 << 20;
const SESSIONS: usize = 16;
const TURNS: usize = 192;
const TEXT: usize = 8 << 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_stays_near_its_limit_while_readers_hold_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("parley.db");
    let store = SqliteStore::open(&db, StoreOptions { wal_limit: LIMIT, ..StoreOptions::default() }).await.unwrap();
    let task =
        Arc::new(Task { index: 0, id: "t".into(), messages: vec![], tools: Default::default(), row: json!({}).into() });
    let specs: Vec<SessionSpec> = (0..SESSIONS)
        .map(|i| SessionSpec { task_index: 0, trial: i as u32, seed: i as u64, player: Player::Run })
        .collect();
    let (_, ids) =
        store.create_run(&RunSpec { environment: "test".into(), config: json!({}) }, &[task], &specs).await.unwrap();

    // The WAL's size, sampled on a thread of its own through the whole run.
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (done, peak) = (Arc::clone(&done), Arc::clone(&peak));
        let wal = dir.path().join("parley.db-wal");
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(std::fs::metadata(&wal).map_or(0, |m| m.len()), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    // A reader in another connection that holds a snapshot for 20 ms at a time, as `parley show`
    // or a progress query might.
    let reader = {
        let done = Arc::clone(&done);
        let url = format!("sqlite://{}?mode=ro", db.display());
        tokio::spawn(async move {
            let mut conn = SqliteConnection::connect(&url).await.unwrap();
            let mut snapshots = 0;
            while !done.load(Ordering::Relaxed) {
                let mut tx = conn.begin().await.unwrap();
                let _: i64 = sqlx::query_scalar("SELECT count(*) FROM messages").fetch_one(&mut *tx).await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
                tx.commit().await.unwrap();
                snapshots += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            snapshots
        })
    };

    let text = "x".repeat(TEXT);
    let writers: Vec<_> = ids
        .iter()
        .map(|&id| {
            let (store, text) = (store.clone(), text.clone());
            tokio::spawn(async move {
                for seq in 0..TURNS as u32 {
                    let message = MessageRecord { seq, message: Message::user(text.clone()), call: None };
                    let turn = TurnRecord { messages: vec![message], tool_calls: Vec::new() };
                    store.commit_turn(Claim::unclaimed(id), turn).await.unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    assert!(reader.await.unwrap() > 0, "the reader never held a snapshot");

    let written = (SESSIONS * TURNS * TEXT) as u64;
    let peak = peak.load(Ordering::Relaxed);
    assert!(
        peak < 8 * LIMIT,
        "the WAL reached {peak} bytes with a limit of {LIMIT}, while {written} bytes of turns were written"
    );
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM messages").fetch_one(store.pool()).await.unwrap();
    assert_eq!(stored as usize, SESSIONS * TURNS);
    store.close().await.unwrap();
}
