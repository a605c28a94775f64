//! One session: the half-duplex state machine over agent, user and environment, one committed
//! turn at a time. Agent text goes to the user; user text goes to the agent; agent tool calls go
//! to the environment and back to the agent; user tool calls (dual control) go to the
//! environment and back to the user. [`Next`] names whose move it is; every step ends in a
//! commit or in a termination reason.
//!
//! How a session goes, beyond that loop:
//!
//! - **Commits.** A finished turn is committed beside the next model call (`beside_commit`),
//!   and the session waits for both before it acts on the reply or ends.
//!   While the process's claims may have run out ([`Leases`]: a renewal late by more than
//!   [`Leases::HOLD`] of a lease counts a lapse, as after a pause or a cut from the store), the
//!   commit goes first (an empty one when there is nothing to commit) and the call is made only
//!   once the store took it, so a session taken over spends no model call on a turn its new
//!   owner committed. A commit refused as [`StoreError::Fenced`] (another owner claimed the
//!   session) stops the session quietly: it is reported `cancelled` with `taken_over` set, and
//!   nothing more of it is recorded.
//! - **Resumes.** A [`Job`] with a [`Prior`] continues a session after its last committed turn:
//!   the recorded write calls are replayed against a fresh environment first, each output
//!   checked against the record, so the environment is where the session left it.
//! - **Malformed calls.** Arguments that are not JSON, an unknown tool or a schema violation
//!   ([`schema`]) become a tool error in the transcript and count against
//!   [`Limits::max_errors`]; never an `Err`. An environment that answers those itself
//!   ([`EnvSession::answers_malformed_calls`], as tau2's tools do) gets them as ordinary calls.
//! - **Premature stops.** A user stop right after the user agreed to an action no write call
//!   has carried out ([`UserSimulator::stopped_too_early`]) grants the agent
//!   [`Limits::stop_grace`] more turns.
//! - **Time.** The session's moves run under its [`Deadline`]. When its time runs out while a
//!   client has a call open, it ends as `infrastructure_error` with that call's failure class and
//!   retries; only time spent otherwise is the agent's `timeout`.
//! - **Ends.** A panic (contained by the caller), timeout or cancel ends one session with a
//!   termination reason. A cancelled session is not marked finished, so its committed turns stay
//!   resumable; a failure outside the agent drops the unfinished turn and records its class.
//!   Before the environment is closed, the simulated user's turns are reviewed
//!   ([`UserSimulator::review`]); its faults travel in [`SessionResult::user_faults`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use parley_core::deadline::{Deadline, Open};
use parley_core::{
    Agent, AgentFailure, AgentView, Claim, EnvSession, Environment, FailureClass, Fence, Limits, Message,
    MessageRecord, ModelCall, ModelFailureKind, Party, Reward, Role, SessionId, SessionOutcome, SessionStore,
    StoreError, Task, Termination, ToolCall, ToolCallRecord, TurnRecord, Usage, UserFailure, UserSimulator, UserStop,
    UserView, agent_view, user_view,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::claims::Leases;
use crate::schema;

/// The parties every session of a run shares. Without a user, the agent's first text answer
/// ends the session (`agent_stop`): single- and multi-step tasks are sessions whose user never
/// speaks after the task's first message.
#[derive(Clone)]
pub struct Parties {
    pub agent: Arc<dyn Agent>,
    pub user: Option<Arc<dyn UserSimulator>>,
    pub environment: Arc<dyn Environment>,
    pub store: Arc<dyn SessionStore>,
    /// What the process knows of its claims' leases (the default: claims that always hold).
    pub leases: Leases,
}

/// One session to run: a task and a trial, the claim it is driven under, and what an earlier
/// process already committed.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: SessionId,
    /// The fence of this process's claim on the session (from `create_claimed_run` or
    /// `claim_sessions`), carried by every commit; [`Fence::UNCLAIMED`] for a session nobody
    /// has claimed.
    pub fence: Fence,
    pub task: Arc<Task>,
    pub trial: u32,
    pub seed: u64,
    pub prior: Option<Prior>,
    /// Who plays the agent: a session another policy plays keeps its claim when cancelled, so
    /// that no resume beside its live owner continues it with the run's agent.
    pub player: parley_core::Player,
}

impl Job {
    /// The session `claim` names, of `task`, as its record `spec` says, continuing from `prior`
    /// when an earlier process committed turns of it.
    pub fn new(claim: Claim, task: Arc<Task>, spec: parley_core::SessionSpec, prior: Option<Prior>) -> Job {
        let (trial, seed, player) = (spec.trial, spec.seed, spec.player);
        Job { id: claim.session, fence: claim.fence, task, trial, seed, prior, player }
    }
}

/// The committed turns of a session that an earlier process started: its transcript, from the
/// first message, and the tool calls recorded in it.
#[derive(Debug, Clone, Default)]
pub struct Prior {
    pub messages: Vec<Message>,
    pub tool_calls: Vec<ToolCallRecord>,
    pub usage: Usage,
}

/// What one session produced.
#[derive(Debug, Clone)]
pub struct SessionResult {
    pub id: SessionId,
    pub task: Arc<Task>,
    pub trial: u32,
    pub outcome: SessionOutcome,
    pub transcript: Vec<Message>,
    /// Where the session's own messages start in `transcript` (after the task's opening).
    pub produced_from: usize,
    /// Tokens of the agent's model calls.
    pub usage: Usage,
    /// Tokens of the user simulator's model calls.
    pub user_usage: Usage,
    /// Another owner claimed the session while this process drove it: it is theirs now, and
    /// nothing of this ending was recorded.
    pub taken_over: bool,
}

/// The text with which an agent ends a conversation that has a user.
pub const AGENT_STOP: &str = "###STOP###";

/// Whose move it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Agent,
    User,
}

/// How a session ended, before it is scored.
struct Ended {
    termination: Termination,
    error: Option<String>,
    failure: Option<FailureClass>,
    /// Another owner claimed the session: nothing more of it is recorded by this process.
    taken_over: bool,
}

impl Ended {
    fn new(termination: Termination, error: Option<String>) -> Ended {
        Ended { termination, error, failure: None, taken_over: false }
    }

    /// A failure outside the agent, recorded with its class.
    fn failed(termination: Termination, class: FailureClass, error: String) -> Ended {
        Ended { termination, error: Some(error), failure: Some(class), taken_over: false }
    }

    /// The store refused a commit because another owner claimed the session since this process
    /// did. It is no failure: the session goes on under its new owner, so this process stops
    /// driving it, records nothing, and reports it as cancelled here.
    fn taken_over(error: &StoreError) -> Ended {
        tracing::info!(error = %error, "another owner took over the session; this process stops driving it");
        Ended { termination: Termination::Cancelled, error: Some(error.to_string()), failure: None, taken_over: true }
    }

    /// How a failed commit ends the session.
    fn commit_failed(error: StoreError) -> Ended {
        match error {
            StoreError::Fenced { .. } => Ended::taken_over(&error),
            _ => Ended::failed(
                Termination::InfrastructureError,
                FailureClass::Store,
                format!("committing a turn: {error}"),
            ),
        }
    }

    /// A failure of the environment: it could not open, replay, run a tool or score.
    fn environment(error: String) -> Ended {
        Ended::failed(Termination::EnvironmentError, FailureClass::EnvironmentError, error)
    }
}

/// How a run asks its sessions to stop. `drain` lets each session in flight finish the turn it
/// is in and stop at the next commit; `abort` stops them at once. Either way a stopped session
/// keeps its committed turns and stays pending, so `parley resume` continues it.
#[derive(Debug, Clone, Default)]
pub struct Stop {
    pub drain: CancellationToken,
    pub abort: CancellationToken,
}

impl Stop {
    pub fn is_stopping(&self) -> bool {
        self.drain.is_cancelled() || self.abort.is_cancelled()
    }
}

struct State<'a> {
    id: SessionId,
    claim: Claim,
    task: &'a Task,
    trial: u32,
    seed: u64,
    messages: Vec<Message>,
    /// The turn under way, not yet handed to the store.
    pending: TurnRecord,
    /// The last finished turn, not yet committed: its commit runs beside the next model call.
    committing: Option<TurnRecord>,
    /// Agent model calls.
    steps: u32,
    /// User turns.
    turns: u32,
    /// Malformed tool calls, by either party.
    errors: u32,
    usage: Usage,
    user_usage: Usage,
    /// Seqs of the results of the agent's write calls, to tell whether a confirmed action was done.
    writes: Vec<u32>,
    /// Agent turns left after a premature user stop, and that stop.
    grace: u32,
    stopping: Option<UserStop>,
    /// Model-call attempts beyond the first.
    retries: u32,
    /// The [`Leases::mark`] at which the session's claim was last known to hold.
    mark: u64,
}

impl State<'_> {
    /// Ends the turn under way: it is committed beside the next model call, or with the
    /// session's end.
    fn finish_turn(&mut self) {
        let turn = std::mem::take(&mut self.pending);
        match &mut self.committing {
            Some(earlier) => earlier.append(turn),
            None => self.committing = Some(turn),
        }
    }

    fn push(&mut self, message: Message, call: Option<ModelCall>, party: Party) -> u32 {
        let seq = self.messages.len() as u32;
        if let Some(call) = &call {
            self.retries += call.attempts.saturating_sub(1);
            match party {
                Party::Agent => self.usage += call.usage,
                Party::User => self.user_usage += call.usage,
            }
        }
        self.pending.messages.push(MessageRecord { seq, message: message.clone(), call: call.map(Box::new) });
        self.messages.push(message);
        seq
    }
}

/// Runs one session to its end and records it. Never returns an error: every failure becomes a
/// termination reason. A job with a [`Prior`] continues after its last committed turn.
pub async fn run_session(parties: &Parties, job: Job, limits: &Limits, stop: &Stop) -> SessionResult {
    let (result, ending) = play_session(parties, job, limits, stop).await;
    ending.record(parties.store.as_ref()).await;
    result
}

/// What is left to record of a session once it has played: its last turns and how it ended.
pub(crate) struct Ending {
    claim: Claim,
    player: parley_core::Player,
    /// Another owner took the session over: nothing is recorded.
    taken_over: bool,
    /// The last finished turn, not yet committed.
    finished: Option<TurnRecord>,
    /// The turn under way when the session ended: recorded with its end, dropped when cancelled.
    last: TurnRecord,
    outcome: SessionOutcome,
}

impl Ending {
    /// Records the session's end, with its last turns, in one commit. A cancelled session keeps
    /// its finished turns, drops the one under way, and stays pending, so it can be resumed.
    pub(crate) async fn record(self, store: &dyn SessionStore) {
        let Ending { claim, player, taken_over, finished, mut last, outcome } = self;
        let id = claim.session;
        if taken_over {
            return;
        }
        if outcome.termination == Termination::Cancelled {
            match commit(store, claim, finished).await {
                // Stopped where it was: the claim goes, so that a resume takes the session at
                // once (a served session whose client went away, while the service runs on).
                // One another policy plays stays its owner's: only that policy continues it
                // (a trainer's reset naming it), and a resume closes it once the owner is gone.
                Ok(()) if player != parley_core::Player::Run => {}
                Ok(()) => {
                    if let Err(e) = store.release_claim(claim).await {
                        tracing::warn!(session = id, error = %e, "could not release the claim of a cancelled session");
                    }
                }
                Err(e @ StoreError::Fenced { .. }) => tracing::info!(session = id, error = %e, "not recorded"),
                Err(e) => {
                    tracing::error!(session = id, error = %e, "could not record the last turn of a cancelled session")
                }
            }
            return;
        }
        if let Some(mut turn) = finished {
            turn.append(last);
            last = turn;
        }
        match store.finish_session(claim, last, &outcome).await {
            Ok(()) => {}
            // Taken over after it played: its new owner plays it again and records that end.
            Err(e @ StoreError::Fenced { .. }) => tracing::info!(session = id, error = %e, "its end is not recorded"),
            Err(e) => tracing::error!(session = id, error = %e, "could not record the end of a session"),
        }
    }
}

/// The messages every session of a task opens with, before anyone moves: the agent's system
/// prompt, then the task's own messages. What the session produces follows them.
pub fn opening(system_prompt: Option<&str>, task: &Task) -> impl Iterator<Item = Message> {
    system_prompt.map(Message::system).into_iter().chain(task.messages.iter().cloned())
}

/// How many messages [`opening`] gives: where a stored transcript's produced messages start.
pub fn opening_len(system_prompt: Option<&str>, task: &Task) -> usize {
    usize::from(system_prompt.is_some()) + task.messages.len()
}

/// Plays one session to its end; the caller records the [`Ending`].
pub(crate) async fn play_session(parties: &Parties, job: Job, limits: &Limits, stop: &Stop) -> (SessionResult, Ending) {
    let started = Instant::now();
    let Job { id, fence, task, trial, seed, prior, player } = job;
    let claim = Claim { session: id, fence };
    let mut state = State {
        id,
        claim,
        task: &task,
        trial,
        seed,
        messages: Vec::new(),
        pending: TurnRecord::default(),
        committing: None,
        steps: 0,
        turns: 0,
        errors: 0,
        usage: Usage::default(),
        user_usage: Usage::default(),
        writes: Vec::new(),
        grace: limits.stop_grace,
        stopping: None,
        retries: 0,
        mark: parties.leases.mark(),
    };
    for m in opening(parties.agent.system_prompt(), &task) {
        state.push(m, None, Party::Agent);
    }
    let produced_from = state.messages.len();
    let prior = prior.filter(|p| !p.messages.is_empty());
    if let Some(prior) = &prior {
        restore(&mut state, prior, produced_from);
    } else if parties.user.is_some()
        && let Some(greeting) = parties.agent.greeting()
        && !task.messages.iter().any(|m| m.role != Role::System)
    {
        state.push(Message::assistant(greeting), None, Party::Agent);
    }
    let opening = state.messages.len() as u32;

    // Whether the trajectory was whole and only its scoring failed: then its last turn is kept.
    let mut scoring = false;
    let mut user_faults = Vec::new();
    let (ended, reward) = match parties.environment.open(&task).await {
        Err(e) => {
            let error = format!("opening the environment: {e}");
            (Ended::environment(error), None)
        }
        Ok(mut env) => {
            let resumed = prior.is_some();
            // The clients read the deadline to give up a wait that would outlast the session, and
            // register the calls they have open with it.
            let deadline = Deadline::after(limits.timeout);
            let played = tokio::select! {
                ended = deadline.scope(async {
                    if let Some(prior) = &prior
                        && let Err(e) = replay_writes(env.as_mut(), &prior.tool_calls).await
                    {
                        return Ended::environment(e);
                    }
                    drive(parties, &mut state, env.as_mut(), limits, resumed, stop).await
                }) => Ok(ended),
                // Read while the call is still open: the session's moves are dropped after this.
                open = async {
                    tokio::time::sleep(limits.timeout).await;
                    deadline.open()
                } => Err(open),
                () = stop.abort.cancelled() => Ok(Ended::new(Termination::Cancelled, Some("the run was stopped".into()))),
            };
            let mut ended = match played {
                Ok(ended) => ended,
                Err(open) => out_of_time(&mut state, limits.timeout, open),
            };
            let mut reward = None;
            if ended.termination.is_scored() && !ended.taken_over {
                scoring = true;
                match env.score(&state.messages, ended.termination).await {
                    Ok(r) => reward = Some(r),
                    // The trajectory is whole but unscored: a failure of the environment, which
                    // `--retry-failed` scores again without another model call.
                    // A verifier that reports its own failure is classified apart: the sample
                    // goes to a trainer masked rather than as a failed rollout.
                    Err(e) if e.verifier_failed => {
                        let error = format!("scoring failed: {e}");
                        ended = Ended::failed(Termination::EnvironmentError, FailureClass::VerifierFailed, error);
                    }
                    Err(e) => ended = Ended::environment(format!("scoring failed: {e}")),
                }
            }
            if let Some(user) = &parties.user {
                user_faults = user.review(&task, &state.messages, env.user_tools()).await;
            }
            env.close().await;
            (ended, reward)
        }
    };

    let Ended { termination, error, failure, taken_over } = ended;
    if failure.is_some() && !scoring {
        // The turn in progress never completed: it is dropped, with any write it made, and a
        // retry (`parley resume --retry-failed`) takes the session up from its last committed
        // turn against an environment rebuilt from the committed writes. An opening not yet
        // committed is kept, so the failed session shows what it was asked.
        state.pending.messages.retain(|m| m.seq < opening);
        state.pending.tool_calls.clear();
    }
    let finished = state.committing.take();
    let outcome = SessionOutcome {
        termination,
        reward,
        error,
        failure,
        steps: state.steps,
        retries: state.retries,
        duration: started.elapsed(),
        token_contiguity: parley_core::tokens::first_discontiguous(&state.messages[produced_from..])
            .map(|(_, why)| why),
        user_faults,
    };
    let ending = Ending {
        claim,
        player,
        taken_over,
        finished,
        last: std::mem::take(&mut state.pending),
        outcome: outcome.clone(),
    };
    let (usage, user_usage, transcript) = (state.usage, state.user_usage, state.messages);
    let result = SessionResult { id, task, trial, outcome, transcript, produced_from, usage, user_usage, taken_over };
    (result, ending)
}

/// How a session whose time ran out ended. Time spent waiting on an endpoint (throttled,
/// backing off, or with a call in flight) is the endpoint's failure, with the class of what held
/// the session back and the retries made; only time the agent's side spent otherwise is the
/// agent's `timeout`.
fn out_of_time(state: &mut State<'_>, limit: Duration, open: Option<Open>) -> Ended {
    let Some(open) = open else {
        return Ended::new(Termination::Timeout, Some(format!("the session ran past its limit of {limit:?}")));
    };
    state.retries += open.retries;
    let class = open.class.unwrap_or(FailureClass::Timeout);
    let error = format!(
        "the session ran past its limit of {limit:?} while waiting on an endpoint ({class}, {} retries so far)",
        open.retries
    );
    Ended::failed(Termination::InfrastructureError, class, error)
}

/// Takes up a session where an earlier process left it: its transcript and counters.
fn restore(state: &mut State<'_>, prior: &Prior, produced_from: usize) {
    // The opening is already committed, and so is everything after it.
    state.pending = TurnRecord::default();
    state.messages.clone_from(&prior.messages);
    let produced = &prior.messages[produced_from.min(prior.messages.len())..];
    state.steps = produced.iter().filter(|m| m.role == Role::Assistant).count() as u32;
    state.turns = produced.iter().filter(|m| m.role == Role::User).count() as u32;
    state.errors = prior.tool_calls.iter().filter(|t| t.malformed).count() as u32;
    state.writes = prior.tool_calls.iter().filter(|t| t.write && t.party == Party::Agent).map(|t| t.seq).collect();
    state.usage = prior.usage;
    // A committed user stop with the agent still to answer means the grace turn was under way.
    if let Some(last) = state.messages.last().filter(|m| m.role == Role::User) {
        state.stopping = UserStop::find(&last.text_content());
        if state.stopping.is_some() {
            state.grace = state.grace.saturating_sub(1);
        }
    }
}

/// Whose move it is after the last committed message.
fn next_after(messages: &[Message], has_user: bool) -> Next {
    let Some(last) = messages.last() else { return if has_user { Next::User } else { Next::Agent } };
    match last.role {
        Role::User => Next::Agent,
        Role::Tool => {
            let id = last.tool_call_id.as_deref();
            let by_user =
                messages.iter().any(|m| m.role == Role::User && m.tool_calls.iter().any(|c| Some(c.id.as_str()) == id));
            if by_user { Next::User } else { Next::Agent }
        }
        Role::Assistant | Role::System if has_user => Next::User,
        Role::Assistant | Role::System => Next::Agent,
    }
}

/// The loop proper. Returns how the session ended; the caller scores and records it.
async fn drive(
    parties: &Parties,
    state: &mut State<'_>,
    env: &mut dyn EnvSession,
    limits: &Limits,
    resumed: bool,
    stop: &Stop,
) -> Ended {
    // The task's opening (and the agent's greeting) is committed with the first turn: a session
    // that ends before it has nothing to resume from, and starts afresh.
    if resumed && let Some(ended) = already_ended(&state.messages, parties.user.is_some()) {
        return ended;
    }
    let mut next = next_after(&state.messages, parties.user.is_some());
    loop {
        if stop.is_stopping() {
            if let Err(e) = commit(parties.store.as_ref(), state.claim, state.committing.take()).await {
                return Ended::commit_failed(e);
            }
            return Ended::new(Termination::Cancelled, Some("the run was stopped between turns".into()));
        }
        next = match next {
            Next::Agent => match agent_turn(parties, state, env, limits).await {
                Ok(next) => next,
                Err(ended) => return ended,
            },
            Next::User => match user_turn(parties, state, env, limits).await {
                Ok(next) => next,
                Err(ended) => return ended,
            },
        };
        state.finish_turn();
    }
}

/// A resumed session whose last committed message already ended it (the agent's final answer,
/// or its stop marker), and which failed after that, in scoring: it is scored again, with no
/// further model call.
fn already_ended(messages: &[Message], has_user: bool) -> Option<Ended> {
    let last = messages.last().filter(|m| m.role == Role::Assistant && m.tool_calls.is_empty())?;
    (!has_user || last.content_str().contains(AGENT_STOP)).then(|| Ended::new(Termination::AgentStop, None))
}

/// One agent step: a model call, then its tool calls if any. `Err` ends the session.
async fn agent_turn(
    parties: &Parties,
    state: &mut State<'_>,
    env: &mut dyn EnvSession,
    limits: &Limits,
) -> Result<Next, Ended> {
    if state.steps >= limits.max_steps {
        return Err(Ended::new(Termination::MaxSteps, Some(format!("the agent used all {} steps", limits.max_steps))));
    }
    state.steps += 1;
    let previous = state.committing.take();
    let turn = {
        let messages = agent_view(&state.messages);
        let view = AgentView {
            task: state.task,
            messages: &messages,
            tools: env.tools(),
            seed: state.seed,
            session: state.id,
        };
        beside_commit(parties, state.claim, previous, &mut state.mark, parties.agent.act(view)).await?
    };
    let message = match turn {
        Ok(turn) => {
            state.push(turn.message.clone(), turn.call, Party::Agent);
            turn.message
        }
        Err(AgentFailure::Model(failure)) => {
            state.retries += failure.call.attempts.saturating_sub(1);
            return Err(model_failure(failure.kind, failure.message));
        }
        Err(AgentFailure::Agent { message, .. }) => return Err(Ended::new(Termination::AgentError, Some(message))),
    };
    if !message.tool_calls.is_empty() {
        run_calls(state, env, Party::Agent, &message.tool_calls, limits).await?;
        check_errors(state, limits)?;
        return Ok(Next::Agent);
    }
    if let Some(stop) = state.stopping {
        // The agent has had its grace turn after a premature stop: the user's stop stands.
        return Err(Ended::new(Termination::UserStop, Some(format!("the user stopped with {}", stop.marker()))));
    }
    if parties.user.is_none() || message.content_str().contains(AGENT_STOP) {
        return Err(Ended::new(Termination::AgentStop, None));
    }
    Ok(Next::User)
}

/// One user step: a simulated (or real) user's message, then its tool calls if any.
async fn user_turn(
    parties: &Parties,
    state: &mut State<'_>,
    env: &mut dyn EnvSession,
    limits: &Limits,
) -> Result<Next, Ended> {
    let Some(user) = &parties.user else {
        return Err(Ended::new(Termination::AgentStop, None));
    };
    if state.turns >= limits.max_turns {
        return Err(Ended::new(Termination::MaxTurns, Some(format!("the user used all {} turns", limits.max_turns))));
    }
    state.turns += 1;
    let previous = state.committing.take();
    let turn = {
        let messages = user_view(&state.messages);
        let view = UserView {
            task: state.task,
            trial: state.trial,
            messages: &messages,
            tools: env.user_tools(),
            seed: state.seed,
        };
        beside_commit(parties, state.claim, previous, &mut state.mark, user.respond(view)).await?
    };
    let turn = match turn {
        Ok(turn) => turn,
        Err(UserFailure::Model(failure)) => {
            state.retries += failure.call.attempts.saturating_sub(1);
            return Err(model_failure(failure.kind, format!("user simulator: {}", failure.message)));
        }
        Err(UserFailure::User { message, .. }) => return Err(Ended::new(Termination::UserError, Some(message))),
    };
    let user_seq = state.push(turn.message.clone(), turn.call, Party::User);
    if !turn.message.tool_calls.is_empty() {
        run_calls(state, env, Party::User, &turn.message.tool_calls, limits).await?;
        check_errors(state, limits)?;
        return Ok(Next::User);
    }
    if let Some(stop) = turn.stop {
        if state.grace > 0 && user.stopped_too_early(&state.messages[..=user_seq as usize], &state.writes) {
            state.grace -= 1;
            state.stopping = Some(stop);
            tracing::debug!(session = state.id, "the user stopped before the agent acted on a confirmation");
            return Ok(Next::Agent);
        }
        return Err(Ended::new(Termination::UserStop, Some(format!("the user stopped with {}", stop.marker()))));
    }
    Ok(Next::Agent)
}

fn model_failure(kind: ModelFailureKind, message: String) -> Ended {
    let termination = match kind {
        ModelFailureKind::ContextWindowExceeded => Termination::ContextWindowExceeded,
        _ => Termination::InfrastructureError,
    };
    Ended::failed(termination, kind.class(), message)
}

fn check_errors(state: &State<'_>, limits: &Limits) -> Result<(), Ended> {
    if state.errors > limits.max_errors {
        return Err(Ended::new(
            Termination::TooManyErrors,
            Some(format!("{} malformed tool calls, more than the limit of {}", state.errors, limits.max_errors)),
        ));
    }
    Ok(())
}

/// Runs one party's tool calls in order. Malformed calls are answered with a tool error; an
/// environment failure ends the session.
async fn run_calls(
    state: &mut State<'_>,
    env: &mut dyn EnvSession,
    party: Party,
    calls: &[ToolCall],
    limits: &Limits,
) -> Result<(), Ended> {
    for call in calls {
        let started = Instant::now();
        let tools = match party {
            Party::Agent => env.tools(),
            Party::User => env.user_tools(),
        };
        let output = match check_call(tools, call, env.answers_malformed_calls()) {
            Err(problem) => {
                state.errors += 1;
                Err(problem)
            }
            Ok(arguments) => match env.call(party, &call.name, &arguments).await {
                Ok(output) => Ok(output),
                Err(e) => {
                    let error = format!("tool `{}`: {e}", call.name);
                    return Err(Ended::environment(error));
                }
            },
        };
        let (content, is_error, write, malformed) = match output {
            Ok(o) => (o.content, o.is_error, o.write, false),
            Err(problem) => (json!({ "error": problem }).to_string(), true, false, true),
        };
        let (content, truncated) = bound(content, limits.max_tool_output);
        let seq = state.push(Message::tool_result(call.id.clone(), content.clone()), None, party);
        if write && party == Party::Agent {
            state.writes.push(seq);
        }
        state.pending.tool_calls.push(ToolCallRecord {
            seq,
            party,
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            output: content,
            is_error,
            write,
            malformed,
            truncated,
            duration: started.elapsed(),
        });
    }
    Ok(())
}

/// Cuts a tool output longer than `max` bytes at a character boundary and says so at its end,
/// so the model knows it saw part of the output.
fn bound(mut content: String, max: usize) -> (String, bool) {
    if content.len() <= max {
        return (content, false);
    }
    let total = content.len();
    let mut cut = max;
    while !content.is_char_boundary(cut) {
        cut -= 1;
    }
    content.truncate(cut);
    content.push_str(&format!("\n[output truncated: {cut} of {total} bytes shown]"));
    (content, true)
}

/// Checks a call the model wrote: a known tool, arguments that parse as JSON and match the
/// tool's schema (only the JSON when the environment answers the rest itself). A problem is
/// returned as the sentence the model will read.
fn check_call(tools: &[parley_core::ToolSpec], call: &ToolCall, env_checks: bool) -> Result<Value, String> {
    let parse = || {
        let text = if call.arguments.trim().is_empty() { "{}" } else { call.arguments.as_str() };
        serde_json::from_str::<Value>(text)
            .map_err(|e| format!("Invalid tool call arguments for `{}`: not JSON ({e})", call.name))
    };
    if env_checks {
        return parse();
    }
    let Some(tool) = tools.iter().find(|t| t.name == call.name) else {
        let known: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        return Err(format!("Unknown tool `{}`. Available tools: {}", call.name, known.join(", ")));
    };
    let arguments = parse()?;
    schema::validate(&tool.parameters, &arguments)
        .map_err(|e| format!("Invalid tool call arguments for `{}`: {e}", call.name))?;
    Ok(arguments)
}

/// Rebuilds an environment's state by calling again every write the session made, checking
/// that each gives the output that was recorded.
async fn replay_writes(env: &mut dyn EnvSession, calls: &[ToolCallRecord]) -> Result<(), String> {
    for call in calls.iter().filter(|c| c.write) {
        let what = format!("replaying write call {} (`{}`)", call.seq, call.name);
        let arguments: Value =
            serde_json::from_str(&call.arguments).map_err(|e| format!("{what}: its arguments do not parse: {e}"))?;
        let output = env.call(call.party, &call.name, &arguments).await.map_err(|e| format!("{what}: {e}"))?;
        if output.content != call.output {
            return Err(format!(
                "{what} gave {:?} where {:?} was recorded: the environment is not deterministic",
                output.content, call.output
            ));
        }
    }
    Ok(())
}

/// Commits a finished turn, if there is one, under the session's claim.
async fn commit(store: &dyn SessionStore, claim: Claim, turn: Option<TurnRecord>) -> Result<(), StoreError> {
    let Some(turn) = turn else { return Ok(()) };
    store.commit_turn(claim, turn).await
}

/// Runs a model call while the previous turn is committed, and waits for both: the session acts
/// on the reply (runs its tools, records it, ends) only once every turn before it is durable, and
/// the commit costs the session no time of its own. A crash before the commit lands loses that
/// turn as it would lose the call in flight: neither was recorded, and resume asks again.
///
/// That holds while the session's claim surely holds ([`Leases::hold`]). When it may have run out
/// (the process was paused, or cut off from the store, past its lease), another owner may have
/// taken the session over and committed this very turn: the commit goes first then (an empty one
/// when there is nothing to commit), and the call is made only once the store has taken it, under
/// the session's claim.
async fn beside_commit<T>(
    parties: &Parties,
    claim: Claim,
    previous: Option<TurnRecord>,
    mark: &mut u64,
    call: impl Future<Output = T>,
) -> Result<T, Ended> {
    let store = parties.store.as_ref();
    if parties.leases.hold(*mark) {
        let (reply, committed) = tokio::join!(call, commit(store, claim, previous));
        committed.map_err(Ended::commit_failed)?;
        return Ok(reply);
    }
    let now = parties.leases.mark();
    store.commit_turn(claim, previous.unwrap_or_default()).await.map_err(Ended::commit_failed)?;
    *mark = now;
    Ok(call.await)
}

impl SessionResult {
    /// The session's own messages, after the task's opening.
    pub fn produced(&self) -> &[Message] {
        &self.transcript[self.produced_from.min(self.transcript.len())..]
    }

    pub fn reward(&self) -> Option<&Reward> {
        self.outcome.reward.as_ref()
    }

    pub fn duration(&self) -> Duration {
        self.outcome.duration
    }
}
