//! A run's score versions (the scores recorded as its sessions finished, then one per
//! `parley rescore`, each with the reward it was scored with), and two of them compared: whose
//! reward moved, by how much and in which component, the largest changes first, each session
//! linked. The comparison is `parley_scoring::versions`, as `parley scores diff` prints it.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::Uri;
use maud::{Markup, html};
use parley_scoring::versions::Diff;
use parley_store::{ScoreVersion, describe_reward};

use crate::AppState;
use crate::error::PageError;
use crate::layout::shell;
use crate::pages::session_link;
use crate::query::{self, Params};

/// Changed sessions listed at most on the page.
const LISTED: usize = 200;

/// The versions of a run as the run's page lists them: the reward of each (the run's own for a
/// version that recorded none), its sessions and mean, and a link comparing it with the one before.
pub fn versions_table(run: i64, versions: &[ScoreVersion], own: &serde_json::Value) -> Markup {
    html! {
        table #score-versions {
            thead { tr { th { "version" } th { "created" } th.num { "sessions" } th.num { "mean" } th { "reward" } th {} } }
            tbody {
                @for (i, v) in versions.iter().enumerate() {
                    tr {
                        td { (v.version) }
                        td { (v.created_at) }
                        td.num { (v.sessions) }
                        td.num { (format!("{:.3}", v.mean)) }
                        td {
                            @match &v.reward {
                                Some(reward) => (describe_reward(reward)),
                                None => { (describe_reward(own)) span.muted { " (the run's)" } },
                            }
                        }
                        td {
                            @if i > 0 {
                                a href=(format!("/runs/{run}/scores?a={}&b={}", versions[i - 1].version, v.version)) {
                                    "what moved since " (versions[i - 1].version)
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub async fn page(State(state): State<Arc<AppState>>, Path(run): Path<String>, uri: Uri) -> Result<Markup, PageError> {
    let run = query::id(&run, "run")?;
    let params = Params::of(&uri, &["a", "b"])?;
    let store = &state.store;
    let record = store.run(run).await?;
    let versions = store.score_versions(run).await?;
    let own = record.config.get("reward").cloned().unwrap_or_default();
    let known: Vec<i64> = versions.iter().map(|v| v.version).collect();
    let (a, b) = match (params.int("a")?, params.int("b")?) {
        (Some(a), Some(b)) => (a, b),
        (None, None) if known.len() >= 2 => (known[known.len() - 2], known[known.len() - 1]),
        (None, None) => (0, 0),
        _ => return Err(PageError::BadRequest("compare two versions: /runs/RUN/scores?a=VERSION&b=VERSION".into())),
    };
    let diff = if a == 0 && b == 0 {
        None
    } else {
        for version in [a, b] {
            if !known.contains(&version) {
                return Err(PageError::NotFound(format!("score version {version} of run {run}")));
            }
        }
        Some(parley_store::compare_versions(store, run, a, b).await?)
    };
    let body = html! {
        h1 { "Scores of " a href=(format!("/runs/{run}")) { "run " (run) } }
        @if versions.is_empty() {
            p.muted { "No scores yet: the run's sessions have not finished." }
        } @else {
            (versions_table(run, &versions, &own))
        }
        @if let Some(diff) = &diff { (diff_section(diff)) }
        @else if versions.len() == 1 {
            p.muted { "One version: `parley rescore " (run) " --reward ...` tries another reward on these trajectories." }
        }
    };
    Ok(shell(&format!("Scores of run {run}"), None, body))
}

fn diff_section(d: &Diff) -> Markup {
    html! {
        h2 #diff { "Version " (d.before) " → " (d.after) }
        p #diff-summary {
            (d.changed.len()) " of " (d.compared) " sessions changed · mean reward "
            (format!("{:.3} → {:.3} ({:+.3})", d.mean_before, d.mean_after, d.mean_after - d.mean_before))
            @if d.only_before + d.only_after > 0 {
                span.muted { " · " (d.only_before + d.only_after) " sessions scored in one version only" }
            }
        }
        @if !d.by_component.is_empty() {
            table #by-component {
                thead { tr { th { "component" } th.num { "sessions moved" } th.num { "in all" } } }
                tbody {
                    @for c in &d.by_component {
                        tr { td { (c.name) } td.num { (c.sessions) } td.num { (format!("{:+.3}", c.total_delta)) } }
                    }
                }
            }
        }
        @if !d.changed.is_empty() {
            table #changed {
                thead { tr { th { "session" } th.num { "task" } th.num { "before" } th.num { "after" } th.num { "change" } th { "components" } } }
                tbody {
                    @for c in d.changed.iter().take(LISTED) {
                        tr {
                            td { (session_link(c.session)) }
                            td.num { (c.task_index) }
                            td.num { (format!("{:.3}", c.before)) }
                            td.num { (format!("{:.3}", c.after)) }
                            td.num { (format!("{:+.3}", c.delta())) }
                            td {
                                @for p in &c.components {
                                    span.badge { (p.name) " " (value(p.before)) " → " (value(p.after)) } " "
                                }
                            }
                        }
                    }
                }
            }
            @if d.changed.len() > LISTED {
                p.muted { (d.changed.len() - LISTED) " more; `parley scores diff " (d.run) " " (d.before) " " (d.after) " --json` lists them all." }
            }
        }
    }
}

fn value(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_owned(), |x| format!("{x:.3}"))
}
