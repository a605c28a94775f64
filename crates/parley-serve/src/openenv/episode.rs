//! One trainer-driven session. The trainer is the agent: [`Trainer`] is an [`Agent`] whose
//! `act` hands what the agent has not yet seen out over a channel and waits for the trainer's
//! next action. The session itself is the engine's `run_session` on a task of its own, so the
//! user, the tools, malformed calls, limits, scoring, termination and every commit are a run's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use async_trait::async_trait;
use parley_core::{
    Agent, AgentFailure, AgentTurn, AgentView, Claim, Fence, Message, Player, Reward, SessionId, SessionSpec, Task,
    Termination, ToolSpec, agent_view,
};
use parley_engine::{Job, Prior, SessionResult, Stop};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::wire::{message_json, tools_json};
use crate::Service;

/// The agent's turn, asked of the trainer: what it has not seen yet, and the reply it gives.
struct Ask {
    messages: Vec<Message>,
    /// The tools, with the first ask of a session (or of a continued one).
    tools: Option<Vec<ToolSpec>>,
    reply: oneshot::Sender<Message>,
}

/// The agent of a trainer-driven session.
struct Trainer {
    asks: mpsc::Sender<Ask>,
    /// How much of the agent's view the trainer has seen (its own actions included).
    seen: Arc<AtomicUsize>,
    system_prompt: Option<String>,
    greeting: Option<String>,
}

#[async_trait]
impl Agent for Trainer {
    fn system_prompt(&self) -> Option<&str> {
        self.system_prompt.as_deref()
    }

    fn greeting(&self) -> Option<&str> {
        self.greeting.as_deref()
    }

    async fn act(&self, view: AgentView<'_>) -> Result<AgentTurn, AgentFailure> {
        let from = self.seen.load(Ordering::Acquire).min(view.messages.len());
        let (reply, answer) = oneshot::channel();
        let tools = (from == 0).then(|| view.tools.to_vec());
        let ask = Ask { messages: view.messages[from..].to_vec(), tools, reply };
        let message = match self.asks.send(ask).await {
            Ok(()) => answer.await.ok(),
            Err(_) => None,
        };
        let Some(message) = message else {
            // The trainer is gone: its episode's drop cancels this session's stop token, which
            // ends the session as `cancelled` (resumable) rather than as the agent's error.
            return std::future::pending().await;
        };
        // The engine appends the reply to the transcript: the trainer has seen it too.
        self.seen.store(view.messages.len() + 1, Ordering::Release);
        Ok(AgentTurn { message, call: None })
    }
}

/// What a session needs to start or to go on after a dropped connection.
#[derive(Debug, Clone)]
pub(crate) struct Resumable {
    pub id: SessionId,
    pub fence: Fence,
    /// The task as the service run recorded it.
    pub task: Arc<Task>,
    /// The task's position among the environment's tasks.
    pub catalogue_index: usize,
    pub trial: u32,
    pub seed: u64,
    pub episode_id: Option<String>,
    /// The session's secret, given to the trainer that reset it: a step, a state read or a
    /// reset that continues the session must present it (its id alone is a guessable number).
    pub key: String,
}

/// A new session key: 128 random bits from the operating system, as hex.
pub(crate) fn new_key() -> String {
    let mut bytes = [0u8; 16];
    // The kernel's source (getrandom(2)) does not fail once the system has booted; without it
    // no session could be guarded, and none is served.
    getrandom::fill(&mut bytes).expect("the operating system's source of randomness");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// How a session ended, as the trainer is told.
#[derive(Debug, Clone)]
struct End {
    termination: Termination,
    reward: Option<Reward>,
    error: Option<String>,
    /// The simulated user's own faults: a trainer leaves the episode out of its loss.
    user_faults: Vec<parley_core::review::UserFault>,
    at: Instant,
}

/// Why a step was not taken.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StepRefused {
    /// The episode has ended; a reset starts another.
    Done,
}

/// One live session and the trainer's side of it.
pub(crate) struct Episode {
    pub(crate) start: Resumable,
    run: i64,
    asks: mpsc::Receiver<Ask>,
    /// The agent's turn under way, waiting for the trainer's action.
    waiting: Option<oneshot::Sender<Message>>,
    seen: Arc<AtomicUsize>,
    session: Option<tokio::task::JoinHandle<SessionResult>>,
    /// Cancelled when the episode is dropped or detached: the session ends `cancelled`.
    abort: CancellationToken,
    steps: u32,
    /// The transcript as the agent sees it, as far as the trainer was shown it.
    transcript: Vec<Message>,
    tools: Vec<ToolSpec>,
    end: Option<End>,
    pub(crate) last_used: Instant,
}

impl Drop for Episode {
    fn drop(&mut self) {
        self.abort.cancel();
    }
}

impl Episode {
    /// Starts the session (`prior`: continues its committed turns) on a task of its own, and
    /// answers with its first observation.
    pub(crate) async fn start(
        service: &Arc<Service>,
        start: Resumable,
        prior: Option<Prior>,
        permit: crate::admission::Admitted,
    ) -> (Episode, Value) {
        let (asks_tx, asks) = mpsc::channel(1);
        let seen = Arc::new(AtomicUsize::new(0));
        let runtime = &service.runtime;
        let trainer = Trainer {
            asks: asks_tx,
            seen: Arc::clone(&seen),
            system_prompt: runtime.system_prompt.clone(),
            greeting: runtime.parties.agent.greeting().map(str::to_owned),
        };
        let stop = Stop { drain: service.stop.drain.child_token(), abort: service.stop.abort.child_token() };
        let abort = stop.abort.clone();
        let spec =
            SessionSpec { task_index: start.task.index, trial: start.trial, seed: start.seed, player: Player::Trainer };
        let job = Job::new(Claim { session: start.id, fence: start.fence }, Arc::clone(&start.task), spec, prior);
        service.metrics.started();
        let counted = Arc::clone(service);
        // The slot is the session's: it is given back when the session ends, whether or not its
        // trainer is still there to see it (an abandoned episode ends at its time limit).
        let catalogue_index = start.catalogue_index;
        let session = runtime.spawn(job, Some(Arc::new(trainer)), stop, move |result| {
            counted.metrics.ended(&result.outcome);
            super::ended(&counted, catalogue_index, &result.outcome);
            drop(permit);
        });
        let mut episode = Episode {
            start,
            run: service.run,
            asks,
            waiting: None,
            seen,
            session: Some(session),
            abort,
            steps: 0,
            transcript: Vec::new(),
            tools: Vec::new(),
            end: None,
            last_used: Instant::now(),
        };
        let first = episode.next().await;
        (episode, first)
    }

    pub(crate) fn id(&self) -> SessionId {
        self.start.id
    }

    /// The actions the trainer has taken in this episode.
    pub(crate) fn steps_taken(&self) -> u32 {
        self.steps
    }

    pub(crate) fn is_done(&self) -> bool {
        self.end.is_some()
    }

    /// When the episode ended, if it did.
    pub(crate) fn ended_at(&self) -> Option<Instant> {
        self.end.as_ref().map(|e| e.at)
    }

    /// Plays the trainer's action and answers with the next observation: the tool results or
    /// the user's reply, or the session's end with its reward.
    pub(crate) async fn step(&mut self, action: Message) -> Result<Value, StepRefused> {
        self.last_used = Instant::now();
        if self.waiting.is_none() && self.end.is_none() {
            // The observation an earlier step waited for was never delivered (its request went
            // away); the trainer reads it in the state. The session is at its next turn now.
            let _ = self.next().await;
        }
        let Some(reply) = self.waiting.take() else { return Err(StepRefused::Done) };
        self.transcript.push(action.clone());
        self.steps += 1;
        // A send fails only when the session has just ended: `next` then reads its end.
        let _ = reply.send(action);
        Ok(self.next().await)
    }

    /// The session's next observation: the agent's next turn, or its end.
    async fn next(&mut self) -> Value {
        if let Some(ask) = self.asks.recv().await {
            self.waiting = Some(ask.reply);
            let first = ask.tools.is_some();
            if let Some(tools) = ask.tools {
                self.tools = tools;
            }
            let observation = self.observation(&ask.messages, first);
            self.transcript.extend(ask.messages);
            self.last_used = Instant::now();
            return observation;
        }
        // The agent's channel closed: the session has played. Its handle is awaited in place,
        // so a caller that goes away meanwhile leaves it to the next call.
        let end = match self.session.as_mut() {
            Some(handle) => match handle.await {
                Ok(result) => {
                    let view = agent_view(&result.transcript);
                    let from = self.seen.load(Ordering::Acquire).min(view.len());
                    let last = view[from..].to_vec();
                    let outcome = result.outcome;
                    let error = if result.taken_over {
                        Some("another process took the session over; it goes on there".to_owned())
                    } else {
                        outcome.error
                    };
                    let at = Instant::now();
                    let (termination, reward, user_faults) = (outcome.termination, outcome.reward, outcome.user_faults);
                    (last, End { termination, reward, error, user_faults, at })
                }
                Err(e) => {
                    let error = Some(format!("the session panicked: {e}"));
                    (
                        Vec::new(),
                        End {
                            termination: Termination::InfrastructureError,
                            reward: None,
                            error,
                            user_faults: Vec::new(),
                            at: Instant::now(),
                        },
                    )
                }
            },
            None => (
                Vec::new(),
                self.end.clone().unwrap_or_else(|| End {
                    termination: Termination::InfrastructureError,
                    reward: None,
                    error: Some("the session's end was lost".into()),
                    user_faults: Vec::new(),
                    at: Instant::now(),
                }),
            ),
        };
        self.session = None;
        let (last, end) = end;
        self.end = Some(end);
        let observation = self.observation(&last, false);
        self.transcript.extend(last);
        observation
    }

    /// Whether `key` is this session's key (compared in constant time).
    pub(crate) fn holds_key(&self, key: &str) -> bool {
        parley_http::guard::same(self.start.key.as_bytes(), key.as_bytes())
    }

    /// An observation in OpenEnv's shape: `{observation, reward, done}`.
    fn observation(&self, messages: &[Message], with_tools: bool) -> Value {
        let mut observation = json!({
            "session_id": self.start.id,
            "session_key": self.start.key,
            "task_id": self.start.task.id,
            "messages": messages.iter().map(message_json).collect::<Vec<_>>(),
        });
        if with_tools {
            observation["tools"] = tools_json(&self.tools);
        }
        let (reward, done) = match &self.end {
            None => (Value::Null, false),
            Some(end) => {
                observation["termination"] = json!(end.termination.as_str());
                observation["reward_breakdown"] = end.reward.as_ref().map_or(Value::Null, |r| json!(r.breakdown));
                observation["error"] = json!(end.error);
                if !end.user_faults.is_empty() {
                    // As `/run` marks it: the sample is the simulator's failure, masked from a loss.
                    observation["user_faults"] = json!(end.user_faults);
                    observation["mask_sample"] = json!(true);
                }
                (end.reward.as_ref().map_or(Value::Null, |r| json!(r.value)), true)
            }
        };
        json!({"observation": observation, "reward": reward, "done": done})
    }

    /// The episode's state: OpenEnv's `episode_id` and `step_count`, and the session as Parley
    /// knows it, its transcript as the agent sees it included.
    pub(crate) fn state(&self) -> Value {
        let end = self.end.as_ref();
        json!({
            "episode_id": self.start.episode_id.clone().unwrap_or_else(|| self.start.id.to_string()),
            "step_count": self.steps,
            "session_id": self.start.id,
            "run_id": self.run,
            "task_id": self.start.task.id,
            "task_index": self.start.catalogue_index,
            "trial": self.start.trial,
            "done": end.is_some(),
            "termination": end.map(|e| e.termination.as_str()),
            "reward": end.and_then(|e| e.reward.as_ref()).map(|r| r.value),
            "user_faults": end.map(|e| json!(e.user_faults)),
            "messages": self.transcript.iter().map(message_json).collect::<Vec<_>>(),
            "tools": tools_json(&self.tools),
        })
    }

    /// Lets go of a session whose trainer went away: it is stopped where it is and ends
    /// `cancelled`, its committed turns kept. Returns what continues it and the session's
    /// handle, to await its end; `None` when it had already ended.
    pub(crate) fn detach(mut self) -> Option<(Resumable, tokio::task::JoinHandle<SessionResult>)> {
        if self.end.is_some() {
            return None;
        }
        self.abort.cancel();
        let handle = self.session.take()?;
        Some((self.start.clone(), handle))
    }
}
