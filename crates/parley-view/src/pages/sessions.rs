//! A run's sessions, a page at a time, filtered by status, termination, failure class, reward
//! range, task and trial. Pages are keyed by session id (`after`, `before`), so the thousandth
//! page of a large run costs what the first does.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::Uri;
use maud::{Markup, html};
use parley_core::{FailureClass, SessionStatus, Termination};
use parley_store::{PageAt, SessionFilter};

use crate::AppState;
use crate::error::PageError;
use crate::layout::{clipped, ms, reward, shell};
use crate::pages::{ending, query_string, session_link};
use crate::query::{self, Params};

const KNOWN: [&str; 10] =
    ["status", "termination", "failure", "reward_min", "reward_max", "task", "trial", "after", "before", "limit"];
const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 1000;

pub async fn page(State(state): State<Arc<AppState>>, Path(run): Path<String>, uri: Uri) -> Result<Markup, PageError> {
    let id = query::id(&run, "run")?;
    let params = Params::of(&uri, &KNOWN)?;
    let filter = SessionFilter {
        status: params.choice("status", &SessionStatus::ALL, SessionStatus::as_str)?,
        termination: params.choice("termination", &Termination::ALL, Termination::as_str)?,
        failure: params.choice("failure", &FailureClass::ALL, FailureClass::as_str)?,
        reward_min: params.number("reward_min")?,
        reward_max: params.number("reward_max")?,
        task: params.int("task")?,
        trial: params.int("trial")?,
    };
    let at = match (params.int("after")?, params.int("before")?) {
        (Some(_), Some(_)) => return Err(PageError::BadRequest("give `after` or `before`, not both".into())),
        (Some(after), None) => PageAt::After(after),
        (None, Some(before)) => PageAt::Before(before),
        (None, None) => PageAt::First,
    };
    let limit = params.int("limit")?.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(PageError::BadRequest(format!("limit `{limit}` is not between 1 and {MAX_LIMIT}")));
    }
    let store = &state.store;
    let record = store.run(id).await?;
    let rows = store.sessions_filtered(id, &filter, at, limit as usize).await?;
    let matching = store.sessions_matching(id, &filter).await?;

    // The filter as query pairs, for the pager's links.
    let mut kept: Vec<(&str, String)> = Vec::new();
    for name in ["status", "termination", "failure", "reward_min", "reward_max", "task", "trial"] {
        if let Some(v) = params.text(name) {
            kept.push((name, v.to_owned()));
        }
    }
    if limit != DEFAULT_LIMIT {
        kept.push(("limit", limit.to_string()));
    }
    let link = |extra: Option<(&'static str, i64)>| {
        let mut pairs = kept.clone();
        pairs.extend(extra.map(|(k, v)| (k, v.to_string())));
        format!("/runs/{id}/sessions{}", query_string(pairs))
    };
    let first = rows.first().map(|r| r.id);
    let last = rows.last().map(|r| r.id);
    // A page read backwards that came up short reached the start; any other page that is full
    // may have more after it.
    let at_start = at == PageAt::First || (matches!(at, PageAt::Before(_)) && rows.len() < limit as usize);
    let more = rows.len() == limit as usize || matches!(at, PageAt::Before(_));

    let body = html! {
        h1 { a href=(format!("/runs/{id}")) { "Run " (id) } " · sessions" }
        p.muted { (record.environment) " · " (matching) " sessions match" }
        form.filters method="get" action=(format!("/runs/{id}/sessions")) {
            label { "status" select name="status" {
                option value="" { "any" }
                @for s in SessionStatus::ALL { option value=(s.as_str()) selected[filter.status == Some(s)] { (s.as_str()) } }
            } }
            label { "termination" select name="termination" {
                option value="" { "any" }
                @for t in Termination::ALL { option value=(t.as_str()) selected[filter.termination == Some(t)] { (t.as_str()) } }
            } }
            label { "failure class" select name="failure" {
                option value="" { "any" }
                @for f in FailureClass::ALL { option value=(f.as_str()) selected[filter.failure == Some(f)] { (f.as_str()) } }
            } }
            label { "reward ≥" input type="number" step="any" name="reward_min" value=[filter.reward_min]; }
            label { "reward ≤" input type="number" step="any" name="reward_max" value=[filter.reward_max]; }
            label { "task" input type="number" name="task" value=[filter.task]; }
            label { "trial" input type="number" name="trial" value=[filter.trial]; }
            @if limit != DEFAULT_LIMIT { input type="hidden" name="limit" value=(limit); }
            button type="submit" { "Filter" }
            a href=(format!("/runs/{id}/sessions")) { "clear" }
        }
        (pager(at_start, more, first, last, &link))
        table #sessions {
            thead { tr {
                th.num { "Session" } th.num { "Task" } th.num { "Trial" } th { "Status" } th { "Ending" }
                th.num { "Reward" } th.num { "Duration" } th.num { "Retries" } th { "Error" }
            } }
            tbody {
                @for s in &rows {
                    tr {
                        td.num { (session_link(s.id)) }
                        td.num { a href=(link_task(id, s.task_index)) { (s.task_index) } }
                        td.num { (s.trial) }
                        td { (s.status.as_str()) }
                        td { (ending(s.termination, s.failure)) }
                        td.num { (reward(s.reward)) }
                        td.num { (ms(s.duration_ms)) }
                        td.num { (s.retries) }
                        td.error { @if let Some(e) = &s.error { (clipped(&e.chars().take(300).collect::<String>())) } }
                    }
                }
            }
        }
        @if rows.is_empty() { p.muted #empty { "No sessions on this page." } }
        (pager(at_start, more, first, last, &link))
    };
    Ok(shell(&format!("Run {id} · sessions"), None, body))
}

fn link_task(run: i64, task: i64) -> String {
    format!("/runs/{run}/sessions{}", query_string([("task", task.to_string())]))
}

fn pager(
    at_start: bool,
    more: bool,
    first: Option<i64>,
    last: Option<i64>,
    link: &dyn Fn(Option<(&'static str, i64)>) -> String,
) -> Markup {
    html! {
        div.pager {
            @if !at_start {
                a.first href=(link(None)) { "« first" }
                @if let Some(first) = first { a.prev href=(link(Some(("before", first)))) { "‹ previous" } }
            }
            @if more { @if let Some(last) = last { a.next href=(link(Some(("after", last)))) { "next ›" } } }
        }
    }
}
