//! The scheduler: runs many sessions at once, at most `concurrency` in flight, each on its own
//! task so that one session's panic is contained to that session.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use parley_core::{Claim, FailureClass, Limits, SessionId, SessionOutcome, Task, Termination};
use tracing::Instrument;

use tokio::sync::{Semaphore, mpsc};

use crate::session::{Job, Parties, SessionResult, Stop, play_session, run_session};

#[derive(Clone)]
pub struct Scheduler {
    pub parties: Parties,
    pub limits: Limits,
    pub concurrency: usize,
    pub stop: Stop,
}

impl Scheduler {
    /// Runs the jobs and yields each result as its session ends, in completion order. Once
    /// [`Stop`] is signalled, sessions not yet started are skipped and running ones end as
    /// `cancelled` (at their next commit when draining, at once when aborted).
    ///
    /// The sessions run on a task of their own, so a slow reader of the results never holds a
    /// new session back; a session's slot is free as soon as it has played, while its end is
    /// committed beside the next one (at most `concurrency` ends wait for the store at once). The
    /// stream ends once every session's end is recorded.
    ///
    /// Jobs are taken from `jobs` only as slots free, so a stream that reads them lazily (from a
    /// file or the store) keeps no more of them in memory than are in flight.
    pub fn run<J>(&self, jobs: J) -> impl Stream<Item = SessionResult> + Unpin + use<J>
    where
        J: Stream<Item = Job> + Send + 'static,
    {
        let concurrency = self.concurrency.max(1);
        let (tx, mut rx) = mpsc::channel(concurrency);
        let this = self.clone();
        let span = tracing::info_span!("scheduler", concurrency);
        tokio::spawn(
            async move {
                let endings = Arc::new(Semaphore::new(concurrency));
                let results = jobs
                    .take_while({
                        let stop = this.stop.clone();
                        move |_| std::future::ready(!stop.is_stopping())
                    })
                    .map(|job| this.session(job, Arc::clone(&endings)))
                    .buffer_unordered(concurrency);
                let mut results = std::pin::pin!(results);
                while let Some(result) = results.next().await {
                    if tx.send(result).await.is_err() {
                        tracing::debug!("the results are no longer read; the sessions in flight finish on their own");
                    }
                }
                // Every permit back: every session's end is committed.
                let _ = endings.acquire_many(concurrency as u32).await;
            }
            .instrument(span),
        );
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }

    /// One session on a task of its own, so that its panic is contained to it; its end is
    /// recorded on another, holding one of `endings`' permits until it is committed.
    async fn session(&self, job: Job, endings: Arc<Semaphore>) -> SessionResult {
        let span = tracing::info_span!("session", id = job.id, task = %job.task.id, trial = job.trial);
        // The job moves into its task; keep what a panic report needs.
        let (task, trial) = (job.task.clone(), job.trial);
        let claim = Claim { session: job.id, fence: job.fence };
        let handle = tokio::spawn({
            let this = self.clone();
            async move {
                let (result, ending) = play_session(&this.parties, job, &this.limits, &this.stop).await;
                // The semaphore is never closed.
                if let Ok(permit) = endings.acquire_owned().await {
                    let store = Arc::clone(&this.parties.store);
                    tokio::spawn(
                        async move {
                            ending.record(store.as_ref()).await;
                            drop(permit);
                        }
                        .in_current_span(),
                    );
                }
                result
            }
            .instrument(span)
        });
        contained(&self.parties, handle, claim, task, trial).await
    }
}

/// One session driven on a task of its own, outside a scheduler (a trainer's `/run`, an OpenEnv
/// episode): played and recorded by [`run_session`], a panic contained to it and recorded as the
/// scheduler records one, so that no session is ever left pending by a panic. `ended` sees the
/// result on the session's own task, whether or not the caller still waits for it.
pub fn spawn_session(
    parties: Parties,
    job: Job,
    limits: Limits,
    stop: Stop,
    ended: impl FnOnce(&SessionResult) + Send + 'static,
) -> tokio::task::JoinHandle<SessionResult> {
    let span = tracing::info_span!("session", id = job.id, task = %job.task.id, trial = job.trial);
    let (task, trial) = (job.task.clone(), job.trial);
    let claim = Claim { session: job.id, fence: job.fence };
    tokio::spawn(
        async move {
            let handle = tokio::spawn({
                let parties = parties.clone();
                async move { run_session(&parties, job, &limits, &stop).await }.in_current_span()
            });
            let result = contained(&parties, handle, claim, task, trial).await;
            ended(&result);
            result
        }
        .instrument(span),
    )
}

/// A session's result, or, when its task panicked, a panicked session's, recorded as ended.
async fn contained(
    parties: &Parties,
    handle: tokio::task::JoinHandle<SessionResult>,
    claim: Claim,
    task: Arc<Task>,
    trial: u32,
) -> SessionResult {
    match handle.await {
        Ok(result) => result,
        Err(e) => {
            let result = panicked(claim.session, task, trial, e.to_string());
            let record = parties.store.finish_session(claim, Default::default(), &result.outcome);
            if let Err(e) = record.await {
                tracing::error!(session = result.id, error = %e, "could not record a panicked session");
            }
            result
        }
    }
}

fn panicked(id: SessionId, task: Arc<Task>, trial: u32, why: String) -> SessionResult {
    tracing::error!(session = id, error = %why, "a session panicked");
    let produced_from = task.messages.len();
    SessionResult {
        id,
        transcript: task.messages.clone(),
        task,
        trial,
        outcome: SessionOutcome {
            termination: Termination::InfrastructureError,
            reward: None,
            error: Some(format!("the session panicked: {why}")),
            failure: Some(FailureClass::Panic),
            steps: 0,
            retries: 0,
            duration: Default::default(),
            token_contiguity: None,
            user_faults: Vec::new(),
        },
        produced_from,
        usage: Default::default(),
        user_usage: Default::default(),
        taken_over: false,
    }
}
