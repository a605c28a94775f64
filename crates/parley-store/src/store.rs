//! [`Store`]: the store a `--db` names, SQLite or PostgreSQL, as one type for every front end.
//! Each method is the backend's own, delegated; both give the same types back.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use parley_core::{
    Claim, Owner, Reward, RunId, RunSpec, RunStatus, SessionId, SessionOutcome, SessionSpec, SessionStore, StoreError,
    Task, TaskRow, TurnRecord,
};
use serde_json::Value;

use crate::{
    CallTotals, ClaimedSession, DbLocation, PageAt, PgStore, RunCounts, RunOutcomes, RunRecord, ScoreVersion,
    SessionFilter, SessionInfo, SessionRead, SessionRow, SessionScore, SessionShape, SqliteStore, StoreOptions,
    Transcript,
};

/// A store on SQLite or on PostgreSQL.
#[derive(Clone, Debug)]
pub enum Store {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl From<SqliteStore> for Store {
    fn from(store: SqliteStore) -> Store {
        Store::Sqlite(store)
    }
}

impl From<PgStore> for Store {
    fn from(store: PgStore) -> Store {
        Store::Postgres(store)
    }
}

/// Methods both stores have, with the same signature: each is the backend's, called through.
macro_rules! delegate {
    ($($(#[$doc:meta])* fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)*) => {
        $(
            $(#[$doc])*
            pub async fn $name(&self $(, $arg: $ty)*) -> $ret {
                match self {
                    Store::Sqlite(s) => s.$name($($arg),*).await,
                    Store::Postgres(s) => s.$name($($arg),*).await,
                }
            }
        )*
    };
}

impl Store {
    /// Opens the store at `db`: a SQLite file (created if missing) or a PostgreSQL database;
    /// either way its migrations are applied first.
    pub async fn open(db: &DbLocation, options: StoreOptions) -> Result<Store, StoreError> {
        Ok(match db {
            DbLocation::File(path) => Store::Sqlite(SqliteStore::open(path, options).await?),
            DbLocation::Postgres(url) => Store::Postgres(PgStore::open(url, options).await?),
        })
    }

    /// Reads every page of a SQLite file, so that nothing is recorded into a damaged one (a
    /// read of the damaged pages would fail later, and what was written beside them is at risk);
    /// a PostgreSQL server checks its own pages.
    pub async fn check_pages(&self) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(s) => s.check_pages().await,
            Store::Postgres(_) => Ok(()),
        }
    }

    delegate! {
        /// One run as stored.
        fn run(&self, run: RunId) -> Result<RunRecord, StoreError>;
        /// Every run, in id order.
        fn runs(&self) -> Result<Vec<RunRecord>, StoreError>;
        /// Every session of a run, in id order.
        fn sessions(&self, run: RunId) -> Result<Vec<SessionRow>, StoreError>;
        /// Sessions of a run with ids above `after`, in id order, at most `limit`.
        fn sessions_page(&self, run: RunId, after: i64, limit: usize) -> Result<Vec<SessionRow>, StoreError>;
        /// A page of sessions, each its row or why it cannot be read.
        fn sessions_page_checked(&self, run: RunId, after: i64, limit: usize) -> Result<Vec<SessionRead>, StoreError>;
        /// The sessions with these ids, in id order (those that exist).
        fn sessions_by_id(&self, ids: &[i64]) -> Result<Vec<SessionRow>, StoreError>;
        /// Those of these sessions with anything committed (a message, a tool call or a model
        /// call): the others have no transcript to read.
        fn sessions_with_turns(&self, ids: &[i64]) -> Result<HashSet<SessionId>, StoreError>;
        /// How many sessions the run has, and how many of them are finished.
        fn session_counts(&self, run: RunId) -> Result<(u64, u64), StoreError>;
        /// The run's sessions as its metrics see them.
        fn run_outcomes(&self, run: RunId) -> Result<RunOutcomes, StoreError>;
        /// The run a session belongs to.
        fn run_of(&self, session: SessionId) -> Result<RunId, StoreError>;
        /// At most `limit` of the run's task rows from task `from` on, with their indexes.
        fn task_rows_from(&self, run: RunId, from: i64, limit: usize) -> Result<Vec<(i64, TaskRow)>, StoreError>;
        /// A session's committed transcript.
        fn transcript(&self, session: SessionId) -> Result<Transcript, StoreError>;
        /// The newest score of a session by its environment's scorer.
        fn latest_score(&self, session: SessionId) -> Result<Option<Reward>, StoreError>;
        /// A run's model calls in figures: each party's tokens and latencies, in one pass.
        fn call_totals(&self, run: RunId) -> Result<CallTotals, StoreError>;
        /// Finished sessions as the training metrics read them, a page at a time.
        fn session_shapes(&self, run: RunId, after: i64, limit: usize) -> Result<Vec<SessionShape>, StoreError>;
        /// The owners holding live leases on the run's unfinished sessions.
        fn owners(&self, run: RunId) -> Result<Vec<(String, u64)>, StoreError>;
        /// Claims a page of the run's sessions nobody holds for `owner`, with their rows and who
        /// plays them, in id order.
        fn claim_page(&self, run: RunId, owner: &Owner, limit: usize) -> Result<Vec<ClaimedSession>, StoreError>;
        /// Ends a gone owner's leases on the run's sessions now.
        fn expire_owner(&self, run: RunId, owner: &str) -> Result<u64, StoreError>;
        /// Makes the run's sessions that failed outside the agent pending again.
        fn reopen_failed(&self, run: RunId) -> Result<u64, StoreError>;
        /// A new session sharing the first `at` messages of `source`.
        fn fork_session(&self, source: SessionId, at: u32) -> Result<SessionId, StoreError>;
        /// A re-score of a run, one version for every session given, or nothing.
        fn add_scores(&self, run: RunId, scores: &[(SessionId, Reward)], reward: &Value) -> Result<i64, StoreError>;
        /// The run's score versions, oldest first, with what each was scored with.
        fn score_versions(&self, run: RunId) -> Result<Vec<ScoreVersion>, StoreError>;
        /// Every score of version `version` of the run, by session.
        fn scores_at(&self, run: RunId, version: i64) -> Result<Vec<SessionScore>, StoreError>;
        /// Replaces the simulated user's faults recorded with each session given.
        fn set_user_faults(&self, faults: &[(SessionId, Vec<parley_core::review::UserFault>)]) -> Result<u64, StoreError>;
        /// Each task's passed and scored sessions, by task id, over every run of `environment`.
        fn pass_counts_by_task(&self, environment: &str) -> Result<Vec<(String, u64, u64)>, StoreError>;
        /// The stored judge reply for a request's hash.
        fn verdict(&self, hash: &str) -> Result<Option<String>, StoreError>;
        /// Stores a judge reply.
        fn record_verdict(&self, hash: String, model: String, reply: String) -> Result<(), StoreError>;
        /// Every run's session counts and mean reward (the viewer's list of runs).
        fn run_counts(&self) -> Result<Vec<RunCounts>, StoreError>;
        /// At most `limit` sessions of a run that pass `filter`, in id order, from `at`.
        fn sessions_filtered(
            &self,
            run: RunId,
            filter: &SessionFilter,
            at: PageAt,
            limit: usize
        ) -> Result<Vec<SessionRow>, StoreError>;
        /// How many sessions of a run pass `filter`.
        fn sessions_matching(&self, run: RunId, filter: &SessionFilter) -> Result<u64, StoreError>;
        /// One session with its run and fork origin.
        fn session_info(&self, session: SessionId) -> Result<SessionInfo, StoreError>;
        /// The other trials of the session's task and the sessions forked from it.
        fn related_sessions(&self, session: SessionId) -> Result<Vec<(SessionId, i64, bool)>, StoreError>;
        /// The id a run's task was stored under.
        fn task_id(&self, run: RunId, task_index: i64) -> Result<Option<String>, StoreError>;
        /// Waits for every acknowledged write to be durable, then closes.
        fn close(&self) -> Result<(), StoreError>;
    }

    /// Adds more tasks and their sessions to a run, in one transaction: a run over more tasks
    /// than fit in memory is recorded a batch at a time. The sessions are claimed by `owner`
    /// (fence 1) or unclaimed.
    pub async fn extend_run(
        &self,
        run: RunId,
        tasks: &[Arc<Task>],
        sessions: &[SessionSpec],
        owner: Option<&Owner>,
    ) -> Result<Vec<Claim>, StoreError> {
        let added = match self {
            Store::Sqlite(s) => s.insert_sessions(Ok(run), tasks, sessions, owner).await,
            Store::Postgres(s) => s.insert_sessions(Ok(run), tasks, sessions, owner).await,
        };
        Ok(added?.1)
    }

    /// The newest run with a session not finished, if any.
    pub async fn newest_unfinished_run(&self) -> Result<Option<RunId>, StoreError> {
        for run in self.runs().await?.iter().rev() {
            let (total, finished) = self.session_counts(run.id).await?;
            if finished < total {
                return Ok(Some(run.id));
            }
        }
        Ok(None)
    }

    fn seam(&self) -> &dyn SessionStore {
        match self {
            Store::Sqlite(s) => s,
            Store::Postgres(s) => s,
        }
    }
}

#[async_trait]
impl SessionStore for Store {
    async fn create_run(
        &self,
        spec: &RunSpec,
        tasks: &[Arc<Task>],
        sessions: &[SessionSpec],
    ) -> Result<(RunId, Vec<SessionId>), StoreError> {
        self.seam().create_run(spec, tasks, sessions).await
    }

    async fn create_claimed_run(
        &self,
        spec: &RunSpec,
        tasks: &[Arc<Task>],
        sessions: &[SessionSpec],
        owner: &Owner,
    ) -> Result<(RunId, Vec<Claim>), StoreError> {
        self.seam().create_claimed_run(spec, tasks, sessions, owner).await
    }

    async fn claim_sessions(&self, run: RunId, owner: &Owner, limit: usize) -> Result<Vec<Claim>, StoreError> {
        self.seam().claim_sessions(run, owner, limit).await
    }

    async fn renew_claims(&self, owner: &Owner) -> Result<u64, StoreError> {
        self.seam().renew_claims(owner).await
    }

    async fn release_claims(&self, owner: &Owner) -> Result<u64, StoreError> {
        self.seam().release_claims(owner).await
    }

    async fn release_claim(&self, claim: Claim) -> Result<(), StoreError> {
        self.seam().release_claim(claim).await
    }

    async fn commit_turn(&self, claim: Claim, turn: TurnRecord) -> Result<(), StoreError> {
        self.seam().commit_turn(claim, turn).await
    }

    async fn finish_session(
        &self,
        claim: Claim,
        last_turn: TurnRecord,
        outcome: &SessionOutcome,
    ) -> Result<(), StoreError> {
        self.seam().finish_session(claim, last_turn, outcome).await
    }

    async fn finish_run(&self, run: RunId, status: RunStatus) -> Result<(), StoreError> {
        self.seam().finish_run(run, status).await
    }
}
