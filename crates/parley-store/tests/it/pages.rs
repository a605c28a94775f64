//! A new database is made with the store's page size; one made before, with SQLite's default,
//! keeps its own pages and takes turns as before.

use std::path::Path;
use std::sync::Arc;

use parley_core::{Claim, Message, MessageRecord, Player, RunSpec, SessionSpec, SessionStore, Task, TurnRecord};
use parley_store::{SqliteStore, StoreOptions};
use serde_json::json;
use sqlx::{Connection, SqliteConnection};

/// Opens the store at `db`, commits a turn into a new run, and closes it.
async fn commit_a_turn(db: &Path) {
    let store = SqliteStore::open(db, StoreOptions::default()).await.unwrap();
    let task =
        Arc::new(Task { index: 0, id: "t".into(), messages: vec![], tools: Default::default(), row: json!({}).into() });
    let spec = SessionSpec { task_index: 0, trial: 0, seed: 0, player: Player::Run };
    let (_, ids) =
        store.create_run(&RunSpec { environment: "test".into(), config: json!({}) }, &[task], &[spec]).await.unwrap();
    let message = MessageRecord { seq: 0, message: Message::user("hello".repeat(10_000)), call: None };
    let turn = TurnRecord { messages: vec![message], tool_calls: Vec::new() };
    store.commit_turn(Claim::unclaimed(ids[0]), turn).await.unwrap();
    store.close().await.unwrap();
}

async fn connect(db: &Path) -> SqliteConnection {
    SqliteConnection::connect(&format!("sqlite://{}", db.display())).await.unwrap()
}

async fn page_size(conn: &mut SqliteConnection) -> i64 {
    sqlx::query_scalar("PRAGMA page_size").fetch_one(conn).await.unwrap()
}

async fn messages(conn: &mut SqliteConnection) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM messages").fetch_one(conn).await.unwrap()
}

#[tokio::test]
async fn a_new_database_has_16_kib_pages_and_an_older_one_keeps_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new.db");
    commit_a_turn(&new).await;
    let mut conn = connect(&new).await;
    assert_eq!(page_size(&mut conn).await, 16 << 10);
    assert_eq!(messages(&mut conn).await, 1);
    conn.close().await.unwrap();

    // A database as an earlier Parley made it: the same schema on 4 KiB pages.
    let old = dir.path().join("old.db");
    std::fs::copy(&new, &old).unwrap();
    let mut conn = connect(&old).await;
    sqlx::raw_sql("PRAGMA journal_mode = DELETE; PRAGMA page_size = 4096; VACUUM; PRAGMA journal_mode = WAL")
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(page_size(&mut conn).await, 4096);
    conn.close().await.unwrap();

    commit_a_turn(&old).await;
    let mut conn = connect(&old).await;
    assert_eq!(page_size(&mut conn).await, 4096, "opening an older database changed its pages");
    assert_eq!(messages(&mut conn).await, 2);
    conn.close().await.unwrap();
}
