//! `parley run`: load tasks, start every session through the scheduler, write rollouts and
//! failures as they finish, and print the run's summary from the store.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_tool_calling::{ToolCallingAgent, ToolCallingConfig};
use anyhow::Context;
use futures::StreamExt;
use parley_core::nemo_gym::{response_object, rollout_row, task_from_row};
use parley_core::{Agent, RunSpec, SessionSpec, SessionStore, Task, ToolLists, UserSimulator, stable_seed};
use parley_engine::{Job, Parties, Prior, Scheduler, SessionResult, Stop};
use parley_llm::{ChatClient, EndpointConfig};
use parley_store::{SqliteStore, StoreOptions};
use tokio_util::sync::CancellationToken;

use crate::environments::Environments;
use crate::error::usage;
use crate::export::Format;
use crate::progress::Progress;
use crate::settings::{AgentKind, BadRows, RunSettings, ToolMode, UserKind};
use crate::summary;

/// What a run needs while it executes: the store, the three parties, and the built-in stub's
/// shutdown when it was started.
pub struct Runtime {
    pub store: Arc<SqliteStore>,
    pub parties: Parties,
    pub base_url: String,
    /// The agent's system prompt in effect: the settings', or the environment's policy.
    pub system_prompt: Option<String>,
    /// Tasks the environment brought (tau2), in run order.
    pub tasks: Option<Vec<Arc<Task>>>,
    shutdown: CancellationToken,
    environments: Environments,
}

impl Runtime {
    pub async fn start(settings: &RunSettings, store: SqliteStore) -> anyhow::Result<Runtime> {
        let shutdown = CancellationToken::new();
        let base_url = match &settings.base_url {
            Some(url) => url.clone(),
            None => start_stub(shutdown.clone()).await?,
        };
        let client = ChatClient::new(&EndpointConfig {
            base_url: base_url.clone(),
            api_key_env: settings.api_key_env.clone(),
            timeout: Duration::from_secs_f64(settings.call_timeout_secs),
            max_retries: settings.max_retries,
            max_concurrency: settings.endpoint_concurrency,
            max_response_bytes: settings.max_response_bytes,
        })
        .map_err(|e| usage(e.to_string()))?;
        let environments = Environments::open(settings).await?;
        // The oracle needs no prompt; a model agent gets the settings' or the environment's.
        let system_prompt = match settings.agent {
            AgentKind::Oracle => None,
            AgentKind::ToolCalling => settings.system_prompt.clone().or_else(|| environments.policy.clone()),
        };
        let agent: Arc<dyn Agent> = match settings.agent {
            AgentKind::Oracle => Arc::new(agent_oracle::Oracle),
            AgentKind::ToolCalling => Arc::new(ToolCallingAgent::new(
                Arc::new(client),
                ToolCallingConfig {
                    model: settings.model.clone(),
                    system_prompt: system_prompt.clone(),
                    sampling: settings.sampling.clone(),
                    seed_per_session: true,
                    json_tools: settings.tool_mode == ToolMode::Json,
                    greeting: settings.greeting.clone(),
                },
            )),
        };
        // A user the environment needs (Gymnasium observations) stands in when none is asked for.
        let user = match user_simulator(settings, &base_url, &store).await? {
            Some(user) => Some(user),
            None => environments.user.clone(),
        };
        let store = Arc::new(store);
        let parties = Parties { agent, user, environment: environments.environment.clone(), store: store.clone() };
        let tasks = environments.tasks.clone();
        Ok(Runtime { store, parties, base_url, system_prompt, tasks, shutdown, environments })
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        self.environments.shutdown().await;
        self.shutdown.cancel();
        self.store.close().await?;
        Ok(())
    }
}

/// The simulated user the settings ask for.
async fn user_simulator(
    settings: &RunSettings,
    agent_base_url: &str,
    store: &SqliteStore,
) -> anyhow::Result<Option<Arc<dyn UserSimulator>>> {
    let user = &settings.user;
    Ok(match user.kind {
        UserKind::None => None,
        UserKind::Scripted => Some(Arc::new(simulator_scripted::Scripted)),
        UserKind::Human => Some(Arc::new(simulator_human::Human::stdio())),
        UserKind::Llm => {
            let client = ChatClient::new(&EndpointConfig {
                base_url: user.base_url.clone().unwrap_or_else(|| agent_base_url.to_owned()),
                api_key_env: user.api_key_env.clone(),
                timeout: Duration::from_secs_f64(settings.call_timeout_secs),
                max_retries: settings.max_retries,
                max_concurrency: settings.endpoint_concurrency,
                max_response_bytes: settings.max_response_bytes,
            })
            .map_err(|e| usage(format!("the user's endpoint: {e}")))?;
            let read = |path: &Option<PathBuf>| -> anyhow::Result<Option<String>> {
                path.as_ref()
                    .map(|p| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())))
                    .transpose()
            };
            let defaults = simulator_llm::Prompt::default();
            let prompt = simulator_llm::Prompt {
                template: read(&user.prompt)?.unwrap_or(defaults.template),
                guidelines: read(&user.guidelines)?.unwrap_or(defaults.guidelines),
                tool_guidelines: defaults.tool_guidelines,
                persona: user.persona.clone(),
            };
            let config = simulator_llm::LlmUserConfig {
                model: user.model.clone().unwrap_or_else(|| settings.model.clone()),
                sampling: user.sampling.clone(),
                prompt,
            };
            Some(Arc::new(simulator_llm::LlmUser::new(Arc::new(client), config)))
        }
        UserKind::Replay => {
            let run = user.replay_run.ok_or_else(|| usage("--user replay needs --user-replay-run RUN"))?;
            let record = store.run(run).await.map_err(|e| usage(format!("--user-replay-run {run}: {e}")))?;
            let recorded: RunSettings = serde_json::from_value(record.config).context("reading the recorded run")?;
            let tasks = stored_tasks(store, run).await?;
            let mut sessions = Vec::new();
            for s in store.sessions(run).await? {
                let opening = usize::from(recorded.system_prompt.is_some())
                    + tasks.get(s.task_index as usize).map_or(0, |t| t.messages.len());
                let transcript = store.transcript(s.id).await?;
                sessions.push(((s.task_index as usize, s.trial as u32), transcript.messages, opening));
            }
            Some(Arc::new(simulator_replay::Replay::new(sessions)))
        }
    })
}

/// How an execution went.
pub struct Executed {
    pub cancelled: bool,
    pub elapsed: Duration,
    /// Whether the elapsed time covers the whole run (not so for a resume).
    pub timed: bool,
}

/// Runs the jobs, hands each result to `sink` as it ends, and marks the run's status.
pub async fn execute(
    runtime: &Runtime,
    settings: &RunSettings,
    run: i64,
    jobs: Vec<Job>,
    mut sink: impl FnMut(&SessionResult) -> anyhow::Result<()>,
) -> anyhow::Result<Executed> {
    let scheduler = Scheduler {
        parties: runtime.parties.clone(),
        limits: settings.limits(),
        concurrency: settings.concurrency,
        stop: Stop::default(),
    };
    let grace = Duration::from_secs_f64(settings.shutdown_grace_secs);
    let watcher = tokio::spawn(watch_signals(scheduler.stop.clone(), grace));
    let started = Instant::now();
    let progress = Progress::new(jobs.len() as u64);
    let mut results = scheduler.run(jobs);
    while let Some(result) = results.next().await {
        sink(&result)?;
        progress.finish_one(result.outcome.reward.as_ref().map(|r| r.value));
    }
    progress.done();
    watcher.abort();
    let cancelled = scheduler.stop.is_stopping();
    runtime.store.finish_run(run, if cancelled { "interrupted" } else { "finished" }).await?;
    Ok(Executed { cancelled, elapsed: started.elapsed(), timed: true })
}

/// Stops the run on SIGINT or SIGTERM: no new session starts, and the sessions in flight finish
/// the turn they are in and stop at their next commit; after `grace`, or on a second signal,
/// they are cancelled where they are. Committed turns are kept either way.
async fn watch_signals(stop: Stop, grace: Duration) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        tracing::warn!("could not listen for SIGINT and SIGTERM; a signal will end the run without a grace period");
        return;
    };
    let mut next = async || {
        tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        }
    };
    let first = next().await;
    eprintln!(
        "\n{first}: stopping; sessions in flight finish their current turn (up to {} s), committed turns are \
         kept; signal again to stop at once",
        grace.as_secs_f64()
    );
    stop.drain.cancel();
    tokio::select! {
        () = tokio::time::sleep(grace) => eprintln!("the grace period is over: cancelling the sessions in flight"),
        again = next() => eprintln!("{again} again: cancelling the sessions in flight"),
    }
    stop.abort.cancel();
}

pub async fn run(mut settings: RunSettings) -> anyhow::Result<()> {
    let file_tasks = if settings.env.starts_with("tau2:") { None } else { Some(load_tasks(&settings)?) };
    let store = SqliteStore::open(&settings.db, StoreOptions { raw_model_calls: settings.raw_calls })
        .await
        .with_context(|| format!("opening the store {}", settings.db.display()))?;
    let runtime = Runtime::start(&settings, store).await?;
    let tasks = match file_tasks {
        Some(tasks) => tasks,
        None => runtime.tasks.clone().unwrap_or_default(),
    };
    if tasks.is_empty() {
        return Err(usage("no tasks to run"));
    }
    // What the transcript starts with is what the run records.
    settings.system_prompt.clone_from(&runtime.system_prompt);

    // Trials of a task are adjacent (NeMo Gym's default `aabbcc` order).
    let specs: Vec<SessionSpec> = tasks
        .iter()
        .flat_map(|t| {
            (0..settings.trials).map(|trial| SessionSpec {
                task_index: t.index,
                trial,
                seed: stable_seed(&t.id, trial),
            })
        })
        .collect();
    let spec = RunSpec { environment: settings.env.clone(), config: serde_json::to_value(&settings)? };
    let (run, ids) = runtime.store.create_run(&spec, &tasks, &specs).await.context("recording the run")?;
    let out = out_path(&settings, run);
    let failures_path = failures_path(&out);
    let mut rollouts = JsonlWriter::create(&out)?;
    let mut failures = JsonlWriter::create(&failures_path)?;

    let stub_note = if settings.base_url.is_none() { " (the built-in stub, a test double)" } else { "" };
    eprintln!(
        "run {run}: {} sessions ({} tasks x {} trials) of {} against {}{stub_note}, model {}; stored in {}",
        specs.len(),
        tasks.len(),
        settings.trials,
        settings.env,
        runtime.base_url,
        settings.model,
        settings.db.display(),
    );
    let jobs: Vec<Job> = specs
        .iter()
        .zip(&ids)
        .map(|(s, &id)| Job {
            id,
            fence: parley_core::Fence::UNCLAIMED,
            task: tasks[s.task_index].clone(),
            trial: s.trial,
            seed: s.seed,
            prior: None,
        })
        .collect();
    let (mut written, mut failed) = (0usize, 0usize);
    let executed = execute(&runtime, &settings, run, jobs, |result| {
        if result.outcome.termination.is_infrastructure() {
            failed += 1;
            failures.write(&failure_row(run, result))
        } else {
            written += 1;
            rollouts.write(&rollout(&settings.model, result))
        }
    })
    .await?;
    rollouts.finish()?;
    failures.finish()?;
    report(&runtime, &settings, run, &executed, &out, written, failed).await?;
    runtime.stop().await
}

/// `parley resume RUN`: loads the run's settings and tasks from the store, continues every
/// pending session from its last committed turn, then rewrites the run's output files from the
/// store so that they hold every finished session exactly once.
pub async fn resume(run: i64, db: &Path, retry_failed: bool) -> anyhow::Result<()> {
    if !db.is_file() {
        return Err(usage(format!("--db {}: no such database", db.display())));
    }
    let probe = SqliteStore::open(db, StoreOptions::default()).await?;
    let record = probe.run(run).await.map_err(|e| usage(format!("{e} in {}; see `parley runs`", db.display())))?;
    let mut settings: RunSettings =
        serde_json::from_value(record.config).context("reading the run's stored settings")?;
    settings.db = db.to_path_buf();
    probe.close().await?;
    drop(probe);
    let store = SqliteStore::open(db, StoreOptions { raw_model_calls: settings.raw_calls }).await?;
    let tasks = stored_tasks(&store, run).await?;
    if retry_failed {
        let reopened = store.reopen_failed(run).await?;
        eprintln!("run {run}: {reopened} failed sessions reopened, each to continue from its last committed turn");
    }
    let pending: Vec<_> = store.sessions(run).await?.into_iter().filter(|s| s.status != "finished").collect();

    let runtime = Runtime::start(&settings, store).await?;
    let mut jobs = Vec::with_capacity(pending.len());
    for s in &pending {
        let transcript = runtime.store.transcript(s.id).await?;
        let prior =
            Prior { usage: transcript.usage(), messages: transcript.messages, tool_calls: transcript.tool_calls };
        let task = tasks
            .get(s.task_index as usize)
            .ok_or_else(|| anyhow::anyhow!("session {} names task {}, which run {run} lacks", s.id, s.task_index))?;
        jobs.push(Job {
            id: s.id,
            fence: parley_core::Fence::UNCLAIMED,
            task: task.clone(),
            trial: s.trial as u32,
            seed: s.seed as u64,
            prior: Some(prior),
        });
    }
    eprintln!("run {run}: resuming {} unfinished sessions against {}", jobs.len(), runtime.base_url);
    let mut executed = execute(&runtime, &settings, run, jobs, |_| Ok(())).await?;
    executed.timed = false;

    let out = out_path(&settings, run);
    let failures_path = failures_path(&out);
    let (written, failed) = rewrite_outputs(&runtime.store, run, &tasks, &settings, &out, &failures_path).await?;
    report(&runtime, &settings, run, &executed, &out, written, failed).await?;
    runtime.stop().await
}

async fn report(
    runtime: &Runtime,
    settings: &RunSettings,
    run: i64,
    executed: &Executed,
    out: &Path,
    written: usize,
    failed: usize,
) -> anyhow::Result<()> {
    let report = summary::Report::load(&runtime.store, run, settings.trials as usize).await?;
    let mut stdout = std::io::stdout().lock();
    report.print(&mut stdout, executed.timed.then_some(executed.elapsed))?;
    writeln!(
        stdout,
        "rollouts       {} ({written}) · failures {} ({failed})",
        out.display(),
        failures_path(out).display()
    )?;
    drop(stdout);
    if executed.cancelled || report.unfinished > 0 {
        eprintln!(
            "run {run} stopped with {} sessions unfinished; resume it with: parley resume {run} --db {}",
            report.unfinished,
            settings.db.display()
        );
    }
    Ok(())
}

/// Writes the rollout and failure files again from the store, through a temporary file each,
/// so that an interrupted rewrite never leaves a half-written file behind.
async fn rewrite_outputs(
    store: &SqliteStore,
    run: i64,
    tasks: &[Arc<Task>],
    settings: &RunSettings,
    out: &Path,
    failures: &Path,
) -> anyhow::Result<(usize, usize)> {
    let out_tmp = out.with_extension("jsonl.partial");
    let failures_tmp = failures.with_extension("jsonl.partial");
    let mut rows = std::io::BufWriter::new(std::fs::File::create(&out_tmp)?);
    let mut fails = std::io::BufWriter::new(std::fs::File::create(&failures_tmp)?);
    let counts =
        crate::export::export(store, run, tasks, settings, Format::NemoGym, &mut rows, Some(&mut fails)).await?;
    rows.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    fails.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&out_tmp, out)?;
    std::fs::rename(&failures_tmp, failures)?;
    Ok((counts.rows, counts.failures))
}

/// The run's tasks as stored with it. tau2 tasks are rebuilt from their domain, by id.
pub async fn stored_tasks(store: &SqliteStore, run: i64) -> anyhow::Result<Vec<Arc<Task>>> {
    let record = store.run(run).await?;
    if record.environment.starts_with("tau2:") {
        let settings: RunSettings = serde_json::from_value(record.config).context("reading the run's settings")?;
        let domain = crate::environments::tau2_domain(&settings, false)?;
        let rows = store.task_rows(run).await?;
        return rows
            .iter()
            .enumerate()
            .map(|(index, row)| {
                let id = row.get("id").and_then(|v| v.as_str()).unwrap_or_default();
                let task =
                    domain.tasks.iter().find(|t| t.id == id).ok_or_else(|| {
                        anyhow::anyhow!("task `{id}` of run {run} is not in the {} domain", domain.name)
                    })?;
                Ok(Arc::new(Task { index, ..task.clone() }))
            })
            .collect();
    }
    tasks_from_rows(store.task_rows(run).await?, "stored")
}

/// Tasks from rows that were valid when written (generated, or stored with the run), sharing
/// their tool lists; `what` names them in an error.
fn tasks_from_rows(rows: impl IntoIterator<Item = serde_json::Value>, what: &str) -> anyhow::Result<Vec<Arc<Task>>> {
    let mut lists = ToolLists::default();
    rows.into_iter()
        .enumerate()
        .map(|(i, row)| {
            let task = task_from_row(i, row).map_err(|e| anyhow::anyhow!("{what} task {i}: {e}"))?;
            Ok(Arc::new(lists.share(task)))
        })
        .collect()
}

fn out_path(settings: &RunSettings, run: i64) -> PathBuf {
    settings.out.clone().unwrap_or_else(|| PathBuf::from(format!("rollouts-{run}.jsonl")))
}

/// Reads task rows, or generates them when no file is given. A row that is not JSON or not a
/// task is named by its line; `--bad-rows` says whether the run then refuses to start or
/// leaves those rows out.
fn load_tasks(settings: &RunSettings) -> anyhow::Result<Vec<Arc<Task>>> {
    let Some(path) = &settings.tasks else {
        return tasks_from_rows(environment_multi_step::generate(settings.num_tasks, 0), "generated");
    };
    let file = std::fs::File::open(path).map_err(|e| usage(format!("--tasks {}: {e}", path.display())))?;
    let mut tasks = Vec::new();
    let mut bad = Vec::new();
    let mut lists = ToolLists::default();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| usage(format!("{}:{}: {e}", path.display(), n + 1)))?;
        if line.trim().is_empty() {
            continue;
        }
        let row = serde_json::from_str(&line)
            .map_err(|e| format!("not a JSON row ({e})"))
            .and_then(|row| task_from_row(tasks.len(), row).map_err(|e| e.to_string()))
            .and_then(|task| check_tools(settings, &task).map(|()| task));
        match row {
            Ok(task) => tasks.push(Arc::new(lists.share(task))),
            Err(why) => bad.push(format!("{}:{}: {why}", path.display(), n + 1)),
        }
    }
    if !bad.is_empty() {
        match settings.bad_rows {
            BadRows::Fail => {
                let shown = bad.iter().take(10).cloned().collect::<Vec<_>>().join("\n  ");
                let more = if bad.len() > 10 { format!("\n  ... and {} more", bad.len() - 10) } else { String::new() };
                return Err(usage(format!(
                    "{} of the rows in {} cannot be read:\n  {shown}{more}\nfix them, or pass --bad-rows skip to run \
                     the other rows",
                    bad.len(),
                    path.display()
                )));
            }
            BadRows::Skip => {
                for line in &bad {
                    eprintln!("skipping {line}");
                }
                eprintln!("skipped {} unreadable rows of {} (--bad-rows skip)", bad.len(), path.display());
            }
        }
    }
    if tasks.is_empty() {
        return Err(usage(format!("--tasks {}: no task rows to run", path.display())));
    }
    Ok(tasks)
}

/// A row for the built-in multi-step environment may declare its tools; each must be one the
/// environment can run.
fn check_tools(settings: &RunSettings, task: &Task) -> Result<(), String> {
    if settings.env != "multi-step" {
        return Ok(());
    }
    let known = environment_multi_step::tools();
    match task.tools.iter().find(|t| !known.iter().any(|k| k.name == t.name)) {
        None => Ok(()),
        Some(unknown) => {
            let names: Vec<&str> = known.iter().map(|k| k.name.as_str()).collect();
            Err(format!(
                "the row declares the tool `{}`, which the multi-step environment does not have (it has {})",
                unknown.name,
                names.join(", ")
            ))
        }
    }
}

async fn start_stub(shutdown: CancellationToken) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.context("starting the built-in stub")?;
    let address = listener.local_addr()?;
    tokio::spawn(parley_stub::serve(listener, parley_stub::StubConfig::default(), async move {
        shutdown.cancelled().await
    }));
    Ok(format!("http://{address}/v1"))
}

fn rollout(model: &str, result: &SessionResult) -> serde_json::Value {
    let reward = result.outcome.reward.clone().unwrap_or_else(|| parley_core::Reward::new(0.0));
    let response = response_object(model, result.produced(), result.usage);
    rollout_row(&result.task.row, response, &reward, result.task.index, result.trial)
}

fn failure_row(run: i64, result: &SessionResult) -> serde_json::Value {
    let failure = crate::export::Failure {
        run,
        session: result.id,
        task_index: result.task.index as i64,
        trial: i64::from(result.trial),
        termination: Some(result.outcome.termination.as_str()),
        error: result.outcome.error.as_deref(),
    };
    failure.row(&result.task.row)
}

/// `out.jsonl` → `out_failures.jsonl`, as NeMo Gym names its sidecar.
fn failures_path(out: &Path) -> PathBuf {
    let stem = out.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "rollouts".into());
    out.with_file_name(format!("{stem}_failures.jsonl"))
}

/// A JSONL file of rows as sessions end. Rows go through a buffer that is written out when it
/// fills, when a row comes [`JsonlWriter::FLUSH_EVERY`] or more after the last write-out, and at
/// the end (also after an interrupt): a write per row cost more than the row itself. A crash
/// loses the rows still in the buffer, which the store holds anyway: `parley resume` rewrites
/// the file from the store, every finished session once.
struct JsonlWriter {
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    flushed: Instant,
}

impl JsonlWriter {
    const FLUSH_EVERY: Duration = Duration::from_secs(1);

    fn create(path: &Path) -> anyhow::Result<JsonlWriter> {
        let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(JsonlWriter {
            path: path.to_path_buf(),
            file: std::io::BufWriter::with_capacity(1 << 16, file),
            flushed: Instant::now(),
        })
    }

    fn write(&mut self, row: &serde_json::Value) -> anyhow::Result<()> {
        serde_json::to_writer(&mut self.file, row)?;
        self.file.write_all(b"\n")?;
        if self.flushed.elapsed() >= Self::FLUSH_EVERY {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        self.flushed = Instant::now();
        self.file.flush().with_context(|| format!("writing {}", self.path.display()))
    }

    fn finish(mut self) -> anyhow::Result<()> {
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_sit_beside_the_rollouts() {
        assert_eq!(failures_path(Path::new("a/out.jsonl")), Path::new("a/out_failures.jsonl"));
    }
}
