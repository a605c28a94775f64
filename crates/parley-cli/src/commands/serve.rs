//! `parley serve`: the runtime behind NeMo Gym's `/run`, for RL trainers. It prints its address
//! on the first line of stdout, records every session under one service run, and on SIGINT or
//! SIGTERM stops taking requests and lets the sessions in flight finish within the grace
//! period, after which they are cancelled (committed turns kept, resumable).

use std::sync::Arc;

use anyhow::Context;
use parley_core::Task;
use parley_runtime::settings::Need;
use parley_runtime::{EnvKind, Front, RunSettings, Runtime, TaskSource};
use parley_serve::{ServeOptions, Service};
use parley_store::{Store, StoreOptions};

use crate::cli::ServeArgs;
use crate::error::usage;

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let token = token(&args)?;
    let mut settings = args.run.resolve_for(Need::Nothing)?;
    // A trainer sets the policy's sampling per row, and its policy server plays the agent alone.
    settings.front = Front { sampling_from_row: true, policy_for_agent_only: true };
    // Every setting is checked (the store opened, the environment and endpoints set up, the
    // tasks read) before the port is bound: a bad setting never leaves a port answering.
    let store =
        Store::open(&settings.db, StoreOptions { raw_model_calls: settings.raw_calls, ..StoreOptions::default() })
            .await
            .with_context(|| format!("opening the store {}", settings.db))?;
    let runtime = Runtime::start(&settings, store).await?;
    let tasks = match reset_tasks(&settings, &runtime) {
        Ok(tasks) => tasks,
        Err(e) => {
            runtime.stop().await?;
            return Err(e);
        }
    };
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(e) => {
            runtime.stop().await?;
            return Err(usage(format!("--listen {}: {e}", args.listen)));
        }
    };
    let address = listener.local_addr()?;
    let run = runtime.create_service_run().await?;
    let options = ServeOptions {
        concurrency: settings.concurrency,
        queue: args.queue.unwrap_or(settings.concurrency),
        token,
        site: parley_http::guard::Site::new(address.ip(), args.allow_origin.clone()),
        policy_url_allow: args.policy_url_allow.clone(),
    };
    let base_url = runtime.base_url.clone();
    let service = Arc::new(Service::new(runtime, run, 0, options).with_tasks(tasks));
    println!("http://{address}");
    if args.trusted_network && !address.ip().is_loopback() {
        eprintln!(
            "parley serve: --trusted-network: {address} takes requests without a token; anyone who reaches it \
             can start rollouts"
        );
    }
    eprintln!(
        "parley serve: run {run} in {}; {} against {}, model {}; up to {} sessions at once",
        settings.db, settings.env, base_url, settings.model, settings.concurrency
    );
    let grace = settings.shutdown_grace();
    let stop = service.stop().clone();
    let shutdown = async move {
        first_signal().await;
        eprintln!("parley serve: stopping; sessions in flight may finish for {} s", grace.as_secs_f64());
        // After the grace period the sessions still in flight are cancelled where they are.
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            stop.abort.cancel();
        });
    };
    let limits = parley_http::server::Limits {
        header_timeout: std::time::Duration::from_secs_f64(args.header_timeout),
        ..parley_http::server::Limits::default()
    };
    parley_http::server::serve(listener, service.router(), limits, shutdown).await.context("serving")?;
    let ended = service.metrics.sessions_ended();
    let runtime = Arc::clone(service.runtime());
    drop(service);
    runtime.finish_run(run, false).await?;
    runtime.stop().await?;
    eprintln!("parley serve: stopped after {ended} sessions (run {run})");
    Ok(())
}

/// The bearer token requests must carry: `--token-env`'s, required off loopback unless
/// `--trusted-network` says only a trainer's cluster reaches the address given.
fn token(args: &ServeArgs) -> anyhow::Result<Option<String>> {
    let listen = args.listen;
    match &args.token_env {
        Some(var) => {
            let token = std::env::var(var)
                .ok()
                .filter(|t| !t.is_empty())
                .ok_or_else(|| usage(format!("--token-env names `{var}`, which is not set; export {var}=... first")))?;
            match parley_http::guard::weak_token(&token) {
                Some(why) if !listen.ip().is_loopback() => Err(usage(format!("--token-env {var}: {why}"))),
                _ => Ok(Some(token)),
            }
        }
        None if args.trusted_network && listen.ip().is_unspecified() => Err(usage(format!(
            "--trusted-network serves one interface without a token, not every one: name the cluster interface's \
             address in --listen instead of {}",
            listen.ip()
        ))),
        None if !listen.ip().is_loopback() && !args.trusted_network => Err(usage(format!(
            "--listen {listen} is reachable from other machines: pass --token-env VAR, the variable holding the \
             bearer token every request must carry, or --trusted-network when only a trainer's cluster reaches this \
             address"
        ))),
        None => Ok(None),
    }
}

/// The tasks an OpenEnv reset picks from: the environment's own (tau2's domains), the task
/// file's, or generated multi-step rows. They are read whole, since a reset picks any of them by
/// index or id; an environment with none of its own and no task file has none.
fn reset_tasks(settings: &RunSettings, runtime: &Runtime) -> anyhow::Result<Vec<Arc<Task>>> {
    let (source, check) = TaskSource::from_settings(settings)?;
    for bad in &check.bad {
        eprintln!("parley serve: left out {bad}");
    }
    if matches!(source, TaskSource::Generated { .. }) && settings.env != EnvKind::MultiStep {
        return Ok(Vec::new());
    }
    source.tasks(runtime.environment_tasks())?.collect()
}

async fn first_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
        (Ok(mut interrupt), Ok(mut terminate)) => {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}
