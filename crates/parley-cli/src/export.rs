//! Writing a run's sessions from the store: NeMo Gym rollouts, OpenAI chat fine-tuning rows,
//! tau2 results, and failure rows. Sessions and their tasks are read a page at a time, so memory
//! stays flat however large the run.

use std::io::Write;
use std::sync::Arc;

use parley_core::{RunId, Termination};
use parley_runtime::{Failure, Rollout, RunSettings, StoredTasks};
use parley_store::{DbLocation, Store};
use serde_json::{Value, json};

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
#[derive(Debug, Default, Clone)]
pub struct Counts {
    pub rows: usize,
    pub failures: usize,
    /// Why each session the store could not read was left out (damaged pages).
    pub unreadable: Vec<String>,
}

impl Counts {
    /// An error naming the sessions left out, if any, and what to do about them.
    pub fn damage(&self, db: &DbLocation) -> Option<anyhow::Error> {
        let first = self.unreadable.first()?;
        Some(anyhow::anyhow!(
            "{} sessions could not be read and were left out (everything else was written); the first: {first}; \
             recover what the file holds with `sqlite3 {} .recover | sqlite3 recovered.db`",
            self.unreadable.len(),
            db
        ))
    }
}

const PAGE: usize = 500;

/// Where the rows of one format go.
enum Rows<'w> {
    NemoGym(&'w mut dyn Write),
    OpenaiChat(&'w mut dyn Write),
    Tau2(tau2::ResultsWriter<'w>),
}

/// Writes one row per scored session in `format`, and one failure row per infrastructure
/// failure to `failures` when given. Unfinished sessions are skipped.
pub async fn export(
    store: &Arc<Store>,
    run: RunId,
    settings: &RunSettings,
    format: Format,
    out: &mut dyn Write,
    mut failures: Option<&mut dyn Write>,
) -> anyhow::Result<Counts> {
    let mut tasks = StoredTasks::new(store.clone(), run, settings)?;
    let mut rows = match format {
        Format::NemoGym => Rows::NemoGym(out),
        Format::OpenaiChat => Rows::OpenaiChat(out),
        Format::Tau2 => {
            let Some(domain) = settings.env.tau2() else {
                anyhow::bail!("--format tau2 exports tau2 runs; run {run} ran `{}`", settings.env);
            };
            let info = json!({
                "num_trials": settings.trials,
                "max_steps": settings.max_steps,
                "agent_info": {"implementation": "parley", "llm": settings.model},
                "user_info": {"implementation": format!("parley-{:?}", settings.user.kind).to_lowercase(),
                              "llm": settings.user.model.as_deref().unwrap_or(&settings.model)},
            });
            Rows::Tau2(tau2::ResultsWriter::start(out, domain.as_str(), info, &tasks.all().await?)?)
        }
    };
    let mut counts = Counts::default();
    let mut after = 0;
    loop {
        let page = store.sessions_page_checked(run, after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        let mut readable = Vec::with_capacity(page.len());
        for read in page {
            match read.row {
                Ok(row) => readable.push(row),
                Err(e) => counts.unreadable.push(e.to_string()),
            }
        }
        for session in readable.iter().filter(|s| s.status == parley_core::SessionStatus::Finished) {
            if session.termination.is_none_or(Termination::is_infrastructure) {
                if let Some(w) = failures.as_deref_mut() {
                    let task = tasks.get(session.task_index as usize).await?;
                    write_line(w, &Failure::of_row(run, session).row(&task.row))?;
                }
                counts.failures += 1;
                continue;
            }
            let task = tasks.get(session.task_index as usize).await?;
            // A session the store cannot read is named and left out; the others are written.
            let (transcript, reward) = match (store.transcript(session.id).await, store.latest_score(session.id).await)
            {
                (Ok(transcript), Ok(reward)) => (transcript, reward),
                (Err(e), _) | (_, Err(e)) => {
                    counts.unreadable.push(e.to_string());
                    continue;
                }
            };
            let trial = session.trial as u32;
            match &mut rows {
                Rows::NemoGym(w) => {
                    let rollout =
                        Rollout::stored(&task, trial, settings.system_prompt.as_deref(), &transcript, reward.as_ref());
                    write_line(*w, &rollout.row(&settings.model))?;
                }
                Rows::OpenaiChat(w) => {
                    let messages: Vec<Value> = transcript.messages.iter().map(chat_message).collect();
                    let tools: Vec<Value> = task.tools.iter().map(|t| t.to_chat_json()).collect();
                    write_line(*w, &json!({"messages": messages, "tools": tools}))?;
                }
                Rows::Tau2(writer) => {
                    let messages: Vec<parley_core::Message> =
                        transcript.messages.into_iter().filter(|m| m.role != parley_core::Role::System).collect();
                    writer.simulation(&tau2::Session {
                        id: session.id,
                        task: &task,
                        trial,
                        seed: session.seed as u64,
                        termination: session.termination.map_or("", Termination::as_str),
                        reward: reward.as_ref(),
                        messages: &messages,
                        tool_calls: &transcript.tool_calls,
                        duration_ms: session.duration_ms.unwrap_or(0.0),
                    })?;
                }
            }
            counts.rows += 1;
        }
    }
    if let Rows::Tau2(writer) = rows {
        writer.finish()?;
    }
    Ok(counts)
}

/// One message in the OpenAI chat fine-tuning form: content parts as Chat Completions parts, the
/// reasoning as `reasoning_content`, the field chat templates and trainers read, whichever field
/// the endpoint wrote it in, and a token-capturing policy's token ids and log-probs.
fn chat_message(m: &parley_core::Message) -> Value {
    let mut v = json!({"role": m.role.as_str(), "content": m.content});
    if !m.parts.is_empty() {
        v["content"] = m.parts.iter().map(parley_core::Part::to_chat_json).collect();
    }
    if let Some(reasoning) = &m.reasoning {
        v["reasoning_content"] = json!(reasoning.text);
    }
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
    if let (Some(tokens), Some(map)) = (&m.tokens, v.as_object_mut()) {
        parley_core::nemo_gym::put_tokens(map, tokens);
    }
    v
}

pub fn write_line(w: &mut dyn Write, row: &Value) -> anyhow::Result<()> {
    serde_json::to_writer(&mut *w, row)?;
    w.write_all(b"\n")?;
    Ok(())
}
