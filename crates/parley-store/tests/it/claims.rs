//! Claims, leases and fencing between owners sharing one SQLite file. Each owner has a store of
//! its own (its own writer connection), as two processes would.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use parley_core::{
    Claim, Fence, Owner, Player, Reward, RunSpec, SessionOutcome, SessionSpec, SessionStore, StoreError, Task,
    Termination, TurnRecord,
};
use parley_store::{SqliteStore, StoreOptions};
use serde_json::json;

use crate::writer::turn;

async fn open(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::open(&dir.path().join("parley.db"), StoreOptions::default()).await.unwrap()
}

fn run_of(n: usize) -> (RunSpec, Vec<Arc<Task>>, Vec<SessionSpec>) {
    let task = Arc::new(Task { index: 0, id: "t".into(), messages: vec![], tools: Default::default(), row: json!({}) });
    let specs =
        (0..n).map(|i| SessionSpec { task_index: 0, trial: i as u32, seed: i as u64, player: Player::Run }).collect();
    (RunSpec { environment: "test".into(), config: json!({}) }, vec![task], specs)
}

async fn messages(store: &SqliteStore, session: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM messages WHERE session_id = ?")
        .bind(session)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

fn outcome() -> SessionOutcome {
    SessionOutcome {
        termination: Termination::AgentStop,
        reward: Some(Reward::new(1.0)),
        error: None,
        failure: None,
        steps: 1,
        retries: 0,
        duration: Duration::from_millis(5),
        token_contiguity: None,
        user_faults: Vec::new(),
    }
}

#[tokio::test]
async fn a_lease_holds_while_renewed_and_is_taken_over_once_it_expires() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (open(&dir).await, open(&dir).await);
    let a = Owner::new(Duration::from_millis(400));
    let b = Owner::new(Duration::from_millis(400));
    let (spec, tasks, specs) = run_of(3);
    let (run, claims) = first.create_claimed_run(&spec, &tasks, &specs, &a).await.unwrap();
    assert_eq!(claims.iter().map(|c| c.fence).collect::<Vec<_>>(), [Fence(1); 3], "created claimed");

    let taken = second.claim_sessions(run, &b, usize::MAX).await.unwrap();
    assert!(taken.claims.is_empty(), "a live lease is left to its owner");
    assert_eq!(taken.held_elsewhere, 3, "and counted");

    // Renewed before it runs out, the lease outlives its first expiry.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(first.renew_claims(&a).await.unwrap(), 3);
    }
    assert!(second.claim_sessions(run, &b, usize::MAX).await.unwrap().claims.is_empty(), "600 ms on, still held");

    // Not renewed, it expires, and the other owner takes the sessions over under a new fence.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let taken = second.claim_sessions(run, &b, usize::MAX).await.unwrap();
    assert_eq!(taken.held_elsewhere, 0);
    let ids: Vec<i64> = claims.iter().map(|c| c.session).collect();
    assert_eq!(taken.claims, ids.iter().map(|&session| Claim { session, fence: Fence(2) }).collect::<Vec<_>>());
    assert_eq!(first.renew_claims(&a).await.unwrap(), 0, "the old owner holds nothing now");

    // The old owner's commits are refused, whole; the new owner's go through.
    let refused = first.commit_turn(claims[0], turn(0)).await;
    assert!(
        matches!(refused, Err(StoreError::Fenced { session, fence: Fence(1), current: Fence(2) }) if session == ids[0]),
        "{refused:?}"
    );
    assert_eq!(messages(&first, ids[0]).await, 0, "nothing of the refused turn is written");
    let refused = first.finish_session(claims[1], turn(0), &outcome()).await;
    assert!(matches!(refused, Err(StoreError::Fenced { .. })), "{refused:?}");
    let status: String = sqlx::query_scalar("SELECT status FROM sessions WHERE id = ?")
        .bind(ids[1])
        .fetch_one(first.pool())
        .await
        .unwrap();
    assert_eq!(status, "pending", "a fenced end is not recorded");
    assert!(first.latest_score(ids[1]).await.unwrap().is_none());
    second.commit_turn(taken.claims[0], turn(0)).await.unwrap();
    assert_eq!(messages(&second, ids[0]).await, 2);

    // A finished session is released; release gives up the rest at once, without waiting for
    // the lease, and the next claim raises the fence again.
    second.finish_session(taken.claims[1], TurnRecord::default(), &outcome()).await.unwrap();
    assert_eq!(second.release_claims(&b).await.unwrap(), 2);
    let c = Owner::new(Duration::from_secs(30));
    let again = first.claim_sessions(run, &c, usize::MAX).await.unwrap();
    let fences: Vec<(i64, Fence)> = again.claims.iter().map(|c| (c.session, c.fence)).collect();
    assert_eq!(fences, [(ids[0], Fence(3)), (ids[2], Fence(3))], "the finished session is not claimed");
    first.close().await.unwrap();
    second.close().await.unwrap();
}

#[tokio::test]
async fn a_fenced_write_is_left_out_of_its_batch_and_the_others_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    let (spec, tasks, specs) = run_of(16);
    let owner = Owner::new(Duration::from_secs(30));
    let (run, claims) = store.create_claimed_run(&spec, &tasks, &specs, &owner).await.unwrap();
    // Session 0 is claimed over by a newer claim (released, then claimed again: fence 2).
    store.release_claims(&owner).await.unwrap();
    let newer = Owner::new(Duration::from_secs(30));
    let taken = store.claim_sessions(run, &newer, 1).await.unwrap();
    assert_eq!(taken.claims, [Claim { session: claims[0].session, fence: Fence(2) }]);
    // All sixteen commits at once, so that they share the writer's batches.
    let commits = claims.iter().map(|&c| store.commit_turn(c, turn(0)));
    let results = futures::future::join_all(commits).await;
    assert!(matches!(results[0], Err(StoreError::Fenced { .. })), "{:?}", results[0]);
    for (result, claim) in results.iter().zip(&claims).skip(1) {
        assert!(result.is_ok(), "session {}: {result:?}", claim.session);
        assert_eq!(messages(&store, claim.session).await, 2);
    }
    assert_eq!(messages(&store, claims[0].session).await, 0);
    store.close().await.unwrap();
}

#[tokio::test]
async fn owners_claiming_at_once_never_get_the_same_session() {
    let dir = tempfile::tempdir().unwrap();
    let creator = open(&dir).await;
    let (spec, tasks, specs) = run_of(300);
    let (run, ids) = creator.create_run(&spec, &tasks, &specs).await.unwrap();
    let stores = [open(&dir).await, open(&dir).await, open(&dir).await];
    let claimers = stores.iter().map(|store| {
        let owner = Owner::new(Duration::from_secs(30));
        async move {
            let mut mine = Vec::new();
            loop {
                let claimed = store.claim_sessions(run, &owner, 7).await.unwrap();
                if claimed.claims.is_empty() {
                    return mine;
                }
                mine.extend(claimed.claims.iter().map(|c| c.session));
                tokio::task::yield_now().await;
            }
        }
    });
    let taken: Vec<Vec<i64>> = futures::future::join_all(claimers).await;
    let mut all = BTreeSet::new();
    for mine in &taken {
        for id in mine {
            assert!(all.insert(*id), "session {id} was claimed twice");
        }
    }
    assert_eq!(all.into_iter().collect::<Vec<_>>(), ids, "every session is claimed once");
    for store in &stores {
        store.close().await.unwrap();
    }
}

#[tokio::test]
async fn the_read_pool_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    let (spec, tasks, specs) = run_of(1);
    store.create_run(&spec, &tasks, &specs).await.unwrap();
    let write = sqlx::query("DELETE FROM sessions").execute(store.pool()).await;
    assert!(write.is_err(), "the read pool is query_only: only the writer writes");
    assert_eq!(store.sessions(1).await.unwrap().len(), 1);
}
