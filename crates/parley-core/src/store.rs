//! The store seam: every turn is committed before the next one starts.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::message::Message;
use crate::model::ModelCall;
use crate::reward::Reward;
use crate::session::{FailureClass, Termination};
use crate::task::Task;

pub type RunId = i64;
pub type SessionId = i64;

/// What a run was started with: its config as JSON (never with secrets) and its tasks.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub environment: String,
    pub config: Value,
}

/// One session to be created: a task and a trial of it, and who plays its agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionSpec {
    pub task_index: usize,
    pub trial: u32,
    pub seed: u64,
    pub player: Player,
}

/// Who plays a session's agent. A session played by a policy other than the run's own is
/// never continued by the run's agent (a resume or a worker): one trajectory, one policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Player {
    /// The run's own agent, against the run's endpoint.
    #[default]
    Run,
    /// A trainer, step by step (an OpenEnv episode): only it can continue the session.
    Trainer,
    /// The policy behind the URL a served row named for itself (`policy_base_url`).
    RowPolicy,
}

impl Player {
    /// As stored: `NULL` for the run's own agent.
    pub fn as_stored(self) -> Option<&'static str> {
        match self {
            Player::Run => None,
            Player::Trainer => Some("trainer"),
            Player::RowPolicy => Some("row_policy"),
        }
    }

    /// Read back from the store; a value this build does not know is another policy all the
    /// same, so never the run's.
    pub fn from_stored(stored: Option<&str>) -> Player {
        match stored {
            None => Player::Run,
            Some("row_policy") => Player::RowPolicy,
            Some(_) => Player::Trainer,
        }
    }

    /// What a resume says of a session it closes rather than continue.
    pub fn not_continued(self) -> &'static str {
        match self {
            Player::Run => "",
            Player::Trainer => {
                "played step by step by a trainer (OpenEnv), whose policy alone may continue it: closed, not continued \
                 by the run's agent"
            }
            Player::RowPolicy => {
                "played by the policy URL its row named: closed, not continued by the run's agent against the run's \
                 endpoint"
            }
        }
    }
}

/// Where a session stands: waiting to be driven (or being driven), or ended with a termination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionStatus {
    Pending,
    Finished,
}

impl SessionStatus {
    pub const ALL: [SessionStatus; 2] = [SessionStatus::Pending, SessionStatus::Finished];

    /// As stored in the `status` column of `sessions`.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Pending => "pending",
            SessionStatus::Finished => "finished",
        }
    }

    pub fn parse(s: &str) -> Option<SessionStatus> {
        SessionStatus::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

impl std::fmt::Display for SessionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, so that a table's `{:<9}` lines it up.
        f.pad(self.as_str())
    }
}

/// Where a run stands: being recorded, ended with every session driven, or stopped early (a
/// signal, a cancel) with sessions left for a resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunStatus {
    Running,
    Finished,
    Interrupted,
}

impl RunStatus {
    pub const ALL: [RunStatus; 3] = [RunStatus::Running, RunStatus::Finished, RunStatus::Interrupted];

    /// As stored in the `status` column of `runs`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Finished => "finished",
            RunStatus::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        RunStatus::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, so that a table's `{:<11}` lines it up.
        f.pad(self.as_str())
    }
}

/// One message with the model call that produced it, if any. The call is boxed: most messages
/// (tool results, openings) have none, and every session in flight holds its turn's records.
#[derive(Debug, Clone)]
pub struct MessageRecord {
    pub seq: u32,
    pub message: Message,
    pub call: Option<Box<ModelCall>>,
}

/// One tool call and its output, recorded beside the tool message that carries the output.
#[derive(Debug, Clone)]
pub struct ToolCallRecord {
    /// The seq of the tool-result message.
    pub seq: u32,
    /// Who made the call: the agent, or the user in dual control.
    pub party: crate::view::Party,
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    pub output: String,
    pub is_error: bool,
    pub write: bool,
    /// The call never reached the environment (bad JSON, unknown tool, schema violation).
    pub malformed: bool,
    /// The output was longer than the session's limit and was cut off.
    pub truncated: bool,
    pub duration: Duration,
}

/// Everything one turn added to a session: committed atomically.
#[derive(Debug, Clone, Default)]
pub struct TurnRecord {
    pub messages: Vec<MessageRecord>,
    pub tool_calls: Vec<ToolCallRecord>,
}

impl TurnRecord {
    /// Adds a later turn's records after this one's, to be committed together.
    pub fn append(&mut self, later: TurnRecord) {
        self.messages.extend(later.messages);
        self.tool_calls.extend(later.tool_calls);
    }
}

/// How a session ended.
#[derive(Debug, Clone)]
pub struct SessionOutcome {
    pub termination: Termination,
    pub reward: Option<Reward>,
    pub error: Option<String>,
    /// Set when the session failed for a reason outside the agent (see [`FailureClass`]).
    pub failure: Option<FailureClass>,
    pub steps: u32,
    /// Model-call attempts beyond the first, over the whole session (the failed call's included).
    pub retries: u32,
    pub duration: Duration,
    /// Why the token ids of the messages the session produced are not one contiguous sequence,
    /// when they are not (see [`crate::tokens::first_discontiguous`]).
    pub token_contiguity: Option<String>,
    /// The simulated user's own faults, as its review found them (see [`crate::review`]).
    pub user_faults: Vec<crate::review::UserFault>,
}

/// The generation of a session's claim. Every claim raises it by one, so a write made under an
/// older claim can be told apart from one made under the current claim and refused (fencing). A
/// session that was never claimed is at [`Fence::UNCLAIMED`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(pub i64);

impl Fence {
    pub const UNCLAIMED: Fence = Fence(0);
}

impl std::fmt::Display for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The right to write one session: its id and the fence of the claim it is driven under. Every
/// commit carries one, and the store refuses it with [`StoreError::Fenced`] once another owner
/// has claimed the session since.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Claim {
    pub session: SessionId,
    pub fence: Fence,
}

impl Claim {
    /// A session driven without a claim: accepted only while nobody has ever claimed it.
    pub fn unclaimed(session: SessionId) -> Claim {
        Claim { session, fence: Fence::UNCLAIMED }
    }
}

/// A driver of sessions (a process, or one of many machines sharing a store), and how long its
/// claims hold without renewal. A claim whose lease has run out may be taken by another owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub id: String,
    pub lease: Duration,
}

impl Owner {
    /// Long enough that a busy process renews well before it runs out, short enough that a
    /// killed process's sessions can be resumed half a minute later.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

    /// An owner with an id no other process has: the host, the process id and the time it
    /// started, to the nanosecond, with a counter for owners made within one process.
    pub fn new(lease: Duration) -> Owner {
        use std::sync::atomic::{AtomicU64, Ordering};
        static MADE: AtomicU64 = AtomicU64::new(0);
        let host = std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_owned()))
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into());
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        Owner { id: format!("{host}:{}:{nanos}:{n}", std::process::id()), lease }
    }

    /// How often a live owner renews its claims: three times per lease, so that one late or
    /// failed renewal does not lose them.
    pub fn renew_every(&self) -> Duration {
        self.lease / 3
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Database(String),
    /// The session was claimed by another owner after the claim this write was made under: the
    /// write was refused whole, and the session belongs to the other owner now.
    #[error(
        "session {session} was claimed by another owner since this one claimed it (fence {fence}, now {current}): \
         this process no longer drives it"
    )]
    Fenced { session: SessionId, fence: Fence, current: Fence },
    #[error("the store's writer has stopped: {0}")]
    WriterGone(String),
    #[error("not found: {0}")]
    NotFound(String),
    /// The database file cannot serve as Parley's store; the message names the file and the fix.
    #[error("{message}")]
    Unusable { problem: Unusable, message: String },
}

/// Why a database file cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// Not a SQLite file, or a SQLite file of another program.
    NotParley,
    /// Written by a newer Parley, with a schema this build does not know.
    NewerSchema,
    /// The file or its folder cannot be written.
    ReadOnly,
    /// Another process holds the write lock for longer than the busy timeout.
    Locked,
    /// The path is a directory, not a file.
    Directory,
    /// The disk (or the file system's quota) is full.
    DiskFull,
    /// The file is damaged: SQLite found malformed pages, or text that is not UTF-8.
    Corrupt,
    /// The process has as many files open as its limit allows, so the database cannot be opened.
    OutOfFiles,
}

/// Where sessions are kept, and who drives each.
///
/// Ownership: a session is driven under a [`Claim`] taken in the store. A new run's sessions are
/// created claimed by their creator ([`create_claimed_run`](SessionStore::create_claimed_run));
/// a resume claims the unfinished sessions nobody holds ([`claim_sessions`](SessionStore::claim_sessions));
/// a live owner renews all its leases at once ([`renew_claims`](SessionStore::renew_claims)) and
/// releases them at its end. Every commit carries its claim and is checked in the transaction
/// that writes it, so a commit under a claim another owner has taken over is refused whole
/// ([`StoreError::Fenced`]).
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Creates a run with its tasks and sessions, none of them claimed; returns the run id and
    /// one id per session. For a process that owns the database alone (tests, tools); a run that
    /// others may resume uses [`create_claimed_run`](SessionStore::create_claimed_run).
    async fn create_run(
        &self,
        spec: &RunSpec,
        tasks: &[Arc<Task>],
        sessions: &[SessionSpec],
    ) -> Result<(RunId, Vec<SessionId>), StoreError>;

    /// Creates a run whose sessions are claimed by `owner`, in the same transaction; returns the
    /// run id and one claim per session, in the order of `sessions`.
    async fn create_claimed_run(
        &self,
        spec: &RunSpec,
        tasks: &[Arc<Task>],
        sessions: &[SessionSpec],
        owner: &Owner,
    ) -> Result<(RunId, Vec<Claim>), StoreError>;

    /// Claims up to `limit` unfinished sessions of a run whose claim is absent or expired, for
    /// `owner`, raising each one's fence; the claims, in id order. Sessions another owner holds
    /// under a live lease are left to it.
    async fn claim_sessions(&self, run: RunId, owner: &Owner, limit: usize) -> Result<Vec<Claim>, StoreError>;

    /// Extends the lease of every unfinished session `owner` still holds, in one write; returns
    /// how many it holds.
    async fn renew_claims(&self, owner: &Owner) -> Result<u64, StoreError>;

    /// Gives up every claim of `owner`, so another owner may take its unfinished sessions at
    /// once rather than after the lease; returns how many were released.
    async fn release_claims(&self, owner: &Owner) -> Result<u64, StoreError>;

    /// Gives up one claim (a session cancelled where it was, its committed turns kept), so that
    /// a resume may take the session at once, while its owner goes on with others. A claim
    /// another owner has taken since (a higher fence) is left alone.
    async fn release_claim(&self, claim: Claim) -> Result<(), StoreError>;

    /// Makes one turn durable under `claim`. Returns once it is committed.
    async fn commit_turn(&self, claim: Claim, turn: TurnRecord) -> Result<(), StoreError>;

    /// Records how a session ended, with its final turn, in one commit under `claim`.
    async fn finish_session(
        &self,
        claim: Claim,
        last_turn: TurnRecord,
        outcome: &SessionOutcome,
    ) -> Result<(), StoreError>;

    /// Marks the run ended: [`RunStatus::Finished`], or [`RunStatus::Interrupted`] when it stopped
    /// with sessions left for a resume.
    async fn finish_run(&self, run: RunId, status: RunStatus) -> Result<(), StoreError>;
}
