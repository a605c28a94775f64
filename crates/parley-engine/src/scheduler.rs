//! The scheduler: runs many sessions at once, at most `concurrency` in flight, each on its own
//! task so that one session's panic is contained to that session.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use parley_core::{FailureClass, Limits, SessionId, SessionOutcome, Task, Termination};
use tracing::Instrument;

use crate::session::{Job, Parties, SessionResult, Stop, run_session};

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
    pub fn run(&self, jobs: Vec<Job>) -> impl Stream<Item = SessionResult> + use<> {
        let this = self.clone();
        futures::stream::iter(jobs)
            .take_while({
                let stop = self.stop.clone();
                move |_| std::future::ready(!stop.is_stopping())
            })
            .map(move |job| {
                let this = this.clone();
                async move {
                    let span = tracing::info_span!("session", id = job.id, task = %job.task.id, trial = job.trial);
                    // The job moves into its task; keep what a panic report needs.
                    let (id, task, trial) = (job.id, job.task.clone(), job.trial);
                    let handle = tokio::spawn({
                        let this = this.clone();
                        async move { run_session(&this.parties, job, &this.limits, &this.stop).await }.instrument(span)
                    });
                    match handle.await {
                        Ok(result) => result,
                        Err(e) => {
                            let result = panicked(id, task, trial, e.to_string());
                            let record =
                                this.parties.store.finish_session(result.id, Default::default(), &result.outcome);
                            if let Err(e) = record.await {
                                tracing::error!(session = result.id, error = %e, "could not record a panicked session");
                            }
                            result
                        }
                    }
                }
            })
            .buffer_unordered(self.concurrency.max(1))
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
        },
        produced_from,
        usage: Default::default(),
        user_usage: Default::default(),
    }
}
