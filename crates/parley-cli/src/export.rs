//! Writing a run's sessions from the store: NeMo Gym rollouts, OpenAI chat fine-tuning rows and
//! failure rows. Sessions are read a page at a time, so memory stays flat however large the run.

use std::io::Write;

use parley_core::nemo_gym::{response_object, rollout_row};
use parley_core::{Reward, RunId, Task, Termination};
use parley_store::{SessionRow, SqliteStore};
use serde_json::{Value, json};

use crate::settings::RunSettings;

mod tau2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// NeMo Gym rollout rows: the task row, `response`, `reward` and the verifier's fields.
    NemoGym,
    /// OpenAI chat fine-tuning rows: `messages` (with tool calls) and `tools`.
    OpenaiChat,
    /// tau2's results JSON (`SimulationRun` records), which `tau2 evaluate-trajs` can re-score.
    Tau2,
}

/// What an export wrote.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub rows: usize,
    pub failures: usize,
}

const PAGE: usize = 500;

/// Writes one row per scored session in `format`, and one failure row per infrastructure
/// failure to `failures` when given. Unfinished sessions are skipped.
pub async fn export(
    store: &SqliteStore,
    run: RunId,
    tasks: &[std::sync::Arc<Task>],
    settings: &RunSettings,
    format: Format,
    out: &mut dyn Write,
    mut failures: Option<&mut dyn Write>,
) -> anyhow::Result<Counts> {
    if format == Format::Tau2 {
        return export_tau2(store, run, tasks, settings, out).await;
    }
    let mut counts = Counts::default();
    let mut after = 0;
    loop {
        let page = store.sessions_page(run, after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        for session in page.iter().filter(|s| s.status == "finished") {
            let task = tasks.get(session.task_index as usize).ok_or_else(|| {
                anyhow::anyhow!("session {} names task {}, which the run lacks", session.id, session.task_index)
            })?;
            let infrastructure =
                session.termination.as_deref().and_then(Termination::parse).is_none_or(Termination::is_infrastructure);
            if infrastructure {
                if let Some(w) = failures.as_deref_mut() {
                    write_line(w, &failure_row(run, session, &task.row))?;
                    counts.failures += 1;
                }
                continue;
            }
            let transcript = store.transcript(session.id).await?;
            let produced_from = usize::from(settings.system_prompt.is_some()) + task.messages.len();
            let produced = &transcript.messages[produced_from.min(transcript.messages.len())..];
            let row = match format {
                Format::NemoGym => {
                    let reward = store.latest_score(session.id).await?.unwrap_or_else(|| Reward::new(0.0));
                    let response = response_object(&settings.model, produced, transcript.usage());
                    rollout_row(&task.row, response, &reward, task.index, session.trial as u32)
                }
                Format::Tau2 => unreachable!("tau2 documents are written by export_tau2"),
                Format::OpenaiChat => {
                    let messages: Vec<Value> = transcript.messages.iter().map(chat_message).collect();
                    let tools: Vec<Value> = task.tools.iter().map(|t| t.to_chat_json()).collect();
                    json!({"messages": messages, "tools": tools})
                }
            };
            write_line(out, &row)?;
            counts.rows += 1;
        }
    }
    Ok(counts)
}

/// One tau2 Results document for the run's scored sessions, streamed a page at a time.
async fn export_tau2(
    store: &SqliteStore,
    run: RunId,
    tasks: &[std::sync::Arc<Task>],
    settings: &RunSettings,
    out: &mut dyn Write,
) -> anyhow::Result<Counts> {
    let Some(domain) = settings.env.strip_prefix("tau2:") else {
        anyhow::bail!("--format tau2 exports tau2 runs; run {run} ran `{}`", settings.env);
    };
    let info = json!({
        "num_trials": settings.trials,
        "max_steps": settings.max_steps,
        "agent_info": {"implementation": "parley", "llm": settings.model},
        "user_info": {"implementation": format!("parley-{:?}", settings.user.kind).to_lowercase(),
                      "llm": settings.user.model.as_deref().unwrap_or(&settings.model)},
    });
    let mut writer = tau2::ResultsWriter::start(out, domain, info, tasks)?;
    let mut counts = Counts::default();
    let mut after = 0;
    loop {
        let page = store.sessions_page(run, after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        for session in page.iter().filter(|s| s.status == "finished") {
            let Some(termination) = session.termination.as_deref() else { continue };
            if Termination::parse(termination).is_none_or(Termination::is_infrastructure) {
                counts.failures += 1;
                continue;
            }
            let task = tasks.get(session.task_index as usize).ok_or_else(|| {
                anyhow::anyhow!("session {} names task {}, which the run lacks", session.id, session.task_index)
            })?;
            let transcript = store.transcript(session.id).await?;
            let reward = store.latest_score(session.id).await?;
            let messages: Vec<parley_core::Message> =
                transcript.messages.into_iter().filter(|m| m.role != parley_core::Role::System).collect();
            writer.simulation(&tau2::Session {
                id: session.id,
                task,
                trial: session.trial as u32,
                seed: session.seed as u64,
                termination,
                reward: reward.as_ref(),
                messages: &messages,
                tool_calls: &transcript.tool_calls,
                duration_ms: session.duration_ms.unwrap_or(0.0),
            })?;
            counts.rows += 1;
        }
    }
    writer.finish()?;
    Ok(counts)
}

fn chat_message(m: &parley_core::Message) -> Value {
    let mut v = json!({"role": m.role.as_str(), "content": m.content});
    if !m.tool_calls.is_empty() {
        v["tool_calls"] = m
            .tool_calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
            .collect();
    }
    if let Some(id) = &m.tool_call_id {
        v["tool_call_id"] = json!(id);
    }
    v
}

/// A failure row as NeMo Gym writes its `_failures.jsonl` sidecar.
pub fn failure_row(run: RunId, session: &SessionRow, task_row: &Value) -> Value {
    let failure = Failure {
        run,
        session: session.id,
        task_index: session.task_index,
        trial: session.trial,
        termination: session.termination.as_deref(),
        error: session.error.as_deref(),
    };
    failure.row(task_row)
}

/// Where and how a session failed: what a failure row adds to its task row.
pub struct Failure<'a> {
    pub run: RunId,
    pub session: i64,
    pub task_index: i64,
    pub trial: i64,
    pub termination: Option<&'a str>,
    pub error: Option<&'a str>,
}

impl Failure<'_> {
    pub fn row(&self, task_row: &Value) -> Value {
        let mut row = task_row.clone();
        if let Some(map) = row.as_object_mut() {
            map.insert("_ng_task_index".into(), json!(self.task_index));
            map.insert("_ng_rollout_index".into(), json!(self.trial));
            map.insert("_ng_failure_class".into(), json!(self.termination));
            map.insert("_ng_failure_message".into(), json!(self.error));
            map.insert("_parley_run".into(), json!(self.run));
            map.insert("_parley_session".into(), json!(self.session));
        }
        row
    }
}

pub fn write_line(w: &mut dyn Write, row: &Value) -> anyhow::Result<()> {
    serde_json::to_writer(&mut *w, row)?;
    w.write_all(b"\n")?;
    Ok(())
}
