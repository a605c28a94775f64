//! Scoring off the service's I/O. A score can be seconds of CPU (tau2 replays the trajectory and
//! hashes megabytes of databases), and many sessions end at once; on the runtime's workers that
//! work would hold up every connection, pings included, until a client gives up on a silent
//! server. [`offloaded`] runs the opening and scoring of an environment that computes
//! ([`Environment::computes`]) under `block_in_place`, so the worker's other tasks move to
//! another thread while it computes, and at most one such call per core at a time: the others
//! wait their turn without holding a thread.
//!
//! Any other environment is left as it is. Its calls await another process (a NeMo Gym
//! resources server's `/verify`, which may wait seconds on a judge model) or do little: under
//! `block_in_place` each held a thread for as long as it waited, and the per-core limit let only
//! as many sessions open or score at once as the machine has cores; and each call handed its
//! worker's tasks to another thread, for a score of microseconds.

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

/// `environment`, its opening and scoring run off the workers if it computes.
pub(crate) fn offloaded(environment: Arc<dyn Environment>) -> Arc<dyn Environment> {
    if !environment.computes() {
        return environment;
    }
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    Arc::new(Offloaded { inner: environment, cores: Arc::new(Semaphore::new(cores)) })
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

    fn computes(&self) -> bool {
        true
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use serde_json::json;
    use tokio::sync::Barrier;

    use super::*;

    /// An environment whose scores wait for `meet` to be met, and count how many run at once.
    struct Scored {
        computes: bool,
        meet: Option<Arc<Barrier>>,
        running: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    }

    struct ScoredSession {
        meet: Option<Arc<Barrier>>,
        running: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    }

    impl Scored {
        fn new(computes: bool, meet: Option<Arc<Barrier>>) -> Scored {
            Scored { computes, meet, running: Arc::default(), most: Arc::default() }
        }
    }

    #[async_trait]
    impl Environment for Scored {
        fn name(&self) -> &str {
            "scored"
        }

        async fn open(&self, _task: &Task) -> Result<Box<dyn EnvSession>, EnvError> {
            let (meet, running, most) = (self.meet.clone(), Arc::clone(&self.running), Arc::clone(&self.most));
            Ok(Box::new(ScoredSession { meet, running, most }))
        }

        fn computes(&self) -> bool {
            self.computes
        }
    }

    #[async_trait]
    impl EnvSession for ScoredSession {
        fn tools(&self) -> &ToolList {
            ToolList::none()
        }

        async fn call(&mut self, _: Party, _: &str, _: &Value) -> Result<ToolOutput, EnvError> {
            Ok(ToolOutput::ok("ok"))
        }

        async fn score(&mut self, _: &[Message], _: Termination) -> Result<Reward, EnvError> {
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            let met = match &self.meet {
                // Bounded, so that scores kept apart fail rather than wait for ever.
                Some(meet) => tokio::time::timeout(MEET_WITHIN, meet.wait()).await.is_ok(),
                // Computing: the thread is busy a while.
                None => {
                    std::thread::sleep(Duration::from_millis(20));
                    true
                }
            };
            self.running.fetch_sub(1, Ordering::SeqCst);
            match met {
                true => Ok(Reward::new(1.0)),
                false => Err(EnvError::new("the other sessions' scores did not come")),
            }
        }
    }

    /// How long a score waits for the others to be scoring at the same time.
    const MEET_WITHIN: Duration = Duration::from_secs(5);

    fn cores() -> usize {
        std::thread::available_parallelism().map_or(2, usize::from)
    }

    /// Opens and scores `sessions` sessions of `environment` at once; how many were scored.
    async fn score_at_once(environment: Arc<dyn Environment>, sessions: usize) -> usize {
        let task =
            Task { index: 0, id: "t".into(), messages: Vec::new(), tools: ToolList::default(), row: json!({}).into() };
        let scores = (0..sessions).map(|_| {
            let (environment, task) = (Arc::clone(&environment), task.clone());
            tokio::spawn(async move {
                let mut session = environment.open(&task).await?;
                session.score(&[], Termination::AgentStop).await
            })
        });
        let done = futures::future::join_all(scores).await;
        done.into_iter().filter(|score| matches!(score, Ok(Ok(_)))).count()
    }

    /// An environment that awaits another process is not limited to a score per core: a service
    /// scoring NeMo Gym rows whose `/verify` waits on a judge scores them all at once. Here every
    /// score waits until more sessions than the machine has cores are scoring.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_environment_that_awaits_scores_more_sessions_at_once_than_there_are_cores() {
        let sessions = cores() + 2;
        let environment: Arc<dyn Environment> = Arc::new(Scored::new(false, Some(Arc::new(Barrier::new(sessions)))));
        let offloaded = offloaded(Arc::clone(&environment));
        assert!(Arc::ptr_eq(&offloaded, &environment), "left as it is");
        assert_eq!(score_at_once(offloaded, sessions).await, sessions, "every score met the others");
    }

    /// An environment that computes scores off the workers, one per core at a time, however many
    /// workers the runtime has.
    #[tokio::test(flavor = "multi_thread", worker_threads = 8)]
    async fn an_environment_that_computes_scores_one_session_a_core_at_a_time() {
        let scored = Arc::new(Scored::new(true, None));
        let most = Arc::clone(&scored.most);
        let environment: Arc<dyn Environment> = scored;
        let offloaded = offloaded(Arc::clone(&environment));
        assert!(!Arc::ptr_eq(&offloaded, &environment) && offloaded.computes(), "wrapped");
        let sessions = 4 * cores();
        assert_eq!(score_at_once(offloaded, sessions).await, sessions);
        let most = most.load(Ordering::SeqCst);
        assert!((1..=cores()).contains(&most), "{most} scores at once on {} cores", cores());
    }
}
