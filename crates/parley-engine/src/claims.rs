//! Keeping an owner's claims alive: one renewal of all its leases, on a timer, until its caller
//! says stop; and what the process knows of them meanwhile ([`Leases`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parley_core::{Owner, SessionStore};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// What a process knows of its leases, for its sessions to tell whether their claims surely
/// hold: when the last renewal the store took was sent, and how many times the claims may have
/// run out since the process started. They may have when a renewal is taken more than
/// [`Leases::HOLD`] of a lease after the one before (the process was paused, or cut off from the
/// store): another owner may have claimed any of its sessions meanwhile and committed turns of
/// it. A session asks its next model call beside the commit of its last turn only while its
/// claim surely holds; otherwise it commits first, so that a claim taken over is refused before
/// a call is spent on a turn that the session's new owner may have committed already.
///
/// The default knows of no lease: its claims always hold (sessions driven without claims).
#[derive(Debug, Clone, Default)]
pub struct Leases(Option<Arc<Clock>>);

#[derive(Debug)]
struct Clock {
    lease: Duration,
    start: Instant,
    /// When the last renewal the store took was sent, in nanoseconds after `start`.
    renewed: AtomicU64,
    /// Times the claims may have run out.
    lapses: AtomicU64,
}

impl Leases {
    /// The share of a lease within which claims renewed (or taken) surely hold: renewals come three
    /// times per lease, so one late renewal is allowed for before the claims are in doubt.
    pub const HOLD: f64 = 2.0 / 3.0;

    /// Leases of `lease`, renewed by a [`Renewal`]; until its first renewal they count from now.
    pub fn new(lease: Duration) -> Leases {
        let clock = Clock { lease, start: Instant::now(), renewed: AtomicU64::new(0), lapses: AtomicU64::new(0) };
        Leases(Some(Arc::new(clock)))
    }

    /// A mark of the claims' lapses so far, for [`Leases::hold`].
    pub fn mark(&self) -> u64 {
        self.0.as_ref().map_or(0, |c| c.lapses.load(Ordering::Acquire))
    }

    /// Whether a claim that held at `mark` surely holds still: the claims have not run out since,
    /// and the last renewal is recent enough that they will not before a call now made is sent.
    pub fn hold(&self, mark: u64) -> bool {
        let Some(c) = &self.0 else { return true };
        let renewed = Duration::from_nanos(c.renewed.load(Ordering::Acquire));
        c.lapses.load(Ordering::Acquire) == mark
            && c.start.elapsed().saturating_sub(renewed) < c.lease.mul_f64(Self::HOLD)
    }

    /// Records a renewal that the store took, sent at `sent`. Taken too long after the last one,
    /// the claims may have run out in between: that counts a lapse, before the renewal is
    /// recorded, so that no session sees the claims hold across it.
    fn renewed(&self, sent: Instant) {
        let Some(c) = &self.0 else { return };
        let last = Duration::from_nanos(c.renewed.load(Ordering::Acquire));
        if c.start.elapsed().saturating_sub(last) >= c.lease.mul_f64(Self::HOLD) {
            c.lapses.fetch_add(1, Ordering::AcqRel);
        }
        let sent = sent.saturating_duration_since(c.start).as_nanos();
        c.renewed.store(u64::try_from(sent).unwrap_or(u64::MAX), Ordering::Release);
    }
}

/// Renews every claim of one owner, every `every`. Start it when the owner's first claims are
/// taken (`create_claimed_run` or `claim_sessions`), stop it through its shutdown token once the
/// scheduler's results have ended, then call `release_claims`.
#[derive(Clone)]
pub struct Renewal {
    pub store: Arc<dyn SessionStore>,
    pub owner: Owner,
    pub every: Duration,
    /// What the renewals tell the owner's sessions.
    pub leases: Leases,
}

impl Renewal {
    /// Renews three times per lease (see [`Owner::renew_every`]).
    pub fn new(store: Arc<dyn SessionStore>, owner: Owner) -> Renewal {
        let every = owner.renew_every();
        let leases = Leases::new(owner.lease);
        Renewal { store, owner, every, leases }
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
                _ = ticks.tick() => {
                    let sent = Instant::now();
                    match self.store.renew_claims(&self.owner).await {
                        Ok(held) => {
                            self.leases.renewed(sent);
                            tracing::debug!(held, "renewed the claims");
                        }
                        Err(e) => tracing::warn!(error = %e, "could not renew the claims; trying again at the next tick"),
                    }
                }
            }
        }
    }
}
