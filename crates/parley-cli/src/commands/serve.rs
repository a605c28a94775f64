//! `parley serve`: the runtime behind NeMo Gym's `/run`, for RL trainers. It prints its address
//! on the first line of stdout, records every session under one service run per environment it
//! hosts (the default, and each `[[environment]]` or `--environment`), and on SIGINT or
//! SIGTERM stops taking requests and lets the sessions in flight finish within the grace
//! period, after which they are cancelled (committed turns kept, resumable).

use std::sync::Arc;

use anyhow::Context;
use parley_core::Task;
use parley_runtime::settings::Need;
use parley_runtime::{EnvKind, Front, GymServed, RunSettings, Runtime, TaskSource};
use parley_serve::{Host, ServeOptions, Service};
use parley_store::{Store, StoreOptions};

use crate::cli::ServeArgs;
use crate::error::usage;
use crate::settings::Hosted;

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let token = token(&args)?;
    let mut resolved = args.run.clone().resolve_hosted(&args.environments, Need::Nothing)?;
    for env in &mut resolved {
        // A trainer sets the policy's sampling per row, and its policy server plays the agent alone.
        env.settings.front = Front { sampling_from_row: true, policy_for_agent_only: true };
    }
    // A NeMo Gym config naming several resources servers is served whole, as `gym env start`
    // serves it: its servers started once, each resources server an environment of its own.
    let mut gym = Vec::new();
    let mut hosted = Vec::new();
    for env in resolved {
        match GymServed::start(&env.settings).await {
            Ok(Some(mut served)) => {
                for resource in std::mem::take(&mut served.environments) {
                    let Hosted { concurrency, queue, .. } = env;
                    let named = Hosted { name: resource.name, settings: resource.settings, concurrency, queue };
                    hosted.push((named, resource.agents));
                }
                gym.push(served);
            }
            Ok(None) => hosted.push((env, Vec::new())),
            Err(e) => {
                stop_gym(gym).await;
                return Err(e.context(format!("environment `{}`", env.name)));
            }
        }
    }
    let served = serve_hosted(&args, token, hosted).await;
    stop_gym(gym).await;
    served
}

async fn stop_gym(served: Vec<GymServed>) {
    for served in served {
        served.shutdown().await;
    }
}

/// Serves the environments `hosted` (with the names rows may also call each by), the default
/// first, until a signal stops the service.
async fn serve_hosted(
    args: &ServeArgs,
    token: Option<String>,
    mut hosted: Vec<(Hosted, Vec<String>)>,
) -> anyhow::Result<()> {
    for (i, (env, _)) in hosted.iter().enumerate() {
        if hosted[..i].iter().any(|(earlier, _)| earlier.name == env.name) {
            return Err(usage(format!("two environments are named `{}`: name each once", env.name)));
        }
    }
    let whole = (hosted[0].0.settings.concurrency, args.queue.unwrap_or(hosted[0].0.settings.concurrency));
    let count = hosted.len();
    let several = count > 1;
    for (env, _) in &mut hosted {
        // Beside others, an environment that names no bounds of its own gets an even share of
        // the whole's, so that a stalled one cannot hold every slot.
        if several {
            env.settings.concurrency = env.concurrency.unwrap_or_else(|| share(whole.0, count).max(1));
        }
    }
    let settings = &hosted[0].0.settings;
    // Every setting is checked (the store opened, each environment and its endpoints set up, its
    // tasks read) before the port is bound: a bad setting never leaves a port answering.
    let store =
        Store::open(&settings.db, StoreOptions { raw_model_calls: settings.raw_calls, ..StoreOptions::default() })
            .await
            .with_context(|| format!("opening the store {}", settings.db))?;
    let mut started: Vec<(Runtime, Vec<Arc<Task>>)> = Vec::new();
    for (env, _) in &hosted {
        let opened = match Runtime::start(&env.settings, store.clone()).await {
            Ok(runtime) => match reset_tasks(&env.settings, &runtime) {
                Ok(tasks) => Ok((runtime, tasks)),
                Err(e) => {
                    runtime.stop().await?;
                    Err(e)
                }
            },
            Err(e) => Err(e),
        };
        match opened {
            Ok(opened) => started.push(opened),
            Err(e) => {
                for (runtime, _) in started {
                    runtime.stop().await?;
                }
                return Err(if several { e.context(format!("environment `{}`", env.name)) } else { e });
            }
        }
    }
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(e) => {
            for (runtime, _) in started {
                runtime.stop().await?;
            }
            return Err(usage(format!("--listen {}: {e}", args.listen)));
        }
    };
    let address = listener.local_addr()?;
    let stop = parley_runtime::Stop::default();
    let mut services = Vec::new();
    for ((env, aliases), (runtime, tasks)) in hosted.iter().zip(started) {
        let run = runtime.create_service_run().await?;
        let concurrency = env.settings.concurrency;
        let queue = match (env.queue, several) {
            (Some(queue), _) => queue,
            (None, true) => share(whole.1, count),
            (None, false) => whole.1,
        };
        let options = ServeOptions {
            concurrency,
            queue,
            token: token.clone(),
            site: parley_http::guard::Site::new(address.ip(), args.allow_origin.clone()),
            policy_url_allow: args.policy_url_allow.clone(),
        };
        let base_url = runtime.base_url.clone();
        let mut service = Service::new(runtime, run, 0, options).with_tasks(tasks).with_stop(stop.clone());
        if several {
            service = service.named(env.name.clone()).also_named(aliases.clone());
        }
        let named = if several { format!("`{}`: ", env.name) } else { String::new() };
        eprintln!(
            "parley serve: {named}run {run} in {}; {} against {}, model {}; up to {concurrency} sessions at once",
            env.settings.db, env.settings.env, base_url, env.settings.model
        );
        services.push(Arc::new(service));
    }
    let host = Arc::new(Host::new(services, Some(whole)).answering_to(args.agent_name.clone()));
    println!("http://{address}");
    if args.trusted_network && !address.ip().is_loopback() {
        eprintln!(
            "parley serve: --trusted-network: {address} takes requests without a token; anyone who reaches it \
             can start rollouts"
        );
    }
    if several {
        eprintln!(
            "parley serve: {} environments, up to {} sessions at once in all; a row names its environment in `{}` or \
             `agent_ref.name`",
            hosted.len(),
            whole.0,
            parley_serve::FIELD
        );
        let runs: Vec<String> = host.hosted().iter().map(|s| s.run().to_string()).collect();
        let (first, rest) = runs.split_first().expect("several environments");
        eprintln!(
            "parley serve: the whole service: `parley metrics {} --db {}`, or /runs/{first}?with={} in `parley view`",
            runs.join(" "),
            settings.db,
            rest.join(",")
        );
    }
    let grace = settings.shutdown_grace();
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
    parley_http::server::serve(listener, host.router(), limits, shutdown).await.context("serving")?;
    let ended = host.sessions_ended();
    let services: Vec<Arc<Service>> = host.hosted().to_vec();
    drop(host);
    let mut runs = Vec::new();
    for service in services {
        let (run, runtime) = (service.run(), Arc::clone(service.runtime()));
        drop(service);
        runtime.finish_run(run, false).await?;
        runtime.stop().await?;
        runs.push(run.to_string());
    }
    let s = if runs.len() > 1 { "s" } else { "" };
    eprintln!("parley serve: stopped after {ended} sessions (run{s} {})", runs.join(", "));
    Ok(())
}

/// An even share of `whole` among `environments`.
fn share(whole: usize, environments: usize) -> usize {
    whole / environments.max(1)
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
