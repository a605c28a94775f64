//! The list of runs: each with its environment, model, status, sessions, mean reward and, for a
//! run under way, its progress. The page reloads itself while any run is under way.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use maud::{Markup, html};
use parley_core::RunStatus;

use crate::AppState;
use crate::error::PageError;
use crate::layout::{reward, shell};
use crate::pages::model_of;

pub async fn page(State(state): State<Arc<AppState>>) -> Result<Markup, PageError> {
    let runs = state.store.runs().await?;
    let counts: HashMap<i64, _> = state.store.run_counts().await?.into_iter().map(|c| (c.run, c)).collect();
    let running = runs
        .iter()
        .any(|r| r.status == RunStatus::Running && counts.get(&r.id).is_some_and(|c| c.finished < c.sessions));
    let body = html! {
        h1 { "Runs" }
        @if runs.is_empty() {
            p.muted { "This database holds no runs yet: start one with " code { "parley run" } "." }
        } @else {
            table #runs {
                thead { tr {
                    th.num { "Run" } th { "Created" } th { "Environment" } th { "Model" } th { "Status" }
                    th.num { "Sessions" } th { "Finished" } th.num { "Failed" } th.num { "Mean reward" }
                } }
                tbody {
                    @for run in runs.iter().rev() {
                        @let c = counts.get(&run.id);
                        @let sessions = c.map_or(0, |c| c.sessions);
                        @let finished = c.map_or(0, |c| c.finished);
                        tr {
                            td.num { a href=(format!("/runs/{}", run.id)) { (run.id) } }
                            td { (run.created_at) }
                            td { (run.environment) }
                            td { (model_of(run)) }
                            td { (run.status.as_str()) }
                            td.num { a href=(format!("/runs/{}/sessions", run.id)) { (sessions) } }
                            td {
                                (finished) " / " (sessions)
                                @if finished < sessions {
                                    " " progress max=(sessions) value=(finished) {}
                                }
                            }
                            td.num { (c.map_or(0, |c| c.failed)) }
                            td.num { (reward(c.and_then(|c| c.mean_reward))) }
                        }
                    }
                }
            }
        }
    };
    Ok(shell("Runs", running.then_some(3), body))
}
