//! The parties a served session is driven by, observed for `/metrics`: each party as the
//! runtime built it, wrapped so that the latency of every model call (read from the call's own
//! record) and of every store commit lands in the service's histograms.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use parley_core::review::UserFault;
use parley_core::{
    Agent, AgentFailure, AgentTurn, AgentView, Claim, Message, Owner, RunId, RunSpec, SessionId, SessionOutcome,
    SessionSpec, SessionStore, StoreError, Task, ToolSpec, TurnRecord, UserFailure, UserSimulator, UserTurn, UserView,
};
use parley_engine::Parties;

use crate::metrics::{Histogram, Metrics};

/// `parties` with every model call and commit counted in `metrics`.
pub fn observed(parties: &Parties, metrics: &Arc<Metrics>) -> Parties {
    Parties {
        agent: agent(parties.agent.clone(), metrics),
        user: parties
            .user
            .clone()
            .map(|inner| Arc::new(ObservedUser { inner, metrics: metrics.clone() }) as Arc<dyn UserSimulator>),
        environment: parties.environment.clone(),
        store: Arc::new(ObservedStore { inner: parties.store.clone(), metrics: metrics.clone() }),
        leases: parties.leases.clone(),
    }
}

/// `inner` with every model call counted in `metrics`.
pub fn agent(inner: Arc<dyn Agent>, metrics: &Arc<Metrics>) -> Arc<dyn Agent> {
    Arc::new(ObservedAgent { inner, metrics: metrics.clone() })
}

fn observe(histogram: &Histogram, call: Option<&parley_core::ModelCall>) {
    if let Some(call) = call {
        histogram.observe(call.latency);
    }
}

struct ObservedAgent {
    inner: Arc<dyn Agent>,
    metrics: Arc<Metrics>,
}

#[async_trait]
impl Agent for ObservedAgent {
    fn system_prompt(&self) -> Option<&str> {
        self.inner.system_prompt()
    }

    fn greeting(&self) -> Option<&str> {
        self.inner.greeting()
    }

    async fn act(&self, view: AgentView<'_>) -> Result<AgentTurn, AgentFailure> {
        let turn = self.inner.act(view).await;
        match &turn {
            Ok(turn) => observe(&self.metrics.agent_calls, turn.call.as_ref()),
            Err(AgentFailure::Model(failure)) => observe(&self.metrics.agent_calls, Some(&failure.call)),
            Err(_) => {}
        }
        turn
    }
}

struct ObservedUser {
    inner: Arc<dyn UserSimulator>,
    metrics: Arc<Metrics>,
}

#[async_trait]
impl UserSimulator for ObservedUser {
    async fn respond(&self, view: UserView<'_>) -> Result<UserTurn, UserFailure> {
        let turn = self.inner.respond(view).await;
        match &turn {
            Ok(turn) => observe(&self.metrics.user_calls, turn.call.as_ref()),
            Err(UserFailure::Model(failure)) => observe(&self.metrics.user_calls, Some(&failure.call)),
            Err(UserFailure::User { call, .. }) => observe(&self.metrics.user_calls, call.as_ref()),
        }
        turn
    }

    fn stopped_too_early(&self, messages: &[Message], writes: &[u32]) -> bool {
        self.inner.stopped_too_early(messages, writes)
    }

    fn instructions(&self, task: &Task, tools: &[ToolSpec]) -> Option<String> {
        self.inner.instructions(task, tools)
    }

    async fn review(&self, task: &Task, transcript: &[Message], tools: &[ToolSpec]) -> Vec<UserFault> {
        self.inner.review(task, transcript, tools).await
    }
}

struct ObservedStore {
    inner: Arc<dyn SessionStore>,
    metrics: Arc<Metrics>,
}

#[async_trait]
impl SessionStore for ObservedStore {
    async fn create_run(
        &self,
        spec: &RunSpec,
        tasks: &[Arc<Task>],
        sessions: &[SessionSpec],
    ) -> Result<(RunId, Vec<SessionId>), StoreError> {
        self.inner.create_run(spec, tasks, sessions).await
    }

    async fn create_claimed_run(
        &self,
        spec: &RunSpec,
        tasks: &[Arc<Task>],
        sessions: &[SessionSpec],
        owner: &Owner,
    ) -> Result<(RunId, Vec<Claim>), StoreError> {
        self.inner.create_claimed_run(spec, tasks, sessions, owner).await
    }

    async fn claim_sessions(&self, run: RunId, owner: &Owner, limit: usize) -> Result<Vec<Claim>, StoreError> {
        self.inner.claim_sessions(run, owner, limit).await
    }

    async fn renew_claims(&self, owner: &Owner) -> Result<u64, StoreError> {
        self.inner.renew_claims(owner).await
    }

    async fn release_claims(&self, owner: &Owner) -> Result<u64, StoreError> {
        self.inner.release_claims(owner).await
    }

    async fn release_claim(&self, claim: Claim) -> Result<(), StoreError> {
        self.inner.release_claim(claim).await
    }

    async fn commit_turn(&self, claim: Claim, turn: TurnRecord) -> Result<(), StoreError> {
        let started = Instant::now();
        let committed = self.inner.commit_turn(claim, turn).await;
        self.metrics.commits.observe(started.elapsed());
        committed
    }

    async fn finish_session(
        &self,
        claim: Claim,
        last_turn: TurnRecord,
        outcome: &SessionOutcome,
    ) -> Result<(), StoreError> {
        let started = Instant::now();
        let committed = self.inner.finish_session(claim, last_turn, outcome).await;
        self.metrics.commits.observe(started.elapsed());
        committed
    }

    async fn finish_run(&self, run: RunId, status: parley_core::RunStatus) -> Result<(), StoreError> {
        self.inner.finish_run(run, status).await
    }
}
