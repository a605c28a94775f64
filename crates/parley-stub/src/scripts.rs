//! Scripts: what the stub says, as an agent, in sessions whose answer it is given. A run with no
//! model endpoint gives the in-process stub the gold tool calls of some of its tasks' sessions
//! (tau2's `evaluation_criteria.actions`), so that a first run scores a spread of rewards
//! rather than none: a scripted session's agent makes its calls in order, one per turn, then
//! says its closing text at every turn after.
//!
//! A session is known by the `seed` its agent's requests carry (Parley sends each session's
//! own), so a script needs nothing of the conversation's words. A scripted call whose tool the
//! request does not offer is not made: the stub answers as it would without the script.

use std::collections::HashMap;

/// One session's script.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    /// The calls, in order: tool name and arguments (a JSON object as text).
    pub calls: Vec<(String, String)>,
    /// What the agent says once every call is made.
    pub closing: String,
}

/// Scripts by the seed of the session they play.
#[derive(Debug, Clone, Default)]
pub struct Scripts {
    by_seed: HashMap<u64, Script>,
}

impl Scripts {
    pub fn new(by_seed: HashMap<u64, Script>) -> Scripts {
        Scripts { by_seed }
    }

    pub fn len(&self) -> usize {
        self.by_seed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_seed.is_empty()
    }

    pub(crate) fn get(&self, seed: u64) -> Option<&Script> {
        self.by_seed.get(&seed)
    }
}
