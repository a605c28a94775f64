//! The `parley` binary: parses the command line, sets up logging, and runs one command.
//!
//! Three layers, as uv's CLI: clap definitions (`cli`, whose doc comments are the `--help`
//! text; `RunOptions` is every run setting, declared once), settings (`settings`: `parley.toml`
//! merged under the flags, then resolved into the runtime's `RunSettings`) and one module per
//! group of commands (`commands`), each calling a library crate and printing what it returns.
//!
//! Exit codes: 64 for bad usage or configuration, before any work starts; 65 (not Parley's,
//! newer, a directory, damaged), 73 (read-only), 74 (disk full) or 75 (locked) for a database
//! that cannot be used ([`error::store_exit_code`]); 128 + the signal's number for a run that
//! SIGINT or SIGTERM stopped before every session was finished; 1 for anything else, with its
//! context chain. A reader that stops early (a broken pipe) is not an error.

mod cli;
mod commands;
#[cfg(test)]
mod doc_commands;
mod error;
mod open_files;
mod progress;
mod scaffold;
mod settings;
mod summary;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

/// Thousands of sessions allocate and free transcripts, request bodies and store rows from
/// every runtime thread at once; mimalloc's per-thread heaps keep that off a shared lock. It is
/// built without transparent huge pages, which would hold more resident memory per session, and
/// it stands in for the C library's `malloc` too (the crate's `override` feature): SQLite's page
/// buffers and statements come from it, where glibc's arenas grew and gave back their heaps with
/// an `mprotect` or `madvise` at every other batch (`docs/performance.md`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use crate::error::{EX_USAGE, UsageError, store_exit_code};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EX_USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    init_tracing();
    // Each session in flight may hold a socket.
    open_files::raise();
    if let Some(secs) = cli.lease {
        parley_runtime::set_lease(std::time::Duration::from_secs_f64(secs));
    }
    if let Some(secs) = cli.busy_timeout {
        parley_store::set_busy_timeout(std::time::Duration::from_secs_f64(secs));
    }
    // A run's settings are resolved before its runtime is built: where its model is served
    // decides how many workers it gets.
    let command = Ready::of(cli.command);
    let result = runtime(workers(cli.workers, &command), &command).map_err(anyhow::Error::from).and_then(|runtime| {
        runtime.block_on(async {
            let command = match command {
                Ready::Run(settings, detach) => return commands::run::run(settings?, detach).await,
                Ready::Other(command) => command,
            };
            match command {
                Command::Run(_) => unreachable!("a run starts above, with the settings it was resolved to"),
                Command::Serve(args) => commands::serve::serve(*args).await,
                Command::Stub(args) => commands::stub::stub(args).await,
                Command::Resume(args) => commands::run::resume(args.run.run, &args.run.db.db, args.retry_failed).await,
                Command::Worker(args) => commands::run::worker(args).await,
                Command::Runs(args) => commands::inspect::runs(args).await,
                Command::Sessions(args) => commands::inspect::sessions(args).await,
                Command::Show(args) => commands::inspect::show(args).await,
                Command::Metrics(args) => commands::inspect::metrics(args).await,
                Command::Export(args) => commands::inspect::export(args).await,
                Command::Rescore(args) => commands::durable::rescore(args).await,
                Command::Scores(args) => commands::scores::scores(args).await,
                Command::Replay(args) => commands::durable::replay(args).await,
                Command::Fork(args) => commands::durable::fork(args).await,
                Command::Tasks(args) => commands::tasks::tasks(args).await,
                Command::Rewards(args) => commands::rewards::rewards(args).await,
                Command::Envs(args) => commands::envs::envs(args),
                Command::Init(args) => commands::init::init(args),
                Command::View(args) => commands::view::view(args).await,
            }
        })
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stops early (`parley export ... | head`) is not an error.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) if e.downcast_ref::<commands::run::Stopped>().is_some() => {
            let signal = e.downcast_ref::<commands::run::Stopped>().map_or(15, |s| s.0);
            eprintln!("{e}");
            ExitCode::from((128 + signal) as u8)
        }
        Err(e) if e.downcast_ref::<UsageError>().is_some() => {
            eprintln!("error: {e}");
            ExitCode::from(EX_USAGE as u8)
        }
        Err(e) => match store_exit_code(&e) {
            Some((code, message)) => {
                eprintln!("error: {message}");
                ExitCode::from(code as u8)
            }
            None => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

/// Logs go to stderr; `RUST_LOG` sets the level (default: warnings); colour only on a terminal
/// and never with `NO_COLOR`.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colour).init();
}

/// A command as it starts: a run with its settings resolved, or any other as parsed. Made once
/// a process, so its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Ready {
    Run(anyhow::Result<parley_runtime::RunSettings>, bool),
    Other(Command),
}

impl Ready {
    fn of(command: Command) -> Ready {
        match command {
            Command::Run(args) => Ready::Run(args.run.resolve(), args.detach),
            command => Ready::Other(command),
        }
    }
}

/// The runtime's worker threads: `--workers` (a stub's `--threads`), else one per core, less one
/// when every model a run calls is served on this machine (at a loopback address), which needs a
/// core of its own. Beside a model's stand-in on two cores, the second worker cost 12% more CPU a
/// collected rollout and 9% more a tau2 conversation, for 2% more rate at most
/// (docs/performance.md).
fn workers(workers: Option<u16>, command: &Ready) -> usize {
    let given = match command {
        Ready::Other(Command::Stub(args)) => args.threads.or(workers),
        _ => workers,
    };
    match (given, command) {
        (Some(n), _) => usize::from(n),
        (None, Ready::Run(Ok(settings), _)) if settings.models_on_loopback() => cores().saturating_sub(1).max(1),
        (None, _) => cores(),
    }
}

/// The runtime a command runs on, with `workers` threads. A run on one worker drives its
/// sessions on the thread that awaits it (tokio's current-thread runtime): the multi-threaded
/// one would give that worker a thread of its own beside the waiting one, each of its wake-ups
/// a hand-over between threads, and 4% more CPU a collected rollout beside the stub
/// (docs/performance.md). Every other command keeps a thread pool, even of one: a server's
/// computing environments step aside for the worker's other tasks there (`block_in_place`), and
/// a stub's threads are the stand-in's cost, which runs do not change.
fn runtime(workers: usize, command: &Ready) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = match command {
        Ready::Run(..) if workers == 1 => tokio::runtime::Builder::new_current_thread(),
        _ => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(workers);
            builder
        }
    };
    builder.enable_all().build()
}

/// The cores this process may run on.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(args: &[&str]) -> Ready {
        Ready::of(Cli::try_parse_from(args).unwrap().command)
    }

    #[test]
    fn a_run_whose_models_are_all_on_loopback_leaves_a_core() {
        let run = ["parley", "run", "--env", "multi-step", "--base-url"];
        let local = ready(&[&run[..], &["http://127.0.0.1:9/v1", "--user-base-url", "http://localhost:8/v1"]].concat());
        assert_eq!(workers(None, &local), cores().saturating_sub(1).max(1));
        assert_eq!(workers(Some(3), &local), 3, "--workers is taken as given");
        let remote = ready(&[&run[..], &["http://127.0.0.1:9/v1", "--user-base-url", "http://10.0.0.7:8/v1"]].concat());
        assert_eq!(workers(None, &remote), cores());
        let in_process = ready(&["parley", "run", "--env", "multi-step"]);
        assert_eq!(workers(None, &in_process), cores(), "the in-process stub runs on the workers");
        assert_eq!(workers(Some(4), &ready(&["parley", "stub", "--threads", "1"])), 1);
        assert_eq!(workers(None, &ready(&["parley", "serve", "--base-url", "http://127.0.0.1:9/v1"])), cores());
    }

    #[test]
    fn a_run_on_one_worker_drives_its_sessions_on_the_thread_that_awaits_it() {
        use tokio::runtime::RuntimeFlavor::{CurrentThread, MultiThread};
        let flavor = |workers, args: &[&str]| runtime(workers, &ready(args)).unwrap().handle().runtime_flavor();
        let run = ["parley", "run", "--env", "multi-step", "--base-url", "http://127.0.0.1:9/v1"];
        assert_eq!(flavor(1, &run), CurrentThread);
        assert_eq!(flavor(2, &run), MultiThread);
        assert_eq!(flavor(1, &["parley", "stub", "--threads", "1"]), MultiThread, "the stand-in is not changed");
        assert_eq!(flavor(1, &["parley", "serve", "--base-url", "http://127.0.0.1:9/v1"]), MultiThread);
    }
}
