//! One session: the half-duplex state machine over agent, user and environment, one committed
//! turn at a time. Agent text goes to the user; user text goes to the agent; agent tool calls go
//! to the environment and back to the agent; user tool calls (dual control) go to the
//! environment and back to the user. [`Next`] names whose move it is; every step ends in a
//! commit or in a termination reason.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parley_core::{
    Agent, AgentFailure, AgentView, EnvSession, Environment, Limits, Message, MessageRecord, ModelCall,
    ModelFailureKind, Party, Reward, Role, SessionId, SessionOutcome, SessionStore, Task, Termination, ToolCall,
    ToolCallRecord, TurnRecord, Usage, UserFailure, UserSimulator, UserStop, UserView, agent_view, user_view,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

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
}

/// One session to run: a task and a trial, and what an earlier process already committed.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: SessionId,
    pub task: Arc<Task>,
    pub trial: u32,
    pub seed: u64,
    pub prior: Option<Prior>,
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
type Ended = (Termination, Option<String>);

struct State<'a> {
    id: SessionId,
    task: &'a Task,
    trial: u32,
    seed: u64,
    messages: Vec<Message>,
    pending: TurnRecord,
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
}

impl State<'_> {
    fn push(&mut self, message: Message, call: Option<ModelCall>, party: Party) -> u32 {
        let seq = self.messages.len() as u32;
        if let Some(call) = &call {
            match party {
                Party::Agent => self.usage += call.usage,
                Party::User => self.user_usage += call.usage,
            }
        }
        self.pending.messages.push(MessageRecord { seq, message: message.clone(), call });
        self.messages.push(message);
        seq
    }
}

/// Runs one session to its end and records it. Never returns an error: every failure becomes a
/// termination reason. A job with a [`Prior`] continues after its last committed turn.
pub async fn run_session(parties: &Parties, job: Job, limits: &Limits, cancel: &CancellationToken) -> SessionResult {
    let started = Instant::now();
    let Job { id, task, trial, seed, prior } = job;
    let mut state = State {
        id,
        task: &task,
        trial,
        seed,
        messages: Vec::new(),
        pending: TurnRecord::default(),
        steps: 0,
        turns: 0,
        errors: 0,
        usage: Usage::default(),
        user_usage: Usage::default(),
        writes: Vec::new(),
        grace: limits.stop_grace,
        stopping: None,
    };
    if let Some(prompt) = parties.agent.system_prompt() {
        state.push(Message::system(prompt), None, Party::Agent);
    }
    for m in &task.messages {
        state.push(m.clone(), None, Party::Agent);
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

    let (termination, error, reward) = match parties.environment.open(&task).await {
        Err(e) => (Termination::EnvironmentError, Some(format!("opening the environment: {e}")), None),
        Ok(mut env) => {
            let resumed = prior.is_some();
            let ended = tokio::select! {
                ended = async {
                    if let Some(prior) = &prior
                        && let Err(e) = replay_writes(env.as_mut(), &prior.tool_calls).await
                    {
                        return (Termination::EnvironmentError, Some(e));
                    }
                    drive(parties, &mut state, env.as_mut(), limits, resumed).await
                } => ended,
                () = tokio::time::sleep(limits.timeout) => {
                    (Termination::Timeout, Some(format!("the session ran past its limit of {:?}", limits.timeout)))
                }
                () = cancel.cancelled() => (Termination::Cancelled, Some("the run was cancelled".into())),
            };
            let (termination, mut error) = ended;
            let mut reward = None;
            if termination.is_scored() {
                match env.score(&state.messages, termination).await {
                    Ok(r) => reward = Some(r),
                    Err(e) => error = Some(format!("scoring failed: {e}")),
                }
            }
            env.close().await;
            (termination, error, reward)
        }
    };

    let outcome = SessionOutcome { termination, reward, error, steps: state.steps, duration: started.elapsed() };
    if termination == Termination::Cancelled {
        // A cancelled session keeps its committed turns and stays pending, so it can be resumed.
    } else if let Err(e) = parties.store.finish_session(id, std::mem::take(&mut state.pending), &outcome).await {
        tracing::error!(session = id, error = %e, "could not record the end of a session");
    }
    let (usage, user_usage, transcript) = (state.usage, state.user_usage, state.messages);
    SessionResult { id, task, trial, outcome, transcript, produced_from, usage, user_usage }
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
        state.stopping = UserStop::find(last.content_str());
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
) -> Ended {
    // The task's opening (and the agent's greeting) is the first turn.
    if !resumed && let Err(e) = commit(parties, state).await {
        return (Termination::InfrastructureError, Some(e));
    }
    let mut next = next_after(&state.messages, parties.user.is_some());
    loop {
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
        if let Err(e) = commit(parties, state).await {
            return (Termination::InfrastructureError, Some(e));
        }
    }
}

/// One agent step: a model call, then its tool calls if any. `Err` ends the session.
async fn agent_turn(
    parties: &Parties,
    state: &mut State<'_>,
    env: &mut dyn EnvSession,
    limits: &Limits,
) -> Result<Next, Ended> {
    if state.steps >= limits.max_steps {
        return Err((Termination::MaxSteps, Some(format!("the agent used all {} steps", limits.max_steps))));
    }
    state.steps += 1;
    let turn = {
        let messages = agent_view(&state.messages);
        let view = AgentView { task: state.task, messages: &messages, tools: env.tools(), seed: state.seed };
        parties.agent.act(view).await
    };
    let message = match turn {
        Ok(turn) => {
            state.push(turn.message.clone(), turn.call, Party::Agent);
            turn.message
        }
        Err(AgentFailure::Model(failure)) => return Err(model_failure(failure.kind, failure.message)),
        Err(AgentFailure::Agent { message, .. }) => return Err((Termination::AgentError, Some(message))),
    };
    if !message.tool_calls.is_empty() {
        run_calls(state, env, Party::Agent, &message.tool_calls).await?;
        check_errors(state, limits)?;
        return Ok(Next::Agent);
    }
    if let Some(stop) = state.stopping {
        // The agent has had its grace turn after a premature stop: the user's stop stands.
        return Err((Termination::UserStop, Some(format!("the user stopped with {}", stop.marker()))));
    }
    if parties.user.is_none() || message.content_str().contains(AGENT_STOP) {
        return Err((Termination::AgentStop, None));
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
        return Err((Termination::AgentStop, None));
    };
    if state.turns >= limits.max_turns {
        return Err((Termination::MaxTurns, Some(format!("the user used all {} turns", limits.max_turns))));
    }
    state.turns += 1;
    let turn = {
        let messages = user_view(&state.messages);
        let view = UserView {
            task: state.task,
            trial: state.trial,
            messages: &messages,
            tools: env.user_tools(),
            seed: state.seed,
        };
        user.respond(view).await
    };
    let turn = match turn {
        Ok(turn) => turn,
        Err(UserFailure::Model(failure)) => {
            return Err(model_failure(failure.kind, format!("user simulator: {}", failure.message)));
        }
        Err(UserFailure::User { message, .. }) => return Err((Termination::UserError, Some(message))),
    };
    let user_seq = state.push(turn.message.clone(), turn.call, Party::User);
    if !turn.message.tool_calls.is_empty() {
        run_calls(state, env, Party::User, &turn.message.tool_calls).await?;
        check_errors(state, limits)?;
        return Ok(Next::User);
    }
    if let Some(stop) = turn.stop {
        if state.grace > 0 && premature(state, user_seq) {
            state.grace -= 1;
            state.stopping = Some(stop);
            tracing::debug!(session = state.id, "the user stopped before the agent acted on a confirmation");
            return Ok(Next::Agent);
        }
        return Err((Termination::UserStop, Some(format!("the user stopped with {}", stop.marker()))));
    }
    Ok(Next::Agent)
}

fn model_failure(kind: ModelFailureKind, message: String) -> Ended {
    match kind {
        ModelFailureKind::ContextWindowExceeded => (Termination::ContextWindowExceeded, Some(message)),
        _ => (Termination::InfrastructureError, Some(message)),
    }
}

fn check_errors(state: &State<'_>, limits: &Limits) -> Result<(), Ended> {
    if state.errors > limits.max_errors {
        return Err((
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
) -> Result<(), Ended> {
    for call in calls {
        let started = Instant::now();
        let tools = match party {
            Party::Agent => env.tools(),
            Party::User => env.user_tools(),
        };
        let output = match check_call(tools, call) {
            Err(problem) => {
                state.errors += 1;
                Err(problem)
            }
            Ok(arguments) => match env.call(party, &call.name, &arguments).await {
                Ok(output) => Ok(output),
                Err(e) => return Err((Termination::EnvironmentError, Some(format!("tool `{}`: {e}", call.name)))),
            },
        };
        let (content, is_error, write, malformed) = match output {
            Ok(o) => (o.content, o.is_error, o.write, false),
            Err(problem) => (json!({ "error": problem }).to_string(), true, false, true),
        };
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
            duration: started.elapsed(),
        });
    }
    Ok(())
}

/// Whether a user stop came too early: the stop message, or the user message just before it,
/// answers an agent's request for the go-ahead with a confirmation, and the agent has made no
/// write call since.
fn premature(state: &State<'_>, stop_seq: u32) -> bool {
    let messages = &state.messages[..=stop_seq as usize];
    let user_texts =
        messages.iter().enumerate().rev().filter(|(_, m)| m.role == Role::User && !m.content_str().is_empty());
    user_texts.take(2).any(|(seq, m)| {
        let asked = messages[..seq]
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant && !m.content_str().is_empty())
            .is_some_and(|m| asks_to_act(m.content_str()));
        asked && confirms(m.content_str()) && !state.writes.iter().any(|&w| w as usize > seq)
    })
}

/// Whether an agent message asks for the go-ahead to do something ("Shall I cancel it?").
fn asks_to_act(text: &str) -> bool {
    let text = text.to_lowercase();
    text.contains('?')
        && [
            "shall i",
            "should i",
            "do you want me to",
            "would you like me to",
            "confirm",
            "proceed",
            "go ahead",
            "may i",
        ]
        .iter()
        .any(|p| text.contains(p))
}

/// Whether a message agrees to have something done ("yes, please go ahead").
fn confirms(text: &str) -> bool {
    let text = text.to_lowercase();
    let words: Vec<&str> = text.split(|c: char| !c.is_alphanumeric() && c != '\'').filter(|w| !w.is_empty()).collect();
    let has = |w: &str| words.contains(&w);
    let phrase = |p: &str| text.contains(p);
    has("yes")
        || has("confirm")
        || has("confirmed")
        || has("proceed")
        || has("sure")
        || has("yeah")
        || phrase("go ahead")
        || phrase("please do")
        || phrase("do it")
        || phrase("sounds good")
        || phrase("that's correct")
        || phrase("that is correct")
}

/// Checks a call the model wrote: a known tool, arguments that parse as JSON and match the
/// tool's schema. A problem is returned as the sentence the model will read.
fn check_call(tools: &[parley_core::ToolSpec], call: &ToolCall) -> Result<Value, String> {
    let Some(tool) = tools.iter().find(|t| t.name == call.name) else {
        let known: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        return Err(format!("Unknown tool `{}`. Available tools: {}", call.name, known.join(", ")));
    };
    let text = if call.arguments.trim().is_empty() { "{}" } else { call.arguments.as_str() };
    let arguments: Value = serde_json::from_str(text)
        .map_err(|e| format!("Invalid tool call arguments for `{}`: not JSON ({e})", call.name))?;
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

async fn commit(parties: &Parties, state: &mut State<'_>) -> Result<(), String> {
    let turn = std::mem::take(&mut state.pending);
    parties.store.commit_turn(state.id, turn).await.map_err(|e| format!("committing a turn: {e}"))
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
