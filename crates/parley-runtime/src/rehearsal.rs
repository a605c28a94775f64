//! What the in-process stub knows of a run's tasks, so that a run with no model endpoint shows
//! what Parley measures: in tau2's domains, some sessions' agents play their task's gold actions
//! and say its `communicate_info` (the oracle's script), the others answer as the stub always
//! does. Each task gets an ability of its own and each trial a draw against it, so the rewards
//! spread, and pass@k and pass^k differ. The stub stays a test double: it plays a script, it
//! does not read the conversation.

use std::collections::HashMap;
use std::sync::Arc;

use parley_core::{Party, stable_seed};
use parley_stub::{Script, Scripts};

use crate::environment::{Judged, tau2_domain, tau2_tasks};
use crate::settings::RunSettings;

/// The trial number whose seed sets a task's ability (no run has this many trials).
const ABILITY: u32 = u32::MAX;

/// The scripts of a run's sessions, for a tau2 run; `None` for any other.
pub fn scripts(settings: &RunSettings) -> anyhow::Result<Option<Arc<Scripts>>> {
    let Some(domain) = settings.env.tau2() else { return Ok(None) };
    let (loaded, _) = tau2_domain(settings, domain, Judged::No)?;
    let tasks = tau2_tasks(&loaded, settings.tau2.split, settings.num_tasks)?;
    let mut by_seed = HashMap::new();
    for task in &tasks {
        let calls: Vec<(String, String)> = agent_oracle::gold_script(task)
            .into_iter()
            .filter(|(party, _)| *party == Party::Agent)
            .map(|(_, call)| (call.name, call.arguments))
            .collect();
        let script = Script { calls, closing: agent_oracle::closing_message(task) };
        let ability = unit(stable_seed(&task.id, ABILITY));
        for trial in 0..settings.trials {
            let seed = stable_seed(&task.id, trial);
            if unit(seed.rotate_left(17)) < ability {
                by_seed.insert(seed, script.clone());
            }
        }
    }
    Ok(Some(Arc::new(Scripts::new(by_seed))))
}

/// A hash as a number in [0, 1).
fn unit(hash: u64) -> f64 {
    (hash >> 11) as f64 / (1u64 << 53) as f64
}
