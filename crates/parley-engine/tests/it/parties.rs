//! Scripted parties: an agent that plays a list of turns, an environment with one counter tool,
//! and a store that keeps every committed turn in memory.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use parley_core::{
    Agent, AgentFailure, AgentTurn, AgentView, Claim, EnvError, EnvSession, Environment, Fence, Message, ModelCall,
    ModelFailure, ModelFailureKind, Owner, Party, Reward, RunId, RunSpec, SessionId, SessionOutcome, SessionSpec,
    SessionStore, StoreError, Task, Termination, ToolCall, ToolList, ToolOutput, ToolSpec, TurnRecord, UserFailure,
    UserSimulator, UserTurn, UserView,
};
use serde_json::{Value, json};

/// What the scripted agent does on one step.
#[derive(Clone)]
pub enum Play {
    Say(&'static str),
    Call(&'static str, &'static str),
    Fail(ModelFailureKind),
    GiveUp,
    Sleep(Duration),
    /// A tool call that takes this long to arrive.
    SlowCall(Duration, &'static str, &'static str),
    /// A model call held back as a client's retry policy holds it: the endpoint answered 429
    /// this many times, and the call waits this long before its next attempt.
    Throttled(u32, Duration),
    Panic,
}

pub struct ScriptedAgent {
    plays: Mutex<VecDeque<Play>>,
    /// How many messages the agent saw on each step.
    pub seen: Mutex<Vec<Vec<Message>>>,
}

impl ScriptedAgent {
    pub fn new(plays: impl IntoIterator<Item = Play>) -> Arc<ScriptedAgent> {
        Arc::new(ScriptedAgent { plays: Mutex::new(plays.into_iter().collect()), seen: Mutex::new(Vec::new()) })
    }
}

pub fn call(name: &str, arguments: &str) -> ToolCall {
    ToolCall { id: format!("call_{name}"), name: name.into(), arguments: arguments.into() }
}

#[async_trait]
impl Agent for ScriptedAgent {
    async fn act(&self, view: AgentView<'_>) -> Result<AgentTurn, AgentFailure> {
        self.seen.lock().unwrap().push(view.messages.to_vec());
        let play = self.plays.lock().unwrap().pop_front().unwrap_or(Play::Say("done"));
        let record = Some(ModelCall { attempts: 1, ..ModelCall::default() });
        match play {
            Play::Say(text) => Ok(AgentTurn { message: Message::assistant(text), call: record }),
            Play::Call(name, args) => {
                Ok(AgentTurn { message: Message::assistant_calls(None, vec![call(name, args)]), call: record })
            }
            Play::Fail(kind) => Err(AgentFailure::Model(ModelFailure {
                kind,
                message: format!("scripted failure {kind:?}"),
                call: ModelCall::default(),
            })),
            Play::GiveUp => Err(AgentFailure::Agent { message: "cannot continue".into(), call: None }),
            Play::Sleep(d) => {
                tokio::time::sleep(d).await;
                Ok(AgentTurn { message: Message::assistant("late"), call: record })
            }
            Play::SlowCall(d, name, args) => {
                tokio::time::sleep(d).await;
                Ok(AgentTurn { message: Message::assistant_calls(None, vec![call(name, args)]), call: record })
            }
            Play::Throttled(retries, wait) => {
                let deadline = parley_core::Deadline::current().expect("the session's deadline reaches its calls");
                let mut open = deadline.begin_call();
                for _ in 0..retries {
                    open.retrying(parley_core::FailureClass::RateLimited);
                }
                tokio::time::sleep(wait).await;
                Ok(AgentTurn { message: Message::assistant("late"), call: record })
            }
            Play::Panic => panic!("scripted panic"),
        }
    }
}

/// A counter: `add` adds to it, `broken` fails as an environment, the score is the counter.
pub struct Counter {
    pub fail_open: bool,
}

pub fn counter_tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "add".into(),
            description: "add n".into(),
            parameters: json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
                              "additionalProperties": false}),
            strict: true,
        },
        ToolSpec {
            name: "broken".into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
            strict: false,
        },
    ]
}

/// The user's own tool in dual control: a switch on the user's side.
pub fn user_tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "toggle".into(),
        description: "flip the switch".into(),
        parameters: json!({"type": "object"}),
        strict: false,
    }]
}

#[async_trait]
impl Environment for Counter {
    fn name(&self) -> &str {
        "counter"
    }

    async fn open(&self, _task: &Task) -> Result<Box<dyn EnvSession>, EnvError> {
        if self.fail_open {
            return Err(EnvError::new("the counter server is down"));
        }
        Ok(Box::new(CounterSession {
            tools: counter_tools().into(),
            user_tools: user_tools().into(),
            total: 0,
            switch: false,
        }))
    }
}

struct CounterSession {
    tools: ToolList,
    user_tools: ToolList,
    total: i64,
    switch: bool,
}

#[async_trait]
impl EnvSession for CounterSession {
    fn tools(&self) -> &ToolList {
        &self.tools
    }

    fn user_tools(&self) -> &ToolList {
        &self.user_tools
    }

    async fn call(&mut self, party: Party, name: &str, arguments: &Value) -> Result<ToolOutput, EnvError> {
        match name {
            "toggle" if party == Party::User => {
                self.switch = !self.switch;
                Ok(ToolOutput {
                    content: format!("switch {}", if self.switch { "on" } else { "off" }),
                    is_error: false,
                    write: true,
                })
            }
            "add" => {
                self.total += arguments["n"].as_i64().unwrap_or(0);
                Ok(ToolOutput { content: self.total.to_string(), is_error: false, write: true })
            }
            _ => Err(EnvError::new("the tool crashed")),
        }
    }

    async fn score(&mut self, _transcript: &[Message], _termination: Termination) -> Result<Reward, EnvError> {
        Ok(Reward::new(self.total as f64).with("switch", self.switch))
    }
}

/// Everything a session asked the store to keep.
#[derive(Default)]
pub struct MemoryStore {
    pub turns: Mutex<Vec<(SessionId, TurnRecord)>>,
    pub finished: Mutex<Vec<(SessionId, SessionOutcome)>>,
    pub fail_commits: bool,
    /// How long each commit takes.
    pub commit_delay: Duration,
    /// Sessions claimed by another owner since: their current fence.
    pub fences: Mutex<std::collections::HashMap<SessionId, Fence>>,
    /// Renewals asked for.
    pub renewals: Mutex<u64>,
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn release_claim(&self, _claim: Claim) -> Result<(), StoreError> {
        Ok(())
    }

    async fn create_run(
        &self,
        _spec: &RunSpec,
        _tasks: &[Arc<Task>],
        sessions: &[SessionSpec],
    ) -> Result<(RunId, Vec<SessionId>), StoreError> {
        Ok((1, (1..=sessions.len() as i64).collect()))
    }

    async fn create_claimed_run(
        &self,
        _spec: &RunSpec,
        _tasks: &[Arc<Task>],
        sessions: &[SessionSpec],
        _owner: &Owner,
    ) -> Result<(RunId, Vec<Claim>), StoreError> {
        Ok((1, (1..=sessions.len() as i64).map(|session| Claim { session, fence: Fence(1) }).collect()))
    }

    async fn claim_sessions(&self, _run: RunId, _owner: &Owner, _limit: usize) -> Result<Vec<Claim>, StoreError> {
        Ok(Vec::new())
    }

    async fn renew_claims(&self, _owner: &Owner) -> Result<u64, StoreError> {
        *self.renewals.lock().unwrap() += 1;
        Ok(0)
    }

    async fn release_claims(&self, _owner: &Owner) -> Result<u64, StoreError> {
        Ok(0)
    }

    async fn commit_turn(&self, claim: Claim, turn: TurnRecord) -> Result<(), StoreError> {
        tokio::time::sleep(self.commit_delay).await;
        self.check(claim)?;
        if self.fail_commits {
            return Err(StoreError::Database("disk full".into()));
        }
        self.turns.lock().unwrap().push((claim.session, turn));
        Ok(())
    }

    async fn finish_session(
        &self,
        claim: Claim,
        last_turn: TurnRecord,
        outcome: &SessionOutcome,
    ) -> Result<(), StoreError> {
        tokio::time::sleep(self.commit_delay).await;
        self.check(claim)?;
        let session = claim.session;
        self.turns.lock().unwrap().push((session, last_turn));
        self.finished.lock().unwrap().push((session, outcome.clone()));
        Ok(())
    }

    async fn finish_run(&self, _run: RunId, _status: parley_core::RunStatus) -> Result<(), StoreError> {
        Ok(())
    }
}

impl MemoryStore {
    /// Refuses a commit under a claim older than the session's fence, as a store does once
    /// another owner claimed the session.
    fn check(&self, claim: Claim) -> Result<(), StoreError> {
        match self.fences.lock().unwrap().get(&claim.session) {
            Some(&current) if current != claim.fence => {
                Err(StoreError::Fenced { session: claim.session, fence: claim.fence, current })
            }
            _ => Ok(()),
        }
    }

    /// The seqs of a session's messages, commit by commit.
    pub fn seqs(&self, session: SessionId) -> Vec<Vec<u32>> {
        let turns = self.turns.lock().unwrap();
        turns.iter().filter(|(s, _)| *s == session).map(|(_, t)| t.messages.iter().map(|m| m.seq).collect()).collect()
    }

    /// Every message stored for a session, in commit order.
    pub fn messages(&self, session: SessionId) -> Vec<Message> {
        let turns = self.turns.lock().unwrap();
        turns
            .iter()
            .filter(|(s, _)| *s == session)
            .flat_map(|(_, t)| t.messages.iter().map(|m| m.message.clone()))
            .collect()
    }
}

pub fn task() -> Arc<Task> {
    Arc::new(Task {
        index: 0,
        id: "t0".into(),
        messages: vec![Message::system("count"), Message::user("add two then stop")],
        tools: Default::default(),
        row: json!({}).into(),
    })
}

/// What the scripted user does on one turn.
#[derive(Clone)]
pub enum Line {
    Say(&'static str),
    Call(&'static str, &'static str),
    Fail,
}

pub struct ScriptedUser {
    lines: Mutex<VecDeque<Line>>,
    /// What the user saw on each turn.
    pub seen: Mutex<Vec<Vec<Message>>>,
}

impl ScriptedUser {
    pub fn new(lines: impl IntoIterator<Item = Line>) -> Arc<ScriptedUser> {
        Arc::new(ScriptedUser { lines: Mutex::new(lines.into_iter().collect()), seen: Mutex::new(Vec::new()) })
    }
}

#[async_trait]
impl UserSimulator for ScriptedUser {
    async fn respond(&self, view: UserView<'_>) -> Result<UserTurn, UserFailure> {
        self.seen.lock().unwrap().push(view.messages.to_vec());
        let line = self.lines.lock().unwrap().pop_front().unwrap_or(Line::Say("###STOP###"));
        let record = Some(ModelCall {
            attempts: 1,
            usage: parley_core::Usage { prompt_tokens: 10, completion_tokens: 1 },
            ..ModelCall::default()
        });
        match line {
            Line::Say(text) => {
                Ok(UserTurn { message: Message::user(text), stop: parley_core::UserStop::find(text), call: record })
            }
            Line::Call(name, args) => {
                Ok(UserTurn { message: Message::user_calls(vec![call(name, args)]), stop: None, call: record })
            }
            Line::Fail => Err(UserFailure::User { message: "the script ran dry".into(), call: None }),
        }
    }
}
