//! `parley rescore`, `parley replay` and `parley fork`: new work from what the store recorded.
//! The work is the runtime's ([`parley_runtime::durable`]); this module calls it and prints.

use std::io::Write;
use std::sync::Arc;

use parley_runtime::Runtime;
use parley_runtime::durable::{self, stored_settings};
use parley_store::{Store, StoreOptions};

use crate::cli::{ForkArgs, ReplayArgs, RescoreArgs};
use crate::commands::inspect::open;
use crate::commands::run::Signals;
use crate::error::usage;

pub async fn rescore(args: RescoreArgs) -> anyhow::Result<()> {
    let reward = args.rewards.for_rescore(args.settings.as_deref())?;
    let args = args.run;
    let store = Arc::new(open(&args.db.db).await?);
    let rescored = durable::rescore(store, args.run, reward).await?;
    let version = rescored.version;
    let mut out = std::io::stdout().lock();
    for (session, old, reward) in &rescored.changes {
        let before = old.as_ref().map_or_else(|| "-".to_owned(), |r| r.value.to_string());
        writeln!(out, "session {session}: reward {before} -> {} (score version {version})", reward.value)?;
        if let Some(old) = old {
            for (key, value) in &reward.breakdown {
                if old.breakdown.get(key) != Some(value) {
                    let was = old.breakdown.get(key).map_or_else(|| "-".to_owned(), ToString::to_string);
                    writeln!(out, "    {key}: {was} -> {value}")?;
                }
            }
        }
    }
    let judge = rescored
        .judge
        .map(|(calls, reused)| format!("; {calls} judge calls, {reused} verdicts reused"))
        .unwrap_or_default();
    let judge = match rescored.user_faults {
        0 => judge,
        n => format!("{judge}; the simulated user's faults found anew in {n} sessions"),
    };
    let (scored, changed) = (rescored.scored, rescored.changes.len());
    writeln!(
        out,
        "rescored {scored} sessions of run {}: {changed} changed{judge} (score version {version})",
        args.run
    )?;
    eprintln!("see what moved: parley scores diff {} {} {version}", args.run, version - 1);
    Ok(())
}

pub async fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let store = Arc::new(open(&args.db.db).await?);
    let (run, sessions) = match (args.session, args.run) {
        (Some(session), _) => (store.run_of(session).await.map_err(|e| usage(e.to_string()))?, vec![session]),
        (None, Some(run)) => (run, durable::finished_sessions(&store, run).await?),
        (None, None) => return Err(usage("name a SESSION or --run RUN")),
    };
    let replayed = durable::replay(store, run, &sessions).await?;
    let mut out = std::io::stdout().lock();
    let (mut drifted, mut reward_changes) = (0, 0);
    for session in &replayed {
        let id = session.session;
        for d in &session.drift {
            drifted += 1;
            writeln!(
                out,
                "session {id} message {} `{}`: recorded {} · replayed {}",
                d.seq, d.name, d.recorded, d.replayed
            )?;
        }
        if let Some((recorded, now)) = session.reward_change {
            reward_changes += 1;
            writeln!(out, "session {id}: reward recorded {recorded:?} · replayed {now:?}")?;
        }
    }
    writeln!(
        out,
        "replayed {} sessions of run {run}: {drifted} tool outputs drifted, {reward_changes} rewards changed",
        sessions.len()
    )?;
    Ok(())
}

pub async fn fork(args: ForkArgs) -> anyhow::Result<()> {
    let probe = open(&args.db.db).await?;
    let run = probe.run_of(args.session).await.map_err(|e| usage(format!("{e}; see `parley sessions RUN`")))?;
    let mut settings = stored_settings(&probe, run).await?;
    let source = probe.transcript(args.session).await?;
    durable::check_fork_point(&source.messages, args.at)
        .map_err(|e| usage(format!("session {}: {e}", args.session)))?;
    probe.close().await?;
    drop(probe);

    // The continuation's policy, over the run's, checked as a run's settings are.
    settings.db = args.db.db.clone();
    args.policy.over(&mut settings);
    settings.check_for(parley_runtime::settings::Need::Nothing)?;

    let store =
        Store::open(&settings.db, StoreOptions { raw_model_calls: settings.raw_calls, ..StoreOptions::default() })
            .await?;
    let runtime = Runtime::start(&settings, store).await?;
    let signals = Signals::watch(settings.shutdown_grace());
    let forked = runtime.fork(run, args.session, args.at, signals.stop.clone()).await;
    runtime.stop().await?;
    let result = forked?;
    let reward = result.outcome.reward.as_ref().map_or_else(|| "-".to_owned(), |r| r.value.to_string());
    println!(
        "session {}: forked from session {} at message {} with model {}; {}, reward {reward}",
        result.id, args.session, args.at, settings.model, result.outcome.termination
    );
    signals.ended()
}
