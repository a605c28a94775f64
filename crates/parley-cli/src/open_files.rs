//! The process's open-files limit, and the share of it one endpoint's connections may take.
//!
//! Every model call in flight holds a socket, and a run of 100,000 sessions would hold one per
//! session: past the limit, the store can no longer open its database and the run stops. So
//! `parley` raises its soft limit to the hard one at start, as a server does, and an endpoint's
//! calls in flight (`--endpoint-concurrency`) default to at most a quarter of what it then has,
//! which leaves room for a second endpoint (a simulated user or a judge served elsewhere), the
//! store and the files a run writes. Calls past the bound wait for one to finish; their
//! sessions stay in flight.

use std::sync::OnceLock;

static LIMIT: OnceLock<Option<u64>> = OnceLock::new();

/// Raises the soft open-files limit to the hard one, once; the limit in force afterwards, or
/// `None` where it cannot be read.
pub fn raise() -> Option<u64> {
    *LIMIT.get_or_init(raised)
}

#[cfg(unix)]
fn raised() -> Option<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard {
        match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => return Some(hard),
            Err(error) => tracing::debug!(soft, hard, %error, "could not raise the open-files limit"),
        }
    }
    Some(soft)
}

#[cfg(not(unix))]
fn raised() -> Option<u64> {
    None
}

/// The default of `--endpoint-concurrency`: the run's concurrency, at most a quarter of the
/// open-files limit (no bound where the limit is unknown).
pub fn endpoint_default(concurrency: usize) -> usize {
    within(concurrency, raise())
}

fn within(concurrency: usize, limit: Option<u64>) -> usize {
    match limit {
        Some(limit) => concurrency.min(usize::try_from(limit / 4).unwrap_or(usize::MAX)).max(1),
        None => concurrency,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_takes_at_most_a_quarter_of_the_open_files() {
        assert_eq!(within(64, Some(1024)), 64);
        assert_eq!(within(100_000, Some(20_000)), 5_000);
        assert_eq!(within(100_000, Some(2)), 1);
        assert_eq!(within(100_000, None), 100_000);
        assert_eq!(within(100_000, Some(u64::MAX)), 100_000);
    }

    /// The limit reported is the one in force, the hard one where the system lets it be raised.
    #[cfg(unix)]
    #[test]
    fn the_limit_reported_is_the_one_in_force() {
        use nix::sys::resource::{Resource, getrlimit};
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        let limit = raise().unwrap();
        let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(limit, soft);
        if cfg!(target_os = "linux") {
            assert_eq!(soft, hard);
        }
    }
}
