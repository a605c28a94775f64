//! Keeping an owner's claims alive: one renewal of all its leases, on a timer, until its caller
//! says stop.

use std::sync::Arc;
use std::time::Duration;

use parley_core::{Owner, SessionStore};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Renews every claim of one owner, every `every`. Start it when the owner's first claims are
/// taken (`create_claimed_run` or `claim_sessions`), stop it through its shutdown token once the
/// scheduler's results have ended, then call `release_claims`.
#[derive(Clone)]
pub struct Renewal {
    pub store: Arc<dyn SessionStore>,
    pub owner: Owner,
    pub every: Duration,
}

impl Renewal {
    /// Renews three times per lease (see [`Owner::renew_every`]).
    pub fn new(store: Arc<dyn SessionStore>, owner: Owner) -> Renewal {
        let every = owner.renew_every();
        Renewal { store, owner, every }
    }

    /// Runs [`Renewal::run`] on a task of its own, in a span that names the owner.
    pub fn spawn(self, shutdown: CancellationToken) -> JoinHandle<()> {
        let span = tracing::info_span!("claim_renewal", owner = %self.owner.id);
        tokio::spawn(self.run(shutdown).instrument(span))
    }

    /// Renews until `shutdown` is cancelled. A renewal that fails is logged and tried again at
    /// the next tick: the lease outlasts two missed renewals, and if it runs out all the same, the
    /// store's fencing refuses this owner's later commits rather than letting two owners write.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut ticks = tokio::time::interval(self.every.max(Duration::from_millis(1)));
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // The first tick is immediate; the claims were just taken.
        ticks.tick().await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = ticks.tick() => match self.store.renew_claims(&self.owner).await {
                    Ok(held) => tracing::debug!(held, "renewed the claims"),
                    Err(e) => tracing::warn!(error = %e, "could not renew the claims; trying again at the next tick"),
                },
            }
        }
    }
}
