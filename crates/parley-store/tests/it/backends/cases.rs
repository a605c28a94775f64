//! The cases every store must pass, written against the seam and the reads both stores have.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use parley_core::{
    Claim, FailureClass, Fence, Message, MessageRecord, Owner, Party, Player, Reward, RunSpec, RunStatus,
    SessionOutcome, SessionSpec, SessionStatus, SessionStore, StoreError, Task, Termination, TurnRecord, Usage,
};
use parley_store::Tokens;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::{Db, Store, seam, session};
use crate::writer::turn;

pub fn run_of(n: usize) -> (RunSpec, Vec<Arc<Task>>, Vec<SessionSpec>) {
    let task = Arc::new(Task {
        index: 0,
        id: "t".into(),
        messages: vec![],
        tools: Default::default(),
        row: json!({"question": "¿qué? ☃", "n": 1}).into(),
    });
    // The last seed needs all 64 bits.
    let specs = (0..n)
        .map(|i| SessionSpec {
            task_index: 0,
            trial: i as u32,
            seed: if i + 1 == n { u64::MAX } else { i as u64 },
            player: Player::Run,
        })
        .collect();
    (RunSpec { environment: "test".into(), config: json!({"model": "m"}) }, vec![task], specs)
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

async fn messages(store: &Store, session: i64) -> usize {
    store.transcript(session).await.unwrap().messages.len()
}

pub async fn turns_and_outcomes_come_back_exactly(db: &Db) {
    let store = db.open().await;
    let (spec, tasks, specs) = run_of(2);
    let (run, ids) = store.create_run(&spec, &tasks, &specs).await.unwrap();
    store.commit_turn(Claim::unclaimed(ids[0]), turn(0)).await.unwrap();
    // Text from every plane, combining marks, right-to-left text and quoting characters.
    let unicode = "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🚀 עברית e\u{301} \u{2028} 'single' \"double\" \\ \u{7f} \u{10ffff}";
    let said = TurnRecord {
        messages: vec![MessageRecord { seq: 2, message: Message::user(unicode), call: None }],
        tool_calls: vec![],
    };
    store.commit_turn(Claim::unclaimed(ids[0]), said).await.unwrap();
    // Rewards that a decimal round trip could bend, and a session without one.
    let third: f64 = 1.0 / 3.0;
    let mut reward = Reward::new(0.1 + 0.2);
    reward.breakdown.insert("part".into(), json!(third));
    let ended = |reward, failure| SessionOutcome {
        termination: Termination::AgentStop,
        reward,
        error: Some(format!("a \"quoted\" error {unicode}")),
        failure,
        steps: 3,
        retries: 1,
        duration: Duration::from_micros(1_500_001),
        token_contiguity: Some("not contiguous at 2".into()),
        user_faults: vec![parley_core::review::UserFault {
            seq: 3,
            rule: parley_core::review::Rule::TalksAfterStop,
            detail: format!("\"more {unicode}\""),
        }],
    };
    store.finish_session(Claim::unclaimed(ids[0]), turn(3), &ended(Some(reward), None)).await.unwrap();
    let failed = ended(None, Some(FailureClass::Timeout));
    store.finish_session(Claim::unclaimed(ids[1]), TurnRecord::default(), &failed).await.unwrap();

    let transcript = store.transcript(ids[0]).await.unwrap();
    let sent: Vec<Message> =
        [turn(0).messages, vec![], turn(3).messages].concat().into_iter().map(|m| m.message).collect();
    assert_eq!(transcript.messages.len(), 5);
    assert_eq!(transcript.messages[..2], sent[..2], "tool calls, tokens and log-probs to the bit");
    assert_eq!(transcript.messages[2], Message::user(unicode));
    assert_eq!(transcript.messages[3..], sent[2..]);
    let call = turn(0).messages[0].call.clone().unwrap();
    assert_eq!(transcript.calls.iter().map(|c| c.seq).collect::<Vec<_>>(), [0, 3]);
    let figures = &transcript.calls[0];
    assert_eq!(figures.usage, call.usage);
    assert_eq!(figures.attempts, 2);
    assert_eq!(figures.latency_ms.to_bits(), (call.latency.as_secs_f64() * 1e3).to_bits());
    assert_eq!((figures.party, figures.finish_reason.as_deref()), (Some(Party::Agent), Some("tool_calls")));
    assert_eq!(figures.sampling, call.sampling);
    let tools: Vec<_> = transcript.tool_calls.iter().map(|t| (t.seq, t.party, t.call_id.as_str())).collect();
    assert_eq!(tools, [(1, Party::Agent, "c1"), (4, Party::Agent, "c1")]);
    let tool = &transcript.tool_calls[0];
    assert_eq!((tool.name.as_str(), tool.arguments.as_str(), tool.output.as_str()), ("add", r#"{"n": 1}"#, "1"));
    assert_eq!((tool.write, tool.truncated, tool.is_error, tool.malformed), (true, true, false, false));
    assert_eq!(tool.duration, Duration::from_micros(42));

    let rows = store.sessions_page(run, 0, 10).await.unwrap();
    assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), ids);
    let (done, failed) = (&rows[0], &rows[1]);
    assert_eq!((done.status, done.termination), (SessionStatus::Finished, Some(Termination::AgentStop)));
    assert_eq!(done.reward.map(f64::to_bits), Some((0.1f64 + 0.2).to_bits()), "the reward, to the bit");
    let duration = Duration::from_micros(1_500_001).as_secs_f64() * 1e3;
    assert_eq!(done.duration_ms.map(f64::to_bits), Some(duration.to_bits()));
    assert_eq!(done.error.as_deref(), Some(format!("a \"quoted\" error {unicode}").as_str()));
    assert_eq!((done.retries, done.token_contiguity.as_deref()), (1, Some("not contiguous at 2")));
    assert_eq!((done.seed, failed.seed), (0, -1), "a u64 seed keeps its bits");
    assert_eq!((failed.reward, failed.failure), (None, Some(FailureClass::Timeout)));
    assert_eq!(done.user_faults.len(), 1, "the user's faults come back");
    assert_eq!(done.user_faults[0].detail, format!("\"more {unicode}\""));
    assert_eq!(done.user_faults[0].rule, parley_core::review::Rule::TalksAfterStop);
    let score = store.latest_score(ids[0]).await.unwrap().unwrap();
    assert_eq!(score.value.to_bits(), (0.1f64 + 0.2).to_bits());
    assert_eq!(score.breakdown["part"].as_f64().map(f64::to_bits), Some(third.to_bits()));
    assert!(store.latest_score(ids[1]).await.unwrap().is_none(), "no reward, no score");
    // The session's end and its score are stamped in the store's one format, by a clock no
    // earlier than the run's creation.
    let created = text(&store, "SELECT created_at FROM runs WHERE id = $1", run).await;
    let finished = text(&store, "SELECT finished_at FROM sessions WHERE id = $1", ids[0]).await;
    let scored = text(&store, "SELECT created_at FROM scores WHERE session_id = $1", ids[0]).await;
    let shape = |t: &str| t.chars().map(|c| if c.is_ascii_digit() { '9' } else { c }).collect::<String>();
    for stamp in [&created, &finished, &scored] {
        assert_eq!(shape(stamp), "9999-99-99T99:99:99.999Z", "{stamp}");
    }
    assert!(created <= finished && created <= scored, "{created} then {finished} and {scored}");
    store.close().await.unwrap();
}

async fn text(store: &Store, sql: &'static str, id: i64) -> String {
    match store {
        Store::Sqlite(s) => sqlx::query_scalar(sql).bind(id).fetch_one(s.pool()).await.unwrap(),
        Store::Postgres(s) => sqlx::query_scalar(sql).bind(id).fetch_one(s.pool()).await.unwrap(),
    }
}

pub async fn pages_of_sessions_come_in_id_order(db: &Db) {
    let store = db.open().await;
    let (spec, tasks, specs) = run_of(10);
    let (run, ids) = store.create_run(&spec, &tasks, &specs).await.unwrap();
    // A second run between them: pages are of one run only.
    store.create_run(&spec, &tasks, &specs[..3]).await.unwrap();
    let mut read = Vec::new();
    let mut after = 0;
    loop {
        let page = store.sessions_page(run, after, 3).await.unwrap();
        let Some(last) = page.last() else { break };
        assert!(page.len() <= 3);
        after = last.id;
        read.extend(page);
    }
    assert_eq!(read.iter().map(|r| r.id).collect::<Vec<_>>(), ids);
    let trials: Vec<(i64, i64, SessionStatus)> = read.iter().map(|r| (r.task_index, r.trial, r.status)).collect();
    assert_eq!(trials, (0..10).map(|i| (0, i, SessionStatus::Pending)).collect::<Vec<_>>());
    store.close().await.unwrap();
}

pub async fn owners_claiming_at_once_never_get_the_same_session(db: &Db) {
    let creator = db.open().await;
    let (spec, tasks, specs) = run_of(300);
    let (run, ids) = creator.create_run(&spec, &tasks, &specs).await.unwrap();
    let stores = [db.open().await, db.open().await, db.open().await];
    let claimers = stores.iter().map(|store| {
        let store = seam(store);
        let owner = Owner::new(Duration::from_secs(30));
        // Tasks of their own, so that the claims of a multi-connection store really overlap.
        tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let claimed = store.claim_sessions(run, &owner, 7).await.unwrap();
                if claimed.is_empty() {
                    return mine;
                }
                assert!(claimed.iter().all(|c| c.fence == Fence(1)), "{claimed:?}");
                mine.extend(claimed.iter().map(|c| c.session));
                tokio::task::yield_now().await;
            }
        })
    });
    let taken = futures::future::join_all(claimers).await;
    let mut all = BTreeSet::new();
    for mine in taken {
        for id in mine.unwrap() {
            assert!(all.insert(id), "session {id} was claimed twice");
        }
    }
    assert_eq!(all.into_iter().collect::<Vec<_>>(), ids, "every session is claimed once");
    for store in stores.iter().chain([&creator]) {
        store.close().await.unwrap();
    }
}

pub async fn a_lease_holds_while_renewed_and_is_taken_over_once_it_expires(db: &Db) {
    let (first, second) = (db.open().await, db.open().await);
    let a = Owner::new(Duration::from_millis(400));
    let b = Owner::new(Duration::from_millis(400));
    let (spec, tasks, specs) = run_of(3);
    let (run, claims) = first.create_claimed_run(&spec, &tasks, &specs, &a).await.unwrap();
    assert_eq!(claims.iter().map(|c| c.fence).collect::<Vec<_>>(), [Fence(1); 3], "created claimed");

    let taken = second.claim_sessions(run, &b, usize::MAX).await.unwrap();
    assert!(taken.is_empty(), "a live lease is left to its owner");
    assert_eq!(second.owners(run).await.unwrap(), [(a.id.clone(), 3)], "who holds it says so");

    // Renewed before it runs out, the lease outlives its first expiry.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(first.renew_claims(&a).await.unwrap(), 3);
    }
    assert!(second.claim_sessions(run, &b, usize::MAX).await.unwrap().is_empty(), "600 ms on, still held");

    // Not renewed, it expires, and the other owner takes the sessions over under a new fence.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let taken = second.claim_sessions(run, &b, usize::MAX).await.unwrap();
    assert_eq!(second.owners(run).await.unwrap(), [(b.id.clone(), 3)], "the new owner holds them all");
    let ids: Vec<i64> = claims.iter().map(|c| c.session).collect();
    assert_eq!(taken, ids.iter().map(|&session| Claim { session, fence: Fence(2) }).collect::<Vec<_>>());
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
    assert_eq!(session(&first, run, ids[1]).await.status, SessionStatus::Pending, "a fenced end is not recorded");
    assert_eq!(messages(&first, ids[1]).await, 0);
    assert!(first.latest_score(ids[1]).await.unwrap().is_none());
    second.commit_turn(taken[0], turn(0)).await.unwrap();
    assert_eq!(messages(&second, ids[0]).await, 2);

    // Release gives up the rest at once, without waiting for the lease, and the next claim
    // raises the fence again.
    assert_eq!(second.release_claims(&b).await.unwrap(), 3);
    let c = Owner::new(Duration::from_secs(30));
    let again = first.claim_sessions(run, &c, usize::MAX).await.unwrap();
    assert_eq!(again.iter().map(|c| c.fence).collect::<Vec<_>>(), [Fence(3); 3]);
    first.close().await.unwrap();
    second.close().await.unwrap();
}

pub async fn a_fenced_write_is_left_out_of_its_batch_and_the_others_are_written(db: &Db) {
    let store = db.open().await;
    let (spec, tasks, specs) = run_of(16);
    let owner = Owner::new(Duration::from_secs(30));
    let (run, claims) = store.create_claimed_run(&spec, &tasks, &specs, &owner).await.unwrap();
    // Session 0 is claimed over by a newer claim (released, then claimed again: fence 2).
    store.release_claims(&owner).await.unwrap();
    let newer = Owner::new(Duration::from_secs(30));
    let taken = store.claim_sessions(run, &newer, 1).await.unwrap();
    assert_eq!(taken, [Claim { session: claims[0].session, fence: Fence(2) }]);
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

pub async fn a_write_for_a_session_not_in_the_table_is_refused_alone(db: &Db) {
    let store = db.open().await;
    let (spec, tasks, specs) = run_of(16);
    let owner = Owner::new(Duration::from_secs(30));
    let (_, claims) = store.create_claimed_run(&spec, &tasks, &specs, &owner).await.unwrap();
    // A claim on a session no row holds, committed at once with the sixteen real ones, so that
    // it shares their batches.
    let missing = Claim { session: claims.iter().map(|c| c.session).max().unwrap() + 1_000, fence: Fence(1) };
    let all: Vec<Claim> = std::iter::once(missing).chain(claims.iter().copied()).collect();
    let results = futures::future::join_all(all.iter().map(|&c| store.commit_turn(c, turn(0)))).await;
    match &results[0] {
        Err(StoreError::Database(why)) => {
            assert!(why.contains(&format!("session {} is not in table `sessions`", missing.session)), "{why}")
        }
        other => panic!("a turn for a missing session is refused: {other:?}"),
    }
    for (result, claim) in results.iter().zip(&all).skip(1) {
        assert!(result.is_ok(), "session {}: {result:?}", claim.session);
        assert_eq!(messages(&store, claim.session).await, 2);
    }
    // Its end, with a model call, a tool call and a score, beside a real session's end.
    let done = outcome();
    let ends = [missing, claims[0]].map(|c| store.finish_session(c, turn(2), &done));
    let ended = futures::future::join_all(ends).await;
    assert!(matches!(&ended[0], Err(StoreError::Database(_))), "{:?}", ended[0]);
    assert!(ended[1].is_ok(), "{:?}", ended[1]);
    // SQLite's committing thread checks no foreign key: the batch's fence read is what keeps a
    // row from naming a session the table does not hold.
    for table in [
        "SELECT COUNT(*) FROM messages WHERE session_id = $1",
        "SELECT COUNT(*) FROM model_calls WHERE session_id = $1",
        "SELECT COUNT(*) FROM tool_calls WHERE session_id = $1",
        "SELECT COUNT(*) FROM scores WHERE session_id = $1",
    ] {
        assert_eq!(scalar(&store, table, missing.session).await, 0, "no row names the missing session: {table}");
        assert!(scalar(&store, table, claims[0].session).await > 0, "the real session's rows: {table}");
    }
    store.close().await.unwrap();
}

pub async fn who_plays_each_session_is_kept(db: &Db) {
    let store = db.open().await;
    let (spec, tasks, mut specs) = run_of(3);
    specs[1].player = Player::Trainer;
    specs[2].player = Player::RowPolicy;
    let (run, ids) = store.create_run(&spec, &tasks, &specs[..2]).await.unwrap();
    let more = store.extend_run(run, &[], &specs[2..], None).await.unwrap();
    let mut all = ids.clone();
    all.extend(more.iter().map(|c| c.session));
    let claimed = store.claim_page(run, &Owner::new(Duration::from_secs(30)), usize::MAX).await.unwrap();
    let played: Vec<(i64, Player)> = claimed.iter().map(|c| (c.row.id, c.player)).collect();
    let expected = [(all[0], Player::Run), (all[1], Player::Trainer), (all[2], Player::RowPolicy)];
    assert_eq!(played, expected, "a claim says who plays each session it takes");
    let rows = store.sessions_by_id(&all).await.unwrap();
    let fenced: Vec<_> = rows.into_iter().zip(claimed).map(|(row, c)| (c.row == row, c.fence)).collect();
    assert_eq!(fenced, [(true, Fence(1)); 3], "with its row as it is now, and its fence");
    store.close().await.unwrap();
}

pub async fn one_released_claim_is_taken_at_once_and_a_stale_one_is_left_alone(db: &Db) {
    let store = db.open().await;
    let (spec, tasks, specs) = run_of(2);
    let a = Owner::new(Duration::from_secs(30));
    let (run, claims) = store.create_claimed_run(&spec, &tasks, &specs, &a).await.unwrap();
    // One session cancelled: its claim goes, the other stays held under its live lease.
    store.release_claim(claims[0]).await.unwrap();
    let b = Owner::new(Duration::from_secs(30));
    let claimed = store.claim_sessions(run, &b, usize::MAX).await.unwrap();
    assert_eq!(claimed.iter().map(|c| c.session).collect::<Vec<_>>(), [claims[0].session]);
    let owners = store.owners(run).await.unwrap();
    assert!(owners.contains(&(a.id.clone(), 1)), "the other session is still the first owner's: {owners:?}");
    // The first owner's stale claim on the session b took is no longer its to release.
    store.release_claim(claims[0]).await.unwrap();
    let c = Owner::new(Duration::from_secs(30));
    let again = store.claim_sessions(run, &c, usize::MAX).await.unwrap();
    assert!(again.is_empty(), "b's claim stands: {again:?}");
    store.close().await.unwrap();
}

pub async fn a_finished_session_is_released_and_never_claimed_again(db: &Db) {
    let store = db.open().await;
    let (spec, tasks, specs) = run_of(3);
    let a = Owner::new(Duration::from_secs(30));
    let (run, claims) = store.create_claimed_run(&spec, &tasks, &specs, &a).await.unwrap();
    store.finish_session(claims[1], turn(0), &outcome()).await.unwrap();
    assert_eq!(store.renew_claims(&a).await.unwrap(), 2, "the finished session is no longer held");
    assert_eq!(store.release_claims(&a).await.unwrap(), 2);
    let b = Owner::new(Duration::from_secs(30));
    let claimed = store.claim_sessions(run, &b, usize::MAX).await.unwrap();
    let sessions: Vec<i64> = claimed.iter().map(|c| c.session).collect();
    assert_eq!(sessions, [claims[0].session, claims[2].session]);
    assert_eq!(store.owners(run).await.unwrap(), [(b.id.clone(), 2)], "the finished session is nobody's");
    let row = session(&store, run, claims[1].session).await;
    assert_eq!((row.status, row.reward), (SessionStatus::Finished, Some(1.0)));
    store.finish_run(run, RunStatus::Finished).await.unwrap();
    store.close().await.unwrap();
}

pub async fn a_failed_batch_keeps_nothing_and_the_next_is_written(db: &Db) {
    let store = db.open().await;
    let (spec, tasks, specs) = run_of(1);
    let (_, ids) = store.create_run(&spec, &tasks, &specs).await.unwrap();
    store.commit_turn(Claim::unclaimed(ids[0]), turn(0)).await.unwrap();
    // The same seqs again: the messages insert fails, and the batch's other rows must go too.
    let again = store.commit_turn(Claim::unclaimed(ids[0]), turn(0)).await;
    assert!(matches!(again, Err(StoreError::Database(_))), "a duplicate turn is refused: {again:?}");
    let transcript = store.transcript(ids[0]).await.unwrap();
    let counts = (transcript.messages.len(), transcript.calls.len(), transcript.tool_calls.len());
    assert_eq!(counts, (2, 1, 1));
    store.commit_turn(Claim::unclaimed(ids[0]), turn(2)).await.unwrap();
    assert_eq!(messages(&store, ids[0]).await, 4, "the next batch is written");
    store.close().await.unwrap();
}

pub async fn commits_renewals_and_claims_at_once_all_go_through(db: &Db) {
    let (owner_store, claimer_store) = (db.open().await, db.open().await);
    let (spec, tasks, specs) = run_of(64);
    let owner = Owner::new(Duration::from_secs(30));
    let (run, claims) = owner_store.create_claimed_run(&spec, &tasks, &specs, &owner).await.unwrap();
    let store = seam(&owner_store);
    let sessions = claims.iter().map(|&claim| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            for first in (0..20).step_by(2) {
                store.commit_turn(claim, turn(first)).await.unwrap();
            }
            store.finish_session(claim, TurnRecord::default(), &outcome()).await.unwrap();
        })
    });
    // Renewals lock the owner's rows and claims pass over them while the batches hold them:
    // none of them may wait on another in a cycle, and none takes a live session.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let renewing = {
        let (store, owner, stop) = (Arc::clone(&store), owner.clone(), Arc::clone(&stop));
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                store.renew_claims(&owner).await.unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    let claiming = {
        let (store, stop) = (seam(&claimer_store), Arc::clone(&stop));
        let other = Owner::new(Duration::from_secs(30));
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let claimed = store.claim_sessions(run, &other, 8).await.unwrap();
                assert!(claimed.is_empty(), "a live session was claimed: {claimed:?}");
                tokio::task::yield_now().await;
            }
        })
    };
    for s in futures::future::join_all(sessions).await {
        s.unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    renewing.await.unwrap();
    claiming.await.unwrap();
    let rows = owner_store.sessions_page(run, 0, 100).await.unwrap();
    assert!(rows.iter().all(|r| r.status == SessionStatus::Finished), "every session finished");
    for claim in &claims {
        assert_eq!(messages(&owner_store, claim.session).await, 20);
    }
    assert_eq!(owner_store.renew_claims(&owner).await.unwrap(), 0, "finished sessions are released");
    owner_store.close().await.unwrap();
    claimer_store.close().await.unwrap();
}

pub async fn a_rescore_lands_one_version_for_the_run_or_nothing(db: &Db) {
    let store = db.open().await;
    let (spec, tasks, specs) = run_of(3);
    let (run, ids) = store.create_run(&spec, &tasks, &specs).await.unwrap();
    let (other, strays) = store.create_run(&spec, &tasks, &specs[..1]).await.unwrap();
    for &id in &ids {
        store.finish_session(Claim::unclaimed(id), TurnRecord::default(), &outcome()).await.unwrap();
    }
    let rescored: Vec<_> = ids.iter().map(|&id| (id, Reward::new(id as f64 / 10.0))).collect();
    let tried = serde_json::json!({"components": [{"scorer": "exact"}], "min": null, "max": null});
    let version = store.add_scores(run, &rescored, &tried).await.unwrap();
    assert_eq!(version, 2, "the next after the score each session ended with");
    for (id, reward) in &rescored {
        assert_eq!(store.latest_score(*id).await.unwrap().as_ref(), Some(reward));
    }
    let rewards: Vec<_> = store.sessions_by_id(&ids).await.unwrap().iter().map(|r| r.reward).collect();
    assert_eq!(rewards, rescored.iter().map(|(_, r)| Some(r.value)).collect::<Vec<_>>());
    // A session of another run: refused, and nothing of that re-score is written.
    let mixed = [(ids[0], Reward::new(0.9)), (strays[0], Reward::new(0.9))];
    assert!(matches!(store.add_scores(run, &mixed, &tried).await, Err(StoreError::NotFound(_))));
    assert_eq!(store.latest_score(ids[0]).await.unwrap().as_ref(), Some(&rescored[0].1));
    assert_eq!(store.add_scores(run, &rescored, &serde_json::json!({})).await.unwrap(), version + 1);
    // The versions, each with the reward it was scored with (none recorded for the first), and
    // each version's scores by session.
    let versions = store.score_versions(run).await.unwrap();
    let listed: Vec<_> = versions.iter().map(|v| (v.version, v.sessions, v.reward.clone())).collect();
    assert_eq!(listed, [(1, 3, None), (2, 3, Some(tried.clone())), (3, 3, Some(serde_json::json!({})))]);
    assert!((versions[1].mean - rescored.iter().map(|(_, r)| r.value).sum::<f64>() / 3.0).abs() < 1e-12);
    let at_two = store.scores_at(run, 2).await.unwrap();
    let got: Vec<_> = at_two.iter().map(|s| (s.session, s.reward.clone())).collect();
    assert_eq!(got, rescored);
    assert!(store.scores_at(run, 9).await.unwrap().is_empty());
    assert!(store.score_versions(other).await.unwrap().is_empty(), "the other run has no scores");

    let outcomes = store.run_outcomes(run).await.unwrap();
    assert_eq!((outcomes.total, outcomes.unfinished, outcomes.outcomes.len()), (3, 0, 3));
    assert_eq!(store.session_counts(run).await.unwrap(), (3, 3));
    assert_eq!(store.session_counts(other).await.unwrap(), (1, 0));
    assert_eq!(store.runs().await.unwrap().iter().map(|r| r.id).collect::<Vec<_>>(), [run, other]);
    assert_eq!(store.newest_unfinished_run().await.unwrap(), Some(other));
    store.close().await.unwrap();
}

pub async fn a_runs_outcomes_count_each_session_as_its_row_says(db: &Db) {
    use parley_core::review::{Rule, UserFault};
    let store = db.open().await;
    let (spec, tasks, specs) = run_of(5);
    let (run, ids) = store.create_run(&spec, &tasks, &specs).await.unwrap();
    let (other, strays) = store.create_run(&spec, &tasks, &specs[..1]).await.unwrap();
    let ended = [
        SessionOutcome { retries: 2, duration: Duration::from_millis(40), ..outcome() },
        SessionOutcome {
            termination: Termination::InfrastructureError,
            reward: None,
            error: Some("the endpoint went away".into()),
            failure: Some(FailureClass::Connection),
            retries: 3,
            ..outcome()
        },
        SessionOutcome {
            termination: Termination::UserStop,
            reward: Some(Reward::new(0.0)),
            user_faults: vec![UserFault { seq: 2, rule: Rule::Repeats, detail: "again".into() }],
            ..outcome()
        },
        SessionOutcome { termination: Termination::MaxTurns, reward: Some(Reward::new(0.5)), ..outcome() },
    ];
    for (&id, o) in ids.iter().zip(&ended) {
        store.finish_session(Claim::unclaimed(id), TurnRecord::default(), o).await.unwrap();
    }
    store.finish_session(Claim::unclaimed(strays[0]), TurnRecord::default(), &ended[1]).await.unwrap();
    // The last session of the run is not finished.
    let read = store.run_outcomes(run).await.unwrap();
    assert_eq!((read.total, read.unfinished, read.retries), (5, 1, 5));
    assert_eq!(read.failures.into_iter().collect::<Vec<_>>(), [(FailureClass::Connection, 1)]);
    let outcome =
        |termination: Termination, reward: Option<f64>, duration_ms: f64, user_fault: bool| parley_scoring::Outcome {
            task: 0,
            termination: termination.as_str(),
            infrastructure: termination.is_infrastructure(),
            reward,
            duration_ms,
            user_fault,
        };
    assert_eq!(
        read.outcomes,
        [
            outcome(Termination::AgentStop, Some(1.0), 40.0, false),
            outcome(Termination::InfrastructureError, None, 5.0, false),
            outcome(Termination::UserStop, Some(0.0), 5.0, true),
            outcome(Termination::MaxTurns, Some(0.5), 5.0, false),
        ]
    );
    assert!(read.outcomes[1].infrastructure && !read.outcomes[0].infrastructure);
    let stray = store.run_outcomes(other).await.unwrap();
    assert_eq!((stray.total, stray.unfinished, stray.retries, stray.outcomes.len()), (1, 0, 3, 1));
    store.close().await.unwrap();
}

pub async fn a_fork_shares_its_prefix_and_failed_sessions_reopen(db: &Db) {
    let store = db.open().await;
    let (spec, tasks, specs) = run_of(2);
    let (run, ids) = store.create_run(&spec, &tasks, &specs).await.unwrap();
    store.commit_turn(Claim::unclaimed(ids[0]), turn(0)).await.unwrap();
    let source = store.transcript(ids[0]).await.unwrap();
    assert!(source.messages.len() > 1 && !source.tool_calls.is_empty());

    let fork = store.fork_session(ids[0], 1).await.unwrap();
    let forked = store.transcript(fork).await.unwrap();
    assert_eq!(forked.messages, source.messages[..1]);
    assert_eq!(forked.calls, source.calls.iter().filter(|c| c.seq < 1).cloned().collect::<Vec<_>>());
    assert!(forked.tool_calls.is_empty());
    // Which sessions have a transcript to read: the one with a turn and its fork, not the one
    // without, nor an id no session has.
    let stored = store.sessions_with_turns(&[ids[0], ids[1], fork, fork + 1000]).await.unwrap();
    assert_eq!(stored, [ids[0], fork].into_iter().collect());
    let row = &store.sessions_by_id(&[fork]).await.unwrap()[0];
    assert_eq!((row.trial, row.status), (2, SessionStatus::Pending), "the fork is its task's next trial");
    assert_eq!(store.run_of(fork).await.unwrap(), run);
    assert!(matches!(store.fork_session(fork + 1000, 1).await, Err(StoreError::NotFound(_))));

    // A session that failed outside the agent is pending again, its turns kept.
    let failed = SessionOutcome {
        termination: Termination::InfrastructureError,
        reward: None,
        error: Some("the endpoint went away".into()),
        failure: Some(FailureClass::Timeout),
        ..outcome()
    };
    store.finish_session(Claim::unclaimed(ids[0]), TurnRecord::default(), &failed).await.unwrap();
    store.finish_session(Claim::unclaimed(ids[1]), TurnRecord::default(), &outcome()).await.unwrap();
    assert_eq!(store.reopen_failed(run).await.unwrap(), 1);
    let rows = store.sessions_by_id(&ids).await.unwrap();
    assert_eq!((rows[0].status, rows[0].failure), (SessionStatus::Pending, None));
    assert_eq!(rows[1].status, SessionStatus::Finished);
    assert_eq!(store.transcript(ids[0]).await.unwrap().messages, source.messages);
    assert_eq!(store.reopen_failed(run).await.unwrap(), 0);

    // A judge's first answer to a request is the one kept.
    assert_eq!(store.verdict("h").await.unwrap(), None);
    store.record_verdict("h".into(), "judge".into(), "first".into()).await.unwrap();
    store.record_verdict("h".into(), "judge".into(), "second".into()).await.unwrap();
    assert_eq!(store.verdict("h").await.unwrap().as_deref(), Some("first"));
    store.close().await.unwrap();
}

/// A figure of the database, read alike from either store.
async fn scalar(store: &Store, sql: &'static str, run: i64) -> i64 {
    match store {
        Store::Sqlite(s) => sqlx::query_scalar(sql).bind(run).fetch_one(s.pool()).await.unwrap(),
        Store::Postgres(s) => sqlx::query_scalar(sql).bind(run).fetch_one(s.pool()).await.unwrap(),
    }
}

pub async fn a_runs_tool_lists_are_stored_once_and_its_rows_come_back_whole(db: &Db) {
    let store = db.open().await;
    let list = |name: &str| json!([{"type": "function", "name": name, "parameters": {"type": "object"}}]);
    let row = |i: usize, tools: serde_json::Value| json!({"id": i, "responses_create_params": {"input": "hi", "tools": tools}, "expected": ["☃"]});
    let task = |index: usize, row: serde_json::Value| {
        Arc::new(Task { index, id: format!("t{index}"), messages: vec![], tools: Default::default(), row: row.into() })
    };
    let specs = |tasks: std::ops::Range<usize>| -> Vec<SessionSpec> {
        tasks.map(|task_index| SessionSpec { task_index, trial: 0, seed: 0, player: Player::Run }).collect()
    };
    let first = [
        task(0, row(0, list("get"))),
        task(1, row(1, list("get"))),
        task(2, row(2, list("put"))),
        task(3, json!({"question": "a row with no tools"})),
    ];
    let (run, _) = store.create_run(&run_of(1).0, &first, &specs(0..4)).await.unwrap();
    // A list whose id the run already gives another list, as a collision of the ids' eight bytes
    // would: its row keeps its list.
    let taken = list("taken");
    let id = text_id(&taken.to_string());
    let squat = "INSERT INTO task_tools (run_id, id, tools) VALUES ($1, $2, '[\"another list\"]')";
    match &store {
        // The store's own pool only reads; a second writer waits for the store's lock.
        Store::Sqlite(s) => {
            let url = format!("sqlite://{}", s.path().display());
            let writer = sqlx::SqlitePool::connect(&url).await.unwrap();
            sqlx::query(squat).bind(run).bind(id).execute(&writer).await.map(drop)
        }
        Store::Postgres(s) => sqlx::query(squat).bind(run).bind(id).execute(s.pool()).await.map(drop),
    }
    .unwrap();
    // A later batch, as a run over a large file records its tasks, shares the first's lists.
    let second = [task(4, row(4, list("get"))), task(5, row(5, taken))];
    store.extend_run(run, &second, &specs(4..6), None).await.unwrap();

    let rows = store.task_rows_from(run, 0, 100).await.unwrap();
    let recorded: Vec<_> = first.iter().chain(&second).map(|t| (t.index as i64, t.row.clone())).collect();
    assert_eq!(rows, recorded, "every row comes back as it was recorded");
    let held = |i: usize| Arc::clone(rows[i].1.apart().expect("a list held apart"));
    assert!(Arc::ptr_eq(&held(0), &held(1)) && Arc::ptr_eq(&held(0), &held(4)), "rows with one list hold one copy");
    assert!(!Arc::ptr_eq(&held(0), &held(2)));
    assert!(rows[5].1.apart().is_none(), "the row whose list's id was taken holds its own");
    let lists = "SELECT COUNT(*) FROM task_tools WHERE run_id = $1";
    assert_eq!(scalar(&store, lists, run).await, 3, "`get` and `put` once each, and the squatter");
    let sharing = "SELECT COUNT(*) FROM tasks WHERE run_id = $1 AND tools IS NOT NULL";
    assert_eq!(scalar(&store, sharing, run).await, 4, "the rows with a list of their own keep it");
    let whole = "SELECT COUNT(*) FROM tasks WHERE run_id = $1 AND row LIKE '%\"tools\"%'";
    assert_eq!(scalar(&store, whole, run).await, 1, "only the row whose list's id was taken holds its list");
}

pub async fn long_system_prompts_are_stored_once_and_transcripts_come_back_whole(db: &Db) {
    let store = db.open().await;
    let (spec, tasks, specs) = run_of(5);
    let (_, ids) = store.create_run(&spec, &tasks, &specs).await.unwrap();
    let policy = "Follow the airline's policy. ☃ ".repeat(40);
    let other = "Another domain's policy. ".repeat(40);
    let taken = "A prompt whose id another text holds. ".repeat(40);
    // A text under the id of `taken`, as two texts with the same eight bytes would be.
    let id = text_id(&taken);
    squat_text(&store, id).await;
    let opening = |system: &str| {
        let mut t = turn(1);
        t.messages.insert(0, MessageRecord { seq: 0, message: Message::system(system), call: None });
        t
    };
    let sent = [opening(&policy), opening(&policy), opening(&other), opening(&taken), opening("short")];
    for (session, t) in ids.iter().zip(&sent) {
        store.commit_turn(Claim::unclaimed(*session), t.clone()).await.unwrap();
    }
    for (session, t) in ids.iter().zip(&sent) {
        let messages: Vec<Message> = t.messages.iter().map(|r| r.message.clone()).collect();
        assert_eq!(store.transcript(*session).await.unwrap().messages, messages, "session {session}");
    }
    let fork = store.fork_session(ids[1], 2).await.unwrap();
    assert_eq!(store.transcript(fork).await.unwrap().messages[0], Message::system(&policy), "a fork keeps the text");
    let texts = "SELECT COUNT(*) FROM texts WHERE id <> $1";
    assert_eq!(scalar(&store, texts, id).await, 2, "each long prompt once, beside the squatter");
    let naming = "SELECT COUNT(*) FROM messages WHERE content_id IS NOT NULL AND session_id <> $1";
    assert_eq!(scalar(&store, naming, 0).await, 4, "the sessions' and the fork's rows name their text");
    let inline = "SELECT COUNT(*) FROM messages WHERE role = 'system' AND content IS NOT NULL AND session_id <> $1";
    assert_eq!(scalar(&store, inline, 0).await, 2, "the short prompt and the one whose id was taken keep theirs");
}

pub async fn a_first_requests_long_tool_list_is_stored_once_and_comes_back_whole(db: &Db) {
    let store = db.open().await;
    let (spec, tasks, specs) = run_of(3);
    let (_, ids) = store.create_run(&spec, &tasks, &specs).await.unwrap();
    let list = |name: &str| {
        let tools: Vec<_> = (0..4)
            .map(|i| {
                json!({"type": "function", "function": {"name": format!("{name}_{i}"), "description": "☃ \"q\"",
                "parameters": {"type": "object"}}})
            })
            .collect();
        serde_json::to_string(&tools).unwrap()
    };
    let (shared, taken) = (list("look_up"), list("taken"));
    squat_text(&store, text_id(&taken)).await;
    let first = |tools: &str| {
        let body =
            format!(r#"{{"messages":[{{"role":"user","content":"hi ☃"}}],"model":"m","seed":7,"tools":{tools}}}"#);
        let mut t = turn(0);
        t.messages[0].call.as_mut().unwrap().request = parley_core::RawJson::from_string(body.clone()).unwrap();
        (t, serde_json::from_str::<serde_json::Value>(&body).unwrap())
    };
    let sent = [first(&shared), first(&shared), first(&taken)];
    for (session, (t, _)) in ids.iter().zip(&sent) {
        store.commit_turn(Claim::unclaimed(*session), t.clone()).await.unwrap();
    }
    let held = text(&store, "SELECT text FROM texts WHERE id = $1", text_id(&shared)).await;
    assert_eq!(held, shared, "the list, once, under its id");
    for (session, (_, request)) in ids.iter().zip(&sent) {
        let sql = "SELECT request FROM model_calls WHERE session_id = $1 AND seq = 0";
        let stored: serde_json::Value = serde_json::from_str(&text(&store, sql, *session).await).unwrap();
        let texts = |id: i64| (id == text_id(&shared)).then(|| shared.clone());
        let back = parley_store::reconstruct(&stored, &|_| None, &texts);
        assert_eq!(back.as_ref(), Some(request), "session {session}");
        let apart = stored.get("tools").is_none();
        assert_eq!(apart, *session != ids[2], "session {session}: only the list whose id is free is kept apart");
    }
    let rows = "SELECT COUNT(*) FROM texts WHERE id <> $1";
    assert_eq!(scalar(&store, rows, text_id(&taken)).await, 1, "the shared list once, beside the squatter");
    store.close().await.unwrap();
}

/// The id a shared text or list is kept under: the first eight bytes of its SHA-256.
fn text_id(text: &str) -> i64 {
    i64::from_be_bytes(Sha256::digest(text.as_bytes())[..8].try_into().unwrap())
}

/// Stores another text under `id` in `texts`, beside the store, as two texts with the same eight
/// bytes of their hash would be.
async fn squat_text(store: &Store, id: i64) {
    let squat = "INSERT INTO texts (id, text) VALUES ($1, 'another text')";
    match store {
        Store::Sqlite(s) => {
            let writer = sqlx::SqlitePool::connect(&format!("sqlite://{}", s.path().display())).await.unwrap();
            sqlx::query(squat).bind(id).execute(&writer).await.map(drop)
        }
        Store::Postgres(s) => sqlx::query(squat).bind(id).execute(s.pool()).await.map(drop),
    }
    .unwrap();
}

/// Runs a statement with no parameters on the store's database, beside the store.
async fn execute(store: &Store, sql: &'static str) {
    match store {
        // The store's own pool only reads; a second writer waits for the store's lock.
        Store::Sqlite(s) => {
            let writer = sqlx::SqlitePool::connect(&format!("sqlite://{}", s.path().display())).await.unwrap();
            sqlx::query(sql).execute(&writer).await.map(drop)
        }
        Store::Postgres(s) => sqlx::query(sql).execute(s.pool()).await.map(drop),
    }
    .unwrap();
}

pub async fn a_runs_call_totals_read_each_calls_party_or_else_its_messages_role(db: &Db) {
    let store = db.open().await;
    let (spec, tasks, specs) = run_of(2);
    let (run, ids) = store.create_run(&spec, &tasks, &specs).await.unwrap();
    // The agent's call, then the simulated user's.
    store.commit_turn(Claim::unclaimed(ids[0]), turn(0)).await.unwrap();
    let mut user = turn(0);
    user.messages.truncate(1);
    user.messages[0].message = Message::user("an answer");
    let call = user.messages[0].call.as_mut().unwrap();
    call.latency = Duration::from_millis(250);
    call.usage = Usage { prompt_tokens: 5, completion_tokens: 1 };
    user.tool_calls.clear();
    store.commit_turn(Claim::unclaimed(ids[1]), user).await.unwrap();
    let read = store.call_totals(run).await.unwrap();
    let tokens = |t: Tokens| (t.model_calls, t.prompt_tokens, t.completion_tokens);
    assert_eq!((tokens(read.tokens.agent), tokens(read.tokens.user)), ((1, 12, 3), (1, 5, 1)));
    assert_eq!((read.latencies.len(), read.user_latencies.as_slice()), (1, [250.0].as_slice()));
    // As a database written before calls kept their party has them.
    execute(&store, "UPDATE model_calls SET party = NULL").await;
    assert_eq!(store.call_totals(run).await.unwrap(), read, "the message's role says whose a call is");
}

pub async fn a_runs_call_totals_sum_every_call_and_keep_each_latency(db: &Db) {
    let store = db.open().await;
    let (spec, tasks, specs) = run_of(5);
    let (run, ids) = store.create_run(&spec, &tasks, &specs).await.unwrap();
    // Another run's calls are not this run's.
    let (other, other_ids) = store.create_run(&spec, &tasks, &run_of(1).2).await.unwrap();
    store.commit_turn(Claim::unclaimed(other_ids[0]), turn(0)).await.unwrap();
    let mut expected = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        let mut t = turn(0);
        let call = t.messages[0].call.as_mut().unwrap();
        // Fractions of a millisecond, one latency far larger than the others, and one with a
        // fraction of a microsecond, which is read to the nearest.
        let micros = 1_000 * i as u64 + 123 + if i == 4 { 3_600_000_000 } else { 0 };
        call.latency = Duration::from_nanos(micros * 1_000 + if i == 1 { 600 } else { 0 });
        call.usage = Usage { prompt_tokens: 10 + i as u64, completion_tokens: i as u64 };
        expected.push((micros + u64::from(i == 1)) as f64 / 1e3);
        store.commit_turn(Claim::unclaimed(id), t).await.unwrap();
    }
    let read = store.call_totals(run).await.unwrap().sorted();
    assert_eq!(read.tokens.agent, Tokens { model_calls: 5, prompt_tokens: 60, completion_tokens: 10 });
    assert_eq!(read.tokens.user, Tokens::default());
    assert!(read.user_latencies.is_empty());
    assert_eq!(read.latencies.len(), expected.len());
    for (read, written) in read.latencies.iter().zip(&expected) {
        assert!((read - written).abs() <= written * 1e-12, "latency {written} ms read back as {read}");
    }
    assert_eq!(store.call_totals(other).await.unwrap().tokens.agent.model_calls, 1);
}
