//! A stored run in peers' formats: NeMo Gym rollouts, OpenAI chat fine-tuning rows, tau2
//! results documents ([`tau2`]), and failure rows. Sessions and their tasks are read from the
//! store a page at a time, so memory stays flat however large the run; `parley export` and a
//! resume's rewrite of its output files both come through [`export`].
//!
//! Invariant: no command line, no terminal: the caller opens the store, chooses the writer and
//! prints what [`Counts`] says. Rows are built by the runtime's `Rollout` and `Failure` and by
//! `parley-core`'s Chat Completions writer, never again here.

use std::io::Write;
use std::sync::Arc;

use parley_core::message::ChatMessage;
use parley_core::{ChatForm, Message, ReasoningField, Role, RunId, StoreError, Termination};
use parley_runtime::{Failure, Rollout, RunSettings, StoredTasks};
use parley_store::{DbLocation, Store};
use serde::Serialize;
use serde_json::json;

pub mod tau2;

/// The row formats of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    /// NeMo Gym rollout rows: the task row, `response`, `reward` and the verifier's fields.
    NemoGym,
    /// OpenAI chat fine-tuning rows: `messages` (with tool calls) and `tools`.
    OpenaiChat,
    /// tau2's results JSON (`SimulationRun` records), which `tau2 evaluate-trajs` can re-score.
    Tau2,
}

/// Why an export stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("--format tau2 exports tau2 runs; run {run} ran `{env}`")]
    NotTau2 { run: RunId, env: String },
    /// A session or task that a tau2 results document cannot hold.
    #[error("tau2 export: {0}")]
    Tau2(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The run's tasks could not be read back (its tau2 domain, or a stored row).
    #[error("reading the run's tasks: {0:#}")]
    Tasks(anyhow::Error),
    #[error("writing the export: {0}")]
    Write(#[from] std::io::Error),
}

impl From<serde_json::Error> for ExportError {
    /// Rows are JSON values, so only the writer under them can fail.
    fn from(error: serde_json::Error) -> ExportError {
        ExportError::Write(error.into())
    }
}

/// What an export wrote.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    pub rows: usize,
    pub failures: usize,
    /// Why each session the store could not read was left out (damaged pages).
    pub unreadable: Vec<String>,
}

/// Sessions an export left out because the store could not read them.
#[derive(Debug, thiserror::Error)]
#[error(
    "{count} sessions could not be read and were left out (everything else was written); the first: {first}; \
     recover what the file holds with `sqlite3 {db} .recover | sqlite3 recovered.db`"
)]
pub struct Damaged {
    pub count: usize,
    pub first: String,
    pub db: String,
}

impl Counts {
    /// The sessions left out, if any, and what to do about them.
    pub fn damage(&self, db: &DbLocation) -> Option<Damaged> {
        let first = self.unreadable.first()?;
        Some(Damaged { count: self.unreadable.len(), first: first.clone(), db: db.to_string() })
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
) -> Result<Counts, ExportError> {
    let mut tasks = StoredTasks::new(store.clone(), run, settings).map_err(ExportError::Tasks)?;
    let mut rows = match format {
        Format::NemoGym => Rows::NemoGym(out),
        Format::OpenaiChat => Rows::OpenaiChat(out),
        Format::Tau2 => {
            let Some(domain) = settings.env.tau2() else {
                return Err(ExportError::NotTau2 { run, env: settings.env.to_string() });
            };
            let info = json!({
                "num_trials": settings.trials,
                "max_steps": settings.max_steps,
                "agent_info": {"implementation": "parley", "llm": settings.model},
                "user_info": {"implementation": format!("parley-{:?}", settings.user.kind).to_lowercase(),
                              "llm": settings.user.model.as_deref().unwrap_or(&settings.model)},
            });
            let all = tasks.all().await.map_err(ExportError::Tasks)?;
            Rows::Tau2(tau2::ResultsWriter::start(out, domain.as_str(), info, &all)?)
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
                    let task = tasks.get(session.task_index as usize).await.map_err(ExportError::Tasks)?;
                    write_line(w, &Failure::of_row(run, session).row(&task.row))?;
                }
                counts.failures += 1;
                continue;
            }
            let task = tasks.get(session.task_index as usize).await.map_err(ExportError::Tasks)?;
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
                    write_line(*w, &rollout.written(&settings.model))?;
                }
                Rows::OpenaiChat(w) => {
                    let messages = transcript.messages.iter().map(|m| m.chat(CHAT_ROW)).collect();
                    write_line(*w, &ChatRow { messages, tools: task.tools.chat_json() })?;
                }
                Rows::Tau2(writer) => {
                    let messages: Vec<Message> =
                        transcript.messages.into_iter().filter(|m| m.role != Role::System).collect();
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

/// A message of an OpenAI chat fine-tuning row: content parts as Chat Completions parts, the
/// reasoning as `reasoning_content`, the field chat templates and trainers read, whichever field
/// the endpoint wrote it in (a dataset names it alike in every row), and a token-capturing
/// policy's token ids and log-probs.
const CHAT_ROW: ChatForm = ChatForm { reasoning: ReasoningField::Template, tokens: true };

/// An OpenAI chat fine-tuning row, written straight from the transcript.
#[derive(Serialize)]
struct ChatRow<'a> {
    messages: Vec<ChatMessage<'a>>,
    /// The task's tools in their Chat Completions form, as its list wrote them once.
    tools: &'a serde_json::value::RawValue,
}

fn write_line(w: &mut dyn Write, row: &impl Serialize) -> Result<(), ExportError> {
    parley_core::json::to_writer(&mut *w, row)?;
    w.write_all(b"\n")?;
    Ok(())
}
