//! What `GET /metrics` reports, in Prometheus' text format: sessions in flight and queued,
//! sessions finished by termination and failure class, requests refused, token contiguity
//! violations, and latency histograms of `/run`, of OpenEnv steps (by what the action held), of
//! model calls (by party) and of store commits.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the `/run` latency buckets, in seconds.
const RUN_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0];
/// Upper bounds of the model-call and commit buckets, in seconds: commits take milliseconds.
const CALL_BUCKETS: &[f64] = &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0];

/// Upper bounds of the OpenEnv step buckets, in seconds: a step the environment answers takes
/// a fraction of a millisecond of Parley's time, one the simulated user answers a model call.
const STEP_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
    60.0,
];

/// What an OpenEnv step's action held, which says who answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Tool calls: the environment answers (with the user after, if the action also wrote text).
    ToolCalls,
    /// Text alone: the simulated user answers.
    Text,
}

impl Action {
    pub(crate) fn of(message: &parley_core::Message) -> Action {
        if message.tool_calls.is_empty() { Action::Text } else { Action::ToolCalls }
    }
}

/// A Prometheus histogram: a count per bucket (cumulative), the sum and the count.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, took: Duration) {
        let secs = took.as_secs_f64();
        for (bound, count) in self.bounds.iter().zip(&self.buckets) {
            if secs <= *bound {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.sum_micros.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Writes the histogram's samples; `labels` go before `le` (`party="agent",`).
    fn render(&self, out: &mut String, name: &str, labels: &str) {
        for (bound, count) in self.bounds.iter().zip(&self.buckets) {
            let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{bound}\"}} {}", count.load(Ordering::Relaxed));
        }
        let count = self.count();
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"+Inf\"}} {count}");
        let braces = if labels.is_empty() { String::new() } else { format!("{{{}}}", labels.trim_end_matches(',')) };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count{braces} {count}");
    }
}

#[derive(Debug)]
pub struct Metrics {
    in_flight: AtomicI64,
    queued: AtomicI64,
    refused: AtomicU64,
    /// Sessions ended, by (termination, failure class).
    ended: Mutex<BTreeMap<(String, String), u64>>,
    /// Sessions whose token ids a trainer would refuse.
    discontiguous: AtomicU64,
    run: Histogram,
    /// OpenEnv steps, from the action read off the connection to the observation written.
    tool_steps: Histogram,
    text_steps: Histogram,
    /// Model calls of the agent (the policy) and of the simulated user.
    pub agent_calls: Histogram,
    pub user_calls: Histogram,
    /// Store commits of turns and of session ends.
    pub commits: Histogram,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            in_flight: AtomicI64::new(0),
            queued: AtomicI64::new(0),
            refused: AtomicU64::new(0),
            ended: Mutex::default(),
            discontiguous: AtomicU64::new(0),
            run: Histogram::new(RUN_BUCKETS),
            tool_steps: Histogram::new(STEP_BUCKETS),
            text_steps: Histogram::new(STEP_BUCKETS),
            agent_calls: Histogram::new(CALL_BUCKETS),
            user_calls: Histogram::new(CALL_BUCKETS),
            commits: Histogram::new(CALL_BUCKETS),
        }
    }
}

impl Metrics {
    pub(crate) fn queued(&self, change: i64) {
        self.queued.fetch_add(change, Ordering::Relaxed);
    }

    pub(crate) fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A session ended: counted by termination and failure class, and apart when its tokens
    /// were not contiguous.
    pub(crate) fn ended(&self, outcome: &parley_core::SessionOutcome) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        if outcome.token_contiguity.is_some() {
            self.discontiguous.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut ended) = self.ended.lock() {
            let failure = outcome.failure.map_or("", |c| c.as_str());
            *ended.entry((outcome.termination.as_str().to_owned(), failure.to_owned())).or_default() += 1;
        }
    }

    pub(crate) fn run_took(&self, took: Duration) {
        self.run.observe(took);
    }

    pub(crate) fn step_took(&self, action: Action, took: Duration) {
        match action {
            Action::ToolCalls => self.tool_steps.observe(took),
            Action::Text => self.text_steps.observe(took),
        }
    }

    /// Sessions ended so far.
    pub fn sessions_ended(&self) -> u64 {
        self.ended.lock().map(|e| e.values().sum()).unwrap_or(0)
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for family in FAMILIES {
            family.head(&mut out);
            self.samples(&mut out, family, "");
        }
        out
    }

    /// Writes this service's samples of `family`, each with `labels` first
    /// (`environment="math",`, or nothing).
    fn samples(&self, out: &mut String, family: &Family, labels: &str) {
        let load = |a: &AtomicI64| a.load(Ordering::Relaxed);
        let name = family.name;
        match family.which {
            Which::InFlight => sample(out, name, labels, load(&self.in_flight)),
            Which::Queued => sample(out, name, labels, load(&self.queued)),
            Which::Refused => sample(out, name, labels, self.refused.load(Ordering::Relaxed)),
            Which::Finished => {
                if let Ok(ended) = self.ended.lock() {
                    for ((termination, failure), n) in ended.iter() {
                        let labels = format!("{labels}termination=\"{termination}\",failure=\"{failure}\",");
                        sample(out, name, &labels, n);
                    }
                }
            }
            Which::Discontiguous => {
                sample(out, name, labels, self.discontiguous.load(Ordering::Relaxed));
            }
            Which::Run => self.run.render(out, name, labels),
            Which::Steps => {
                self.tool_steps.render(out, name, &format!("{labels}action=\"tool_calls\","));
                self.text_steps.render(out, name, &format!("{labels}action=\"text\","));
            }
            Which::ModelCalls => {
                self.agent_calls.render(out, name, &format!("{labels}party=\"agent\","));
                self.user_calls.render(out, name, &format!("{labels}party=\"user\","));
            }
            Which::Commits => self.commits.render(out, name, labels),
        }
    }
}

/// Which of the service's figures a family reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    InFlight,
    Queued,
    Refused,
    Finished,
    Discontiguous,
    Run,
    Steps,
    ModelCalls,
    Commits,
}

/// The families `/metrics` reports, in order: name, type and help.
struct Family {
    which: Which,
    name: &'static str,
    kind: &'static str,
    help: &'static str,
}

impl Family {
    fn head(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind);
    }
}

const FAMILIES: &[Family] = &[
    Family {
        which: Which::InFlight,
        name: "parley_sessions_in_flight",
        kind: "gauge",
        help: "Sessions being driven now.",
    },
    Family {
        which: Which::Queued,
        name: "parley_sessions_queued",
        kind: "gauge",
        help: "Requests waiting for a free slot.",
    },
    Family {
        which: Which::Refused,
        name: "parley_requests_refused_total",
        kind: "counter",
        help: "Requests answered 503: every slot and the queue full.",
    },
    Family {
        which: Which::Finished,
        name: "parley_sessions_finished_total",
        kind: "counter",
        help: "Sessions ended, by termination and failure class.",
    },
    Family {
        which: Which::Discontiguous,
        name: "parley_sessions_token_discontiguous_total",
        kind: "counter",
        help: "Sessions whose token ids are not one contiguous sequence (answered without the tokens from there on).",
    },
    Family {
        which: Which::Run,
        name: "parley_run_seconds",
        kind: "histogram",
        help: "Time from a /run request to its answer.",
    },
    Family {
        which: Which::Steps,
        name: "parley_openenv_step_seconds",
        kind: "histogram",
        help: "OpenEnv steps, from the action read off the connection to the observation written, by what the action held.",
    },
    Family {
        which: Which::ModelCalls,
        name: "parley_model_call_seconds",
        kind: "histogram",
        help: "Model calls, retries included, by party.",
    },
    Family {
        which: Which::Commits,
        name: "parley_store_commit_seconds",
        kind: "histogram",
        help: "Store commits of turns and session ends.",
    },
];

/// One sample line: `name value`, or `name{labels} value`.
fn sample(out: &mut String, name: &str, labels: &str, value: impl std::fmt::Display) {
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {value}");
    } else {
        let _ = writeln!(out, "{name}{{{}}} {value}", labels.trim_end_matches(','));
    }
}

/// The metrics of several environments in one text: each family once, each sample labelled
/// with its environment; `refused_unrouted`, requests the whole service refused before reading
/// them, under `environment=""`.
pub(crate) fn render_labelled(environments: &[(&str, &Metrics)], refused_unrouted: u64) -> String {
    let mut out = String::new();
    for family in FAMILIES {
        family.head(&mut out);
        for (name, metrics) in environments {
            metrics.samples(&mut out, family, &format!("environment=\"{name}\","));
        }
        if family.which == Which::Refused {
            sample(&mut out, family.name, "environment=\"\",", refused_unrouted);
        }
    }
    out
}
