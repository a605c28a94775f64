//! What only the PostgreSQL store does: refusing text PostgreSQL cannot hold, and databases
//! that are not Parley's or are newer than this build.

use parley_core::{Claim, Message, MessageRecord, SessionStore, StoreError, TurnRecord, Unusable};
use parley_store::{PgStore, StoreOptions};

use super::{Backend, Db, Store};
use crate::writer::turn;

async fn pg(db: &Db) -> PgStore {
    match db.open().await {
        Store::Postgres(store) => store,
        Store::Sqlite(_) => unreachable!("a PostgreSQL database opens a PgStore"),
    }
}

#[tokio::test]
async fn a_nul_character_is_refused_for_its_session_alone() {
    let Some(db) = Db::new(Backend::Postgres).await else { return };
    let store = pg(&db).await;
    let (spec, tasks, specs) = super::cases::run_of(2);
    let (_, ids) = store.create_run(&spec, &tasks, &specs).await.unwrap();
    let bad = TurnRecord {
        messages: vec![MessageRecord { seq: 0, message: Message::user("a\0b"), call: None }],
        tool_calls: vec![],
    };
    // Both at once, so that they may share a batch: the good one is written all the same.
    let (bad, good) = tokio::join!(
        store.commit_turn(Claim::unclaimed(ids[0]), bad),
        store.commit_turn(Claim::unclaimed(ids[1]), turn(0))
    );
    let Err(StoreError::Database(message)) = bad else { panic!("{bad:?}") };
    let expected = format!("session {}: column `content` of table `messages` (seq 0)", ids[0]);
    assert!(message.contains(&expected), "{message}");
    good.unwrap();
    assert_eq!(store.transcript(ids[0]).await.unwrap().messages.len(), 0);
    assert_eq!(store.transcript(ids[1]).await.unwrap().messages.len(), 2);
    store.close().await.unwrap();
    db.remove().await;
}

#[tokio::test]
async fn another_programs_tables_and_a_newer_schema_are_refused_untouched() {
    let Some(db) = Db::new(Backend::Postgres).await else { return };
    let store = pg(&db).await;
    // A version this build does not know, as a newer Parley would leave it.
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (9999, 'from the future', TRUE, '\\x00', 0)",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let connect = db.connect_options().unwrap();
    let refused = PgStore::connect_with(connect.clone(), StoreOptions::default()).await;
    assert!(
        matches!(&refused, Err(StoreError::Unusable { problem: Unusable::NewerSchema, message })
            if message.contains("9999") && !message.contains("password")),
        "{refused:?}"
    );
    // Another program's tables only.
    sqlx::query("DROP TABLE _sqlx_migrations").execute(store.pool()).await.unwrap();
    let refused = PgStore::connect_with(connect, StoreOptions::default()).await;
    assert!(
        matches!(&refused, Err(StoreError::Unusable { problem: Unusable::NotParley, message }) if message.contains("runs")),
        "{refused:?}"
    );
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM runs").fetch_one(store.pool()).await.unwrap();
    assert_eq!(runs, 0, "left as it was");
    store.close().await.unwrap();
    db.remove().await;
}

#[tokio::test]
async fn an_unreachable_server_is_named_without_its_password() {
    let refused = PgStore::open("postgres://parley:secret@127.0.0.1:1/parley", StoreOptions::default()).await;
    let Err(StoreError::Database(message)) = refused else { panic!("{refused:?}") };
    assert!(message.contains("postgres://parley@127.0.0.1:1/parley"), "{message}");
    assert!(!message.contains("secret"), "{message}");
}

/// A transaction left open by a client that stopped (paused, or cut off) ends on the server's
/// timer, its row locks with it, so that other machines can claim the sessions it held.
#[tokio::test]
async fn a_transaction_left_idle_is_ended_by_the_server() {
    let Some(db) = Db::new(Backend::Postgres).await else { return };
    let store = pg(&db).await;
    let timeout: String =
        sqlx::query_scalar("SHOW idle_in_transaction_session_timeout").fetch_one(store.pool()).await.unwrap();
    assert_eq!(timeout, "10s");
    let search_path: String = sqlx::query_scalar("SHOW search_path").fetch_one(store.pool()).await.unwrap();
    assert!(search_path.starts_with("test_"), "the URL's own options are kept: {search_path}");
    store.close().await.unwrap();
    db.remove().await;
}
