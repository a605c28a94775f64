//! Records served sessions under the service run, many in one store call. A trainer sends its
//! rollouts in batches (hundreds of `/run`s, or resets, at once); each recorded alone would be a
//! transaction of its own, one after the other, and the last would wait for all the others.
//! Requests that arrive while a record is being written are gathered and written together when
//! it ends: alone, a request waits for nothing; in a burst, for one transaction.

use std::sync::Arc;

use parley_core::{Claim, SessionSpec, Task};
use parley_runtime::Runtime;
use tokio::sync::{mpsc, oneshot};

/// Sessions recorded in one store call at most.
const BATCH: usize = 1024;

struct Pending {
    task: Arc<Task>,
    /// Whether the task is new to the service run (a prompt group's later copies share the
    /// task its first copy recorded).
    new_task: bool,
    spec: SessionSpec,
    claimed: oneshot::Sender<Result<Claim, String>>,
}

/// The handle requests record their sessions through; the recording task ends with it.
pub(crate) struct Recorder {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Recorder {
    pub(crate) fn spawn(runtime: Arc<Runtime>, run: parley_core::RunId) -> Recorder {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(tracing::Instrument::instrument(record(runtime, run, rx), tracing::info_span!("recorder")));
        Recorder { tx }
    }

    /// Records `task` as a new task of the service run and one session of it, claimed by the
    /// runtime's owner.
    pub(crate) async fn record(&self, task: Arc<Task>, spec: SessionSpec) -> Result<Claim, String> {
        self.enqueue(task, true, spec).await
    }

    /// Queues a session of `task` (recording the task too when `new_task`); sessions are
    /// recorded in the order they were queued, so a task's first session is never recorded
    /// after a later one. The claim comes when the session is in the store.
    pub(crate) fn enqueue(
        &self,
        task: Arc<Task>,
        new_task: bool,
        spec: SessionSpec,
    ) -> impl Future<Output = Result<Claim, String>> + use<> {
        let (claimed, claim) = oneshot::channel();
        let sent = self.tx.send(Pending { task, new_task, spec, claimed });
        async move {
            sent.map_err(|_| "the service is stopping".to_owned())?;
            claim.await.map_err(|_| "the service is stopping".to_owned())?
        }
    }
}

async fn record(runtime: Arc<Runtime>, run: parley_core::RunId, mut rx: mpsc::UnboundedReceiver<Pending>) {
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let tasks: Vec<Arc<Task>> = batch.iter().filter(|p| p.new_task).map(|p| Arc::clone(&p.task)).collect();
        let specs: Vec<SessionSpec> = batch.iter().map(|p| p.spec).collect();
        match runtime.store.extend_run(run, &tasks, &specs, Some(&runtime.owner)).await {
            Ok(claims) if claims.len() == batch.len() => {
                for (pending, claim) in batch.drain(..).zip(claims) {
                    let _ = pending.claimed.send(Ok(claim));
                }
            }
            Ok(claims) => {
                let why = format!("the store recorded {} sessions of {}", claims.len(), batch.len());
                batch.drain(..).for_each(|p| drop(p.claimed.send(Err(why.clone()))));
            }
            Err(e) => {
                let why = format!("recording the session: {e}");
                batch.drain(..).for_each(|p| drop(p.claimed.send(Err(why.clone()))));
            }
        }
    }
}
