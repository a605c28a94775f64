//! The rows a finished session is written as: a NeMo Gym rollout row when it was scored, a
//! failure row (NeMo Gym's `_failures.jsonl` sidecar) when it failed outside the agent. One
//! builder each, whether the session comes from a live run or from the store.

use parley_core::nemo_gym::{RolloutRow, response_object};
use parley_core::tokens::first_discontiguous;
use parley_core::{FailureClass, Message, Reward, RunId, Task, TaskRow, Termination, Usage};
use parley_engine::SessionResult;
use parley_store::{SessionRow, Transcript};
use serde_json::{Value, json};

/// A scored session, as its rollout row needs it.
#[derive(Debug)]
pub struct Rollout<'a> {
    pub task: &'a Task,
    pub trial: u32,
    /// The messages the session produced, after its opening.
    pub produced: &'a [Message],
    /// Tokens of the agent's model calls.
    pub usage: Usage,
    pub reward: Option<&'a Reward>,
}

impl<'a> Rollout<'a> {
    /// The NeMo Gym rollout row: the task row, `response` (a Responses object whose output is
    /// the trajectory), `reward` and the scorer's fields.
    ///
    /// Token ids go out only where a trainer would accept them: when a generation's prompt does
    /// not extend the ones before it, it and every later one are written without their tokens
    /// (so untrainable), and `_parley_token_contiguity` says why.
    pub fn row(&self, model: &str) -> Value {
        self.written(model).into_value()
    }

    /// [`Rollout::row`] borrowing the task row, for writing: the same bytes, without a copy of
    /// the task's fields.
    pub fn written<'r>(&'r self, model: &'r str) -> RolloutRow<'r> {
        let unscored = Reward::new(0.0);
        let discontiguous = first_discontiguous(self.produced);
        let reward = self.reward.unwrap_or(&unscored);
        let mut row = match &discontiguous {
            None => RolloutRow::produced(
                &self.task.row,
                model,
                self.produced,
                self.usage,
                reward,
                self.task.index,
                self.trial,
            ),
            Some((at, _)) => {
                let mut kept = self.produced.to_vec();
                kept[*at..].iter_mut().for_each(|m| m.tokens = None);
                let response = response_object(model, &kept, self.usage);
                RolloutRow::new(&self.task.row, response, reward, self.task.index, self.trial)
            }
        };
        if let Some((_, why)) = discontiguous {
            row.insert("_parley_token_contiguity", json!(why));
        }
        row
    }
}

impl<'a> From<&'a SessionResult> for Rollout<'a> {
    fn from(result: &'a SessionResult) -> Rollout<'a> {
        Rollout {
            task: &result.task,
            trial: result.trial,
            produced: result.produced(),
            usage: result.usage,
            reward: result.outcome.reward.as_ref(),
        }
    }
}

impl<'a> Rollout<'a> {
    /// A stored session: its transcript after the opening the run's settings gave it.
    pub fn stored(
        task: &'a Task,
        trial: u32,
        system_prompt: Option<&str>,
        transcript: &'a Transcript,
        reward: Option<&'a Reward>,
    ) -> Rollout<'a> {
        let from = parley_engine::opening_len(system_prompt, task).min(transcript.messages.len());
        Rollout { task, trial, produced: &transcript.messages[from..], usage: transcript.agent_usage(), reward }
    }
}

/// Where and how a session failed: what a failure row adds to its task row.
#[derive(Debug)]
pub struct Failure<'a> {
    pub run: RunId,
    pub session: i64,
    pub task_index: i64,
    pub trial: i64,
    pub termination: Option<&'a str>,
    /// The failure class (`rate_limited`, `server_error`, ...).
    pub class: Option<&'a str>,
    pub error: Option<&'a str>,
}

impl Failure<'_> {
    /// The task row with NeMo Gym's failure fields (`_ng_failure_class` is the failure class)
    /// and Parley's own (run, session, termination).
    pub fn row(&self, task_row: &TaskRow) -> Value {
        let mut row = task_row.to_value();
        if let Some(map) = row.as_object_mut() {
            map.insert("_ng_task_index".into(), json!(self.task_index));
            map.insert("_ng_rollout_index".into(), json!(self.trial));
            map.insert("_ng_failure_class".into(), json!(self.class));
            map.insert("_ng_failure_message".into(), json!(self.error));
            map.insert("_parley_run".into(), json!(self.run));
            map.insert("_parley_session".into(), json!(self.session));
            map.insert("_parley_termination".into(), json!(self.termination));
        }
        row
    }

    pub fn of_result(run: RunId, result: &SessionResult) -> Failure<'_> {
        Failure {
            run,
            session: result.id,
            task_index: result.task.index as i64,
            trial: i64::from(result.trial),
            termination: Some(result.outcome.termination.as_str()),
            class: result.outcome.failure.map(|c| c.as_str()),
            error: result.outcome.error.as_deref(),
        }
    }

    pub fn of_row(run: RunId, session: &SessionRow) -> Failure<'_> {
        Failure {
            run,
            session: session.id,
            task_index: session.task_index,
            trial: session.trial,
            termination: session.termination.map(Termination::as_str),
            class: session.failure.map(FailureClass::as_str),
            error: session.error.as_deref(),
        }
    }
}
