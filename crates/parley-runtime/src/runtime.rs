//! The assembly of a run: settings → endpoints → environment → agent → user → store →
//! scheduler → results. Every front end starts its sessions here, so a session is driven the
//! same way whoever asked for it.
//!
//! [`Runtime::start`] builds the parties (without a `--base-url` it starts the built-in stub
//! and points the agent at it), takes an [`Owner`] for this process and spawns the renewal of
//! its leases, which lives until [`Runtime::stop`] releases its claims. A run is recorded first
//! ([`Runtime::create_run`], a batch of tasks per transaction) and then driven from the store:
//! a new run and a resume go the same way, so memory does not grow with the number of tasks.
//!
//! [`Runtime::pending`] yields a run's unfinished sessions as jobs, claimed a page (twice the
//! concurrency, within bounds) at a time as the scheduler takes them, each with its fence. Claims
//! of a process of this host that is gone are expired first, so a resume after a crash takes its
//! sessions at once; those a live owner holds are left to it. On a resume, one query per page
//! says which claimed sessions have committed turns: only those have their transcripts read (as
//! their [`Prior`]); the others start afresh. A session another policy played ([`Player`]: an
//! OpenEnv trainer, a row's own policy URL) is closed where it stopped (`cancelled`, no turn
//! added) rather than continued, so no trajectory holds two policies' turns. A page claimed
//! before the process's leases may have lapsed ([`Leases::hold`]) is checked by an empty commit
//! per session, and those refused as fenced are skipped.
//!
//! [`Runtime::drive`] runs jobs through the scheduler under the caller's [`Stop`];
//! [`Runtime::spawn`] drives one session on a task of its own (a served row, an OpenEnv
//! episode, a fork). Those two are the only ways a session is started.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agent_tool_calling::{ToolCallingAgent, ToolCallingConfig};
use anyhow::Context;
use futures::{Stream, StreamExt};
use parley_core::{
    Agent, Claim, Owner, Player, RunId, RunSpec, RunStatus, SessionId, SessionOutcome, SessionSpec, SessionStore,
    StoreError, Termination, TurnRecord, UserSimulator, stable_seed,
};
use parley_engine::{Job, Leases, Parties, Prior, Renewal, Scheduler, SessionResult, Stop};
use parley_llm::{ChatClient, EndpointConfig};
use parley_store::{ClaimedSession, Store, Transcript};
use tokio_util::sync::CancellationToken;

use crate::environment::Environments;
use crate::error::usage;
use crate::settings::{AgentKind, RunSettings, ToolMode, UserKind, UserReview};
use crate::tasks::{StoredTasks, TaskSource};

/// Tasks (with their trials) recorded per store transaction when a run is created.
const CREATE_BATCH: usize = 1024;
/// Sessions claimed at once when they are driven: twice the concurrency, so that a claim is
/// rarely waited for, and few enough that other processes driving the same run share its
/// sessions rather than find them all taken; within these bounds.
const CLAIM_PAGE: (usize, usize) = (16, 1024);

/// What a run needs while it executes: the store, the three parties, and the built-in stub's
/// shutdown when it was started.
pub struct Runtime {
    /// What the runtime was started with: every session it records and drives follows them.
    pub settings: RunSettings,
    pub store: Arc<Store>,
    pub parties: Parties,
    pub base_url: String,
    /// The agent's system prompt in effect: the settings', or the environment's policy.
    pub system_prompt: Option<String>,
    /// Who this process is to the store: every session it drives, it drives under this owner's
    /// claim, renewed while the runtime lives.
    pub owner: Owner,
    /// The task renewing the owner's leases, until [`Runtime::stop`] takes it.
    renewal: Mutex<Option<tokio::task::JoinHandle<()>>>,
    shutdown: CancellationToken,
    environments: Environments,
    /// How the run's tool-calling agent is made, so that one like it can be made for another
    /// policy URL ([`Runtime::policy_agent`]); `None` for the oracle.
    policy: Option<(ToolCallingConfig, EndpointConfig)>,
}

/// A run just recorded.
#[derive(Debug, Clone)]
pub struct Created {
    pub run: RunId,
    pub tasks: u64,
    pub sessions: u64,
    /// Every task of the source was recorded (not so when the recording was stopped).
    pub whole: bool,
    /// With a `--budget`, the tasks' ids in task order, which [`Runtime::drive_budget`] draws
    /// sessions from (no session is recorded up front); empty otherwise.
    pub task_ids: Vec<String>,
}

impl Runtime {
    /// Starts what the settings ask for, driving sessions as their front end wants
    /// ([`RunSettings::front`], stored with the run, so that a resume drives them alike).
    pub async fn start(settings: &RunSettings, store: impl Into<Store>) -> anyhow::Result<Runtime> {
        // With no endpoint, the stub plays some sessions' gold actions, so a first run scores a spread.
        let scripts = match settings.base_url {
            None => crate::rehearsal::scripts(settings)?,
            Some(_) => None,
        };
        Runtime::start_with_stub(settings, store, parley_stub::StubConfig { scripts, ..Default::default() }).await
    }

    /// [`Runtime::start`], with the built-in stub (started when the settings name no
    /// `base_url`) answering by `stub` rather than by its defaults: a probe's script, say.
    pub async fn start_with_stub(
        settings: &RunSettings,
        store: impl Into<Store>,
        stub: parley_stub::StubConfig,
    ) -> anyhow::Result<Runtime> {
        let front = settings.front;
        let store = store.into();
        let shutdown = CancellationToken::new();
        let base_url = match &settings.base_url {
            Some(url) => url.clone(),
            None => start_stub(stub, shutdown.clone()).await?,
        };
        // The environment's judge defaults to the agent's endpoint, the in-process stub included,
        // unless the policy serves the agent alone.
        let judge_default = (!front.policy_for_agent_only).then(|| base_url.clone());
        let resolved = RunSettings { base_url: judge_default, ..settings.clone() };
        let mut environments = Environments::open(&resolved, Some(&store)).await?;
        // The oracle needs no prompt; a model agent gets the settings' or the environment's.
        let system_prompt = match settings.agent {
            AgentKind::Oracle => None,
            AgentKind::ToolCalling => settings.system_prompt.clone().or_else(|| environments.policy.clone()),
        };
        let mut policy = None;
        let agent: Arc<dyn Agent> = match settings.agent {
            AgentKind::Oracle => Arc::new(agent_oracle::Oracle),
            AgentKind::ToolCalling => {
                let mut ranks: Vec<Arc<dyn parley_core::ModelClient>> = Vec::new();
                for url in std::iter::once(&base_url).chain(&settings.ranks) {
                    let client = ChatClient::new(&settings.policy_endpoint(url.clone()))
                        .map_err(|e| usage(format!("--base-url {url}: {e}")))?;
                    ranks.push(Arc::new(client));
                }
                let client: Arc<dyn parley_core::ModelClient> =
                    if ranks.len() == 1 { ranks.remove(0) } else { Arc::new(crate::ranks::Ranked::new(ranks)) };
                let config = ToolCallingConfig {
                    model: settings.model.clone(),
                    system_prompt: system_prompt.clone(),
                    sampling: settings.sampling.clone(),
                    seed_per_session: true,
                    json_tools: settings.tool_mode == ToolMode::Json,
                    greeting: settings.greeting.clone(),
                    sampling_from_row: front.sampling_from_row,
                };
                // A rollout's own policy URL is the policy all the same: its token ids are captured too.
                policy = Some((config.clone(), settings.policy_endpoint(String::new())));
                Arc::new(ToolCallingAgent::new(client, config))
            }
        };
        // A user the environment needs (Gymnasium observations) stands in when none is asked for.
        if front.policy_for_agent_only && settings.user.kind == UserKind::Llm && settings.user.base_url.is_none() {
            return Err(usage(
                "the simulated user needs an endpoint of its own here: pass --user-base-url (its calls never go to \
                 the policy)",
            )
            .into());
        }
        let user = match user_simulator(settings, &base_url, &store).await? {
            Some(user) => Some(user),
            None => environments.user.clone(),
        };
        let user = reviewed(user, &resolved, &store, &mut environments)?;
        let store = Arc::new(store);
        let owner = Owner::new(lease());
        let renewal = Renewal::new(store.clone(), owner.clone());
        let leases = renewal.leases.clone();
        let parties =
            Parties { agent, user, environment: environments.environment.clone(), store: store.clone(), leases };
        let renewal = renewal.spawn(shutdown.clone());
        let renewal = Mutex::new(Some(renewal));
        let settings = settings.clone();
        Ok(Runtime {
            settings,
            store,
            parties,
            base_url,
            system_prompt,
            owner,
            renewal,
            shutdown,
            environments,
            policy,
        })
    }

    /// The run's agent, but talking to the policy at `base_url`: for a trainer that gives each
    /// rollout a policy URL of its own (its proxy that captures tokens). Everything else (model
    /// name, sampling, prompt, timeouts, retries, token ids) is the run's; the run's key goes
    /// along only when `with_key` (a URL the operator trusts with it). The simulated user and
    /// the judge keep their own endpoints.
    pub fn policy_agent(&self, base_url: &str, with_key: bool) -> Result<Arc<dyn Agent>, crate::UsageError> {
        let Some((config, endpoint)) = &self.policy else {
            return Err(usage("the agent plays no model (--agent oracle): a policy URL has nothing to drive"));
        };
        let api_key_env = endpoint.api_key_env.clone().filter(|_| with_key);
        let endpoint = EndpointConfig { base_url: base_url.to_owned(), api_key_env, ..endpoint.clone() };
        let client = ChatClient::new(&endpoint).map_err(|e| usage(format!("policy URL {base_url}: {e}")))?;
        Ok(Arc::new(ToolCallingAgent::new(Arc::new(client), config.clone())))
    }

    /// A task row a trainer sent, as the session it names: in an environment that brings its
    /// own tasks (tau2's domains), a row naming one of them by `id` plays that task (its
    /// opening, and its scenario for the simulated user), the row's own fields (its sampling,
    /// NeMo Gym's indices) laid over the task's row.
    pub fn served_task(&self, sent: parley_core::Task) -> parley_core::Task {
        let Some(own) = self.environment_tasks().and_then(|tasks| tasks.iter().find(|t| t.id == sent.id)) else {
            return sent;
        };
        let mut row = own.row.to_value();
        if let (Some(into), serde_json::Value::Object(from)) = (row.as_object_mut(), sent.row.to_value()) {
            into.extend(from);
        }
        let messages = if sent.messages.is_empty() { own.messages.clone() } else { sent.messages };
        let tools = if sent.tools.is_empty() { own.tools.clone() } else { sent.tools };
        parley_core::Task { index: sent.index, id: sent.id, messages, tools, row: row.into() }
    }

    /// The tasks the environment brings (tau2's domains), when it brings its own.
    pub fn environment_tasks(&self) -> Option<&[Arc<parley_core::Task>]> {
        self.environments.tasks.as_deref()
    }

    /// Records a new run and every session of it (each task × trial, the trials of a task
    /// adjacent, as NeMo Gym orders them), a batch of tasks per transaction, so that the tasks
    /// are never all in memory. The settings stored with the run carry the system prompt in
    /// effect, which is what every transcript of it starts with. The sessions are claimed as
    /// they are driven (see [`Runtime::pending`]).
    ///
    /// Once `stop` is cancelled no further batch is recorded: the run holds the tasks recorded
    /// so far, and [`Created::whole`] is false.
    pub async fn create_run(&self, source: TaskSource, stop: &CancellationToken) -> anyhow::Result<Created> {
        let settings = &self.settings;
        let spec = self.run_spec()?;
        let mut tasks = source.tasks(self.environments.tasks.as_deref())?;
        let mut created: Option<Created> = None;
        // With a budget, the sessions are drawn as the run goes (`drive_budget`): none up front.
        let budgeted = settings.budget.is_some();
        let trials = if budgeted { 0 } else { settings.trials };
        let mut task_ids = Vec::new();
        loop {
            let batch: Vec<_> = tasks.by_ref().take(CREATE_BATCH).collect::<anyhow::Result<_>>()?;
            if batch.is_empty() && created.is_some() {
                break;
            }
            if let Some(c) = created.as_mut().filter(|_| stop.is_cancelled()) {
                c.whole = false;
                break;
            }
            if budgeted {
                task_ids.extend(batch.iter().map(|t| t.id.clone()));
            }
            let specs: Vec<SessionSpec> = batch
                .iter()
                .flat_map(|t| {
                    (0..trials).map(|trial| SessionSpec {
                        task_index: t.index,
                        trial,
                        seed: stable_seed(&t.id, trial),
                        player: Player::Run,
                    })
                })
                .collect();
            let sessions = specs.len() as u64;
            match &mut created {
                None => {
                    if batch.is_empty() {
                        return Err(usage("no tasks to run").into());
                    }
                    let (run, _) = self.store.create_run(&spec, &batch, &specs).await.context("recording the run")?;
                    created =
                        Some(Created { run, tasks: batch.len() as u64, sessions, whole: true, task_ids: Vec::new() });
                }
                Some(c) => {
                    self.store.extend_run(c.run, &batch, &specs, None).await.context("recording the run's sessions")?;
                    c.tasks += batch.len() as u64;
                    c.sessions += sessions;
                }
            }
        }
        let mut created = created.expect("the loop records a first batch or returns");
        created.task_ids = task_ids;
        Ok(created)
    }

    /// Spends the run's `--budget` of sessions on its tasks, a round of `--concurrency` sessions
    /// at a time: each round's tasks are drawn by the run's sampler (uniform: the tasks in turn;
    /// learnable: by the outcomes so far, this run's and the store's earlier runs' of the same
    /// environment, see [`Learnable`](crate::curriculum::Learnable)), recorded, driven, and
    /// their outcomes taken into the next draw. `sink` sees each session's result as it ends.
    /// Once `stop` drains, no further round is drawn. Returns the sessions drawn.
    pub async fn drive_budget(
        &self,
        run: RunId,
        task_ids: &[String],
        stop: Stop,
        mut sink: impl FnMut(&SessionResult) -> anyhow::Result<()>,
    ) -> anyhow::Result<u64> {
        use crate::curriculum::{Learnable, Sampler};
        let settings = &self.settings;
        let budget = settings.budget.unwrap_or(task_ids.len() as u64 * u64::from(settings.trials));
        if task_ids.is_empty() {
            return Err(usage("no tasks to draw sessions from").into());
        }
        let history = match settings.sampler {
            Sampler::Learnable => self.store.pass_counts_by_task(&settings.env.to_string()).await?,
            Sampler::Uniform => Vec::new(),
        };
        let mut learnable = Learnable::new(task_ids, &history, run as u64);
        let mut trials = vec![0u32; task_ids.len()];
        let (mut spent, mut turn) = (0u64, 0usize);
        while spent < budget && !stop.is_stopping() {
            let round = (budget - spent).min(settings.concurrency as u64);
            let specs: Vec<SessionSpec> = (0..round)
                .map(|_| {
                    let task = match settings.sampler {
                        Sampler::Learnable => learnable.draw(),
                        Sampler::Uniform => {
                            turn += 1;
                            (turn - 1) % task_ids.len()
                        }
                    };
                    let trial = trials[task];
                    trials[task] += 1;
                    SessionSpec {
                        task_index: task,
                        trial,
                        seed: stable_seed(&task_ids[task], trial),
                        player: Player::Run,
                    }
                })
                .collect();
            self.store.extend_run(run, &[], &specs, None).await.context("recording the run's next sessions")?;
            spent += round;
            let pending = self.pending(run, false).await?;
            let mut results = self.drive(pending.jobs, stop.clone());
            while let Some(result) = results.next().await {
                learnable.take(result.task.index, &result.outcome);
                sink(&result)?;
            }
            if let Some(e) = pending.failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
                return Err(e);
            }
        }
        Ok(spent)
    }

    /// Records a run with no sessions yet, which a service extends with a session per request.
    pub async fn create_service_run(&self) -> anyhow::Result<RunId> {
        let (run, _) = self.store.create_run(&self.run_spec()?, &[], &[]).await.context("recording the service run")?;
        Ok(run)
    }

    /// The run as it is recorded: its environment, and its settings with the system prompt in
    /// effect, which is what every transcript of it starts with.
    fn run_spec(&self) -> anyhow::Result<RunSpec> {
        let mut recorded = self.settings.clone();
        recorded.system_prompt.clone_from(&self.system_prompt);
        Ok(RunSpec { environment: recorded.env.to_string(), config: serde_json::to_value(&recorded)? })
    }

    /// The run's unfinished sessions as jobs, claimed and read from the store a page at a time
    /// as the scheduler takes them, with how many there are. A session is driven only under
    /// this process's claim: sessions another live process holds are left to it (counted in
    /// [`Pending::held_elsewhere`]), and a process of this host that no longer runs holds
    /// nothing, so a resume after a crash takes its sessions at once. `resumed`: the sessions
    /// may have committed turns, which each job carries as its [`Prior`]; a new run's have none.
    pub async fn pending(&self, run: RunId, resumed: bool) -> anyhow::Result<Pending> {
        let settings = &self.settings;
        let mut held_elsewhere = 0;
        for (owner, held) in self.store.owners(run).await? {
            if owner == self.owner.id {
                continue;
            }
            if gone(&owner) {
                self.store.expire_owner(run, &owner).await?;
            } else {
                held_elsewhere += held;
            }
        }
        let (total, finished) = self.store.session_counts(run).await?;
        let tasks = StoredTasks::new(self.store.clone(), run, settings)?;
        let failed = Arc::new(Mutex::new(None));
        let closed = Arc::new(AtomicU64::new(0));
        let state = JobCursor {
            store: self.store.clone(),
            owner: self.owner.clone(),
            run,
            tasks,
            resumed,
            claim: (2 * settings.concurrency).clamp(CLAIM_PAGE.0, CLAIM_PAGE.1),
            page: Vec::new().into_iter(),
            stored: HashSet::new(),
            closed: Arc::clone(&closed),
            leases: self.parties.leases.clone(),
            mark: 0,
            failed: failed.clone(),
        };
        let jobs = futures::stream::unfold(state, JobCursor::next).boxed();
        let count = total.saturating_sub(finished).saturating_sub(held_elsewhere);
        Ok(Pending { count, held_elsewhere, jobs, failed, closed })
    }

    /// Drives the jobs, at most `--concurrency` at once, and yields each session's result as it
    /// ends. `stop` is the caller's: it stops the run (see [`Stop`]).
    pub fn drive<J>(&self, jobs: J, stop: Stop) -> impl Stream<Item = SessionResult> + Unpin + use<J>
    where
        J: Stream<Item = Job> + Send + 'static,
    {
        let scheduler = Scheduler {
            parties: self.parties.clone(),
            limits: self.settings.limits(),
            concurrency: self.settings.concurrency,
            stop,
        };
        scheduler.run(jobs)
    }

    /// Drives one session on a task of its own, outside the scheduler (a trainer's `/run`, an
    /// OpenEnv episode, a fork), with the run's limits: `agent` plays it when given (a row's own
    /// policy, a trainer stepping), else the run's agent. A panic is contained to the session
    /// and recorded as the scheduler records one; `ended` sees the result on the session's own
    /// task, whether or not the caller still waits for it.
    pub fn spawn(
        &self,
        job: Job,
        agent: Option<Arc<dyn Agent>>,
        stop: Stop,
        ended: impl FnOnce(&SessionResult) + Send + 'static,
    ) -> tokio::task::JoinHandle<SessionResult> {
        let mut parties = self.parties.clone();
        if let Some(agent) = agent {
            parties.agent = agent;
        }
        parley_engine::spawn_session(parties, job, self.settings.limits(), stop, ended)
    }

    /// Marks the run's end: `interrupted` when it was stopped, else `finished`.
    pub async fn finish_run(&self, run: RunId, stopped: bool) -> anyhow::Result<()> {
        self.store.finish_run(run, if stopped { RunStatus::Interrupted } else { RunStatus::Finished }).await?;
        Ok(())
    }

    /// Stops what the runtime started and gives up this process's claims on the sessions it
    /// did not finish, so that a resume can take them at once. Through `&self`: a service stops
    /// its runtime while handles to it may still be held by connections winding down; what
    /// they do after this fails as a stopped store's work does.
    pub async fn stop(&self) -> anyhow::Result<()> {
        self.environments.shutdown().await;
        self.shutdown.cancel();
        let renewal = self.renewal.lock().ok().and_then(|mut r| r.take());
        if let Some(renewal) = renewal {
            let _ = renewal.await;
        }
        self.store.release_claims(&self.owner).await?;
        self.store.close().await?;
        Ok(())
    }
}

/// A run's unfinished sessions, ready to drive.
pub struct Pending {
    /// The unfinished sessions this process may drive (not counting those held elsewhere).
    pub count: u64,
    /// Unfinished sessions a live process of another owner holds: left to it.
    pub held_elsewhere: u64,
    pub jobs: futures::stream::BoxStream<'static, Job>,
    failed: Arc<Mutex<Option<anyhow::Error>>>,
    closed: Arc<AtomicU64>,
}

impl Pending {
    /// How many sessions another policy played were closed where they stopped rather than
    /// continued (see [`Player`]), so far.
    pub fn closed(&self) -> u64 {
        self.closed.load(Ordering::Relaxed)
    }

    /// The jobs, to hand to [`Runtime::drive`]; `self` keeps what [`Pending::error`] reports.
    pub fn take_jobs(&mut self) -> futures::stream::BoxStream<'static, Job> {
        std::mem::replace(&mut self.jobs, futures::stream::empty().boxed())
    }

    /// Why the jobs stopped before the last session, if the store could not give one: its
    /// session stays pending, for a later resume.
    pub fn error(&self) -> Option<anyhow::Error> {
        self.failed.lock().ok()?.take()
    }
}

/// Where [`Runtime::pending`]'s stream is in the run's sessions.
struct JobCursor {
    store: Arc<Store>,
    owner: Owner,
    run: RunId,
    tasks: StoredTasks,
    resumed: bool,
    /// Sessions claimed at once.
    claim: usize,
    /// The page claimed last, each session with its fence and who plays it: one another policy
    /// plays is closed, never continued by this run's agent.
    page: std::vec::IntoIter<ClaimedSession>,
    /// The page's sessions with committed turns (read only when `resumed`): the others start
    /// afresh without reading a transcript.
    stored: HashSet<SessionId>,
    /// How many sessions another policy plays this cursor closed.
    closed: Arc<AtomicU64>,
    /// What the process knows of its claims, and its [`Leases::mark`] when the page was claimed.
    leases: Leases,
    mark: u64,
    failed: Arc<Mutex<Option<anyhow::Error>>>,
}

impl JobCursor {
    async fn next(mut self) -> Option<(Job, JobCursor)> {
        match self.job().await {
            Ok(Some(job)) => Some((job, self)),
            Ok(None) => None,
            Err(e) => {
                if let Ok(mut slot) = self.failed.lock() {
                    *slot = Some(e);
                }
                None
            }
        }
    }

    /// The next session of this owner's: from the page it claimed last, or from a new claim.
    /// The store's calls that most jobs never make are boxed: inline, they made the cursor's
    /// future, moved at every job, 10 KB; boxed, 1.3 KB.
    async fn job(&mut self) -> anyhow::Result<Option<Job>> {
        let (session, fence) = loop {
            let ClaimedSession { row: session, fence, player } = match self.page.next() {
                Some(next) => next,
                None => {
                    self.mark = self.leases.mark();
                    let claimed = Box::pin(self.store.claim_page(self.run, &self.owner, self.claim)).await?;
                    // Read under this page's claims: no other owner writes these sessions'
                    // turns while they hold, and a page whose claims lapse is checked below.
                    if self.resumed {
                        let ids: Vec<i64> = claimed.iter().map(|c| c.row.id).collect();
                        self.stored = Box::pin(self.store.sessions_with_turns(&ids)).await?;
                    }
                    self.page = claimed.into_iter();
                    match self.page.next() {
                        Some(next) => next,
                        None => return Ok(None),
                    }
                }
            };
            if player != Player::Run {
                Box::pin(self.close(Claim { session: session.id, fence }, player)).await?;
                continue;
            }
            if self.leases.hold(self.mark) {
                break (session, fence);
            }
            // The page's claims may have run out since it was claimed (the process was paused, or
            // cut off from the store), and another owner may have claimed any of its sessions: an
            // empty commit, refused as fenced for those, says which are still this owner's.
            match Box::pin(self.store.commit_turn(Claim { session: session.id, fence }, TurnRecord::default())).await {
                Ok(()) => break (session, fence),
                Err(StoreError::Fenced { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let task = self.tasks.get(session.task_index as usize).await?;
        let prior = match (self.resumed, self.stored.contains(&session.id)) {
            (false, _) => None,
            (true, true) => Some(prior(Box::pin(self.store.transcript(session.id)).await?)),
            // Nothing committed: what reading its transcript would give.
            (true, false) => Some(prior(Transcript::default())),
        };
        let spec = SessionSpec {
            task_index: task.index,
            trial: session.trial as u32,
            seed: session.seed as u64,
            player: Player::Run,
        };
        Ok(Some(Job::new(Claim { session: session.id, fence }, task, spec, prior)))
    }

    /// Ends a session another policy played, where it stopped: its committed turns are kept and
    /// none is added, so that no trajectory holds two policies' turns.
    async fn close(&self, claim: Claim, player: Player) -> anyhow::Result<()> {
        let outcome = SessionOutcome {
            termination: Termination::Cancelled,
            reward: None,
            error: Some(player.not_continued().to_owned()),
            failure: None,
            steps: 0,
            retries: 0,
            duration: std::time::Duration::ZERO,
            token_contiguity: None,
            user_faults: Vec::new(),
        };
        match self.store.finish_session(claim, TurnRecord::default(), &outcome).await {
            Ok(()) => {
                self.closed.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            // Another owner took it over meanwhile: theirs to settle.
            Err(StoreError::Fenced { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// This process's lease, when its front end sets one (`--lease`); a process-wide setting, as
/// the process is one owner to the store whatever runs it drives.
static LEASE: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();

/// Sets how long this process's claims last without renewal, once, before any runtime starts;
/// else [`Owner::DEFAULT_LEASE`].
pub fn set_lease(lease: std::time::Duration) {
    let _ = LEASE.set(lease);
}

fn lease() -> std::time::Duration {
    LEASE.get().copied().filter(|d| !d.is_zero()).unwrap_or(Owner::DEFAULT_LEASE)
}

/// Whether an owner is a process of this host that no longer runs. Owners are named
/// `host:pid:started:n` ([`Owner::new`]); one of another host, or whose process still runs (or
/// whose name is not of that shape), may be alive, and keeps its claims until its lease ends.
fn gone(owner: &str) -> bool {
    let mut parts = owner.rsplitn(4, ':');
    let (_n, _started, pid, host) = (parts.next(), parts.next(), parts.next(), parts.next());
    let (Some(pid), Some(host)) = (pid.and_then(|p| p.parse::<u32>().ok()), host) else { return false };
    let here = Owner::new(std::time::Duration::ZERO).id;
    let here_host = here.rsplitn(4, ':').nth(3).unwrap_or_default().to_owned();
    host == here_host && pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// What a stored transcript gives a session that continues it.
pub fn prior(transcript: Transcript) -> Prior {
    Prior { usage: transcript.agent_usage(), messages: transcript.messages, tool_calls: transcript.tool_calls }
}

/// The simulated user a stored run's settings name, built for its review alone (a rescore
/// re-deriving its faults): none when the run had no user, or when it cannot be built here (a key
/// no longer set); nothing is ever asked of it, so an endpoint that no longer answers is fine.
pub(crate) async fn reviewer(
    settings: &RunSettings,
    store: &Store,
    environments: &mut Environments,
) -> anyhow::Result<Option<Arc<dyn UserSimulator>>> {
    // The run's own endpoint, or where its in-process stub listened: only a URL to build with.
    let base_url = settings.base_url.clone().unwrap_or_else(|| "http://127.0.0.1:9/v1".to_owned());
    let user = match settings.user.kind {
        UserKind::None | UserKind::Human => None,
        _ => user_simulator(settings, &base_url, store).await.ok().flatten(),
    };
    reviewed(user, settings, store, environments)
}

/// The user, reviewed as the settings ask: by its own rules, or by them and the judge.
fn reviewed(
    user: Option<Arc<dyn UserSimulator>>,
    settings: &RunSettings,
    store: &Store,
    environments: &mut Environments,
) -> anyhow::Result<Option<Arc<dyn UserSimulator>>> {
    Ok(match (user, settings.user.review) {
        (Some(user), UserReview::Judge) => {
            let judge = environments.verdicts(settings, store)?;
            Some(Arc::new(crate::review::Judged::new(user, judge, settings.judge().model)))
        }
        (user, _) => user,
    })
}

/// The simulated user the settings ask for.
async fn user_simulator(
    settings: &RunSettings,
    agent_base_url: &str,
    store: &Store,
) -> anyhow::Result<Option<Arc<dyn UserSimulator>>> {
    let user = &settings.user;
    Ok(match user.kind {
        UserKind::None => None,
        UserKind::Scripted => Some(Arc::new(simulator_scripted::Scripted)),
        UserKind::Human => Some(Arc::new(simulator_human::Human::stdio())),
        UserKind::Llm => {
            let base_url = user.base_url.clone().unwrap_or_else(|| agent_base_url.to_owned());
            let client = ChatClient::new(&settings.endpoint(base_url, user.api_key_env.clone()))
                .map_err(|e| usage(format!("the user's endpoint: {e}")))?;
            let read = |path: &Option<PathBuf>| -> anyhow::Result<Option<String>> {
                path.as_ref()
                    .map(|p| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())))
                    .transpose()
            };
            // tau2's domains get tau2's own user: its template and scenario, its guidelines read
            // from its data, its temperature. Every other environment gets Parley's. The flags
            // replace either.
            let tau2 = settings.env.tau2().is_some();
            let mut prompt = match read(&user.guidelines)? {
                Some(own) if tau2 => simulator_llm::Prompt::tau2(own.clone(), own),
                Some(own) => simulator_llm::Prompt::default().with_guidelines(own),
                None if tau2 => {
                    let data = settings.tau2.data()?;
                    let theirs = environment_tau2::user_guidelines(&data).map_err(|e| usage(e.to_string()))?;
                    simulator_llm::Prompt::tau2(theirs.plain, theirs.tools)
                }
                None => simulator_llm::Prompt::default(),
            };
            if let Some(template) = read(&user.prompt)? {
                prompt.template = template;
            }
            prompt.persona.clone_from(&user.persona);
            let mut sampling = user.sampling.clone();
            if tau2 {
                sampling.temperature = sampling.temperature.or(Some(simulator_llm::tau2::TEMPERATURE));
            }
            let config = simulator_llm::LlmUserConfig {
                model: user.model.clone().unwrap_or_else(|| settings.model.clone()),
                sampling,
                prompt,
            };
            Some(Arc::new(simulator_llm::LlmUser::new(Arc::new(client), config)))
        }
        UserKind::Remote => {
            let url = user.url.clone().ok_or_else(|| usage("--user remote needs --user-url URL"))?;
            let key = match &user.api_key_env {
                Some(var) => {
                    Some(std::env::var(var).map_err(|_| usage(format!("--user-api-key-env {var} is not set")))?)
                }
                None => None,
            };
            // Told as the run's own LLM user would be: tau2's scenario (persona within) in
            // tau2's domains, Parley's sections elsewhere.
            let tau2 = settings.env.tau2().is_some();
            let fallback = user.persona.clone();
            let briefing: simulator_remote::Briefing = Arc::new(move |row: &serde_json::Value| {
                let persona = simulator_llm::persona_of(row).or_else(|| fallback.clone());
                let tau2 = if tau2 { simulator_llm::tau2::scenario(row, fallback.as_deref()) } else { None };
                simulator_remote::Brief { scenario: tau2.unwrap_or_else(|| simulator_llm::scenario_of(row)), persona }
            });
            let config = simulator_remote::RemoteUserConfig {
                limits: settings.endpoint(url.clone(), None).limits(),
                url,
                key,
                briefing,
            };
            let remote = simulator_remote::RemoteUser::new(config).map_err(|e| usage(format!("--user-url: {e}")))?;
            Some(Arc::new(remote))
        }
        UserKind::Replay => {
            let run = user.replay_run.ok_or_else(|| usage("--user replay needs --user-replay-run RUN"))?;
            let record = store.run(run).await.map_err(|e| usage(format!("--user-replay-run {run}: {e}")))?;
            let recorded: RunSettings = serde_json::from_value(record.config).context("reading the recorded run")?;
            let store = Arc::new(store.clone());
            let mut tasks = StoredTasks::new(store.clone(), run, &recorded)?;
            let mut sessions = Vec::new();
            for s in store.sessions(run).await? {
                let task = tasks.get(s.task_index as usize).await?;
                let opening = parley_engine::opening_len(recorded.system_prompt.as_deref(), &task);
                let transcript = store.transcript(s.id).await?;
                sessions.push(((s.task_index as usize, s.trial as u32), transcript.messages, opening));
            }
            Some(Arc::new(simulator_replay::Replay::new(sessions)))
        }
    })
}

async fn start_stub(config: parley_stub::StubConfig, shutdown: CancellationToken) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.context("starting the built-in stub")?;
    let address = listener.local_addr()?;
    let serve = parley_stub::serve(listener, config, async move { shutdown.cancelled().await });
    tokio::spawn(tracing::Instrument::instrument(serve, tracing::info_span!("stub", %address)));
    Ok(format!("http://{address}/v1"))
}
