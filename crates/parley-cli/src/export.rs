//! Writing a run's sessions from the store: NeMo Gym rollouts, OpenAI chat fine-tuning rows and
//! failure rows. Sessions are read a page at a time, so memory stays flat however large the run.

use std::io::Write;

use parley_core::nemo_gym::{response_object, rollout_row};
use parley_core::{Reward, RunId, Task, Termination};
use parley_store::{SessionRow, SqliteStore};
use serde_json::{Value, json};

use crate::settings::RunSettings;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// NeMo Gym rollout rows: the task row, `response`, `reward` and the verifier's fields.
    NemoGym,
    /// OpenAI chat fine-tuning rows: `messages` (with tool calls) and `tools`.
    OpenaiChat,
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
    let mut row = task_row.clone();
    if let Some(map) = row.as_object_mut() {
        map.insert("_ng_task_index".into(), json!(session.task_index));
        map.insert("_ng_rollout_index".into(), json!(session.trial));
        map.insert("_ng_failure_class".into(), json!(session.termination));
        map.insert("_ng_failure_message".into(), json!(session.error));
        map.insert("_parley_run".into(), json!(run));
        map.insert("_parley_session".into(), json!(session.id));
    }
    row
}

pub fn write_line(w: &mut dyn Write, row: &Value) -> anyhow::Result<()> {
    serde_json::to_writer(&mut *w, row)?;
    w.write_all(b"\n")?;
    Ok(())
}
