//! The figures a training-environment author looks at, for a whole run and per task: mean
//! reward, its variance (a task whose rollouts all score alike gives a policy-gradient trainer no
//! signal), success rate, agent turns per session, and the mean of each reward component.
//! Sessions that failed outside the agent are left out, as everywhere in the metrics.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::SUCCESS;

/// One scored session, as these metrics need it.
#[derive(Debug, Clone, PartialEq)]
pub struct Shaped {
    pub task: usize,
    pub reward: f64,
    pub steps: u64,
    /// The composite reward's components (empty for an environment's own scorer).
    pub components: BTreeMap<String, f64>,
    /// Success as the reward's own components decide it; `None`: the reward reached 1.
    pub success: Option<bool>,
}

impl Shaped {
    /// Whether the session succeeded: as the reward's deciding components say, else its
    /// reward reached 1.
    pub fn succeeded(&self) -> bool {
        self.success.unwrap_or(self.reward >= SUCCESS)
    }
}

/// The figures of a group of sessions (the run, or one task).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    pub sessions: usize,
    pub mean_reward: f64,
    /// The population variance of the reward.
    pub reward_variance: f64,
    /// The fraction of sessions that succeeded: as the reward's deciding components say, else
    /// those whose reward reached 1.
    pub success_rate: f64,
    pub mean_steps: f64,
    /// The mean of each component over the group's sessions (a session without it counts 0).
    pub components: BTreeMap<String, f64>,
}

/// The run's figures and each task's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainingMetrics {
    pub run: Figures,
    /// Per task, by task index.
    pub tasks: BTreeMap<usize, Figures>,
}

/// Running sums, so that a run of a million sessions keeps one accumulator per task.
#[derive(Debug, Clone, Default)]
struct Sums {
    n: usize,
    reward: f64,
    reward_sq: f64,
    successes: usize,
    steps: u64,
    components: BTreeMap<String, f64>,
}

impl Sums {
    fn add(&mut self, s: &Shaped) {
        self.n += 1;
        self.reward += s.reward;
        self.reward_sq += s.reward * s.reward;
        self.successes += usize::from(s.succeeded());
        self.steps += s.steps;
        for (name, value) in &s.components {
            *self.components.entry(name.clone()).or_default() += value;
        }
    }

    fn figures(&self) -> Figures {
        let n = self.n.max(1) as f64;
        let mean = self.reward / n;
        Figures {
            sessions: self.n,
            mean_reward: mean,
            reward_variance: (self.reward_sq / n - mean * mean).max(0.0),
            success_rate: self.successes as f64 / n,
            mean_steps: self.steps as f64 / n,
            components: self.components.iter().map(|(k, v)| (k.clone(), v / n)).collect(),
        }
    }
}

/// Accumulates sessions one at a time.
#[derive(Debug, Clone, Default)]
pub struct TrainingAccumulator {
    run: Sums,
    tasks: BTreeMap<usize, Sums>,
}

impl TrainingAccumulator {
    pub fn add(&mut self, session: &Shaped) {
        self.run.add(session);
        self.tasks.entry(session.task).or_default().add(session);
    }

    /// The figures; `None` when no session was scored.
    pub fn finish(&self) -> Option<TrainingMetrics> {
        (self.run.n > 0).then(|| TrainingMetrics {
            run: self.run.figures(),
            tasks: self.tasks.iter().map(|(t, s)| (*t, s.figures())).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shaped(task: usize, reward: f64, steps: u64, parts: &[(&str, f64)]) -> Shaped {
        Shaped {
            task,
            reward,
            steps,
            components: parts.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            success: None,
        }
    }

    #[test]
    fn run_and_task_figures() {
        let mut acc = TrainingAccumulator::default();
        assert!(acc.finish().is_none());
        acc.add(&shaped(0, 1.0, 2, &[("math", 0.9), ("format", 0.1)]));
        acc.add(&shaped(0, 0.1, 4, &[("math", 0.0), ("format", 0.1)]));
        acc.add(&shaped(1, 1.0, 3, &[("math", 0.9), ("format", 0.1)]));
        let m = acc.finish().unwrap();
        assert_eq!(m.run.sessions, 3);
        assert!((m.run.mean_reward - 0.7).abs() < 1e-12);
        // Rewards 1, 0.1, 1: mean 0.7, variance (0.09 + 0.36 + 0.09) / 3 = 0.18.
        assert!((m.run.reward_variance - 0.18).abs() < 1e-12);
        assert!((m.run.success_rate - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(m.run.mean_steps, 3.0);
        assert!((m.run.components["math"] - 0.6).abs() < 1e-12);
        let task0 = &m.tasks[&0];
        assert_eq!((task0.sessions, task0.success_rate, task0.mean_steps), (2, 0.5, 3.0));
        assert_eq!(m.tasks[&1].reward_variance, 0.0, "one rollout has no spread");
        // A deciding component overrides the reward's threshold.
        acc.add(&Shaped { success: Some(true), ..shaped(2, 0.9, 1, &[]) });
        assert_eq!(acc.finish().unwrap().tasks[&2].success_rate, 1.0);
    }
}
