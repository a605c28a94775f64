//! The runtime as a library: a run assembled, recorded and driven without the command line,
//! against the built-in stub and a real SQLite file.

use futures::StreamExt;
use parley_engine::Stop;
use parley_runtime::{RunSettings, Runtime, TaskSource};
use parley_store::{SqliteStore, StoreOptions};

fn settings(db: &std::path::Path, num_tasks: usize, trials: u32) -> RunSettings {
    serde_json::from_value(serde_json::json!({
        "env": "multi-step", "tasks": null, "num_tasks": num_tasks, "base_url": null, "model": "parley-stub",
        "api_key_env": null, "concurrency": 8, "endpoint_concurrency": 8, "trials": trials, "db": db,
        "out": null, "max_steps": 10, "max_errors": 5, "session_timeout_secs": 60.0, "call_timeout_secs": 30.0,
        "max_retries": 1, "system_prompt": null, "sampling": {}, "raw_calls": true
    }))
    .unwrap()
}

/// More tasks than one batch of the run's creation and one page of its sessions: every session
/// is recorded once, driven once, in task order with adjacent trials, and a second pass finds
/// nothing left to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_recorded_in_batches_and_driven_from_the_store_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("parley.db");
    let settings = settings(&db, 1100, 2);
    settings.check().unwrap();
    let store = SqliteStore::open(&db, StoreOptions::default()).await.unwrap();
    let runtime = Runtime::start(&settings, store).await.unwrap();
    let (source, check) = TaskSource::from_settings(&settings).unwrap();
    assert!(check.bad.is_empty());
    let created = runtime.create_run(source, &Default::default()).await.unwrap();
    assert_eq!((created.tasks, created.sessions), (1100, 2200));

    let mut pending = runtime.pending(created.run, false).await.unwrap();
    assert_eq!(pending.count, 2200);
    let results: Vec<_> = runtime.drive(pending.take_jobs(), Stop::default()).collect().await;
    assert!(pending.error().is_none());
    assert_eq!(results.len(), 2200);
    let mut seen: Vec<(usize, u32)> = results.iter().map(|r| (r.task.index, r.trial)).collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 2200, "every task x trial once");
    assert!(results.iter().all(|r| r.outcome.reward.is_some()));
    runtime.finish_run(created.run, false).await.unwrap();

    let again = runtime.pending(created.run, true).await.unwrap();
    assert_eq!(again.count, 0);
    let sessions = runtime.store.sessions(created.run).await.unwrap();
    assert!(sessions.iter().all(|s| s.status == parley_core::SessionStatus::Finished));
    // Trials of a task are adjacent, in task order, as NeMo Gym orders them.
    let order: Vec<(i64, i64)> = sessions.iter().take(4).map(|s| (s.task_index, s.trial)).collect();
    assert_eq!(order, [(0, 0), (0, 1), (1, 0), (1, 1)]);
    runtime.stop().await.unwrap();
}

/// A recording stopped (a signal while a large task file is recorded) ends after the batch in
/// hand: the run holds the tasks recorded so far, and says it is not whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_recording_keeps_the_batches_recorded_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("parley.db");
    let settings = settings(&db, 3000, 1);
    let store = SqliteStore::open(&db, StoreOptions::default()).await.unwrap();
    let runtime = Runtime::start(&settings, store).await.unwrap();
    let (source, _) = TaskSource::from_settings(&settings).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    stop.cancel();
    let created = runtime.create_run(source, &stop).await.unwrap();
    assert!(!created.whole);
    assert!(created.tasks > 0 && created.tasks < 3000, "one batch, not every task: {}", created.tasks);
    let (total, _) = runtime.store.session_counts(created.run).await.unwrap();
    assert_eq!(total, created.sessions, "what it says it recorded is what the store holds");
    runtime.stop().await.unwrap();
}

/// A page of sessions claimed before the process's claims may have run out is checked before
/// its sessions are driven: a session another owner has claimed since is left to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_claimed_before_the_claims_may_have_run_out_gives_only_the_sessions_still_held() {
    use parley_core::SessionStore;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("parley.db");
    let settings = settings(&db, 20, 1);
    let store = SqliteStore::open(&db, StoreOptions::default()).await.unwrap();
    let mut runtime = Runtime::start(&settings, store).await.unwrap();
    let (source, _) = TaskSource::from_settings(&settings).unwrap();
    let run = runtime.create_run(source, &Default::default()).await.unwrap().run;
    // Claims never renewed, of a lease so short that they are in doubt at once.
    runtime.parties.leases = parley_engine::Leases::new(std::time::Duration::from_millis(1));
    let mut pending = runtime.pending(run, false).await.unwrap();
    let mut jobs = pending.take_jobs();
    let first = jobs.next().await.unwrap();
    // The page's leases run out, and another owner claims the first two sessions of the run.
    runtime.store.expire_owner(run, &runtime.owner.id).await.unwrap();
    let other = parley_core::Owner::new(std::time::Duration::from_secs(30));
    let taken = runtime.store.claim_sessions(run, &other, 2).await.unwrap();
    let taken: Vec<i64> = taken.iter().map(|c| c.session).collect();
    assert_eq!(taken, [first.id, first.id + 1]);
    // This process renews what it still holds, as its renewal does once it runs again.
    runtime.store.renew_claims(&runtime.owner).await.unwrap();
    let rest: Vec<i64> = jobs.map(|job| job.id).collect().await;
    assert!(pending.error().is_none());
    assert_eq!(rest, (first.id + 2..first.id + 20).collect::<Vec<_>>(), "every session but those taken, once");
    runtime.stop().await.unwrap();
}

/// An offline curriculum: from a run's stored outcomes, the rows of the tasks whose pass rate
/// lies in the band, in task order; tasks that always or never pass, and unscored ones, left out.
#[tokio::test]
async fn a_selection_keeps_the_tasks_whose_pass_rate_lies_in_the_band() {
    use parley_core::{Player, Reward, RunSpec, SessionOutcome, SessionSpec, SessionStore, Task, Termination};
    use parley_runtime::curriculum::{Band, Selected, select};
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("parley.db"), StoreOptions::default()).await.unwrap();
    // Four tasks of four trials each; the rewards of each task's trials.
    let rewards = [[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]];
    let tasks: Vec<_> = (0..5)
        .map(|i| {
            std::sync::Arc::new(Task {
                index: i,
                id: format!("t{i}"),
                messages: vec![],
                tools: Default::default(),
                row: serde_json::json!({"id": format!("t{i}")}).into(),
            })
        })
        .collect();
    let specs: Vec<SessionSpec> = (0..4)
        .flat_map(|t| (0..4).map(move |trial| SessionSpec { task_index: t, trial, seed: 0, player: Player::Run }))
        .collect();
    let spec = RunSpec { environment: "test".into(), config: serde_json::json!({}) };
    let (run, ids) = store.create_run(&spec, &tasks, &specs).await.unwrap();
    for (id, s) in ids.iter().zip(&specs) {
        let outcome = SessionOutcome {
            termination: Termination::AgentStop,
            reward: Some(Reward::new(rewards[s.task_index][s.trial as usize])),
            error: None,
            failure: None,
            steps: 1,
            retries: 0,
            duration: std::time::Duration::ZERO,
            token_contiguity: None,
            user_faults: Vec::new(),
        };
        store.finish_session(parley_core::Claim::unclaimed(*id), Default::default(), &outcome).await.unwrap();
    }
    let store = parley_store::Store::from(store);
    let mut out = Vec::new();
    let selected = select(&store, run, Band::new(0.1, 0.9).unwrap(), &mut out).await.unwrap();
    assert_eq!(selected, Selected { written: 2, below: 1, above: 1, unscored: 1 });
    let ids: Vec<String> = String::from_utf8(out).unwrap().lines().map(|l| l.to_owned()).collect();
    assert_eq!(ids, [r#"{"id":"t1"}"#, r#"{"id":"t2"}"#]);
    assert!(Band::new(0.9, 0.1).is_err() && Band::new(-0.1, 0.5).is_err());
}
