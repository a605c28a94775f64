//! Replay: drive a recorded session's tool calls again against a fresh environment, with the
//! recorded agent turns, and report where the environment's answers drifted from the record.

use parley_core::{Environment, Message, Reward, Task, Termination, ToolCallRecord};
use serde_json::Value;

/// One tool output that differs from the recording.
#[derive(Debug, Clone, PartialEq)]
pub struct Drift {
    pub seq: u32,
    pub name: String,
    pub recorded: String,
    pub replayed: String,
}

/// What a replay found.
#[derive(Debug, Clone)]
pub struct ReplayReport {
    pub drift: Vec<Drift>,
    /// The score of the recorded transcript against the replayed environment.
    pub reward: Result<Reward, String>,
}

/// Replays `tool_calls` (as recorded beside `transcript`) against a fresh session of
/// `environment`. Calls that never reached the environment (malformed) are skipped: they have no
/// environment output to compare.
pub async fn replay(
    environment: &dyn Environment,
    task: &Task,
    transcript: &[Message],
    tool_calls: &[ToolCallRecord],
    termination: Termination,
) -> Result<ReplayReport, String> {
    let mut env = environment.open(task).await.map_err(|e| format!("opening the environment: {e}"))?;
    let mut drift = Vec::new();
    for call in tool_calls.iter().filter(|c| !c.malformed) {
        let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
        let replayed = match env.call(call.party, &call.name, &arguments).await {
            Ok(output) => output.content,
            Err(e) => format!("environment error: {e}"),
        };
        if replayed != call.output {
            drift.push(Drift { seq: call.seq, name: call.name.clone(), recorded: call.output.clone(), replayed });
        }
    }
    let reward = env.score(transcript, termination).await.map_err(|e| e.to_string());
    env.close().await;
    Ok(ReplayReport { drift, reward })
}
