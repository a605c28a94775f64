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
use parley_core::{RunSpec, SessionSpec, SessionStore, Task, stable_seed};
use parley_engine::{Job, Parties, Scheduler, SessionResult};
use parley_llm::{ChatClient, EndpointConfig};
use parley_store::{SqliteStore, StoreOptions};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::error::usage;
use crate::progress::Progress;
use crate::settings::RunSettings;
use crate::summary;

pub async fn run(settings: RunSettings) -> anyhow::Result<()> {
    let tasks = load_tasks(&settings)?;
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
    })
    .map_err(|e| usage(e.to_string()))?;
    let store = SqliteStore::open(&settings.db, StoreOptions { raw_model_calls: settings.raw_calls })
        .await
        .with_context(|| format!("opening the store {}", settings.db.display()))?;
    let agent = ToolCallingAgent::new(
        Arc::new(client),
        ToolCallingConfig {
            model: settings.model.clone(),
            system_prompt: settings.system_prompt.clone(),
            sampling: settings.sampling.clone(),
            seed_per_session: true,
        },
    );

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
    let (run, ids) = store.create_run(&spec, &tasks, &specs).await.context("recording the run")?;
    let out = settings.out.clone().unwrap_or_else(|| PathBuf::from(format!("rollouts-{run}.jsonl")));
    let failures_path = failures_path(&out);
    let mut rollouts = JsonlWriter::create(&out)?;
    let mut failures = JsonlWriter::create(&failures_path)?;

    let stub_note = if settings.base_url.is_none() { " (the built-in stub, a test double)" } else { "" };
    eprintln!(
        "run {run}: {} sessions ({} tasks x {} trials) of {} against {base_url}{stub_note}, model {}; stored in {}",
        specs.len(),
        tasks.len(),
        settings.trials,
        settings.env,
        settings.model,
        settings.db.display(),
    );

    let store = Arc::new(store);
    let scheduler = Scheduler {
        parties: Parties {
            agent: Arc::new(agent),
            environment: Arc::new(environment_multi_step::MultiStep),
            store: store.clone(),
        },
        limits: settings.limits(),
        concurrency: settings.concurrency,
        cancel: CancellationToken::new(),
    };
    let jobs: Vec<Job> = specs
        .iter()
        .zip(&ids)
        .map(|(s, &id)| Job { id, task: tasks[s.task_index].clone(), trial: s.trial, seed: s.seed })
        .collect();

    let interrupted = scheduler.cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\nstopping: sessions in flight end as cancelled; committed turns are kept");
            interrupted.cancel();
        }
    });

    let started = Instant::now();
    let progress = Progress::new(jobs.len() as u64);
    let mut results = scheduler.run(jobs);
    let (mut written, mut failed) = (0usize, 0usize);
    while let Some(result) = results.next().await {
        if result.outcome.termination.is_infrastructure() {
            failures.write(&failure_row(run, &result))?;
            failed += 1;
        } else {
            rollouts.write(&rollout(&settings.model, &result))?;
            written += 1;
        }
        progress.finish_one(result.outcome.reward.as_ref().map(|r| r.value));
    }
    progress.done();
    let elapsed = started.elapsed();
    rollouts.finish()?;
    failures.finish()?;

    let cancelled = scheduler.cancel.is_cancelled();
    store.finish_run(run, if cancelled { "interrupted" } else { "finished" }).await?;
    let report = summary::Report::load(&store, run, settings.trials as usize).await?;
    let mut stdout = std::io::stdout().lock();
    report.print(&mut stdout, elapsed)?;
    writeln!(stdout, "rollouts       {} ({written}) · failures {} ({failed})", out.display(), failures_path.display())?;
    drop(stdout);
    if cancelled {
        eprintln!("run {run} was interrupted; {} sessions did not finish", report.unfinished);
    }
    shutdown.cancel();
    store.close().await?;
    Ok(())
}

/// Reads task rows, or generates them when no file is given.
fn load_tasks(settings: &RunSettings) -> anyhow::Result<Vec<Arc<Task>>> {
    let rows: Vec<(String, serde_json::Value)> = match &settings.tasks {
        None => environment_multi_step::generate(settings.num_tasks, 0)
            .enumerate()
            .map(|(i, row)| (format!("generated task {i}"), row))
            .collect(),
        Some(path) => {
            let file = std::fs::File::open(path).map_err(|e| usage(format!("--tasks {}: {e}", path.display())))?;
            let mut rows = Vec::new();
            for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
                let line = line.with_context(|| format!("reading {}", path.display()))?;
                if line.trim().is_empty() {
                    continue;
                }
                let where_ = format!("{}:{}", path.display(), n + 1);
                let row = serde_json::from_str(&line).map_err(|e| usage(format!("{where_}: not a JSON row ({e})")))?;
                rows.push((where_, row));
            }
            rows
        }
    };
    if rows.is_empty() {
        return Err(usage("the task file has no rows"));
    }
    rows.into_iter()
        .enumerate()
        .map(|(i, (where_, row))| task_from_row(i, row).map(Arc::new).map_err(|e| usage(format!("{where_}: {e}"))))
        .collect()
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
    let mut row = result.task.row.clone();
    if let Some(map) = row.as_object_mut() {
        map.insert("_ng_task_index".into(), json!(result.task.index));
        map.insert("_ng_rollout_index".into(), json!(result.trial));
        map.insert("_ng_failure_class".into(), json!(result.outcome.termination.as_str()));
        map.insert("_ng_failure_message".into(), json!(result.outcome.error));
        map.insert("_parley_run".into(), json!(run));
        map.insert("_parley_session".into(), json!(result.id));
    }
    row
}

/// `out.jsonl` → `out_failures.jsonl`, as NeMo Gym names its sidecar.
fn failures_path(out: &Path) -> PathBuf {
    let stem = out.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "rollouts".into());
    out.with_file_name(format!("{stem}_failures.jsonl"))
}

/// A JSONL file written one flushed line per row, so a crash loses at most the line in flight.
struct JsonlWriter {
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
}

impl JsonlWriter {
    fn create(path: &Path) -> anyhow::Result<JsonlWriter> {
        let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(JsonlWriter { path: path.to_path_buf(), file: std::io::BufWriter::new(file) })
    }

    fn write(&mut self, row: &serde_json::Value) -> anyhow::Result<()> {
        serde_json::to_writer(&mut self.file, row)?;
        self.file.write_all(b"\n")?;
        self.file.flush().with_context(|| format!("writing {}", self.path.display()))
    }

    fn finish(mut self) -> anyhow::Result<()> {
        self.file.flush().with_context(|| format!("writing {}", self.path.display()))
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
