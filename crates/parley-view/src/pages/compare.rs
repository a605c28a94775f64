//! Two sessions side by side (a fork beside its source, two trials of one task), aligned by
//! message number, with the first message where they differ marked.

use std::sync::Arc;

use axum::extract::State;
use axum::http::Uri;
use maud::{Markup, html};
use parley_core::Message;
use parley_store::Transcript;

use crate::AppState;
use crate::error::PageError;
use crate::layout::{reward, shell};
use crate::pages::session::message;
use crate::pages::{ending, session_link, text};
use crate::query::Params;

/// Whether two messages say the same: role, text and tool calls (name and arguments; call ids
/// are drawn afresh by every model and say nothing about the conversation).
fn same(a: &Message, b: &Message) -> bool {
    a.role == b.role
        && text(a) == text(b)
        && a.tool_calls.len() == b.tool_calls.len()
        && a.tool_calls.iter().zip(&b.tool_calls).all(|(x, y)| x.name == y.name && x.arguments == y.arguments)
}

/// The first message number where the transcripts differ, or where one ends before the other;
/// None when they are the same throughout.
pub fn divergence(a: &[Message], b: &[Message]) -> Option<usize> {
    let common = a.iter().zip(b).position(|(x, y)| !same(x, y));
    common.or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))
}

pub async fn page(State(state): State<Arc<AppState>>, uri: Uri) -> Result<Markup, PageError> {
    let params = Params::of(&uri, &["a", "b"])?;
    let (Some(a), Some(b)) = (params.int("a")?, params.int("b")?) else {
        return Err(PageError::BadRequest("compare takes two sessions: /compare?a=ID&b=ID".into()));
    };
    let store = &state.store;
    let (left, right) = (store.session_info(a).await?, store.session_info(b).await?);
    let (lt, rt): (Transcript, Transcript) = (store.transcript(a).await?, store.transcript(b).await?);
    let first = divergence(&lt.messages, &rt.messages);
    let rows = lt.messages.len().max(rt.messages.len());
    let relation = if left.forked_from == Some(b) || right.forked_from == Some(a) {
        "a fork beside its source"
    } else if left.run == right.run && left.row.task_index == right.row.task_index {
        "two trials of one task"
    } else {
        "two sessions"
    };
    let body = html! {
        h1 { "Compare " (session_link(a)) " and " (session_link(b)) }
        p { (relation) " · "
            @match first {
                Some(i) => { "they first differ at " a href=(format!("#row{i}")) { "message " (i) } },
                None => "their transcripts are the same",
            }
        }
        div.sbs {
            div {}
            @for info in [&left, &right] {
                div.side {
                    strong { (session_link(info.row.id)) } " · run " (info.run) " · task " (info.row.task_index) " · trial " (info.row.trial)
                    " · " (ending(info.row.termination, info.row.failure)) " · reward " (reward(info.row.reward))
                    @if let (Some(source), Some(at)) = (info.forked_from, info.fork_at) { " · forked from #" (source) " at " (at) }
                }
            }
            @for i in 0..rows {
                @let class = match first { Some(f) if f == i => "diverged", Some(f) if i < f => "same", None => "same", _ => "after" };
                div.seq id=(format!("row{i}")) { (i) }
                @for t in [&lt, &rt] {
                    div class=(class) {
                        @match t.messages.get(i) {
                            Some(m) => (message(i, m, t)),
                            None => div.empty { "(no message)" },
                        }
                    }
                }
            }
        }
    };
    Ok(shell(&format!("Compare {a} and {b}"), None, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divergence_is_the_first_difference_or_the_shorter_end() {
        let a = vec![Message::user("hi"), Message::assistant("one")];
        let b = vec![Message::user("hi"), Message::assistant("two")];
        assert_eq!(divergence(&a, &b), Some(1));
        assert_eq!(divergence(&a, &a), None);
        assert_eq!(divergence(&a, &a[..1]), Some(1));
        assert_eq!(divergence(&[], &a), Some(0));
    }
}
