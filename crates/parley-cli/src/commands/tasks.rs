//! `parley tasks`: write generated task files, and check or split task files.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use parley_runtime::datacheck;
use parley_runtime::settings::Need;
use parley_runtime::{EnvKind, Environments};
use serde_json::json;

use crate::cli::{TasksAction, TasksArgs, TasksCheckArgs, TasksSelectArgs, TasksSplitArgs};
use crate::error::usage;

/// `parley tasks`: generates a task file, or checks or splits one.
pub async fn tasks(args: TasksArgs) -> anyhow::Result<()> {
    match args.action {
        Some(TasksAction::Check(check_args)) => check(*check_args).await,
        Some(TasksAction::Split(split_args)) => split(split_args),
        Some(TasksAction::Select(select_args)) => select(select_args).await,
        None => generate(args),
    }
}

fn generate(args: TasksArgs) -> anyhow::Result<()> {
    let Some(env) = args.env else { return Err(usage("name an environment to generate tasks for")) };
    let mut out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    for row in env.rows(args.count, args.seed) {
        serde_json::to_writer(&mut out, &row)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    if let Some(path) = &args.out {
        eprintln!("wrote {} {} tasks to {}", args.count, env.name(), path.display());
    }
    Ok(())
}

/// `parley tasks check FILE`: names each row that cannot run, repeats another or leaks into an
/// `--against` file, then counts; exits 1 when it named any.
pub async fn check(args: TasksCheckArgs) -> anyhow::Result<()> {
    let mut settings = args.run.resolve_for(Need::Nothing)?;
    settings.tasks = Some(args.file.clone());
    let environments = Environments::open(&settings, None).await?;
    let env = environments.environment.clone();
    let runnable = |task: &parley_core::Task| env.check(task);
    let multi_step = settings.env == EnvKind::MultiStep;
    let file = args.file.display().to_string();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let (mut named, mut written) = (Vec::new(), Ok(()));
    let checked = datacheck::check(&args.file, multi_step, &runnable, &args.against, |line, finding| {
        if args.json {
            named.push(json!({"line": line, "kind": finding.kind(), "finding": finding.to_string()}));
        } else if written.is_ok() {
            written = writeln!(out, "{file}:{line}: {finding}");
        }
    });
    environments.shutdown().await;
    let checked = checked?;
    written?;
    let flagged = checked.rows - checked.good;
    // Rows that cannot run, or that leak into another split, fail the check; a repeated row is
    // named, and fails it only when asked (a task file may repeat a prompt on purpose).
    let repeated = ["duplicate", "near_duplicate"].iter().filter_map(|k| checked.findings.get(k)).sum::<usize>();
    let failing = checked.findings.values().sum::<usize>() - if args.fail_on_duplicates { 0 } else { repeated };
    if args.json {
        let report = json!({
            "file": file, "rows": checked.rows, "good": checked.good, "findings": named,
            "counts": checked.findings, "fields": checked.fields,
        });
        writeln!(out, "{report}")?;
    } else {
        let counts: Vec<String> = checked.findings.iter().map(|(kind, n)| format!("{kind} {n}")).collect();
        let counts = if counts.is_empty() { String::new() } else { format!(" ({})", counts.join(", ")) };
        writeln!(out, "{file}: {} rows, {} good, {flagged} named{counts}", checked.rows, checked.good)?;
        let fields: Vec<String> = checked.fields.iter().map(|(field, n)| format!("{field} {n}")).collect();
        writeln!(out, "fields: {}", fields.join(", "))?;
        for (field, n) in datacheck::uneven_fields(&checked) {
            writeln!(out, "  `{field}` is missing from {} rows", checked.rows - n)?;
        }
    }
    out.flush()?;
    if failing > 0 {
        anyhow::bail!("{flagged} of {} rows of {file} were named", checked.rows);
    }
    Ok(())
}

/// `parley tasks split FILE`: train, validation and test files with no question in two.
pub fn split(args: TasksSplitArgs) -> anyhow::Result<()> {
    let dir = args.out_dir.clone().unwrap_or_else(|| args.file.parent().map(Path::to_path_buf).unwrap_or_default());
    let outs = ["train", "validation", "test"].map(|part| dir.join(format!("{part}.jsonl")));
    if outs.contains(&args.file) {
        return Err(usage(format!("{} would be overwritten by its own split: pass --out-dir", args.file.display())));
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("--out-dir {}", dir.display()))?;
    let shares = datacheck::Shares { train: args.train, validation: args.validation, test: args.test };
    let paths = outs.each_ref().map(PathBuf::as_path);
    let split = datacheck::split(&args.file, shares, args.seed, args.by.as_deref(), paths)?;
    for (out, n) in outs.iter().zip([split.train, split.validation, split.test]) {
        eprintln!("wrote {n} rows to {}", out.display());
    }
    if split.unreadable > 0 {
        eprintln!("left out {} unreadable rows (`parley tasks check` names them)", split.unreadable);
    }
    Ok(())
}

/// `parley tasks select --run RUN --pass-between LOW HIGH`: the rows of the tasks worth
/// practising, by their stored pass rates.
pub async fn select(args: TasksSelectArgs) -> anyhow::Result<()> {
    let band = parley_runtime::curriculum::Band::new(args.pass_between[0], args.pass_between[1])?;
    let store = crate::commands::inspect::open(&args.db.db).await?;
    let mut out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let selected = parley_runtime::curriculum::select(&store, args.run, band, &mut out).await?;
    out.flush()?;
    eprintln!(
        "run {}: {} tasks in the band written; {} below it, {} above it, {} never scored",
        args.run, selected.written, selected.below, selected.above, selected.unscored
    );
    Ok(())
}
