//! `parley runs`, `parley sessions`, `parley show`, `parley metrics` and `parley export`: reading
//! the store, never changing it.

use std::io::{IsTerminal, Write};

use anyhow::Context;
use parley_core::{Part, Role};
use parley_store::{DbLocation, Store, StoreOptions};

use parley_runtime::durable::stored_settings;

use crate::cli::{DbArg, ExportArgs, MetricsArgs, SessionsArgs, ShowArgs};
use crate::error::usage;
use crate::summary::Report;

/// Opens an existing store: a SQLite file must exist (a reader never creates one); a
/// PostgreSQL database gets its migrations like any other opening.
pub async fn open(db: &DbLocation) -> anyhow::Result<Store> {
    parley_runtime::settings::check_db(db)?;
    if let Some(path) = db.file()
        && !path.is_file()
    {
        return Err(usage(format!("--db {}: no such database", path.display())));
    }
    Store::open(db, StoreOptions::default()).await.with_context(|| format!("opening {db}"))
}

pub async fn runs(args: DbArg) -> anyhow::Result<()> {
    let store = open(&args.db).await?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:>4}  {:<24}  {:<12}  {:<11}  {:>8}  {:>8}  {:>7}",
        "run", "created", "env", "status", "sessions", "finished", "reward"
    )?;
    for run in store.runs().await? {
        let sessions = store.sessions(run.id).await?;
        let finished = sessions.iter().filter(|s| s.status == parley_core::SessionStatus::Finished).count();
        let rewards: Vec<f64> = sessions.iter().filter_map(|s| s.reward).collect();
        let reward = parley_scoring::mean(&rewards).map_or_else(|| "-".to_owned(), |m| format!("{:.3}", m.mean));
        writeln!(
            out,
            "{:>4}  {:<24}  {:<12}  {:<11}  {:>8}  {:>8}  {:>7}",
            run.id,
            run.created_at,
            run.environment,
            run.status,
            sessions.len(),
            finished,
            reward
        )?;
    }
    Ok(())
}

pub async fn sessions(args: SessionsArgs) -> anyhow::Result<()> {
    let termination = args.termination.as_deref().map(|t| {
        parley_core::Termination::parse(t).ok_or_else(|| {
            let all: Vec<&str> = parley_core::Termination::ALL.iter().map(|t| t.as_str()).collect();
            usage(format!("--termination `{t}` is not one of: {}", all.join(", ")))
        })
    });
    let termination = termination.transpose()?;
    let failure = args.failure.as_deref().map(|f| {
        parley_core::FailureClass::parse(f).ok_or_else(|| {
            let all: Vec<&str> = parley_core::FailureClass::ALL.iter().map(|c| c.as_str()).collect();
            usage(format!("--failure `{f}` is not one of: {}", all.join(", ")))
        })
    });
    let failure = failure.transpose()?;
    let user_fault = args.user_fault.as_deref().map(|r| {
        parley_core::review::Rule::parse(r).ok_or_else(|| {
            let all: Vec<&str> = parley_core::review::Rule::ALL.iter().map(|r| r.as_str()).collect();
            usage(format!("--user-fault `{r}` is not one of: {}", all.join(", ")))
        })
    });
    let user_fault = user_fault.transpose()?;
    let store = open(&args.run.db.db).await?;
    store.run(args.run.run).await.map_err(|e| usage(format!("{e}; see `parley runs`")))?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:>7}  {:>5}  {:>5}  {:<9}  {:<24}  {:>7}  {:>9}",
        "session", "task", "trial", "status", "termination", "reward", "ms"
    )?;
    for s in store.sessions(args.run.run).await? {
        if args.status.is_some_and(|st| parley_core::SessionStatus::from(st) != s.status)
            || termination.is_some_and(|t| Some(t) != s.termination)
            || failure.is_some_and(|f| Some(f) != s.failure)
            || user_fault.is_some_and(|rule| !s.user_faults.iter().any(|f| f.rule == rule))
        {
            continue;
        }
        writeln!(
            out,
            "{:>7}  {:>5}  {:>5}  {:<9}  {:<24}  {:>7}  {:>9}",
            s.id,
            s.task_index,
            s.trial,
            s.status.as_str(),
            match (s.termination, s.failure) {
                (Some(t), Some(f)) => format!("{t} ({f})"),
                (Some(t), None) => t.as_str().to_owned(),
                (None, _) => "-".to_owned(),
            },
            s.reward.map_or_else(|| "-".to_owned(), |r| format!("{r:.3}")),
            s.duration_ms.map_or_else(|| "-".to_owned(), |d| format!("{d:.1}")),
        )?;
    }
    Ok(())
}

/// Colours for a terminal; none when stdout is a pipe or `NO_COLOR` is set.
struct Paint(bool);

impl Paint {
    fn detect() -> Paint {
        Paint(std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none())
    }

    fn role(&self, role: Role) -> String {
        let (code, name) = match role {
            Role::System => ("2", "system"),
            Role::User => ("1;34", "user"),
            Role::Assistant => ("1;32", "assistant"),
            Role::Tool => ("1;33", "tool"),
        };
        self.wrap(code, name)
    }

    fn wrap(&self, code: &str, text: &str) -> String {
        if self.0 { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_owned() }
    }
}

pub async fn show(args: ShowArgs) -> anyhow::Result<()> {
    let store = open(&args.db.db).await?;
    let run = store.run_of(args.session).await.map_err(|e| usage(format!("{e}; see `parley sessions RUN`")))?;
    let row = store
        .sessions(run)
        .await?
        .into_iter()
        .find(|s| s.id == args.session)
        .ok_or_else(|| usage(format!("session {} not found", args.session)))?;
    let transcript = store.transcript(args.session).await?;
    let paint = Paint::detect();
    let mut out = std::io::stdout().lock();
    writeln!(out, "session {} · run {run} · task {} · trial {} · {}", row.id, row.task_index, row.trial, row.status)?;
    for fault in &row.user_faults {
        writeln!(out, "user fault     [{}] {}: {}", fault.seq, fault.rule, fault.detail)?;
    }
    for (seq, m) in transcript.messages.iter().enumerate() {
        let figures = transcript.calls.iter().find(|c| c.seq as usize == seq);
        let note = figures.map_or_else(String::new, |c| {
            format!(
                "  ({} + {} tokens, {:.1} ms{})",
                c.usage.prompt_tokens,
                c.usage.completion_tokens,
                c.latency_ms,
                if c.attempts > 1 { format!(", {} attempts", c.attempts) } else { String::new() }
            )
        });
        writeln!(out, "\n[{seq}] {}{note}", paint.role(m.role))?;
        if let Some(text) = m.content.as_deref().filter(|t| !t.is_empty()) {
            for line in text.lines() {
                writeln!(out, "    {line}")?;
            }
        }
        // Parts by type and size, never their data: an image is a line, not a megabyte of base64.
        for part in &m.parts {
            match part {
                Part::Text { text } => {
                    for line in text.lines() {
                        writeln!(out, "    {line}")?;
                    }
                }
                other => writeln!(out, "    {}", paint.wrap("36", &format!("[{}]", other.describe())))?,
            }
        }
        for call in &m.tool_calls {
            writeln!(out, "    → {}({})", paint.wrap("1", &call.name), call.arguments)?;
        }
        // Reasoning folded under the answer (its text and calls): marked off, so that it never reads
        // as what was said.
        if let Some(reasoning) = &m.reasoning {
            let encrypted = if reasoning.encrypted() { ", encrypted content kept" } else { "" };
            let head = format!(
                "┆ reasoning ({}, {} chars{encrypted})",
                reasoning.spelling.as_str(),
                reasoning.text.chars().count()
            );
            writeln!(out, "    {}", paint.wrap("2", &head))?;
            for line in reasoning.text.lines() {
                writeln!(out, "    {}", paint.wrap("2", &format!("┆   {line}")))?;
            }
        }
        if let Some(tokens) = &m.tokens {
            let counts =
                format!("┆ token ids: {} in the prompt, {} generated", tokens.prompt.len(), tokens.generation.len());
            writeln!(out, "    {}", paint.wrap("2", &counts))?;
        }
        if let Some(record) = transcript.tool_calls.iter().find(|t| t.seq as usize == seq) {
            if record.is_error {
                let what = if record.malformed { "malformed call" } else { "tool error" };
                writeln!(out, "    {}", paint.wrap("31", what))?;
            }
            if record.truncated {
                writeln!(out, "    {}", paint.wrap("33", "output truncated (--max-tool-output)"))?;
            }
        }
    }
    writeln!(out)?;
    writeln!(out, "termination  {}", row.termination.map_or("- (unfinished)", parley_core::Termination::as_str))?;
    if let Some(failure) = &row.failure {
        writeln!(out, "failure      {failure}")?;
    }
    if row.retries > 0 {
        writeln!(out, "retries      {}", row.retries)?;
    }
    if let Some(why) = &row.token_contiguity {
        writeln!(out, "token ids    {}", paint.wrap("33", &format!("not contiguous: {why}")))?;
    }
    if let Some(error) = &row.error {
        writeln!(out, "error        {}", paint.wrap("31", error))?;
    }
    if let Some(reward) = store.latest_score(row.id).await? {
        writeln!(out, "reward       {}", reward.value)?;
        for (k, v) in &reward.breakdown {
            writeln!(out, "  {k:<34} {v}")?;
        }
    }
    Ok(())
}

pub async fn metrics(args: MetricsArgs) -> anyhow::Result<()> {
    let store = open(&args.run.db.db).await?;
    let mut trials = stored_settings(&store, args.run.run).await?.trials as usize;
    for &run in &args.with {
        trials = trials.max(stored_settings(&store, run).await?.trials as usize);
    }
    let report = Report::load_runs(&store, args.run.run, &args.with, trials, args.keep_user_faults)
        .await?
        .with_training(&store, args.keep_user_faults)
        .await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report.to_json())?;
        writeln!(out)?;
    } else {
        report.print(&mut out, None)?;
    }
    Ok(())
}

pub async fn export(args: ExportArgs) -> anyhow::Result<()> {
    let store = std::sync::Arc::new(open(&args.run.db.db).await?);
    let settings = stored_settings(&store, args.run.run).await?;
    let mut out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let counts = parley_export::export(&store, args.run.run, &settings, args.format, &mut out, None).await?;
    out.flush()?;
    eprintln!("exported {} sessions of run {}", counts.rows, args.run.run);
    if let Some(damage) = counts.damage(&args.run.db.db) {
        return Err(damage.into());
    }
    Ok(())
}
