//! `parley scores`: a run's score versions, and what changed between two of them. The figures
//! are the runtime's ([`parley_runtime::scores`]); this module prints them.

use std::io::Write;

use parley_runtime::scores::{self, Version};
use parley_scoring::versions::Diff;
use parley_store::describe_reward;

use crate::cli::{ScoresAction, ScoresArgs, ScoresDiffArgs};
use crate::commands::inspect::open;

pub async fn scores(args: ScoresArgs) -> anyhow::Result<()> {
    if let Some(ScoresAction::Diff(diff)) = args.diff {
        return self::diff(diff).await;
    }
    let run = args.run.expect("clap requires RUN without a subcommand");
    let store = open(&args.db.db).await?;
    let versions = scores::versions(&store, run).await?;
    store.close().await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &versions)?;
        writeln!(out)?;
        return Ok(());
    }
    if versions.is_empty() {
        writeln!(out, "run {run} has no scores yet: its sessions have not finished")?;
        return Ok(());
    }
    writeln!(out, "{:>7}  {:<24}  {:>8}  {:>7}  reward", "version", "created", "sessions", "mean")?;
    for v in &versions {
        writeln!(out, "{:>7}  {:<24}  {:>8}  {:>7.3}  {}", v.version, v.created_at, v.sessions, v.mean, describe(v))?;
    }
    Ok(())
}

/// A version's reward in one line, saying when it is the run's own.
fn describe(version: &Version) -> String {
    let text = describe_reward(&version.reward);
    if version.run_reward { format!("{text} (the run's)") } else { text }
}

async fn diff(args: ScoresDiffArgs) -> anyhow::Result<()> {
    let store = open(&args.db.db).await?;
    let diff = scores::diff(&store, args.run, args.before, args.after).await?;
    store.close().await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &diff)?;
        writeln!(out)?;
        return Ok(());
    }
    print_diff(&mut out, &diff, args.limit.unwrap_or(20))
}

fn print_diff(out: &mut impl Write, d: &Diff, limit: usize) -> anyhow::Result<()> {
    writeln!(
        out,
        "run {}: score version {} -> {}: {} of {} sessions changed; mean reward {:.3} -> {:.3} ({:+.3})",
        d.run,
        d.before,
        d.after,
        d.changed.len(),
        d.compared,
        d.mean_before,
        d.mean_after,
        d.mean_after - d.mean_before
    )?;
    if d.only_before + d.only_after > 0 {
        writeln!(
            out,
            "  {} sessions scored only in version {}, {} only in version {} (not compared)",
            d.only_before, d.before, d.only_after, d.after
        )?;
    }
    if !d.by_component.is_empty() {
        writeln!(out, "by component:")?;
        for c in &d.by_component {
            writeln!(out, "  {:<16} {:>6} sessions  {:+.3} in all", c.name, c.sessions, c.total_delta)?;
        }
    }
    if d.changed.is_empty() {
        return Ok(());
    }
    writeln!(out, "{:>8}  {:>5}  {:>7}  {:>7}  {:>7}  components", "session", "task", "before", "after", "change")?;
    let shown = if limit == 0 { d.changed.len() } else { limit.min(d.changed.len()) };
    for c in &d.changed[..shown] {
        let parts: Vec<String> = c
            .components
            .iter()
            .map(|p| {
                let v = |x: Option<f64>| x.map_or_else(|| "-".to_owned(), short);
                format!("{} {} -> {}", p.name, v(p.before), v(p.after))
            })
            .collect();
        writeln!(
            out,
            "{:>8}  {:>5}  {:>7.3}  {:>7.3}  {:>+7.3}  {}",
            c.session,
            c.task_index,
            c.before,
            c.after,
            c.delta(),
            parts.join("; ")
        )?;
    }
    if shown < d.changed.len() {
        writeln!(out, "... {} more (--limit 0 lists every one, --json gives them all)", d.changed.len() - shown)?;
    }
    Ok(())
}

/// A component's value in a few digits: `-0.0375`, `1`.
fn short(x: f64) -> String {
    let text = format!("{x:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" { "0".to_owned() } else { text.to_owned() }
}
