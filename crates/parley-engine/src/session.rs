//! One session: a half-duplex loop between the agent and the environment, one committed turn
//! at a time. Each step of the loop is a [`Step`]: the one closed set of things that can happen.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parley_core::{
    Agent, AgentFailure, AgentView, EnvSession, Environment, Limits, Message, MessageRecord, ModelFailureKind, Party,
    Reward, Role, SessionId, SessionOutcome, SessionStore, Task, Termination, ToolCall, ToolCallRecord, TurnRecord,
    Usage,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::schema;

/// The three parties every session of a run shares.
#[derive(Clone)]
pub struct Parties {
    pub agent: Arc<dyn Agent>,
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
    pub usage: Usage,
}

/// What the loop does next.
enum Step {
    /// The agent answered; its tool calls (if any) are next.
    Agent(Message),
    /// The session is over.
    End(Termination, Option<String>),
}

struct State {
    id: SessionId,
    messages: Vec<Message>,
    pending: TurnRecord,
    steps: u32,
    errors: u32,
    usage: Usage,
}

impl State {
    fn push(&mut self, message: Message, call: Option<parley_core::ModelCall>) -> u32 {
        let seq = self.messages.len() as u32;
        if let Some(call) = &call {
            self.usage += call.usage;
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
        messages: Vec::new(),
        pending: TurnRecord::default(),
        steps: 0,
        errors: 0,
        usage: Usage::default(),
    };
    if let Some(prompt) = parties.agent.system_prompt() {
        state.push(Message::system(prompt), None);
    }
    for m in &task.messages {
        state.push(m.clone(), None);
    }
    let produced_from = state.messages.len();
    let prior = prior.filter(|p| !p.messages.is_empty());
    if let Some(prior) = &prior {
        // The opening is already committed, and so is everything after it.
        state.pending = TurnRecord::default();
        state.messages.clone_from(&prior.messages);
        let produced = &prior.messages[produced_from.min(prior.messages.len())..];
        state.steps = produced.iter().filter(|m| m.role == Role::Assistant).count() as u32;
        state.errors = prior.tool_calls.iter().filter(|t| t.malformed).count() as u32;
        state.usage = prior.usage;
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
                    drive(parties, &mut state, env.as_mut(), limits, seed, resumed).await
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
    SessionResult { id, task, trial, outcome, transcript: state.messages, produced_from, usage: state.usage }
}

/// The loop proper. Returns how the session ended; the caller scores and records it.
async fn drive(
    parties: &Parties,
    state: &mut State,
    env: &mut dyn EnvSession,
    limits: &Limits,
    seed: u64,
    resumed: bool,
) -> (Termination, Option<String>) {
    // The task's opening messages are the first turn (already committed when resuming).
    if !resumed && let Err(e) = commit(parties, state).await {
        return (Termination::InfrastructureError, Some(e));
    }
    loop {
        let step = agent_step(parties, state, env.tools(), limits, seed).await;
        let message = match step {
            Step::End(termination, error) => return (termination, error),
            Step::Agent(message) => message,
        };
        if message.tool_calls.is_empty() {
            return (Termination::AgentStop, None);
        }
        for call in &message.tool_calls {
            let started = Instant::now();
            let output = match check_call(env.tools(), call) {
                Err(problem) => {
                    state.errors += 1;
                    Err(problem)
                }
                Ok(arguments) => match env.call(Party::Agent, &call.name, &arguments).await {
                    Ok(output) => Ok(output),
                    Err(e) => {
                        return (Termination::EnvironmentError, Some(format!("tool `{}`: {e}", call.name)));
                    }
                },
            };
            let (content, is_error, write, malformed) = match output {
                Ok(o) => (o.content, o.is_error, o.write, false),
                Err(problem) => (json!({ "error": problem }).to_string(), true, false, true),
            };
            let seq = state.push(Message::tool_result(call.id.clone(), content.clone()), None);
            state.pending.tool_calls.push(ToolCallRecord {
                seq,
                party: Party::Agent,
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
        if state.errors > limits.max_errors {
            return (
                Termination::TooManyErrors,
                Some(format!("{} malformed tool calls, more than the limit of {}", state.errors, limits.max_errors)),
            );
        }
        if let Err(e) = commit(parties, state).await {
            return (Termination::InfrastructureError, Some(e));
        }
    }
}

async fn agent_step(
    parties: &Parties,
    state: &mut State,
    tools: &[parley_core::ToolSpec],
    limits: &Limits,
    seed: u64,
) -> Step {
    if state.steps >= limits.max_steps {
        return Step::End(Termination::MaxSteps, Some(format!("the agent used all {} steps", limits.max_steps)));
    }
    state.steps += 1;
    let view = AgentView { messages: &state.messages, tools, seed };
    match parties.agent.act(view).await {
        Ok(turn) => {
            state.push(turn.message.clone(), turn.call);
            Step::Agent(turn.message)
        }
        Err(AgentFailure::Model(failure)) => {
            let termination = match failure.kind {
                ModelFailureKind::ContextWindowExceeded => Termination::ContextWindowExceeded,
                _ => Termination::InfrastructureError,
            };
            Step::End(termination, Some(failure.message))
        }
        Err(AgentFailure::Agent { message, .. }) => Step::End(Termination::AgentError, Some(message)),
    }
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

async fn commit(parties: &Parties, state: &mut State) -> Result<(), String> {
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
