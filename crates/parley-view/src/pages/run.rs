//! One run: its summary (terminations, failure classes, reward with its 95% interval, pass@k
//! and pass^k, tokens, latency) and plots of the reward distribution, pass^k against k,
//! success per task and model-call latency. The figures are parley-scoring's, over the
//! sessions read a page at a time, as `parley metrics` computes them. `?with=2,3` shows the
//! figures of this run and those together (a service's environments, each its own run), as
//! `parley metrics 1 2 3` does.

use std::sync::Arc;

use axum::extract::{Path, State};
use maud::{Markup, html};
use parley_core::RunStatus;
use parley_scoring::percentile;

use crate::AppState;
use crate::error::PageError;
use crate::figures::RunFigures;
use crate::layout::{fraction, ms, reward, shell};
use crate::pages::{model_of, query_string, trials_of};
use crate::plot::{Bar, Series, bar_chart, histogram, line_chart};
use crate::query;

/// Per-task bars are drawn one per task up to this many tasks; beyond, the plot is a histogram
/// of the tasks' success rates.
const TASK_BARS: usize = 60;

pub async fn page(
    State(state): State<Arc<AppState>>,
    Path(run): Path<String>,
    uri: axum::http::Uri,
) -> Result<Markup, PageError> {
    let id = query::id(&run, "run")?;
    let params = query::Params::of(&uri, &["with"])?;
    let with: Vec<i64> = match params.text("with") {
        Some(list) => list.split(',').map(|r| query::id(r.trim(), "run")).collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let store = &state.store;
    let record = store.run(id).await?;
    let (mut trials, mut running) = (trials_of(&record), record.status == RunStatus::Running);
    for &other in &with {
        let other = store.run(other).await?;
        trials = trials.max(trials_of(&other));
        running |= other.status == RunStatus::Running;
    }
    let runs: Vec<i64> = std::iter::once(id).chain(with.iter().copied()).collect();
    let figures = state.figures.get(store, &runs, trials, running).await?;
    let RunFigures {
        summary,
        failures,
        tasks,
        rewards,
        total,
        unfinished,
        retries,
        tokens,
        latencies,
        user_latencies,
        at,
    } = &*figures;
    let (total, unfinished, retries) = (*total, *unfinished, *retries);
    let (lo, hi) = rewards.iter().fold((0.0f64, 1.0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    let reward_bars = histogram(rewards, 10, lo, hi, "");
    let pass_hat: Vec<(f64, f64)> = summary.pass.iter().filter_map(|(k, _, hat)| Some((*k as f64, (*hat)?))).collect();
    let pass_at: Vec<(f64, f64)> = summary.pass.iter().filter_map(|(k, at, _)| Some((*k as f64, (*at)?))).collect();
    let task_bars: Vec<Bar> = if tasks.len() <= TASK_BARS {
        tasks
            .iter()
            .map(|(task, (n, c))| Bar {
                label: task.to_string(),
                value: *c as f64 / (*n).max(1) as f64,
                title: format!("task {task}: {c} of {n} trials succeeded"),
            })
            .collect()
    } else {
        let rates: Vec<f64> = tasks.values().map(|(n, c)| *c as f64 / (*n).max(1) as f64).collect();
        histogram(&rates, 10, 0.0, 1.0, " success")
    };
    let latency_top = percentile(latencies, 0.99).unwrap_or(1.0).max(1e-3);
    let latency_bars = histogram(latencies, 20, 0.0, latency_top, " ms");
    let versions = store.score_versions(id).await?;
    let own_reward = record.config.get("reward").cloned().unwrap_or_default();
    let running = running && unfinished > 0;
    let sessions = format!("/runs/{id}/sessions");
    let finished = total - unfinished;

    let body = html! {
        h1 { "Run " (id) }
        @if !with.is_empty() {
            p #together {
                "The figures below are of run " (id) " together with "
                @for (i, other) in with.iter().enumerate() {
                    @if i > 0 { ", " }
                    a href=(format!("/runs/{other}")) { "run " (other) }
                }
                ", each run's tasks its own (" (runs.len()) " runs, " (total) " sessions). "
                a href=(format!("/runs/{id}")) { "Run " (id) " alone" }
            }
        }
        dl.facts {
            dt { "Environment" } dd { (record.environment) }
            dt { "Model" } dd { (model_of(&record)) }
            dt { "Status" } dd #status { (record.status.as_str()) }
            dt { "Created" } dd { (record.created_at) }
            @if let Some(at) = &record.finished_at { dt { "Finished" } dd { (at) } }
            dt { "Sessions" } dd #progress {
                a href=(sessions) { (total) } " · " (finished) " finished"
                @if unfinished > 0 { " · " (unfinished) " to go " progress max=(total) value=(finished) {} }
            }
            dt { "Trials per task" } dd { (trials) }
            @if at.elapsed().as_secs() >= 5 { dt { "Figures" } dd.muted { "as of " (at.elapsed().as_secs()) " s ago (this run is large; they are read again as it goes on)" } }
        }

        h2 { "Summary" }
        dl.facts #summary {
            dt { "Terminations" }
            dd {
                @for (t, n) in &summary.terminations {
                    a href=(format!("{sessions}{}", query_string([("termination", t.clone())]))) { (t) } " " (n) " · "
                }
            }
            dt { "Failure classes" }
            dd {
                @if failures.is_empty() { span.muted { "none" } }
                @for (f, n) in failures {
                    a href=(format!("{sessions}{}", query_string([("failure", f.clone())]))) { (f) } " " (n) " · "
                }
                @if retries > 0 { span.muted { "(" (retries) " model-call retries)" } }
            }
            dt { "Reward" }
            dd #reward {
                @match summary.reward {
                    Some(m) => { (format!("{:.3} ± {:.3}", m.mean, m.ci95)) span.muted { " (95% interval, n = " (m.n) ")" } },
                    None => span.muted { "no scored sessions" },
                }
            }
            @if let Some(share) = summary.groups.alike_share() {
                dt { "Prompt groups" }
                dd #groups {
                    (summary.groups.alike) " of " (summary.groups.groups) " tasks with 2+ rollouts scored all alike"
                    span.muted { " (" (format!("{:.1}", share * 100.0)) "%: they teach GRPO nothing)" }
                }
            }
            dt { "Tokens (agent)" }
            dd { "prompt " (tokens.agent.prompt_tokens) " · completion " (tokens.agent.completion_tokens) " · " (tokens.agent.model_calls) " model calls" }
            @if tokens.user.model_calls > 0 {
                dt { "Tokens (user)" }
                dd { "prompt " (tokens.user.prompt_tokens) " · completion " (tokens.user.completion_tokens) " · " (tokens.user.model_calls) " model calls" }
            }
            dt { "Latency" }
            dd {
                "model call p50 " (ms(percentile(latencies, 0.5))) " p99 " (ms(percentile(latencies, 0.99)))
                " · session p50 " (ms(summary.session_ms_p50)) " p99 " (ms(summary.session_ms_p99))
                @if !user_latencies.is_empty() {
                    " · user call p50 " (ms(percentile(user_latencies, 0.5))) " p99 " (ms(percentile(user_latencies, 0.99)))
                }
            }
        }
        table #pass {
            thead { tr { th { "k" } th.num { "pass@k" } th.num { "pass^k" } } }
            tbody {
                @for (k, at, hat) in &summary.pass {
                    tr { td { (k) } td.num { (fraction(*at)) } td.num { (fraction(*hat)) } }
                }
            }
        }

        @if versions.len() > 1 && with.is_empty() {
            h2 { "Score versions" }
            (crate::pages::scores::versions_table(id, &versions, &own_reward))
            p { a href=(format!("/runs/{id}/scores")) { "What the latest rescore moved" } }
        }

        h2 { "Plots" }
        div.plots {
            figure #plot-reward {
                figcaption { "Reward distribution" }
                (bar_chart(&reward_bars, None, "reward"))
            }
            figure #plot-pass {
                figcaption { "pass^k and pass@k against k" }
                (line_chart(&[
                    Series { name: "pass^k", class: "line", points: pass_hat },
                    Series { name: "pass@k", class: "line2", points: pass_at },
                ], trials as f64, "k"))
            }
            figure #plot-tasks {
                @if tasks.len() <= TASK_BARS {
                    figcaption { "Success per task (share of trials with reward 1)" }
                    (bar_chart(&task_bars, Some(1.0), "task"))
                } @else {
                    figcaption { "Tasks by success rate (" (tasks.len()) " tasks)" }
                    (bar_chart(&task_bars, None, "share of trials with reward 1"))
                }
            }
            figure #plot-latency {
                figcaption { "Model-call latency (agent, up to p99 " (ms(Some(latency_top))) ")" }
                (bar_chart(&latency_bars, None, "milliseconds"))
            }
        }
        p { a href=(sessions) { "All sessions of run " (id) } " · mean reward " (reward(summary.reward.map(|m| m.mean))) }
    };
    Ok(shell(&format!("Run {id}"), running.then_some(3), body))
}
