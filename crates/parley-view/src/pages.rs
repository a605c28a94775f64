//! One module per page, and what several pages share: a run's facts from its stored settings,
//! links with filters, and how a message reads.

pub mod compare;
pub mod run;
pub mod runs;
pub mod scores;
pub mod session;
pub mod sessions;

use maud::{Markup, html};
use parley_core::{FailureClass, Message, Termination};
use parley_store::RunRecord;

/// The model the run's agent talked to, from its stored settings.
pub fn model_of(run: &RunRecord) -> &str {
    run.config.get("model").and_then(|m| m.as_str()).unwrap_or("–")
}

/// Trials per task, from the run's stored settings (1 when they do not say).
pub fn trials_of(run: &RunRecord) -> usize {
    run.config.get("trials").and_then(|t| t.as_u64()).unwrap_or(1).max(1) as usize
}

/// A message's text, the one place that knows how content is stored.
pub fn text(message: &Message) -> &str {
    message.content_str()
}

/// A query string from pairs, each value percent-encoded.
pub fn query_string<'a>(pairs: impl IntoIterator<Item = (&'a str, String)>) -> String {
    let encoded: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}={}", encode(&v))).collect();
    if encoded.is_empty() { String::new() } else { format!("?{}", encoded.join("&")) }
}

fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A session's link with its id.
pub fn session_link(id: i64) -> Markup {
    html! { a href=(format!("/sessions/{id}")) { "#" (id) } }
}

/// How a session ended: its termination, and the failure class when it failed.
pub fn ending(termination: Option<Termination>, failure: Option<FailureClass>) -> Markup {
    html! {
        @match termination {
            Some(t) => span { (t.as_str()) },
            None => span.muted { "unfinished" },
        }
        @if let Some(f) = failure {
            " " span.badge.error title="failure class" { (f.as_str()) }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn values_are_percent_encoded() {
        assert_eq!(super::query_string([("a", "x y&z=<".to_owned())]), "?a=x%20y%26z%3D%3C");
        assert_eq!(super::query_string([]), "");
    }
}
