//! A simulated user that fails on purpose: each mode makes one of the faults a user review
//! looks for, in a share of the conversations, the same ones for the same seed.
//!
//! A conversation faults in mode *m* when the hash of (seed, the user's system text, *m*) falls
//! below *m*'s rate; the first such mode of the list wins. Its user then says, at the turn where the
//! fault shows:
//!
//! - `repeats`: "I would like some help with my booking, please." at its first two turns;
//! - `speaks_as_agent`: "Hello! How can I help you today?" at its first turn;
//! - `leaks_instructions`: "As an AI playing a customer, I was told to ask about my booking."
//!   at its first turn;
//! - `ends_early`: "Never mind. ###STOP###" at its first turn, before the agent answered it;
//! - `talks_after_stop`: "Thank you, that is all. ###STOP### One more thing: can you check my
//!   seat?" where it would stop;
//! - `off_scenario`: "Actually, forget that. Can you recommend a restaurant in Rome instead?" at
//!   its first turn;
//! - `unknown_info`: "My reservation number is ZX9Q7W, please look it up." at its first turn.
//!
//! The last two break no rule a reading without a model can check: only the judged review
//! (`--user-review judge`) finds them.

use crate::hash::{Fnv, mix, unit};

/// A fault the stub's simulated user can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserFaultMode {
    Repeats,
    SpeaksAsAgent,
    LeaksInstructions,
    EndsEarly,
    TalksAfterStop,
    OffScenario,
    UnknownInfo,
}

impl UserFaultMode {
    pub const ALL: [UserFaultMode; 7] = [
        UserFaultMode::Repeats,
        UserFaultMode::SpeaksAsAgent,
        UserFaultMode::LeaksInstructions,
        UserFaultMode::EndsEarly,
        UserFaultMode::TalksAfterStop,
        UserFaultMode::OffScenario,
        UserFaultMode::UnknownInfo,
    ];

    /// As the review's rule names it.
    pub fn as_str(self) -> &'static str {
        match self {
            UserFaultMode::Repeats => "repeats",
            UserFaultMode::SpeaksAsAgent => "speaks_as_agent",
            UserFaultMode::LeaksInstructions => "leaks_instructions",
            UserFaultMode::EndsEarly => "ends_early",
            UserFaultMode::TalksAfterStop => "talks_after_stop",
            UserFaultMode::OffScenario => "off_scenario",
            UserFaultMode::UnknownInfo => "unknown_info",
        }
    }

    pub fn parse(text: &str) -> Option<UserFaultMode> {
        UserFaultMode::ALL.into_iter().find(|m| m.as_str() == text)
    }

    /// What the faulty user says at turn `turn` (its earlier turns counted), when it stops at
    /// turn `stops_at`; `None` where it speaks as a clean user does.
    pub(crate) fn says(self, turn: usize, stops_at: usize) -> Option<&'static str> {
        match (self, turn) {
            (UserFaultMode::Repeats, 0 | 1) => Some("I would like some help with my booking, please."),
            (UserFaultMode::SpeaksAsAgent, 0) => Some("Hello! How can I help you today?"),
            (UserFaultMode::LeaksInstructions, 0) => {
                Some("As an AI playing a customer, I was told to ask about my booking.")
            }
            (UserFaultMode::EndsEarly, 0) => Some("Never mind. ###STOP###"),
            (UserFaultMode::TalksAfterStop, t) if t >= stops_at => {
                Some("Thank you, that is all. ###STOP### One more thing: can you check my seat?")
            }
            (UserFaultMode::OffScenario, 0) => {
                Some("Actually, forget that. Can you recommend a restaurant in Rome instead?")
            }
            (UserFaultMode::UnknownInfo, 0) => Some("My reservation number is ZX9Q7W, please look it up."),
            _ => None,
        }
    }
}

/// The mode, of `modes` (each with its rate), in which this conversation's user faults, if any.
pub(crate) fn drawn(modes: &[(UserFaultMode, f64)], seed: u64, instructions: u64) -> Option<UserFaultMode> {
    modes.iter().find_map(|&(mode, rate)| {
        let draw = mix(Fnv::new().u64(seed).u64(instructions).u64(mode as u64).finish());
        (unit(draw) < rate).then_some(mode)
    })
}
