//! One session: its transcript by role with tool calls, their arguments and results (errors
//! and truncation marked), user turns, tokens and latency per model call, the reward with every
//! component, and for tau2 sessions what changed in the database and how it compares with the
//! gold database as far as the score records it.

use std::sync::Arc;

use axum::extract::{Path, State};
use maud::{Markup, html};
use parley_core::{Message, Role, ToolCallRecord};
use parley_store::{CallFigures, Transcript};
use serde_json::Value;

use crate::AppState;
use crate::error::PageError;
use crate::layout::{clipped, json_text, ms, reward, shell};
use crate::pages::{ending, query_string, session_link, text};
use crate::query;

pub async fn page(State(state): State<Arc<AppState>>, Path(session): Path<String>) -> Result<Markup, PageError> {
    let id = query::id(&session, "session")?;
    let store = &state.store;
    let info = store.session_info(id).await?;
    let record = store.run(info.run).await?;
    let transcript = store.transcript(id).await?;
    let score = store.latest_score(id).await?;
    let task_id = store.task_id(info.run, info.row.task_index).await?;
    let related = store.related_sessions(id).await?;
    let row = &info.row;
    let run = info.run;

    let body = html! {
        h1 { "Session " (id) }
        dl.facts #facts {
            dt { "Run" } dd { a href=(format!("/runs/{run}")) { "Run " (run) } " · " (record.environment) }
            dt { "Task" } dd {
                a href=(format!("/runs/{run}/sessions{}", query_string([("task", row.task_index.to_string())]))) {
                    "task " (row.task_index)
                }
                @if let Some(task) = &task_id { " · id " code { (task) } }
                " · trial " (row.trial) " · seed " (row.seed)
            }
            dt { "Status" } dd { (row.status.as_str()) }
            dt { "Ending" } dd #ending { (ending(row.termination, row.failure)) }
            dt { "Reward" } dd #reward-value { (reward(score.as_ref().map(|s| s.value).or(row.reward))) }
            dt { "Duration" } dd { (ms(row.duration_ms)) @if row.retries > 0 { " · " (row.retries) " model-call retries" } }
            @if let Some(error) = &row.error { dt { "Error" } dd.error { pre { (clipped(error)) } } }
            @if !row.user_faults.is_empty() {
                dt { "User faults" } dd #user-faults {
                    "the simulated user failed its part (left out of the run's rewards):"
                    ul {
                        @for fault in &row.user_faults {
                            li { "message " (fault.seq) " · " code { (fault.rule.as_str()) } " · " (fault.detail) }
                        }
                    }
                }
            }
            @if let Some(source) = info.forked_from {
                dt { "Forked from" } dd {
                    (session_link(source)) " at message " (info.fork_at.unwrap_or(0)) " · "
                    a.compare href=(compare_link(source, id)) { "compare with its source" }
                }
            }
            @if !related.is_empty() {
                dt { "Compare with" } dd #related {
                    @for (other, trial, fork) in &related {
                        a.compare href=(compare_link(id, *other)) {
                            "#" (other) @if *fork { " (its fork)" } @else { " (trial " (trial) ")" }
                        }
                        " "
                    }
                }
            }
        }

        h2 { "Transcript" span.muted { " · " (transcript.messages.len()) " messages" } }
        div #transcript {
            @for (seq, m) in transcript.messages.iter().enumerate() {
                (message(seq, m, &transcript))
            }
        }

        h2 { "Model calls" }
        (calls(&transcript))

        h2 { "Reward" }
        @match &score {
            Some(score) => {
                p { "Reward " strong #reward { (format!("{}", score.value)) } " (newest score by the environment)" }
                (components(&score.breakdown))
                @if record.environment.starts_with("tau2") || score.breakdown.contains_key("db_check") {
                    (tau2(&score.breakdown, &transcript.tool_calls))
                }
            },
            None => p.muted { "Not scored." },
        }
    };
    Ok(shell(&format!("Session {id}"), None, body))
}

pub fn compare_link(a: i64, b: i64) -> String {
    format!("/compare{}", query_string([("a", a.to_string()), ("b", b.to_string())]))
}

fn role_class(role: Role) -> &'static str {
    role.as_str()
}

/// The model call that produced message `seq`, if one did.
fn figures(transcript: &Transcript, seq: usize) -> Option<&CallFigures> {
    transcript.calls.iter().find(|c| c.seq as usize == seq)
}

/// The tool call whose result is message `seq`, if it is one.
fn tool_record(transcript: &Transcript, seq: usize) -> Option<&ToolCallRecord> {
    transcript.tool_calls.iter().find(|t| t.seq as usize == seq)
}

/// One message: its role, who produced it and at what cost, its text, the tool calls it makes
/// and, for a tool result, how the call went.
pub fn message(seq: usize, m: &Message, transcript: &Transcript) -> Markup {
    let call = figures(transcript, seq);
    let tool = tool_record(transcript, seq);
    html! {
        div class=(format!("msg {}", role_class(m.role))) id=(format!("m{seq}")) {
            header {
                span.role { (m.role.as_str()) }
                span { "#" (seq) }
                @if let Some(c) = call {
                    span.figures {
                        (c.usage.prompt_tokens) " + " (c.usage.completion_tokens) " tokens · " (ms(Some(c.latency_ms)))
                        @if c.attempts > 1 { " · " (c.attempts) " attempts" }
                    }
                }
                @if let Some(t) = tool {
                    span { code { (t.name) } @if t.party.as_str() == "user" { " (the user's tool)" } " · " (format!("{:.1} ms", t.duration.as_secs_f64() * 1000.0)) }
                    @if t.malformed { span.badge.error { "malformed call" } }
                    @else if t.is_error { span.badge.error { "tool error" } }
                    @if t.truncated { span.badge.trunc { "output truncated" } }
                    @if t.write { span.badge.write { "write" } }
                }
            }
            @if !text(m).is_empty() { pre.content { (clipped(text(m))) } }
            @for c in &m.tool_calls {
                div.call {
                    "→ " strong.tool-name { (c.name) } span.muted { " " (c.id) }
                    pre.arguments { (clipped(&json_text(&c.arguments))) }
                }
            }
        }
    }
}

fn calls(transcript: &Transcript) -> Markup {
    html! {
        @if transcript.calls.is_empty() {
            p.muted { "No model calls recorded." }
        } @else {
            table #calls {
                thead { tr { th.num { "Message" } th { "Party" } th.num { "Prompt" } th.num { "Completion" } th.num { "Latency" } th.num { "Attempts" } } }
                tbody {
                    @for c in &transcript.calls {
                        @let role = transcript.messages.get(c.seq as usize).map_or("–", |m| m.role.as_str());
                        tr {
                            td.num { a href=(format!("#m{}", c.seq)) { (c.seq) } }
                            td { (if role == "user" { "user" } else { "agent" }) }
                            td.num { (c.usage.prompt_tokens) }
                            td.num { (c.usage.completion_tokens) }
                            td.num { (ms(Some(c.latency_ms))) }
                            td.num { (c.attempts) }
                        }
                    }
                }
            }
        }
    }
}

/// Every component of the score: numbers as they are, anything else as indented JSON.
fn components(breakdown: &serde_json::Map<String, Value>) -> Markup {
    html! {
        table #components {
            thead { tr { th { "Component" } th { "Value" } } }
            tbody {
                @for (key, value) in breakdown {
                    tr {
                        td { code { (key) } }
                        td {
                            @match value {
                                Value::Object(_) | Value::Array(_) => pre { (clipped(&serde_json::to_string_pretty(value).unwrap_or_default())) },
                                Value::String(s) => (clipped(s)),
                                other => (other.to_string()),
                            }
                        }
                    }
                }
            }
        }
    }
}

/// What a tau2 score says about the database. The score keeps whether the final database
/// matched the gold one (`db_check`) and which gold actions the trajectory carried out
/// (`action_checks`), not the databases themselves; the change from the initial database is
/// the session's successful write calls, in order, as the environment applied them.
fn tau2(breakdown: &serde_json::Map<String, Value>, tools: &[ToolCallRecord]) -> Markup {
    let writes: Vec<&ToolCallRecord> = tools.iter().filter(|t| t.write && !t.is_error).collect();
    let db_match = breakdown.get("db_check").and_then(|c| c.get("db_match")).and_then(Value::as_bool);
    let actions: Vec<&Value> = breakdown.get("action_checks").and_then(Value::as_array).into_iter().flatten().collect();
    let missed: Vec<&&Value> = actions.iter().filter(|a| a.get("action_match") == Some(&Value::Bool(false))).collect();
    html! {
        h2 { "Database" }
        h3 { "Initial → final: the writes that changed it" }
        @if writes.is_empty() {
            p #db-writes.muted { "No write succeeded: the final database is the initial one." }
        } @else {
            table #db-writes {
                thead { tr { th.num { "Message" } th { "Write" } th { "Arguments" } th { "Result" } } }
                tbody {
                    @for w in &writes {
                        tr {
                            td.num { a href=(format!("#m{}", w.seq)) { (w.seq) } }
                            td { code { (w.name) } }
                            td { pre { (clipped(&json_text(&w.arguments))) } }
                            td { pre { (clipped(&json_text(&w.output))) } }
                        }
                    }
                }
            }
        }
        h3 { "Final → gold" }
        p #db-gold {
            @match db_match {
                Some(true) => "The final database equals the gold database.",
                Some(false) => span.bad { "The final database differs from the gold database." },
                None => span.muted { "No database comparison was recorded (the task does not check it, or the gold replay was incomplete)." },
            }
        }
        @if !missed.is_empty() {
            p { "Gold actions the session did not carry out:" }
            table #gold-missed {
                thead { tr { th { "Action" } th { "Arguments" } } }
                tbody {
                    @for a in &missed {
                        tr {
                            td { code { (a.pointer("/action/name").and_then(Value::as_str).unwrap_or("?")) } }
                            td { pre { (serde_json::to_string_pretty(a.pointer("/action/arguments").unwrap_or(&Value::Null)).unwrap_or_default()) } }
                        }
                    }
                }
            }
        }
        @if let Some(diff) = breakdown.get("db_diff").filter(|d| !d.is_null()) {
            (db_diff("Initial → final, field by field", "db-diff-initial", &diff["initial_to_final"]))
            @if !diff["final_to_gold"].is_null() {
                (db_diff("Final → gold, field by field", "db-diff-gold", &diff["final_to_gold"]))
            }
        } @else {
            p.muted { "This score keeps no field-by-field difference of the databases (it was scored by an older Parley)." }
        }
    }
}

/// One recorded database difference (`db` and `user_db`): each changed field by its path, with
/// its value before and after.
fn db_diff(title: &str, id: &str, diff: &Value) -> Markup {
    html! {
        h3 { (title) }
        table id=(id) {
            thead { tr { th { "Database" } th { "Field" } th { "Before" } th { "After" } } }
            tbody {
                @for which in ["db", "user_db"] {
                    @for change in diff[which]["changes"].as_array().into_iter().flatten() {
                        tr {
                            td { (which) }
                            td { code { (change["path"].as_str().unwrap_or("?")) } }
                            td { pre { (clipped(&json_text(&change["before"].to_string()))) } }
                            td { pre { (clipped(&json_text(&change["after"].to_string()))) } }
                        }
                    }
                }
            }
        }
        @for which in ["db", "user_db"] {
            @if diff[which]["cut"].as_bool() == Some(true) {
                p.muted { (format!("{which}: {} fields differ; the first {} are shown.", diff[which]["total"], diff[which]["changes"].as_array().map_or(0, Vec::len))) }
            }
        }
    }
}
