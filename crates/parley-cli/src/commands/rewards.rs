//! `parley rewards probe`: the runtime plays each reward-hack probe and scores it; this module
//! prints the table (or `--json`) and fails when asked to on a paid probe.

use std::io::Write;

use parley_runtime::probe::{ProbeOptions, ProbeReport};
use serde_json::json;

use crate::cli::{RewardsAction, RewardsArgs, RewardsProbeArgs};

/// `parley rewards ...`.
pub async fn rewards(args: RewardsArgs) -> anyhow::Result<()> {
    match args.action {
        RewardsAction::Probe(probe_args) => probe(*probe_args).await,
    }
}

/// `parley rewards probe`: which shortcuts the reward pays for.
pub async fn probe(args: RewardsProbeArgs) -> anyhow::Result<()> {
    let keep = args.run.db.is_some();
    let settings = args.run.resolve()?;
    let options = ProbeOptions {
        probes: if args.probes.is_empty() { parley_stub::Probe::ALL.to_vec() } else { args.probes },
        paid_above: args.paid_above,
        answer_field: args.answer_field,
        answer_format: args.answer_format,
        db: keep.then(|| settings.db.clone()),
    };
    let report = parley_runtime::probe::probe(&settings, &options).await?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.json {
        writeln!(out, "{}", as_json(&report))?;
    } else {
        table(&mut out, &report)?;
    }
    out.flush()?;
    let paid = report.paid();
    if args.fail_on_paid && !paid.is_empty() {
        let names: Vec<&str> = paid.iter().map(|p| p.as_str()).collect();
        anyhow::bail!("the reward pays {} of {} probes: {}", paid.len(), report.results.len(), names.join(", "));
    }
    Ok(())
}

fn as_json(report: &ProbeReport) -> serde_json::Value {
    let probes: Vec<serde_json::Value> = report
        .results
        .iter()
        .map(|r| {
            json!({
                "probe": r.probe.as_str(), "answers": r.probe.describe(), "scored": r.scored,
                "not_applicable": r.not_applicable, "failed": r.failed, "mean_reward": r.mean_reward,
                "paid": r.paid, "paid_share": r.paid_share(), "run": r.run,
            })
        })
        .collect();
    let paid: Vec<&str> = report.paid().iter().map(|p| p.as_str()).collect();
    json!({
        "tasks": report.tasks, "unrunnable": report.unrunnable, "paid_above": report.paid_above,
        "probes": probes, "paid": paid, "db": report.db.as_ref().map(|db| db.redacted()),
    })
}

fn table(out: &mut impl Write, report: &ProbeReport) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<18} {:>6} {:>5} {:>6} {:>11} {:>7}  answers",
        "probe", "scored", "n/a", "failed", "mean reward", "paid"
    )?;
    for r in &report.results {
        let mean = r.mean_reward.map_or_else(|| "-".to_owned(), |m| format!("{m:.3}"));
        let share = r.paid_share().map_or_else(|| "-".to_owned(), |s| format!("{:.0}%", 100.0 * s));
        writeln!(
            out,
            "{:<18} {:>6} {:>5} {:>6} {:>11} {:>7}  {}",
            r.probe.as_str(),
            r.scored,
            r.not_applicable,
            r.failed,
            mean,
            share,
            r.probe.describe()
        )?;
    }
    let paid = report.paid();
    let names: Vec<&str> = paid.iter().map(|p| p.as_str()).collect();
    let verdict = if paid.is_empty() { "none".to_owned() } else { names.join(", ") };
    writeln!(out, "{} tasks; paid means a reward above {}; paid probes: {verdict}", report.tasks, report.paid_above)?;
    if report.unrunnable > 0 {
        writeln!(
            out,
            "{} tasks left out: the environment or the reward cannot run them (parley tasks check names them)",
            report.unrunnable
        )?;
    }
    if let Some(db) = &report.db {
        writeln!(out, "the probes' runs are in {} (parley runs --db {} lists them)", db.redacted(), db.redacted())?;
    }
    Ok(())
}
