//! `parley rescore`, `parley replay` and `parley fork`: new work from what the store recorded.

use std::io::Write;

use std::sync::Arc;

use parley_core::Role;
use parley_engine::Job;
use parley_runtime::{Environments, Runtime, StoredTasks, prior};
use parley_store::{Store, StoreOptions};

use crate::cli::{ForkArgs, ReplayArgs, RunRef};
use crate::commands::inspect::{open, settings_of};
use crate::commands::run::{Signals, execute};
use crate::error::usage;

/// How a stored session ended, for scorers that look at it.
fn stored_termination(termination: Option<parley_core::Termination>) -> parley_core::Termination {
    termination.unwrap_or(parley_core::Termination::AgentStop)
}

/// Scores every scored session of a run again. The new scores land together, as one version
/// for the whole run, or not at all (a killed rescore leaves none behind). The judge's verdicts
/// are kept by the hash of their prompt, so a rescore asks the judge only what it has not
/// judged before.
pub async fn rescore(args: RunRef) -> anyhow::Result<()> {
    let store = Arc::new(open(&args.db.db).await?);
    let settings = settings_of(&store, args.run).await?;
    let mut tasks = StoredTasks::new(store.clone(), args.run, &settings)?;
    let environments = Environments::open(&settings, Some(&store)).await?;
    let env = environments.environment.clone();
    let mut scores = Vec::new();
    let mut changes = Vec::new();
    let mut after = 0;
    loop {
        let page = store.sessions_page(args.run, after, 500).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        for session in page.iter().filter(|s| s.status == parley_core::SessionStatus::Finished && s.reward.is_some()) {
            let transcript = store.transcript(session.id).await?;
            let task = tasks.get(session.task_index as usize).await?;
            let mut env_session = env.open(&task).await.map_err(|e| anyhow::anyhow!("session {}: {e}", session.id))?;
            let reward = env_session
                .score(&transcript.messages, stored_termination(session.termination))
                .await
                .map_err(|e| anyhow::anyhow!("session {}: {e}", session.id))?;
            env_session.close().await;
            let old = store.latest_score(session.id).await?;
            if old.as_ref() != Some(&reward) {
                changes.push((session.id, old, reward.clone()));
            }
            scores.push((session.id, reward));
        }
    }
    let version = store.add_scores(args.run, &scores).await?;
    let mut out = std::io::stdout().lock();
    for (session, old, reward) in &changes {
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
    let judge = environments
        .judge
        .as_ref()
        .map(|j| format!("; {} judge calls, {} verdicts reused", j.calls(), j.reused()))
        .unwrap_or_default();
    writeln!(out, "rescored {} sessions of run {}: {} changed{judge}", scores.len(), args.run, changes.len())?;
    environments.shutdown().await;
    Ok(())
}

pub async fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let store = Arc::new(open(&args.db.db).await?);
    let (run, sessions) = match (args.session, args.run) {
        (Some(session), _) => {
            let run = store.run_of(session).await.map_err(|e| usage(e.to_string()))?;
            (run, vec![session])
        }
        (None, Some(run)) => {
            settings_of(&store, run).await?;
            let ids = store
                .sessions(run)
                .await?
                .into_iter()
                .filter(|s| s.status == parley_core::SessionStatus::Finished)
                .map(|s| s.id)
                .collect();
            (run, ids)
        }
        (None, None) => return Err(usage("name a SESSION or --run RUN")),
    };
    let settings = settings_of(&store, run).await?;
    let mut tasks = StoredTasks::new(store.clone(), run, &settings)?;
    let rows = store.sessions(run).await?;
    let environments = Environments::open(&settings, None).await?;
    let env = environments.environment.clone();
    let mut out = std::io::stdout().lock();
    let (mut drifted, mut reward_changes) = (0, 0);
    for id in &sessions {
        let Some(row) = rows.iter().find(|r| r.id == *id) else { continue };
        let transcript = store.transcript(*id).await?;
        let task = tasks.get(row.task_index as usize).await?;
        let report = parley_engine::replay::replay(
            env.as_ref(),
            &task,
            &transcript.messages,
            &transcript.tool_calls,
            stored_termination(row.termination),
        )
        .await
        .map_err(|e| anyhow::anyhow!("session {id}: {e}"))?;
        for d in &report.drift {
            drifted += 1;
            writeln!(
                out,
                "session {id} message {} `{}`: recorded {} · replayed {}",
                d.seq, d.name, d.recorded, d.replayed
            )?;
        }
        let now = report.reward.as_ref().ok().map(|r| r.value);
        if row.reward.is_some() && now != row.reward {
            reward_changes += 1;
            writeln!(out, "session {id}: reward recorded {:?} · replayed {:?}", row.reward, now)?;
        }
    }
    writeln!(
        out,
        "replayed {} sessions of run {run}: {drifted} tool outputs drifted, {reward_changes} rewards changed",
        sessions.len()
    )?;
    environments.shutdown().await;
    Ok(())
}

pub async fn fork(args: ForkArgs) -> anyhow::Result<()> {
    let probe = open(&args.db.db).await?;
    let run = probe.run_of(args.session).await.map_err(|e| usage(format!("{e}; see `parley sessions RUN`")))?;
    let mut settings = settings_of(&probe, run).await?;
    let source = probe.transcript(args.session).await?;
    let at = args.at as usize;
    if at == 0 || at > source.messages.len() {
        return Err(usage(format!("--at {at}: session {} has messages 0 to {}", args.session, source.messages.len())));
    }
    let last = &source.messages[at - 1];
    if last.role == Role::Assistant && !last.tool_calls.is_empty() {
        return Err(usage(format!(
            "--at {at} would cut between message {} (tool calls) and their results; use --at {} or later",
            at - 1,
            at + last.tool_calls.len()
        )));
    }
    probe.close().await?;
    drop(probe);

    settings.db = args.db.db.clone();
    settings.model = args.model.unwrap_or(settings.model);
    if let Some(url) = args.base_url {
        settings.base_url = Some(url);
        settings.ranks.clear();
    }
    settings.api_key_env = args.api_key_env.or(settings.api_key_env);
    settings.sampling.temperature = args.temperature.or(settings.sampling.temperature);
    settings.sampling.top_p = args.top_p.or(settings.sampling.top_p);
    settings.sampling.max_tokens = args.max_tokens.or(settings.sampling.max_tokens);

    let store = Store::open(&settings.db, StoreOptions { raw_model_calls: settings.raw_calls }).await?;
    let id = store.fork_session(args.session, args.at).await?;
    let row = store.sessions(run).await?.into_iter().find(|s| s.id == id).expect("the fork was just created");
    let transcript = store.transcript(id).await?;
    let runtime = Runtime::start(&settings, store).await?;
    let mut tasks = StoredTasks::new(runtime.store.clone(), run, &settings)?;
    // A fork is a new session nobody has claimed; it runs unclaimed (fence 0), which the store
    // accepts until someone claims it.
    let spec = parley_core::SessionSpec {
        task_index: row.task_index as usize,
        trial: row.trial as u32,
        seed: row.seed as u64,
        player: parley_core::Player::Run,
    };
    let task = tasks.get(spec.task_index).await?;
    let job = Job::new(parley_core::Claim::unclaimed(id), task, spec, Some(prior(transcript)));
    let mut outcome = None;
    let signals = Signals::watch(settings.shutdown_grace());
    execute(&runtime, &settings, run, 1, futures::stream::iter([job]), &signals, |r| {
        outcome = Some((r.outcome.termination, r.outcome.reward.as_ref().map(|r| r.value)));
        Ok(())
    })
    .await?;
    runtime.stop().await?;
    let (termination, reward) = outcome.ok_or_else(|| anyhow::anyhow!("the fork did not run"))?;
    println!(
        "session {id}: forked from session {} at message {} with model {}; {termination}, reward {}",
        args.session,
        args.at,
        settings.model,
        reward.map_or_else(|| "-".to_owned(), |r| r.to_string())
    );
    Ok(())
}
