//! New work from what the store recorded: a run's sessions scored again, replayed against a
//! fresh environment, or forked from one of their messages and played on.

use std::sync::Arc;

use parley_core::review::UserFault;
use parley_core::{
    Claim, Message, Player, Reward, Role, RunId, SessionId, SessionSpec, SessionStatus, Termination, UserSimulator,
};
use parley_engine::replay::Drift;
use parley_engine::{Job, SessionResult, Stop};
use parley_store::Store;

use crate::error::usage;
use crate::settings::{Need, RewardSettings};
use crate::{Environments, RunSettings, Runtime, StoredTasks, prior};

/// The settings run `run` was recorded with.
pub async fn stored_settings(store: &Store, run: RunId) -> anyhow::Result<RunSettings> {
    let record = store.run(run).await.map_err(|e| usage(format!("{e}; see `parley runs`")))?;
    serde_json::from_value(record.config).map_err(|e| anyhow::anyhow!("reading run {run}'s stored settings: {e}"))
}

/// How a stored session ended, for scorers that look at it.
fn stored_termination(termination: Option<Termination>) -> Termination {
    termination.unwrap_or(Termination::AgentStop)
}

/// A run scored again.
#[derive(Debug, Clone)]
pub struct Rescored {
    /// The score version the new scores landed as.
    pub version: i64,
    /// Sessions scored.
    pub scored: usize,
    /// The sessions whose reward changed, in session order: the newest score before, and now.
    pub changes: Vec<(SessionId, Option<Reward>, Reward)>,
    /// Calls the judge made, and verdicts it answered from the store, when there is a judge.
    pub judge: Option<(u64, u64)>,
    /// Sessions whose simulated user's faults, found again by the review's rules, differ from
    /// those recorded (and were recorded anew).
    pub user_faults: u64,
}

/// Scores every scored session of `run` again with its environment. The new scores land
/// together, as one version for the whole run, or not at all (a killed rescore leaves none
/// behind). The judge's verdicts are kept by the hash of their prompt, so a rescore asks the
/// judge only what it has not judged before.
///
/// With `reward`, the sessions are scored with it instead of the run's own reward (a reward
/// tried on stored trajectories); either way the version keeps the reward it was scored with.
pub async fn rescore(store: Arc<Store>, run: RunId, reward: Option<RewardSettings>) -> anyhow::Result<Rescored> {
    let mut settings = stored_settings(&store, run).await?;
    if let Some(reward) = reward {
        settings.reward = reward;
        settings.check_for(Need::Nothing)?;
    }
    let mut tasks = StoredTasks::new(store.clone(), run, &settings)?;
    let mut environments = Environments::open(&settings, Some(&store)).await?;
    // The simulated user, for its review alone (it is asked nothing): what it finds is recorded
    // again, so a rescore after the rules changed re-derives each session's faults. A judged
    // review asks the judge through the verdict cache, which answers what it judged before.
    let user = crate::runtime::reviewer(&settings, &store, &mut environments).await?;
    let scored = score_all(&store, run, &mut tasks, &environments, user.as_deref()).await;
    let judge = environments.judge.as_ref().map(|j| (j.calls(), j.reused()));
    environments.shutdown().await;
    let (scores, changes, faults) = scored?;
    if scores.is_empty() {
        return Err(usage(format!(
            "run {run} has no finished session with a reward to score again; see `parley sessions {run}`"
        ))
        .into());
    }
    let version = store.add_scores(run, &scores, &serde_json::to_value(&settings.reward)?).await?;
    let user_faults = store.set_user_faults(&faults).await?;
    Ok(Rescored { version, scored: scores.len(), changes, judge, user_faults })
}

type Scores = (Vec<(SessionId, Reward)>, Vec<(SessionId, Option<Reward>, Reward)>, Vec<(SessionId, Vec<UserFault>)>);

async fn score_all(
    store: &Store,
    run: RunId,
    tasks: &mut StoredTasks,
    environments: &Environments,
    user: Option<&dyn UserSimulator>,
) -> anyhow::Result<Scores> {
    let env = &environments.environment;
    let (mut scores, mut changes, mut faults) = (Vec::new(), Vec::new(), Vec::new());
    let mut after = 0;
    loop {
        let page = store.sessions_page(run, after, 500).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        for session in page.iter().filter(|s| s.status == SessionStatus::Finished && s.reward.is_some()) {
            let transcript = store.transcript(session.id).await?;
            let task = tasks.get(session.task_index as usize).await?;
            let failed = |e: &dyn std::fmt::Display| anyhow::anyhow!("session {}: {e}", session.id);
            let mut scoring = env.open(&task).await.map_err(|e| failed(&e))?;
            let termination = stored_termination(session.termination);
            let reward = scoring.score(&transcript.messages, termination).await.map_err(|e| failed(&e));
            if let Some(user) = user {
                let found = user.review(&task, &transcript.messages, scoring.user_tools()).await;
                if found != session.user_faults {
                    faults.push((session.id, found));
                }
            }
            scoring.close().await;
            let reward = reward?;
            let old = store.latest_score(session.id).await?;
            if old.as_ref().is_none_or(|old| moved(old, &reward)) {
                changes.push((session.id, old, reward.clone()));
            }
            scores.push((session.id, reward));
        }
    }
    Ok((scores, changes, faults))
}

/// Whether a reward moved: its value, or one of its components (a reward's other details, such
/// as a component's weight, may differ while it pays the same).
fn moved(old: &Reward, new: &Reward) -> bool {
    old.value != new.value || old.breakdown.get("reward_components") != new.breakdown.get("reward_components")
}

/// What replaying one session found.
#[derive(Debug, Clone)]
pub struct Replayed {
    pub session: SessionId,
    /// Tool outputs that differ from the recorded ones.
    pub drift: Vec<Drift>,
    /// The reward recorded, and the one the replayed environment gives the recorded transcript,
    /// when the two differ.
    pub reward_change: Option<(Option<f64>, Option<f64>)>,
}

/// Replays the recorded tool calls of `sessions` (of run `run`) against a fresh environment, and
/// scores each recorded transcript against it: what drifted, and which rewards changed.
pub async fn replay(store: Arc<Store>, run: RunId, sessions: &[SessionId]) -> anyhow::Result<Vec<Replayed>> {
    let settings = stored_settings(&store, run).await?;
    let mut tasks = StoredTasks::new(store.clone(), run, &settings)?;
    let rows = store.sessions(run).await?;
    let environments = Environments::open(&settings, None).await?;
    let env = environments.environment.clone();
    let mut replayed = Vec::new();
    for &id in sessions {
        let Some(row) = rows.iter().find(|r| r.id == id) else { continue };
        let transcript = store.transcript(id).await?;
        let task = tasks.get(row.task_index as usize).await?;
        let termination = stored_termination(row.termination);
        let report = parley_engine::replay::replay(
            env.as_ref(),
            &task,
            &transcript.messages,
            &transcript.tool_calls,
            termination,
        )
        .await
        .map_err(|e| anyhow::anyhow!("session {id}: {e}"))?;
        let now = report.reward.as_ref().ok().map(|r| r.value);
        let reward_change = (row.reward.is_some() && now != row.reward).then_some((row.reward, now));
        replayed.push(Replayed { session: id, drift: report.drift, reward_change });
    }
    environments.shutdown().await;
    Ok(replayed)
}

/// The sessions of `run` a replay of the whole run takes: its finished ones.
pub async fn finished_sessions(store: &Store, run: RunId) -> anyhow::Result<Vec<SessionId>> {
    stored_settings(store, run).await?;
    Ok(store.sessions(run).await?.into_iter().filter(|s| s.status == SessionStatus::Finished).map(|s| s.id).collect())
}

/// Whether a session's transcript may be forked after its first `at` messages: not before the
/// first message or past the last, and never between a tool call and its results.
pub fn check_fork_point(messages: &[Message], at: u32) -> Result<(), crate::UsageError> {
    let at = at as usize;
    if at == 0 || at > messages.len() {
        return Err(usage(format!("--at {at}: the session has messages 0 to {}", messages.len())));
    }
    let last = &messages[at - 1];
    if last.role == Role::Assistant && !last.tool_calls.is_empty() {
        return Err(usage(format!(
            "--at {at} would cut between message {} (tool calls) and their results; use --at {} or later",
            at - 1,
            at + last.tool_calls.len()
        )));
    }
    Ok(())
}

impl Runtime {
    /// Forks session `source` of run `run` after its first `at` messages (see
    /// [`check_fork_point`]) into a new session of the run, and plays the fork to its end with
    /// this runtime's agent. The fork runs unclaimed (fence 0), which the store accepts until
    /// someone claims it; the run's own status is left as it is.
    pub async fn fork(&self, run: RunId, source: SessionId, at: u32, stop: Stop) -> anyhow::Result<SessionResult> {
        check_fork_point(&self.store.transcript(source).await?.messages, at)?;
        let id = self.store.fork_session(source, at).await?;
        let row = self.store.sessions_by_id(&[id]).await?.pop().ok_or_else(|| anyhow::anyhow!("fork {id} is gone"))?;
        let transcript = self.store.transcript(id).await?;
        let mut tasks = StoredTasks::new(self.store.clone(), run, &self.settings)?;
        let task = tasks.get(row.task_index as usize).await?;
        let spec =
            SessionSpec { task_index: task.index, trial: row.trial as u32, seed: row.seed as u64, player: Player::Run };
        let job = Job::new(Claim::unclaimed(id), task, spec, Some(prior(transcript)));
        Ok(self.spawn(job, None, stop, |_| {}).await?)
    }
}
