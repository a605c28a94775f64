//! `parley run`, `parley resume` and `parley worker`: the runtime records and drives the
//! sessions; this module shows progress, writes the rollout and failure files as sessions end,
//! handles signals, and prints the run's summary from the store. A worker drives a run beside
//! others sharing the store until every session of it is finished.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{Stream, StreamExt};
use parley_export::Format;
use parley_runtime::settings::{UserKind, check_output, failures_path};
use parley_runtime::{Failure, Job, Rollout, RunSettings, Runtime, SessionResult, Stop, TaskSource, WORKER_RETRIES};
use parley_store::{DbLocation, Store, StoreOptions};

use crate::cli::WorkerArgs;
use crate::commands::inspect::open;
use crate::progress::Progress;
use crate::summary;

/// How an execution went.
pub struct Executed {
    pub cancelled: bool,
    pub elapsed: Duration,
    /// Whether the elapsed time covers the whole run (not so for a resume).
    pub timed: bool,
    /// The signal that stopped the run early, if one did.
    pub signal: Option<i32>,
}

impl Executed {
    /// What the command ends with (see [`Stopped::after`]).
    fn ended(&self) -> anyhow::Result<()> {
        Stopped::after(self.signal)
    }
}

/// Drives the jobs, writes each result to `outputs` as it ends, shows progress, and marks the
/// run's status. SIGINT and SIGTERM stop it gracefully (see [`watch_signals`]). The results are
/// taken on a task of the runtime's, where sessions end, so that each does not wake the thread
/// that awaits this.
pub async fn execute<O: Sink>(
    runtime: &Runtime,
    run: i64,
    count: u64,
    jobs: impl Stream<Item = Job> + Send + 'static,
    signals: &Signals,
    mut outputs: O,
) -> anyhow::Result<(Executed, O)> {
    let started = Instant::now();
    let progress = Progress::new(count);
    let mut results = runtime.drive(jobs, signals.stop.clone());
    let taken = tokio::spawn(async move {
        while let Some(result) = results.next().await {
            shown(&progress, &mut outputs, &result)?;
        }
        progress.done();
        anyhow::Ok(outputs)
    });
    let outputs = taken.await.context("taking the sessions' results")??;
    Ok((finished(runtime, run, started, signals).await?, outputs))
}

/// As [`execute`], for a run with a `--budget`: the runtime draws its sessions a round at a
/// time as earlier ones end (see [`Runtime::drive_budget`]).
pub async fn execute_budget(
    runtime: &Runtime,
    run: i64,
    budget: u64,
    task_ids: &[String],
    signals: &Signals,
    outputs: &mut impl Sink,
) -> anyhow::Result<Executed> {
    let started = Instant::now();
    let progress = Progress::new(budget);
    runtime.drive_budget(run, task_ids, signals.stop.clone(), |result| shown(&progress, outputs, result)).await?;
    progress.done();
    finished(runtime, run, started, signals).await
}

/// A session's result handed to the sink, and counted on the progress bar.
fn shown(progress: &Progress, sink: &mut impl Sink, result: &SessionResult) -> anyhow::Result<()> {
    sink.take(result)?;
    progress.finish_one(result.outcome.reward.as_ref().map(|r| r.value));
    Ok(())
}

/// The run's status marked as the drive left it (interrupted when it was stopped), and how the
/// execution went.
async fn finished(runtime: &Runtime, run: i64, started: Instant, signals: &Signals) -> anyhow::Result<Executed> {
    let cancelled = signals.stop.is_stopping();
    runtime.finish_run(run, cancelled).await?;
    Ok(Executed { cancelled, elapsed: started.elapsed(), timed: true, signal: signals.caught() })
}

/// SIGINT and SIGTERM, watched from a command's start to its end, so that a signal at any
/// point (reading a large task file, recording its sessions, driving them) stops the command
/// gracefully instead of ending the process where it is.
pub struct Signals {
    /// Drained on the first signal, aborted after the grace period or on a second signal.
    pub stop: Stop,
    caught: Arc<OnceLock<i32>>,
    watcher: tokio::task::JoinHandle<()>,
}

impl Signals {
    pub fn watch(grace: Duration) -> Signals {
        let (stop, caught) = (Stop::default(), Arc::new(OnceLock::new()));
        let watcher = tokio::spawn(tracing::Instrument::instrument(
            watch_signals(stop.clone(), grace, Arc::clone(&caught)),
            tracing::info_span!("signals"),
        ));
        Signals { stop, caught, watcher }
    }

    /// The signal that asked the command to stop, if one did.
    pub fn caught(&self) -> Option<i32> {
        self.caught.get().copied()
    }

    /// What the command ends with (see [`Stopped::after`]).
    pub fn ended(&self) -> anyhow::Result<()> {
        Stopped::after(self.caught())
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// Stops the run on SIGINT or SIGTERM: no new session starts, and the sessions in flight finish
/// the turn they are in and stop at their next commit; after `grace`, or on a second signal,
/// they are cancelled where they are. Committed turns are kept either way.
async fn watch_signals(stop: Stop, grace: Duration, caught: Arc<OnceLock<i32>>) {
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
    let _ = caught.set(if first == "SIGINT" { 2 } else { 15 });
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

/// `parley run`; with `detach`, the run and its sessions are recorded and left to workers.
pub async fn run(settings: RunSettings, detach: bool) -> anyhow::Result<()> {
    // Everything that can be checked is checked before the run is recorded.
    if let Some(out) = &settings.out {
        check_output("--out", out)?;
        check_output("the failures file beside --out", &failures_path(out))?;
    }
    let signals = Signals::watch(settings.shutdown_grace());
    let (source, check) = TaskSource::from_settings(&settings)?;
    if signals.stop.is_stopping() {
        eprintln!("stopped while reading the tasks: nothing was recorded");
        return signals.ended();
    }
    for line in &check.bad {
        eprintln!("skipping {line}");
    }
    let first_pass = check.bad.clone();
    for line in &check.warnings {
        eprintln!("warning: {line}");
    }
    if let (false, Some(path)) = (check.bad.is_empty(), &settings.tasks) {
        eprintln!("skipped {} unreadable rows of {} (--bad-rows skip)", check.bad.len(), path.display());
    }
    let store =
        Store::open(&settings.db, StoreOptions { raw_model_calls: settings.raw_calls, ..StoreOptions::default() })
            .await
            .with_context(|| format!("opening the store {}", settings.db))?;
    // A run is not recorded into a damaged file, whose other runs can no longer be read whole.
    store.check_pages().await?;
    let runtime = Runtime::start(&settings, store).await?;
    // The rows read, each is checked against what the environment and the reward need (the
    // environment is open now), still before the run is recorded or any model is called.
    let source = match settings.tasks.is_some() {
        false => source,
        true => match TaskSource::from_settings_checked(&settings, &|task| runtime.parties.environment.check(task)) {
            Ok((source, check)) => {
                for line in check.bad.iter().filter(|line| !first_pass.contains(*line)) {
                    eprintln!("skipping {line}");
                }
                source
            }
            Err(e) => {
                runtime.stop().await?;
                return Err(e.into());
            }
        },
    };
    if signals.stop.is_stopping() {
        eprintln!("stopped while checking the tasks: nothing was recorded");
        runtime.stop().await?;
        return signals.ended();
    }
    let created = runtime.create_run(source, &signals.stop.drain).await?;
    let run = created.run;
    if !created.whole {
        eprintln!(
            "run {run}: stopped while recording the tasks; it holds the first {} ({} sessions), none of them driven \
             (`parley resume {run} --db {}` drives them; run again for every task)",
            created.tasks, created.sessions, settings.db
        );
        runtime.finish_run(run, true).await?;
        runtime.stop().await?;
        return signals.ended();
    }
    if detach && settings.budget.is_some() {
        runtime.finish_run(run, true).await?;
        runtime.stop().await?;
        return Err(crate::error::usage(
            "--detach records every session for workers to drive, and a --budget run draws its sessions as it \
             goes: drop one of the two",
        ));
    }
    if detach {
        println!("{run}");
        eprintln!(
            "run {run}: {} sessions ({} tasks x {} trials) of {} recorded in {}; drive them with: parley worker \
             --db {} --run {run}",
            created.sessions, created.tasks, settings.trials, settings.env, settings.db, settings.db
        );
        return runtime.stop().await;
    }
    let out = settings.out_path(run);
    let rollouts = JsonlWriter::create(&out)?;
    let failures = JsonlWriter::create(&failures_path(&out))?;

    let stub_note = if settings.base_url.is_none() { " (the built-in stub, a test double)" } else { "" };
    let shape = match settings.budget {
        Some(budget) => {
            format!("{budget} sessions drawn ({:?} sampler) from {} tasks", settings.sampler, created.tasks)
                .to_lowercase()
        }
        None => format!("{} sessions ({} tasks x {} trials)", created.sessions, created.tasks, settings.trials),
    };
    eprintln!(
        "run {run}: {shape} of {} against {}{stub_note}, model {}; stored in {}",
        settings.env, runtime.base_url, settings.model, settings.db,
    );
    let mut outputs = Outputs { run, model: settings.model.clone(), rollouts, failures, written: 0, failed: 0 };
    let mut pending = None;
    let executed = match settings.budget {
        Some(budget) => execute_budget(&runtime, run, budget, &created.task_ids, &signals, &mut outputs).await?,
        None => {
            let pending = pending.insert(runtime.pending(run, false).await?);
            let jobs = pending.take_jobs();
            let executed;
            (executed, outputs) = execute(&runtime, run, pending.count, jobs, &signals, outputs).await?;
            executed
        }
    };
    let (mut written, mut failed) = outputs.finish()?;
    // Another process (a resume beside this run) finished some of its sessions: the files are
    // written again from the store, unless that process is still at it and will write them.
    let (_, finished) = runtime.store.session_counts(run).await?;
    if finished as usize > written + failed && !driven_elsewhere(&runtime, run).await? {
        (written, failed) = rewrite_outputs(&runtime.store, run, &settings, &out).await?;
    }
    report(&runtime, &settings, run, &executed, &out, written, failed).await?;
    if let Some(e) = pending.and_then(|p| p.error()) {
        runtime.stop().await?;
        return Err(e.context(format!("reading run {run}'s sessions from the store; its other sessions ran")));
    }
    runtime.stop().await?;
    executed.ended()
}

/// `parley resume RUN`: loads the run's settings from the store, continues every pending session
/// from its last committed turn, then rewrites the run's output files from the store so that
/// they hold every finished session exactly once.
pub async fn resume(run: i64, db: &DbLocation, retry_failed: bool) -> anyhow::Result<()> {
    let settings = stored_settings(run, db).await?;
    let store =
        Store::open(db, StoreOptions { raw_model_calls: settings.raw_calls, ..StoreOptions::default() }).await?;
    if retry_failed {
        let reopened = store.reopen_failed(run).await?;
        eprintln!("run {run}: {reopened} failed sessions reopened, each to continue from its last committed turn");
    }
    let runtime = Runtime::start(&settings, store).await?;
    let mut pending = runtime.pending(run, true).await?;
    eprintln!("run {run}: resuming {} unfinished sessions against {}", pending.count, runtime.base_url);
    if pending.held_elsewhere > 0 {
        eprintln!(
            "run {run}: {} unfinished sessions are left to another live process driving them; resume again once it \
             has stopped to take up any it leaves",
            pending.held_elsewhere
        );
    }
    let jobs = pending.take_jobs();
    let signals = Signals::watch(settings.shutdown_grace());
    let (mut executed, _) = execute(&runtime, run, pending.count, jobs, &signals, ()).await?;
    executed.timed = false;
    if pending.closed() > 0 {
        eprintln!(
            "run {run}: {} unfinished sessions were played by a policy other than the run's (a trainer's OpenEnv \
             episodes, rows that named their own policy URL): closed where they stopped, as cancelled, not continued \
             by the run's agent",
            pending.closed()
        );
    }
    if let Some(e) = pending.error() {
        runtime.stop().await?;
        return Err(e.context(format!("reading run {run}'s sessions from the store")));
    }

    let out = settings.out_path(run);
    if driven_elsewhere(&runtime, run).await? {
        eprintln!(
            "run {run}: another process still drives some of its sessions; it writes {} when it ends",
            out.display()
        );
        report(&runtime, &settings, run, &executed, &out, 0, 0).await?;
        runtime.stop().await?;
        return executed.ended();
    }
    let (written, failed) = rewrite_outputs(&runtime.store, run, &settings, &out).await?;
    report(&runtime, &settings, run, &executed, &out, written, failed).await?;
    runtime.stop().await?;
    executed.ended()
}

/// A command that a signal stopped before its work was done (its exit code is 128 + the
/// signal's number, as a shell reports a process the signal ended).
#[derive(Debug)]
pub struct Stopped(pub i32);

impl Stopped {
    /// What a command ends with: success, or `Stopped` when `signal` stopped it early, so that a
    /// script can tell a run that stopped from one that finished.
    fn after(signal: Option<i32>) -> anyhow::Result<()> {
        signal.map_or(Ok(()), |signal| Err(Stopped(signal).into()))
    }
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = if self.0 == 2 { "SIGINT" } else { "SIGTERM" };
        write!(f, "stopped by {name} before every session was finished")
    }
}

impl std::error::Error for Stopped {}

/// The settings `run` was recorded with, its store being `db` (which the stored settings name
/// without a URL's password).
async fn stored_settings(run: i64, db: &DbLocation) -> anyhow::Result<RunSettings> {
    let probe = open(db).await?;
    let mut settings = parley_runtime::durable::stored_settings(&probe, run).await?;
    settings.db = db.clone();
    probe.close().await?;
    Ok(settings)
}

/// `parley worker`: drives the run's pending sessions beside any other workers (on this
/// machine or others sharing the store) until every session of it is finished. Each round
/// claims pages of sessions nobody holds, or whose holder's lease ran out (a worker killed or
/// cut off from the store), and continues each from its last committed turn; when none is
/// left to claim but some are still held elsewhere, it looks again shortly, so that it takes
/// over the sessions of a worker that dies. SIGINT or SIGTERM stops it as they stop a run,
/// leaving its unfinished sessions to the others.
pub async fn worker(args: WorkerArgs) -> anyhow::Result<()> {
    let db = &args.db.db;
    let run = match args.run {
        Some(run) => run,
        None => {
            let probe = open(db).await?;
            let newest = probe.newest_unfinished_run().await?;
            probe.close().await?;
            match newest {
                Some(run) => run,
                None => {
                    eprintln!("worker: no run in {db} has unfinished sessions; nothing to do");
                    return Ok(());
                }
            }
        }
    };
    let mut settings = stored_settings(run, db).await?;
    // The worker's own concurrency over the run's, checked as a run's settings are.
    settings.concurrency = args.concurrency.unwrap_or(settings.concurrency);
    settings.check_for(parley_runtime::settings::Need::Nothing)?;
    let store =
        Store::open(db, StoreOptions { raw_model_calls: settings.raw_calls, ..StoreOptions::default() }).await?;
    let runtime = Runtime::start(&settings, store).await?;
    eprintln!(
        "worker {}: run {run} in {db}, up to {} sessions at once against {}",
        runtime.owner.id, settings.concurrency, runtime.base_url
    );
    let signals = Signals::watch(settings.shutdown_grace());
    let id = runtime.owner.id.clone();
    let worked = runtime
        .work(run, &signals.stop, |e, round| {
            eprintln!("worker {id}: {e:#}; trying again ({round} of {WORKER_RETRIES})");
        })
        .await;
    let worked = match worked {
        Ok(worked) => worked,
        Err(e) => {
            runtime.stop().await?;
            return Err(e);
        }
    };
    if worked.done {
        eprintln!("worker {id}: drove {} sessions; run {run} is done", worked.driven);
    } else {
        eprintln!(
            "worker {id}: stopped after {} sessions; run {run}'s unfinished sessions are left to other workers",
            worked.driven
        );
    }
    runtime.stop().await?;
    signals.ended()
}

/// After a run against the built-in stub: what the figures are, and the three next commands
/// (a session turn by turn, the viewer, the same run against a real model).
async fn next_steps(out: &mut impl Write, runtime: &Runtime, settings: &RunSettings, run: i64) -> anyhow::Result<()> {
    let first = runtime.store.sessions_page(run, 0, 1).await?;
    let session = first.first().map_or_else(|| "SESSION".to_owned(), |s| s.id.to_string());
    let db = &settings.db;
    let user = if settings.user.kind == UserKind::Llm { " --user llm" } else { "" };
    let how = match settings.env.tau2() {
        Some(_) => "it plays some sessions' gold actions and not others",
        None => "it answers by rule",
    };
    writeln!(out, "\nThe built-in stub is a test double ({how}): these figures show")?;
    writeln!(out, "what Parley measures, not what a model can do. Next:")?;
    let next = [
        (format!("parley show {session} --db {db}"), "one session, turn by turn"),
        (format!("parley view --db {db}"), "every run and session in a browser"),
        (format!("parley run --env {}{user} --base-url URL --model NAME", settings.env), "the same against a model"),
    ];
    let width = next.iter().map(|(command, _)| command.len()).max().unwrap_or(0);
    for (command, what) in next {
        writeln!(out, "  {command:width$}   {what}")?;
    }
    Ok(())
}

/// Whether a live process other than this one holds claims on the run's unfinished sessions.
async fn driven_elsewhere(runtime: &Runtime, run: i64) -> anyhow::Result<bool> {
    Ok(runtime.store.owners(run).await?.iter().any(|(owner, _)| *owner != runtime.owner.id))
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
    let report = summary::Report::load(&runtime.store, run, settings.trials as usize, false).await?;
    let mut stdout = std::io::stdout().lock();
    report.print(&mut stdout, executed.timed.then_some(executed.elapsed))?;
    writeln!(
        stdout,
        "rollouts       {} ({written}) · failures {} ({failed})",
        out.display(),
        failures_path(out).display()
    )?;
    if settings.base_url.is_none() && !executed.cancelled {
        next_steps(&mut stdout, runtime, settings, run).await?;
    }
    drop(stdout);
    if executed.cancelled || report.unfinished > 0 {
        eprintln!(
            "run {run} stopped with {} sessions unfinished; resume it with: parley resume {run} --db {}",
            report.unfinished, settings.db
        );
    }
    Ok(())
}

/// Writes the rollout and failure files again from the store, through a temporary file each,
/// so that an interrupted rewrite never leaves a half-written file behind. The temporary files
/// are this process's own: a run and a resume beside it may both rewrite the files as they end,
/// and with one name between them, one's rename took the other's file away (`No such file`).
async fn rewrite_outputs(
    store: &std::sync::Arc<Store>,
    run: i64,
    settings: &RunSettings,
    out: &Path,
) -> anyhow::Result<(usize, usize)> {
    let failures = failures_path(out);
    let partial = format!("jsonl.partial-{}", std::process::id());
    let (out_tmp, failures_tmp) = (out.with_extension(&partial), failures.with_extension(&partial));
    let mut rows = std::io::BufWriter::new(std::fs::File::create(&out_tmp)?);
    let mut fails = std::io::BufWriter::new(std::fs::File::create(&failures_tmp)?);
    let counts = parley_export::export(store, run, settings, Format::NemoGym, &mut rows, Some(&mut fails)).await?;
    rows.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    fails.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&out_tmp, out)?;
    std::fs::rename(&failures_tmp, &failures)?;
    if let Some(damage) = counts.damage(&settings.db) {
        return Err(anyhow::Error::from(damage).context(format!("writing {}", out.display())));
    }
    Ok((counts.rows, counts.failures))
}

/// What takes each session's result as it ends.
pub trait Sink: Send + 'static {
    fn take(&mut self, result: &SessionResult) -> anyhow::Result<()>;
}

/// Results left to the store alone (`parley resume` writes the files from it at the end).
impl Sink for () {
    fn take(&mut self, _: &SessionResult) -> anyhow::Result<()> {
        Ok(())
    }
}

/// The files a run writes as its sessions end: a rollout row for each session that ended, a
/// failure row (the task row with NeMo Gym's failure fields) for each that the infrastructure
/// failed.
struct Outputs {
    run: i64,
    model: String,
    rollouts: JsonlWriter,
    failures: JsonlWriter,
    written: usize,
    failed: usize,
}

impl Sink for Outputs {
    fn take(&mut self, result: &SessionResult) -> anyhow::Result<()> {
        if result.taken_over {
            // Another process drives the session now; its row is theirs to write.
            Ok(())
        } else if result.outcome.termination.is_infrastructure() {
            self.failed += 1;
            self.failures.write(&Failure::of_result(self.run, result).row(&result.task.row))
        } else {
            self.written += 1;
            self.rollouts.write(&Rollout::from(result).written(&self.model))
        }
    }
}

impl Outputs {
    /// Writes out what the files' buffers hold; says how many rollout and failure rows were
    /// written.
    fn finish(self) -> anyhow::Result<(usize, usize)> {
        self.rollouts.finish()?;
        self.failures.finish()?;
        Ok((self.written, self.failed))
    }
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

    fn write(&mut self, row: &impl serde::Serialize) -> anyhow::Result<()> {
        parley_core::json::to_writer(&mut self.file, row)?;
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
