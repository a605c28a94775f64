//! Scoring off the service's I/O. A score can be seconds of CPU (tau2 replays the trajectory and
//! hashes megabytes of databases), and many sessions end at once; on the runtime's workers that
//! work would hold up every connection, pings included, until a client gives up on a silent
//! server. [`Offloaded`] runs an environment's opening and scoring under `block_in_place`, so the
//! worker's other tasks move to another thread while it computes, and at most one such call per
//! core at a time: the others wait their turn without holding a thread.

use std::sync::Arc;

use async_trait::async_trait;
use parley_core::{EnvError, EnvSession, Environment, Message, Party, Reward, Task, Termination, ToolList, ToolOutput};
use serde_json::Value;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::Semaphore;

/// An environment whose heavy calls leave the async workers free.
pub(crate) struct Offloaded {
    inner: Arc<dyn Environment>,
    cores: Arc<Semaphore>,
}

impl Offloaded {
    pub(crate) fn new(inner: Arc<dyn Environment>) -> Offloaded {
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        Offloaded { inner, cores: Arc::new(Semaphore::new(cores)) }
    }
}

struct OffloadedSession {
    inner: Box<dyn EnvSession>,
    cores: Arc<Semaphore>,
}

/// Runs `work` where it blocks no other task: in place of the worker on a multi-threaded
/// runtime, once a core is free, as it is elsewhere (a current-thread runtime has no other
/// thread to hand its tasks to).
async fn offload<F: Future>(cores: &Semaphore, work: F) -> F::Output {
    if let Ok(handle) = Handle::try_current()
        && handle.runtime_flavor() == RuntimeFlavor::MultiThread
    {
        let _core = cores.acquire().await;
        return tokio::task::block_in_place(|| handle.block_on(work));
    }
    work.await
}

#[async_trait]
impl Environment for Offloaded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn check(&self, task: &Task) -> Result<(), String> {
        self.inner.check(task)
    }

    async fn open(&self, task: &Task) -> Result<Box<dyn EnvSession>, EnvError> {
        let inner = offload(&self.cores, self.inner.open(task)).await?;
        Ok(Box::new(OffloadedSession { inner, cores: Arc::clone(&self.cores) }))
    }
}

#[async_trait]
impl EnvSession for OffloadedSession {
    fn tools(&self) -> &ToolList {
        self.inner.tools()
    }

    fn user_tools(&self) -> &ToolList {
        self.inner.user_tools()
    }

    fn answers_malformed_calls(&self) -> bool {
        self.inner.answers_malformed_calls()
    }

    async fn call(&mut self, party: Party, name: &str, arguments: &Value) -> Result<ToolOutput, EnvError> {
        self.inner.call(party, name, arguments).await
    }

    async fn score(&mut self, transcript: &[Message], termination: Termination) -> Result<Reward, EnvError> {
        offload(&self.cores, self.inner.score(transcript, termination)).await
    }

    async fn close(&mut self) {
        self.inner.close().await;
    }
}
