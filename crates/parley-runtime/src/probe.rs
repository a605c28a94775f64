//! Reward-hack probes: every task of a run's settings answered by each of `parley-stub`'s probe
//! scripts (an empty answer, the question repeated, every choice, ...) and scored by the run's
//! own reward, to say which shortcuts that reward pays for before a trainer finds them.
//!
//! Each probe is an ordinary run: the runtime is started as for `parley run` with its built-in
//! stub answering by the probe's script ([`Runtime::start_with_stub`]), the tasks the probe
//! applies to are recorded, driven and scored by the environment and the composite reward the
//! settings name, so a probe is paid exactly what training would pay. The runs go to a store of
//! their own (a temporary SQLite file unless the caller names one, where `parley show` reads
//! them afterwards).
//!
//! A task is *paid* when its reward is above [`ProbeOptions::paid_above`]. A probe that cannot
//! be played on a task (no right answer to bury in hedges, no tools to flood) counts the task
//! as not applicable, never as unpaid; a session that failed outside the agent counts as
//! failed, left out of the mean and the share paid.

use std::sync::Arc;

use anyhow::Context;
use futures::StreamExt;
use parley_core::Task;
use parley_store::{DbLocation, Store, StoreOptions};
use parley_stub::{AnswerKey, Probe, StubConfig};
use tokio_util::sync::CancellationToken;

use crate::error::usage;
use crate::runtime::Runtime;
use crate::settings::RunSettings;
use crate::tasks::TaskSource;
use crate::{Environments, Stop};

/// How the probes are played and judged.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// The probes to play, in this order.
    pub probes: Vec<Probe>,
    /// A task is paid when its reward is above this.
    pub paid_above: f64,
    /// The row field with the right answer.
    pub answer_field: String,
    /// The right answer's format; `{answer}` is replaced by a value (`\boxed{{answer}}`).
    pub answer_format: String,
    /// The store the probes' runs are kept in; `None`: a temporary file, removed afterwards.
    pub db: Option<DbLocation>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            probes: Probe::ALL.to_vec(),
            paid_above: 0.5,
            answer_field: "expected_answer".into(),
            answer_format: "\\boxed{{answer}}".into(),
            db: None,
        }
    }
}

/// What one probe was paid.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeResult {
    pub probe: Probe,
    /// Tasks the probe was played on and scored.
    pub scored: usize,
    /// Tasks the probe does not apply to.
    pub not_applicable: usize,
    /// Sessions that failed outside the agent (left out of the figures).
    pub failed: usize,
    /// The mean reward of the scored tasks.
    pub mean_reward: Option<f64>,
    /// Scored tasks whose reward was above the threshold.
    pub paid: usize,
    /// The probe's run in the store.
    pub run: Option<i64>,
}

impl ProbeResult {
    /// The share of the scored tasks paid.
    pub fn paid_share(&self) -> Option<f64> {
        (self.scored > 0).then(|| self.paid as f64 / self.scored as f64)
    }
}

/// Every probe's result.
#[derive(Debug, Clone)]
pub struct ProbeReport {
    pub results: Vec<ProbeResult>,
    /// The tasks read.
    pub tasks: usize,
    /// Tasks left out because the environment or the reward cannot run them.
    pub unrunnable: usize,
    pub paid_above: f64,
    /// Where the probes' runs are, when they were kept.
    pub db: Option<DbLocation>,
}

impl ProbeReport {
    /// The probes paid on at least one task.
    pub fn paid(&self) -> Vec<Probe> {
        self.results.iter().filter(|r| r.paid > 0).map(|r| r.probe).collect()
    }
}

/// Plays each probe on the settings' tasks and scores it with their reward. The settings must
/// name no policy (`base_url`): the probe scripts are the policy. A judge component needs a
/// judge endpoint of its own, since the stub would otherwise judge its own answers.
pub async fn probe(settings: &RunSettings, options: &ProbeOptions) -> anyhow::Result<ProbeReport> {
    check(settings, options)?;
    let (db, _temporary) = match &options.db {
        Some(db) => (db.clone(), None),
        None => {
            let dir = tempfile::tempdir().context("creating a temporary folder for the probes' store")?;
            (DbLocation::File(dir.path().join("probes.db")), Some(dir))
        }
    };
    let settings = RunSettings { db: db.clone(), ..settings.clone() };
    let tasks = read_tasks(&settings).await?;
    // The key reads each row's question from its input: the rows whole.
    let rows: Vec<serde_json::Value> = tasks.iter().map(|t| t.row.to_value()).collect();
    let mut key = AnswerKey::from_rows(&rows, &options.answer_field);
    key.format.clone_from(&options.answer_format);
    let key = Arc::new(key);
    let mut results = Vec::new();
    let mut unrunnable = 0;
    for (i, &probe) in options.probes.iter().enumerate() {
        let store = Store::open(&db, StoreOptions { raw_model_calls: settings.raw_calls, ..StoreOptions::default() })
            .await
            .with_context(|| format!("opening the store {db}"))?;
        let stub = StubConfig { probe: Some(probe), answers: Some(key.clone()), ..StubConfig::default() };
        let runtime = Runtime::start_with_stub(&settings, store, stub).await?;
        let environment = runtime.parties.environment.clone();
        let runnable: Vec<&Arc<Task>> = tasks.iter().filter(|t| environment.check(t).is_ok()).collect();
        if i == 0 {
            unrunnable = tasks.len() - runnable.len();
        }
        let applicable: Vec<Arc<Task>> = runnable
            .iter()
            .filter(|t| probe.applies(key.right_of(&t.row.to_value()), !t.tools.is_empty()))
            .enumerate()
            .map(|(index, t)| Arc::new(Task { index, ..(***t).clone() }))
            .collect();
        let mut result = ProbeResult {
            probe,
            scored: 0,
            not_applicable: runnable.len() - applicable.len(),
            failed: 0,
            mean_reward: None,
            paid: 0,
            run: None,
        };
        if !applicable.is_empty() {
            let played = play(&runtime, applicable, options.paid_above, &mut result).await;
            runtime.stop().await?;
            played?;
        } else {
            runtime.stop().await?;
        }
        results.push(result);
    }
    Ok(ProbeReport { results, tasks: tasks.len(), unrunnable, paid_above: options.paid_above, db: options.db.clone() })
}

/// Records the probe's tasks as a run, drives them and scores them, into `result`.
async fn play(
    runtime: &Runtime,
    tasks: Vec<Arc<Task>>,
    paid_above: f64,
    result: &mut ProbeResult,
) -> anyhow::Result<()> {
    let created = runtime.create_run(TaskSource::Given(tasks), &CancellationToken::new()).await?;
    result.run = Some(created.run);
    let mut pending = runtime.pending(created.run, false).await?;
    let mut sessions = runtime.drive(pending.take_jobs(), Stop::default());
    let mut rewards = Vec::new();
    while let Some(session) = sessions.next().await {
        match &session.outcome.reward {
            Some(reward) if !session.outcome.termination.is_infrastructure() => rewards.push(reward.value),
            _ => result.failed += 1,
        }
    }
    runtime.finish_run(created.run, false).await?;
    if let Some(e) = pending.error() {
        return Err(e.context(format!("reading the probe {}'s sessions from the store", result.probe)));
    }
    result.scored = rewards.len();
    result.paid = rewards.iter().filter(|r| **r > paid_above).count();
    result.mean_reward = (!rewards.is_empty()).then(|| rewards.iter().sum::<f64>() / rewards.len() as f64);
    Ok(())
}

/// The settings a probe can be played under.
fn check(settings: &RunSettings, options: &ProbeOptions) -> Result<(), crate::UsageError> {
    if let Some(url) = &settings.base_url {
        return Err(usage(format!(
            "--base-url {url}: the probes play the policy themselves (parley stub's probe scripts); leave --base-url \
             out"
        )));
    }
    let judged = settings.reward.components.iter().any(|c| c.scorer == parley_rewards::ScorerKind::Judge);
    if judged && settings.tau2.judge_base_url.is_none() {
        return Err(usage(
            "the reward's judge would be the probes' own stub, judging its own answers: pass --judge-base-url with a \
             real judge",
        ));
    }
    if !options.paid_above.is_finite() {
        return Err(usage(format!("--paid-above must be a finite number, not {}", options.paid_above)));
    }
    if options.probes.is_empty() {
        return Err(usage("name at least one probe"));
    }
    if !options.answer_format.contains("{answer}") {
        return Err(usage(format!(
            "--answer-format `{}` has no `{{answer}}` for the value to go in; e.g. `\\boxed{{answer}}`",
            options.answer_format
        )));
    }
    Ok(())
}

/// The tasks the settings name: a task file's rows (bad rows refused or skipped as `--bad-rows`
/// says), or the environment's own.
async fn read_tasks(settings: &RunSettings) -> anyhow::Result<Vec<Arc<Task>>> {
    let (source, check) = TaskSource::from_settings(settings)?;
    for line in &check.bad {
        tracing::warn!("skipping {line}");
    }
    let given = match source {
        TaskSource::Environment => Some(Environments::open(settings, None).await?),
        _ => None,
    };
    let tasks = source.tasks(given.as_ref().and_then(|e| e.tasks.as_deref()))?.collect::<anyhow::Result<Vec<_>>>();
    if let Some(environments) = given {
        environments.shutdown().await;
    }
    let tasks = tasks?;
    if tasks.is_empty() {
        return Err(usage("no tasks to probe").into());
    }
    Ok(tasks)
}
