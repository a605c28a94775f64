//! Transitions and terminations of one session.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parley_core::FailureClass;
use parley_core::{Claim, Fence, Limits, ModelFailureKind, Player, Role, SessionSpec, Termination};
use parley_engine::{Job, Parties, Prior, Scheduler, SessionResult, Stop, run_session, spawn_session};

use crate::parties::{Counter, MemoryStore, Play, ScriptedAgent, task};

struct Setup {
    agent: Arc<ScriptedAgent>,
    store: Arc<MemoryStore>,
    parties: Parties,
}

fn setup(plays: Vec<Play>, store: MemoryStore, fail_open: bool) -> Setup {
    let agent = ScriptedAgent::new(plays);
    let store = Arc::new(store);
    let parties = Parties {
        agent: agent.clone(),
        user: None,
        environment: Arc::new(Counter { fail_open }),
        store: store.clone(),
        leases: Default::default(),
    };
    Setup { agent, store, parties }
}

fn job(id: i64) -> Job {
    let spec = SessionSpec { task_index: 0, trial: 0, seed: 42, player: Player::Run };
    Job::new(Claim::unclaimed(id), task(), spec, None)
}

async fn play(plays: Vec<Play>, limits: Limits) -> (Setup, SessionResult) {
    let s = setup(plays, MemoryStore::default(), false);
    let result = run_session(&s.parties, job(7), &limits, &Stop::default()).await;
    (s, result)
}

#[tokio::test]
async fn agent_text_ends_the_session_as_agent_stop_and_is_scored() {
    let (s, r) = play(vec![Play::Call("add", r#"{"n": 2}"#), Play::Say("the total is 2")], Limits::default()).await;
    assert_eq!(r.outcome.termination, Termination::AgentStop);
    assert_eq!(r.outcome.reward.unwrap().value, 2.0);
    assert_eq!(r.outcome.steps, 2);
    let stored = s.store.messages(7);
    let roles: Vec<Role> = stored.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::Tool, Role::Assistant]);
    assert_eq!(stored, r.transcript, "every message is committed");
    assert_eq!(s.store.finished.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn tool_results_go_back_to_the_agent() {
    let (s, r) = play(vec![Play::Call("add", r#"{"n": 3}"#), Play::Say("ok")], Limits::default()).await;
    let seen = s.agent.seen.lock().unwrap();
    let second = &seen[1];
    assert_eq!(second.last().unwrap().role, Role::Tool);
    assert_eq!(second.last().unwrap().content_str(), "3");
    assert_eq!(second.last().unwrap().tool_call_id.as_deref(), Some("call_add"));
    assert_eq!(r.produced().len(), 3);
}

#[tokio::test]
async fn each_turn_is_committed_in_a_record_of_its_own() {
    let (s, _) = play(
        vec![Play::Call("add", r#"{"n": 1}"#), Play::Call("add", r#"{"n": 1}"#), Play::Say("2")],
        Limits::default(),
    )
    .await;
    let turns = s.store.turns.lock().unwrap();
    // The opening with the first tool turn, the second tool turn, and the final turn with the
    // session's end.
    let sizes: Vec<usize> = turns.iter().map(|(_, t)| t.messages.len()).collect();
    assert_eq!(sizes, [4, 2, 1]);
    assert_eq!(turns[1].1.tool_calls.len(), 1);
    assert!(turns[1].1.tool_calls[0].write);
    assert!(turns[1].1.messages[0].call.is_some(), "the model call is stored with its message");
}

#[tokio::test]
async fn malformed_calls_become_tool_errors_and_the_session_goes_on() {
    let plays = vec![
        Play::Call("add", "{not json"),
        Play::Call("subtract", r#"{"n": 1}"#),
        Play::Call("add", r#"{"n": "one"}"#),
        Play::Call("add", r#"{"n": 5}"#),
        Play::Say("5"),
    ];
    let (_, r) = play(plays, Limits::default()).await;
    assert_eq!(r.outcome.termination, Termination::AgentStop);
    assert_eq!(r.outcome.reward.unwrap().value, 5.0);
    let errors: Vec<&str> = r.transcript.iter().filter(|m| m.role == Role::Tool).map(|m| m.content_str()).collect();
    assert!(errors[0].contains("not JSON"), "{}", errors[0]);
    assert!(errors[1].contains("Unknown tool `subtract`") && errors[1].contains("add"), "{}", errors[1]);
    assert!(errors[2].contains("arguments.n must be of type integer"), "{}", errors[2]);
    assert_eq!(errors[3], "5");
}

#[tokio::test]
async fn too_many_malformed_calls_end_the_session() {
    let limits = Limits { max_errors: 1, ..Limits::default() };
    let (s, r) = play(vec![Play::Call("add", "{"), Play::Call("add", "{"), Play::Say("never")], limits).await;
    assert_eq!(r.outcome.termination, Termination::TooManyErrors);
    assert_eq!(r.outcome.steps, 2);
    assert_eq!(s.store.messages(7).len(), 6, "the erroneous turn is stored too");
}

#[tokio::test]
async fn the_step_limit_ends_the_session() {
    let limits = Limits { max_steps: 2, ..Limits::default() };
    let plays = vec![Play::Call("add", r#"{"n": 1}"#), Play::Call("add", r#"{"n": 1}"#), Play::Say("x")];
    let (_, r) = play(plays, limits).await;
    assert_eq!(r.outcome.termination, Termination::MaxSteps);
    assert_eq!(r.outcome.reward.unwrap().value, 2.0, "a session that ran out of steps is still scored");
}

#[tokio::test]
async fn a_failed_model_call_is_an_infrastructure_error() {
    let (s, r) =
        play(vec![Play::Call("add", r#"{"n": 1}"#), Play::Fail(ModelFailureKind::Status(500))], Limits::default())
            .await;
    assert_eq!(r.outcome.termination, Termination::InfrastructureError);
    assert!(r.outcome.reward.is_none(), "infrastructure failures are not scored");
    assert!(r.outcome.error.unwrap().contains("Status(500)"));
    assert_eq!(s.store.messages(7).len(), 4, "turns before the failure are kept");
}

#[tokio::test]
async fn a_context_overflow_has_its_own_reason() {
    let (_, r) = play(vec![Play::Fail(ModelFailureKind::ContextWindowExceeded)], Limits::default()).await;
    assert_eq!(r.outcome.termination, Termination::ContextWindowExceeded);
}

#[tokio::test]
async fn an_agent_that_gives_up_is_an_agent_error() {
    let (_, r) = play(vec![Play::GiveUp], Limits::default()).await;
    assert_eq!(r.outcome.termination, Termination::AgentError);
    assert_eq!(r.outcome.error.as_deref(), Some("cannot continue"));
}

#[tokio::test]
async fn a_crashing_tool_is_an_environment_error() {
    let (_, r) = play(vec![Play::Call("broken", "{}")], Limits::default()).await;
    assert_eq!(r.outcome.termination, Termination::EnvironmentError);
    assert!(r.outcome.error.unwrap().contains("tool `broken`: the tool crashed"));
}

#[tokio::test]
async fn an_environment_that_cannot_open_is_an_environment_error() {
    let s = setup(vec![Play::Say("hi")], MemoryStore::default(), true);
    let r = run_session(&s.parties, job(1), &Limits::default(), &Stop::default()).await;
    assert_eq!(r.outcome.termination, Termination::EnvironmentError);
    assert!(s.agent.seen.lock().unwrap().is_empty(), "the agent is never asked");
}

#[tokio::test]
async fn a_store_that_cannot_commit_ends_the_session() {
    let plays = vec![Play::Call("add", r#"{"n": 1}"#), Play::Say("1")];
    let s = setup(plays, MemoryStore { fail_commits: true, ..MemoryStore::default() }, false);
    let r = run_session(&s.parties, job(1), &Limits::default(), &Stop::default()).await;
    assert_eq!(r.outcome.termination, Termination::InfrastructureError);
    assert!(r.outcome.error.unwrap().contains("disk full"));
    // The second call ran beside the commit that failed; its reply is not acted on.
    assert_eq!(s.agent.seen.lock().unwrap().len(), 2);
    let roles: Vec<Role> = r.transcript.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::Tool]);
}

#[tokio::test(start_paused = true)]
async fn a_turn_is_committed_while_the_next_model_call_runs() {
    let plays = vec![
        Play::SlowCall(Duration::from_millis(500), "add", r#"{"n": 1}"#),
        Play::SlowCall(Duration::from_millis(500), "add", r#"{"n": 1}"#),
        Play::Sleep(Duration::from_millis(500)),
    ];
    let store = MemoryStore { commit_delay: Duration::from_millis(100), ..MemoryStore::default() };
    let s = setup(plays, store, false);
    let started = tokio::time::Instant::now();
    let r = run_session(&s.parties, job(1), &Limits::default(), &Stop::default()).await;
    assert_eq!(r.outcome.termination, Termination::AgentStop);
    // Three calls of 500 ms; of the three commits only the last, with the session's end, waits
    // on its own.
    assert_eq!(started.elapsed(), Duration::from_millis(3 * 500 + 100));
    assert_eq!(s.store.seqs(1), [vec![0, 1, 2, 3], vec![4, 5], vec![6]], "every turn is committed, in order");
}

#[tokio::test]
async fn the_opening_is_committed_with_the_first_turn() {
    let (s, _) = play(vec![Play::Call("add", r#"{"n": 1}"#), Play::Say("1")], Limits::default()).await;
    let seqs = s.store.seqs(7);
    assert_eq!(seqs, [vec![0, 1, 2, 3], vec![4]], "one commit per turn, the opening in the first");
    // A session whose first call fails keeps its opening, and nothing of the failed turn.
    let (s, r) = play(vec![Play::Fail(ModelFailureKind::Status(503))], Limits::default()).await;
    assert_eq!(r.outcome.failure, Some(FailureClass::ServerError));
    let roles: Vec<Role> = s.store.messages(7).iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User]);
}

#[tokio::test(start_paused = true)]
async fn the_wall_time_limit_ends_the_session() {
    let limits = Limits { timeout: Duration::from_secs(5), ..Limits::default() };
    let (_, r) = play(vec![Play::Call("add", r#"{"n": 4}"#), Play::Sleep(Duration::from_secs(60))], limits).await;
    assert_eq!(r.outcome.termination, Termination::Timeout);
    assert_eq!(r.outcome.reward.unwrap().value, 4.0);
}

#[tokio::test(start_paused = true)]
async fn a_session_whose_time_runs_out_while_an_endpoint_holds_it_back_is_the_endpoints_failure() {
    let limits = Limits { timeout: Duration::from_secs(5), ..Limits::default() };
    let plays = vec![Play::Call("add", r#"{"n": 4}"#), Play::Throttled(2, Duration::from_secs(60))];
    let (_, r) = play(plays, limits).await;
    assert_eq!(r.outcome.termination, Termination::InfrastructureError);
    assert_eq!(r.outcome.failure, Some(FailureClass::RateLimited));
    assert_eq!(r.outcome.retries, 2);
    assert!(r.outcome.reward.is_none(), "a failure outside the agent is not scored");
    assert!(r.outcome.error.as_deref().is_some_and(|e| e.contains("waiting on an endpoint")), "{:?}", r.outcome.error);
}

#[tokio::test(start_paused = true)]
async fn a_wall_time_limit_too_large_for_the_clock_never_panics() {
    let limits = Limits { timeout: Duration::MAX, ..Limits::default() };
    let (_, r) = play(vec![Play::Say("done")], limits).await;
    assert_eq!(r.outcome.termination, Termination::AgentStop);
}

/// Signals `token` once `after` has passed.
fn cancel_after(token: tokio_util::sync::CancellationToken, after: Duration) {
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        token.cancel();
    });
}

#[tokio::test(start_paused = true)]
async fn cancelling_leaves_the_session_unfinished_in_the_store() {
    let s = setup(
        vec![Play::Call("add", r#"{"n": 1}"#), Play::Sleep(Duration::from_secs(60))],
        MemoryStore::default(),
        false,
    );
    let stop = Stop::default();
    cancel_after(stop.abort.clone(), Duration::from_secs(1));
    let r = run_session(&s.parties, job(3), &Limits::default(), &stop).await;
    assert_eq!(r.outcome.termination, Termination::Cancelled);
    assert!(s.store.finished.lock().unwrap().is_empty(), "a cancelled session stays resumable");
    assert_eq!(s.store.messages(3).len(), 4, "its committed turns are kept");
}

#[tokio::test(start_paused = true)]
async fn draining_lets_the_turn_in_flight_finish_and_commit() {
    let s = setup(
        vec![Play::SlowCall(Duration::from_secs(10), "add", r#"{"n": 1}"#), Play::Say("done")],
        MemoryStore::default(),
        false,
    );
    let stop = Stop::default();
    cancel_after(stop.drain.clone(), Duration::from_secs(1));
    let r = run_session(&s.parties, job(3), &Limits::default(), &stop).await;
    assert_eq!(r.outcome.termination, Termination::Cancelled);
    assert!(s.store.finished.lock().unwrap().is_empty(), "a drained session stays resumable");
    let stored = s.store.messages(3);
    assert_eq!(stored.last().unwrap().content_str(), "1", "the turn in flight finished and was committed");
    assert_eq!(s.agent.seen.lock().unwrap().len(), 1, "no turn started after the drain");
}

#[tokio::test]
async fn failures_carry_their_class_and_drop_the_unfinished_turn() {
    for (kind, class) in [
        (ModelFailureKind::Status(429), FailureClass::RateLimited),
        (ModelFailureKind::Status(503), FailureClass::ServerError),
        (ModelFailureKind::Status(401), FailureClass::Rejected),
        (ModelFailureKind::Timeout, FailureClass::Timeout),
        (ModelFailureKind::Transport, FailureClass::Connection),
        (ModelFailureKind::MalformedResponse, FailureClass::MalformedResponse),
    ] {
        let (_, r) = play(vec![Play::Fail(kind)], Limits::default()).await;
        assert_eq!(r.outcome.termination, Termination::InfrastructureError, "{kind:?}");
        assert_eq!(r.outcome.failure, Some(class), "{kind:?}");
    }
    // An environment that fails in the middle of a turn: the turn is not kept.
    let (s, r) = play(vec![Play::Call("add", r#"{"n": 2}"#), Play::Call("broken", "{}")], Limits::default()).await;
    assert_eq!(r.outcome.failure, Some(FailureClass::EnvironmentError));
    let stored = s.store.messages(7);
    assert_eq!(stored.len(), 4, "the opening and the first, committed turn only: {stored:?}");
    let (_, r) = play(vec![Play::Say("hi")], Limits::default()).await;
    assert_eq!(r.outcome.failure, None);
}

#[tokio::test]
async fn long_tool_outputs_are_cut_and_marked() {
    let limits = Limits { max_tool_output: 3, ..Limits::default() };
    let (s, r) = play(vec![Play::Call("add", r#"{"n": 123456}"#), Play::Say("done")], limits).await;
    assert_eq!(r.outcome.termination, Termination::AgentStop);
    let output = s.store.messages(7)[3].content_str().to_owned();
    assert!(output.starts_with("123\n[output truncated: 3 of 6 bytes shown]"), "{output}");
    let turns = s.store.turns.lock().unwrap();
    assert!(turns.iter().flat_map(|(_, t)| &t.tool_calls).any(|t| t.truncated), "the cut is recorded");
}

#[tokio::test]
async fn the_scheduler_runs_every_job_and_contains_a_panic() {
    // One agent is shared by all sessions: the second session to ask it panics.
    let s = setup(vec![Play::Say("a"), Play::Panic, Play::Say("c"), Play::Say("d")], MemoryStore::default(), false);
    let scheduler =
        Scheduler { parties: s.parties.clone(), limits: Limits::default(), concurrency: 1, stop: Stop::default() };
    let jobs: Vec<Job> = (1..=4).map(|id| with(job(id), |j| j.trial = id as u32)).collect();
    let mut results: Vec<SessionResult> = scheduler.run(futures::stream::iter(jobs)).collect().await;
    results.sort_by_key(|r| r.id);
    let terminations: Vec<Termination> = results.iter().map(|r| r.outcome.termination).collect();
    assert_eq!(
        terminations,
        [Termination::AgentStop, Termination::InfrastructureError, Termination::AgentStop, Termination::AgentStop]
    );
    assert!(results[1].outcome.error.as_deref().unwrap().contains("panicked"));
    assert_eq!(s.store.finished.lock().unwrap().len(), 4, "the panicked session is recorded as failed");
}

/// A session driven outside a scheduler (a trainer's `/run`, an OpenEnv episode) contains its
/// panic as the scheduler does: recorded as failed, never left pending, `ended` told.
#[tokio::test]
async fn a_spawned_session_contains_its_panic_and_records_it() {
    let s = setup(vec![Play::Panic], MemoryStore::default(), false);
    let (told, seen) = tokio::sync::oneshot::channel();
    let handle = spawn_session(s.parties.clone(), job(5), Limits::default(), Stop::default(), move |r| {
        let _ = told.send(r.outcome.failure);
    });
    let result = handle.await.expect("the panic is contained to the session's own task");
    assert_eq!(result.outcome.termination, Termination::InfrastructureError);
    assert_eq!(result.outcome.failure, Some(FailureClass::Panic));
    assert_eq!(seen.await.unwrap(), Some(FailureClass::Panic));
    assert_eq!(s.store.finished.lock().unwrap().len(), 1, "recorded as ended");
}

#[tokio::test]
async fn the_scheduler_bounds_concurrency() {
    let plays = (0..20).map(|_| Play::Sleep(Duration::from_millis(20))).collect();
    let s = setup(plays, MemoryStore::default(), false);
    let scheduler =
        Scheduler { parties: s.parties.clone(), limits: Limits::default(), concurrency: 5, stop: Stop::default() };
    let jobs: Vec<Job> = (1..=20).map(job).collect();
    let started = std::time::Instant::now();
    let results: Vec<SessionResult> = scheduler.run(futures::stream::iter(jobs)).collect().await;
    assert_eq!(results.len(), 20);
    // 20 sessions of 20 ms, 5 at a time: at least 4 rounds.
    assert!(started.elapsed() >= Duration::from_millis(80));
}

#[tokio::test(start_paused = true)]
async fn a_session_frees_its_slot_while_its_end_is_committed() {
    let plays = (0..3).map(|_| Play::Sleep(Duration::from_millis(500))).collect();
    let store = MemoryStore { commit_delay: Duration::from_millis(100), ..MemoryStore::default() };
    let s = setup(plays, store, false);
    let scheduler =
        Scheduler { parties: s.parties.clone(), limits: Limits::default(), concurrency: 1, stop: Stop::default() };
    let started = tokio::time::Instant::now();
    let results: Vec<SessionResult> = scheduler.run(futures::stream::iter((1..=3).map(job))).collect().await;
    assert_eq!(results.len(), 3);
    // One at a time: three sessions of 500 ms back to back, and only the last end's commit after them.
    assert_eq!(started.elapsed(), Duration::from_millis(3 * 500 + 100));
    assert_eq!(s.store.finished.lock().unwrap().len(), 3, "every end is recorded before the results end");
}

fn prior(recorded_total: &str) -> Prior {
    let mut messages = task().messages.clone();
    messages.push(parley_core::Message::assistant_calls(None, vec![crate::parties::call("add", r#"{"n": 2}"#)]));
    messages.push(parley_core::Message::tool_result("call_add", recorded_total));
    let tool_calls = vec![parley_core::ToolCallRecord {
        seq: 3,
        party: parley_core::Party::Agent,
        call_id: "call_add".into(),
        name: "add".into(),
        arguments: r#"{"n": 2}"#.into(),
        output: recorded_total.into(),
        is_error: false,
        write: true,
        malformed: false,
        truncated: false,
        duration: Duration::ZERO,
    }];
    Prior { messages, tool_calls, usage: Default::default() }
}

#[tokio::test]
async fn a_resumed_session_continues_after_its_last_committed_turn() {
    let s = setup(vec![Play::Call("add", r#"{"n": 3}"#), Play::Say("5")], MemoryStore::default(), false);
    let limits = Limits::default();
    let r = run_session(&s.parties, with(job(9), |j| j.prior = Some(prior("2"))), &limits, &Stop::default()).await;
    assert_eq!(r.outcome.termination, Termination::AgentStop);
    // The recorded write was replayed, so the counter holds 2 before the agent adds 3.
    assert_eq!(r.outcome.reward.unwrap().value, 5.0);
    assert_eq!(r.outcome.steps, 3, "the recorded step counts");
    let seen = s.agent.seen.lock().unwrap();
    assert_eq!(seen[0].len(), 4, "the agent first sees the recorded transcript");
    // Only the new turns are committed: the opening and the recorded turn are not written again.
    let stored = s.store.messages(9);
    assert_eq!(stored.len(), 3);
    assert_eq!(stored[1].content_str(), "5");
}

#[tokio::test]
async fn a_replayed_write_that_disagrees_with_the_record_is_an_environment_error() {
    let s = setup(vec![Play::Say("never")], MemoryStore::default(), false);
    let r =
        run_session(&s.parties, with(job(9), |j| j.prior = Some(prior("99"))), &Limits::default(), &Stop::default())
            .await;
    assert_eq!(r.outcome.termination, Termination::EnvironmentError);
    assert!(r.outcome.error.unwrap().contains("not deterministic"));
    assert!(s.agent.seen.lock().unwrap().is_empty(), "no model call is made on a diverged state");
}

#[tokio::test]
async fn the_step_limit_counts_recorded_steps() {
    let s = setup(vec![Play::Call("add", r#"{"n": 3}"#)], MemoryStore::default(), false);
    let limits = Limits { max_steps: 1, ..Limits::default() };
    let r = run_session(&s.parties, with(job(9), |j| j.prior = Some(prior("2"))), &limits, &Stop::default()).await;
    assert_eq!(r.outcome.termination, Termination::MaxSteps);
    assert!(s.agent.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn replay_of_an_unchanged_environment_reports_no_drift() {
    let p = prior("2");
    let report = parley_engine::replay::replay(
        &Counter { fail_open: false },
        &task(),
        &p.messages,
        &p.tool_calls,
        Termination::AgentStop,
    )
    .await
    .unwrap();
    assert!(report.drift.is_empty());
    assert_eq!(report.reward.unwrap().value, 2.0);
}

#[tokio::test]
async fn replay_reports_exactly_the_outputs_that_changed() {
    // Recorded when `add` answered differently: the replayed counter answers "2" where "3" was recorded.
    let p = prior("3");
    let report = parley_engine::replay::replay(
        &Counter { fail_open: false },
        &task(),
        &p.messages,
        &p.tool_calls,
        Termination::AgentStop,
    )
    .await
    .unwrap();
    assert_eq!(
        report.drift,
        [parley_engine::replay::Drift { seq: 3, name: "add".into(), recorded: "3".into(), replayed: "2".into() }]
    );
}

#[tokio::test]
async fn a_session_taken_over_by_another_owner_stops_quietly_and_records_nothing() {
    let plays = vec![Play::Call("add", r#"{"n": 1}"#), Play::Say("1")];
    let store = MemoryStore::default();
    // Another owner claimed session 1 after this process did (at fence 1).
    store.fences.lock().unwrap().insert(1, Fence(2));
    let s = setup(plays, store, false);
    let r = run_session(&s.parties, with(job(1), |j| j.fence = Fence(1)), &Limits::default(), &Stop::default()).await;
    assert_eq!(r.outcome.termination, Termination::Cancelled, "not a failure: the session goes on elsewhere");
    assert_eq!(r.outcome.failure, None);
    assert!(r.outcome.error.as_deref().unwrap_or_default().contains("claimed by another owner"), "{r:?}");
    assert!(r.outcome.reward.is_none(), "a session taken over is not scored here");
    assert!(s.store.turns.lock().unwrap().is_empty(), "nothing is recorded");
    assert!(s.store.finished.lock().unwrap().is_empty(), "not even its end");
    assert_eq!(s.agent.seen.lock().unwrap().len(), 2, "the reply beside the refused commit is not acted on");
}

#[tokio::test]
async fn a_session_under_its_current_claim_commits_as_before() {
    let plays = vec![Play::Call("add", r#"{"n": 1}"#), Play::Say("1")];
    let store = MemoryStore::default();
    store.fences.lock().unwrap().insert(1, Fence(3));
    let s = setup(plays, store, false);
    let r = run_session(&s.parties, with(job(1), |j| j.fence = Fence(3)), &Limits::default(), &Stop::default()).await;
    assert_eq!(r.outcome.termination, Termination::AgentStop);
    assert_eq!(s.store.finished.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_session_whose_claim_may_have_run_out_asks_the_store_before_the_model() {
    // Leases of 30 s that were never renewed: 25 s on, another owner may have claimed the session
    // and committed its turns. It has (at fence 2): the session learns so from its first commit,
    // before any model call.
    let plays = vec![Play::Call("add", r#"{"n": 1}"#), Play::Say("1")];
    let store = MemoryStore::default();
    store.fences.lock().unwrap().insert(1, Fence(2));
    let mut s = setup(plays, store, false);
    s.parties.leases = parley_engine::Leases::new(Duration::from_secs(30));
    tokio::time::advance(Duration::from_secs(25)).await;
    let r = run_session(&s.parties, with(job(1), |j| j.fence = Fence(1)), &Limits::default(), &Stop::default()).await;
    assert_eq!(r.outcome.termination, Termination::Cancelled);
    assert!(r.outcome.error.as_deref().unwrap_or_default().contains("claimed by another owner"), "{r:?}");
    assert!(s.agent.seen.lock().unwrap().is_empty(), "no model call under a claim taken over");
    assert!(s.store.turns.lock().unwrap().is_empty() && s.store.finished.lock().unwrap().is_empty());

    // Under a claim that still holds, the session plays as ever, each turn committed before the
    // next call.
    let plays = vec![Play::Call("add", r#"{"n": 1}"#), Play::Say("1")];
    let mut s = setup(plays, MemoryStore::default(), false);
    s.parties.leases = parley_engine::Leases::new(Duration::from_secs(30));
    tokio::time::advance(Duration::from_secs(25)).await;
    let r = run_session(&s.parties, with(job(1), |j| j.fence = Fence(1)), &Limits::default(), &Stop::default()).await;
    assert_eq!(r.outcome.termination, Termination::AgentStop);
    assert_eq!(s.agent.seen.lock().unwrap().len(), 2);
    assert_eq!(s.store.messages(1), r.transcript, "every message is committed");
}

#[tokio::test(start_paused = true)]
async fn a_renewal_that_comes_past_the_lease_tells_the_sessions_their_claims_may_have_run_out() {
    let store = Arc::new(MemoryStore::default());
    let renewal = parley_engine::Renewal::new(store.clone(), parley_core::Owner::new(Duration::from_secs(30)));
    let leases = renewal.leases.clone();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = renewal.spawn(shutdown.clone());
    let mark = leases.mark();
    tokio::time::sleep(Duration::from_secs(35)).await;
    assert!(leases.hold(mark), "renewed every 10 s, the claims hold");
    // The process stands still for 40 s (stopped, or cut off from its store): then the renewal due
    // at 40 s comes at 75 s. The claims may have run out meanwhile, and a mark taken before says
    // so after the renewal too; a mark taken after it holds.
    tokio::time::advance(Duration::from_secs(40)).await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(*store.renewals.lock().unwrap(), 4);
    assert!(!leases.hold(mark), "the claims may have been taken over");
    assert_eq!(leases.mark(), mark + 1);
    assert!(leases.hold(leases.mark()));
    // Without the renewal, the claims are in doubt again 20 s (two thirds of a lease) later.
    shutdown.cancel();
    task.await.unwrap();
    let mark = leases.mark();
    tokio::time::sleep(Duration::from_secs(19)).await;
    assert!(leases.hold(mark));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!leases.hold(mark));
}

#[tokio::test(start_paused = true)]
async fn the_renewal_renews_on_its_timer_until_its_caller_stops_it() {
    let store = Arc::new(MemoryStore::default());
    let owner = parley_core::Owner::new(Duration::from_secs(30));
    let renewal = parley_engine::Renewal::new(store.clone(), owner);
    assert_eq!(renewal.every, Duration::from_secs(10), "three renewals per lease");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = renewal.spawn(shutdown.clone());
    tokio::time::sleep(Duration::from_secs(35)).await;
    assert_eq!(*store.renewals.lock().unwrap(), 3, "at 10, 20 and 30 s");
    shutdown.cancel();
    task.await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(*store.renewals.lock().unwrap(), 3, "none after the shutdown");
}

/// `job` with one thing changed.
fn with(mut job: Job, change: impl FnOnce(&mut Job)) -> Job {
    change(&mut job);
    job
}
