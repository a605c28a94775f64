//! A worker's loop: drives a run's pending sessions beside any other workers (on this machine
//! or others sharing the store) until every session of it is finished, or it is stopped.

use std::time::Duration;

use futures::StreamExt;
use parley_core::RunId;
use parley_engine::Stop;

use crate::Runtime;

/// Store failures in a row a worker rides out before it gives up.
pub const WORKER_RETRIES: u32 = 5;

/// How a worker's loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Worked {
    /// Sessions this worker played to their end. (One whose end the store then refused, since
    /// another worker took it over meanwhile, counts too: its result comes before its commit.)
    pub driven: u64,
    /// Every session of the run is finished (else the worker was stopped, leaving the rest to
    /// the others).
    pub done: bool,
}

impl Runtime {
    /// Drives run `run` as one of its workers. Each round claims pages of sessions nobody
    /// holds, or whose holder's lease ran out (a worker killed or cut off from the store), and
    /// continues each from its last committed turn; when none is left to claim but some are
    /// still held elsewhere, it looks again shortly, so that it takes over the sessions of a
    /// worker that dies. A store that fails is tried again, up to [`WORKER_RETRIES`] rounds in a
    /// row (`retrying` hears of each); `stop` stops it as it stops a run.
    pub async fn work(
        &self,
        run: RunId,
        stop: &Stop,
        mut retrying: impl FnMut(&anyhow::Error, u32),
    ) -> anyhow::Result<Worked> {
        // Looking again for sessions whose holder's lease ran out: a few times per lease.
        let poll = (self.owner.lease / 4).clamp(Duration::from_millis(100), Duration::from_secs(2));
        let mut driven = 0u64;
        // Rounds in a row that the store failed: a worker cut off from the database for a
        // moment goes on once it is back (its leases may be gone by then, and its sessions).
        let mut failed_rounds = 0;
        loop {
            match self.work_round(run, stop, &mut driven).await {
                Ok(true) => {
                    self.finish_run(run, false).await?;
                    return Ok(Worked { driven, done: true });
                }
                Ok(false) => failed_rounds = 0,
                Err(e) if failed_rounds < WORKER_RETRIES => {
                    failed_rounds += 1;
                    retrying(&e, failed_rounds);
                }
                Err(e) => return Err(e),
            }
            if stop.is_stopping() {
                return Ok(Worked { driven, done: false });
            }
            tokio::select! {
                () = tokio::time::sleep(poll) => {}
                () = stop.drain.cancelled() => return Ok(Worked { driven, done: false }),
            }
        }
    }

    /// One round of a worker: claims and drives what it can of the run, then says whether
    /// every session of the run is finished.
    async fn work_round(&self, run: RunId, stop: &Stop, driven: &mut u64) -> anyhow::Result<bool> {
        let mut pending = self.pending(run, true).await?;
        let mut results = self.drive(pending.take_jobs(), stop.clone());
        while let Some(result) = results.next().await {
            *driven += u64::from(!result.taken_over);
        }
        if let Some(e) = pending.error() {
            return Err(e.context(format!("reading run {run}'s sessions from the store")));
        }
        let (total, finished) = self.store.session_counts(run).await?;
        Ok(finished >= total)
    }
}
