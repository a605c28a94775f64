//! Deterministic fault draws: which request gets a rate limit, an error, a hang, a broken
//! body, broken tool arguments, a dropped connection or an oversized body.
//!
//! A draw depends only on the seed, the request body and how many times that exact body was
//! seen before, so a run is reproducible while a retry of the same body gets a fresh draw.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::config::Faults;
use crate::hash::{Fnv, mix, unit};

/// The fault one request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    RateLimit,
    ServerError,
    Hang,
    Malformed,
    BadArguments(BadArguments),
    Reset,
    Huge,
}

/// The two ways a tool call's arguments are broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BadArguments {
    /// `{"oops": `, which is not JSON.
    NotJson,
    /// `{}`, valid JSON that lacks the required properties.
    MissingRequired,
}

impl BadArguments {
    pub(crate) fn text(self) -> &'static str {
        match self {
            Self::NotJson => r#"{"oops": "#,
            Self::MissingRequired => "{}",
        }
    }
}

/// Draws faults and remembers how often each body was seen.
#[derive(Debug)]
pub(crate) struct FaultDice {
    faults: Faults,
    seed: u64,
    seen: Mutex<HashMap<u64, u64>>,
}

impl FaultDice {
    pub(crate) fn new(faults: Faults, seed: u64) -> Self {
        Self { faults, seed, seen: Mutex::default() }
    }

    /// The fault for a request whose body hashes to `body_hash`, if any.
    pub(crate) fn draw(&self, body_hash: u64) -> Option<Fault> {
        // Without faults the seen-count map would only grow, so it is not kept at all.
        if !self.faults.any() {
            return None;
        }
        let seen_before = {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            let count = seen.entry(body_hash).or_default();
            let before = *count;
            *count += 1;
            before
        };
        let h = mix(Fnv::new().u64(self.seed).u64(body_hash).u64(seen_before).finish());
        let u = unit(h);
        // One draw walks the cumulative fractions, so the kinds never overlap and a fraction
        // of 1.0 always wins for the first kind that has it.
        let kinds = [
            Fault::RateLimit,
            Fault::ServerError,
            Fault::Hang,
            Fault::Malformed,
            Fault::BadArguments(if h & 1 == 0 { BadArguments::NotJson } else { BadArguments::MissingRequired }),
            Fault::Reset,
            Fault::Huge,
        ];
        let mut threshold = 0.0;
        for (kind, (_, fraction)) in kinds.into_iter().zip(self.faults.named()) {
            threshold += fraction;
            if u < threshold {
                return Some(kind);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_faults_no_draws() {
        let dice = FaultDice::new(Faults::default(), 0);
        assert_eq!(dice.draw(42), None);
        assert!(dice.seen.lock().unwrap().is_empty());
    }

    #[test]
    fn repeats_of_a_body_draw_afresh() {
        let faults = Faults { rate_limit: 0.5, ..Faults::default() };
        let dice = FaultDice::new(faults, 7);
        let draws: Vec<_> = (0..64).map(|_| dice.draw(42)).collect();
        assert!(draws.contains(&None));
        assert!(draws.contains(&Some(Fault::RateLimit)));
        // The same seed replays the same sequence.
        let again = FaultDice::new(faults, 7);
        let replay: Vec<_> = (0..64).map(|_| again.draw(42)).collect();
        assert_eq!(draws, replay);
    }

    #[test]
    fn bad_arguments_alternate_between_both_kinds() {
        let faults = Faults { bad_arguments: 1.0, ..Faults::default() };
        let dice = FaultDice::new(faults, 0);
        let draws: Vec<_> = (0..32).filter_map(|body| dice.draw(body)).collect();
        assert!(draws.contains(&Fault::BadArguments(BadArguments::NotJson)));
        assert!(draws.contains(&Fault::BadArguments(BadArguments::MissingRequired)));
    }
}
