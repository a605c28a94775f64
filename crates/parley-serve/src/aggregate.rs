//! `POST /aggregate_metrics`, answered as NeMo Gym 0.7.0's `simple_agent` answers it.
//!
//! Gym's `simple_agent` passes the call on to its resources server, whose answer is
//! `nemo_gym.reward_profile.compute_aggregate_metrics` with the `AggregateMetricsMixin` hooks
//! (no benchmark metrics of its own; the key metrics are the `mean/` ones). That function runs
//! pandas over the rows; this module computes the same answer, key for key, in one pass that
//! keeps only each rollout's numbers, so rows can be fed as they are read. What it mirrors:
//!
//! - A row is a rollout keyed by `_ng_task_index` and `_ng_rollout_index` (each 0 when
//!   absent). A key sent twice is refused (Gym raises on it).
//! - A row whose `mask_sample` is true (in Python's sense) is left out of every quality figure
//!   and counted under `coverage/*`, which appear only when something was masked.
//! - A rollout's metrics are its top-level numbers and booleans (as 0 and 1), fields starting
//!   with `_` excepted, and the numbers of its `response.usage`, which win over a top-level
//!   field of the same name. Nested objects, strings and nulls are not metrics.
//! - Per task (`group_level_metrics`) and over all rollouts (`agent_metrics`): the `mean`,
//!   `max`, `min`, `median` and sample `std` (n - 1) of each metric, over the rollouts that
//!   have it; a std over one value is absent, except in a group of one rollout, where it is 0.
//!   Each task also lists its rollouts (`rollout_infos`).
//! - With more than one repeat, per repeat (`repeat_level_metrics`): mean, median, std, sem,
//!   min, max, p25, p75 and a 95% Student-t interval of each metric over the repeat's tasks;
//!   and in `agent_metrics`, the same figures of each repeat's means across repeats
//!   (`*_across_repeats/mean/...`).
//! - `perf_summary` from the rows' `ng_perf` objects, null when none has one.
//!
//! A service hosting several environments (`host`) answers the same over all the rows, and
//! beside it, under `environments`, the same answer over each environment's rows (by the
//! environment that played each, `_parley_environment`, or the one the row names); each
//! environment's `agent_metrics` and `key_metrics` are also in the whole's, prefixed
//! `env/NAME/`, where Gym's answer model (which drops fields it does not know) keeps them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::{Host, problem};

const TASK: &str = "_ng_task_index";
const REPEAT: &str = "_ng_rollout_index";

/// `POST /aggregate_metrics`: the body is `{"verify_responses": [row, ...]}` (other fields
/// are ignored, as Gym's request model ignores them).
pub(crate) async fn aggregate_metrics(State(host): State<Arc<Host>>, body: Bytes) -> Response {
    let rows = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(mut map)) => match map.remove("verify_responses") {
            Some(Value::Array(rows)) => rows,
            _ => {
                return problem(
                    StatusCode::BAD_REQUEST,
                    "the body needs `verify_responses`, a list of verify responses",
                );
            }
        },
        Ok(_) => return problem(StatusCode::BAD_REQUEST, "the body must be an object with `verify_responses`"),
        Err(e) => return problem(StatusCode::BAD_REQUEST, format!("the body is not JSON: {e}")),
    };
    let mut by_environment: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    if host.hosted().len() > 1 {
        for row in &rows {
            match host.route(row) {
                Ok(service) => by_environment.entry(service.name().to_owned()).or_default().push(row.clone()),
                Err(why) => return problem(StatusCode::BAD_REQUEST, why),
            }
        }
    }
    let mut answer = match aggregate(rows) {
        Ok(answer) => answer,
        Err(refused) => return problem(StatusCode::BAD_REQUEST, refused.to_string()),
    };
    if !by_environment.is_empty() {
        let mut each = Map::new();
        for (name, rows) in by_environment {
            let figures = match aggregate(rows) {
                Ok(figures) => figures,
                Err(refused) => return problem(StatusCode::BAD_REQUEST, format!("in `{name}`: {refused}")),
            };
            // Gym's own answer model keeps only its fields, and logs their flat keys: each
            // environment's figures go there too, under `env/NAME/`.
            for field in ["agent_metrics", "key_metrics"] {
                if let (Some(Value::Object(own)), Some(Value::Object(all))) =
                    (figures.get(field), answer.get_mut(field))
                {
                    all.extend(own.iter().map(|(k, v)| (format!("env/{name}/{k}"), v.clone())));
                }
            }
            each.insert(name, figures);
        }
        answer["environments"] = Value::Object(each);
    }
    axum::Json(answer).into_response()
}

/// The aggregate of `rows`, verify responses.
fn aggregate(rows: Vec<Value>) -> Result<Value, Refused> {
    let mut aggregate = Aggregate::default();
    for row in rows {
        aggregate.push(row)?;
    }
    aggregate.finish()
}

/// Why a batch of verify responses has no aggregate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Refused {
    /// The row (by position) is not a JSON object.
    NotAnObject(usize),
    /// The row's task or rollout index is not an integer.
    Index { row: usize, field: &'static str, value: Value },
    /// Two rows name the same rollout, or a scored row shares its key with a masked one.
    Duplicate { task: i64, repeat: i64 },
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::NotAnObject(row) => write!(f, "verify response {row} is not a JSON object"),
            Refused::Index { row, field, value } => {
                write!(f, "verify response {row}: `{field}` must be an integer, not {value}")
            }
            Refused::Duplicate { task, repeat } => write!(
                f,
                "two verify responses are rollout {repeat} of task {task} (`{TASK}`, `{REPEAT}`): \
                 each rollout is sent once"
            ),
        }
    }
}

/// The aggregate being built: fed one verify response at a time, answered at the end.
#[derive(Default)]
pub(crate) struct Aggregate {
    /// Rows seen, masked or not.
    rows: usize,
    /// Task and rollout indices of every row, masked or not.
    tasks: BTreeSet<i64>,
    repeats: BTreeSet<i64>,
    /// Whether a scored row holds the key, for every key seen.
    keys: HashMap<(i64, i64), bool>,
    duplicate: Option<(i64, i64)>,
    scored: Vec<Rollout>,
    perf: Vec<Map<String, Value>>,
}

/// One scored rollout: its key, its metrics, and how Gym lists it under its task.
struct Rollout {
    task: i64,
    repeat: i64,
    metrics: BTreeMap<String, f64>,
    info: Map<String, Value>,
}

impl Aggregate {
    /// Takes one verify response.
    pub(crate) fn push(&mut self, row: Value) -> Result<(), Refused> {
        let position = self.rows;
        let Value::Object(mut row) = row else { return Err(Refused::NotAnObject(position)) };
        let task = index(&row, TASK, position)?;
        let repeat = index(&row, REPEAT, position)?;
        self.rows += 1;
        self.tasks.insert(task);
        self.repeats.insert(repeat);
        // Performance records count over every rollout that ran, masked or not.
        if let Some(Value::Object(perf)) = row.remove("ng_perf") {
            self.perf.push(perf);
        }
        let masked = truthy(row.get("mask_sample"));
        // Gym refuses a key that two scored rows share, or a masked and a scored one (it drops
        // the masked key from the rows it aligns with the results); two masked rows pass.
        let held = self.keys.get(&(task, repeat)).copied();
        if held.is_some_and(|scored| scored || !masked) {
            self.duplicate.get_or_insert((task, repeat));
        }
        self.keys.insert((task, repeat), held == Some(true) || !masked);
        if !masked {
            // A flag, not a measurement.
            row.remove("mask_sample");
            self.scored.push(Rollout::new(task, repeat, &row));
        }
        Ok(())
    }

    /// The answer, in the shape of Gym's `AggregateMetrics`.
    pub(crate) fn finish(mut self) -> Result<Value, Refused> {
        if self.rows == 0 {
            return Ok(answer(Vec::new(), Map::new(), Map::new(), Value::Null, Vec::new()));
        }
        let coverage = self.coverage();
        let perf_summary = perf_summary(&self.perf, self.rows);
        if self.scored.is_empty() {
            // Everything was masked: no quality figure was measured.
            return Ok(answer(Vec::new(), coverage.clone(), coverage, perf_summary, Vec::new()));
        }
        if let Some((task, repeat)) = self.duplicate {
            return Err(Refused::Duplicate { task, repeat });
        }
        self.scored.sort_by_key(|r| (r.task, r.repeat));
        let mut quantiles = TQuantiles::default();

        let groups = self
            .scored
            .chunk_by(|a, b| a.task == b.task)
            .map(|rollouts| {
                let mut entry = Map::new();
                entry.insert(TASK.into(), json!(rollouts[0].task));
                describe(rollouts, &mut entry);
                entry.insert("sample".into(), json!({"agent_ref": {"name": "agent"}}));
                entry.insert("num_rollouts".into(), json!(rollouts.len()));
                entry.insert("expected_num_rollouts".into(), json!(rollouts.len()));
                entry.insert("missing_num_rollouts".into(), json!(0));
                entry.insert("reward_profile_completion_pct".into(), json!(100.0));
                let infos = rollouts.iter().map(|r| Value::Object(r.info.clone())).collect();
                entry.insert("rollout_infos".into(), Value::Array(infos));
                Value::Object(entry)
            })
            .collect();

        let mut agent = Map::new();
        describe(&self.scored, &mut agent);
        let repeats = repeat_level(&self.scored, &mut quantiles);
        across_repeats(&repeats, &mut agent, &mut quantiles);
        agent.extend(coverage.clone());
        agent.insert("num_repeats".into(), json!(self.repeats.len()));
        agent.extend(prompt_groups(&self.scored));

        let mut key = agent
            .iter()
            .filter(|(k, _)| k.starts_with("mean/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Map<_, _>>();
        key.extend(coverage);
        Ok(answer(groups, agent, key, perf_summary, repeats.into_iter().map(Value::Object).collect()))
    }

    /// `coverage/*`: how many rollouts and tasks the figures come from, when some were masked.
    fn coverage(&self) -> Map<String, Value> {
        let mut coverage = Map::new();
        let masked = self.rows - self.scored.len();
        if masked == 0 {
            return coverage;
        }
        let measured: BTreeSet<i64> = self.scored.iter().map(|r| r.task).collect();
        coverage.insert("coverage/measured_rollouts".into(), json!(self.scored.len()));
        coverage.insert("coverage/masked_rollouts".into(), json!(masked));
        coverage.insert("coverage/measured_tasks".into(), json!(measured.len()));
        coverage.insert("coverage/fully_masked_tasks".into(), json!(self.tasks.len() - measured.len()));
        coverage
    }
}

/// Parley's figures of the prompt groups (the rollouts of one `_ng_task_index`), beside Gym's
/// in `agent_metrics` as a benchmark's own metrics are: `parley/pass@k` and `parley/pass^k` for
/// k up to the usual group size (a success is a reward of 1), and the share of groups of two or
/// more rollouts that scored all alike (`parley/groups_scored_alike`: they teach GRPO nothing).
fn prompt_groups(scored: &[Rollout]) -> Map<String, Value> {
    let mut tasks: BTreeMap<i64, usize> = BTreeMap::new();
    let outcomes: Vec<parley_scoring::Outcome> = scored
        .iter()
        .map(|r| {
            let next = tasks.len();
            parley_scoring::Outcome {
                task: *tasks.entry(r.task).or_insert(next),
                termination: "",
                infrastructure: false,
                reward: r.metrics.get("reward").copied(),
                duration_ms: 0.0,
                user_fault: false,
            }
        })
        .collect();
    let summary = parley_scoring::summarize(&outcomes, 1);
    let mut out = Map::new();
    for (k, at, hat) in &summary.pass {
        out.insert(format!("parley/pass@{k}"), json!(at));
        out.insert(format!("parley/pass^{k}"), json!(hat));
    }
    if let Some(share) = summary.groups.alike_share() {
        out.insert("parley/groups_scored_alike".into(), json!(share));
    }
    out
}

/// Gym's `AggregateMetrics`, serialized.
fn answer(
    groups: Vec<Value>,
    agent: Map<String, Value>,
    key: Map<String, Value>,
    perf_summary: Value,
    repeats: Vec<Value>,
) -> Value {
    json!({
        "group_level_metrics": groups,
        "agent_metrics": agent,
        "key_metrics": key,
        "perf_summary": perf_summary,
        "repeat_level_metrics": repeats,
    })
}

/// A row's task or rollout index, 0 when absent.
fn index(row: &Map<String, Value>, field: &'static str, position: usize) -> Result<i64, Refused> {
    match row.get(field) {
        None => Ok(0),
        Some(value) => value.as_i64().ok_or_else(|| Refused::Index { row: position, field, value: value.clone() }),
    }
}

/// Python's truth of a JSON value, as Gym tests `mask_sample`.
fn truthy(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// A field's value as a metric: a number as sent, a boolean as 0 or 1, anything else none.
fn as_metric(value: &Value) -> Option<Value> {
    match value {
        Value::Bool(b) => Some(json!(u8::from(*b))),
        Value::Number(_) => Some(value.clone()),
        _ => None,
    }
}

impl Rollout {
    fn new(task: i64, repeat: i64, row: &Map<String, Value>) -> Rollout {
        let empty = Map::new();
        let usage = match row.get("response").and_then(|r| r.get("usage")) {
            Some(Value::Object(usage)) => usage,
            _ => &empty,
        };
        // Gym's metrics are the row merged with its usage (usage wins), less `_` fields.
        let mut metrics = BTreeMap::new();
        let merged = row.iter().filter(|(k, _)| !usage.contains_key(*k)).chain(usage);
        for (name, value) in merged {
            if let Some(n) = as_metric(value).and_then(|v| v.as_f64())
                && !name.starts_with('_')
            {
                metrics.insert(name.clone(), n);
            }
        }
        // Its listing: the reward as sent, then usage's numbers, then the row's (the row wins).
        let mut info = Map::new();
        info.insert("rollout_id".into(), json!(format!("{task}:{repeat}")));
        info.insert(TASK.into(), json!(task));
        info.insert(REPEAT.into(), json!(repeat));
        if let Some(reward) = row.get("reward") {
            info.insert("reward".into(), reward.clone());
        }
        for (name, value) in usage {
            if let Some(n) = as_metric(value) {
                info.insert(name.clone(), n);
            }
        }
        for (name, value) in row {
            if name.starts_with('_') || name == "reward" || name == "response" {
                continue;
            }
            if let Some(n) = as_metric(value) {
                info.insert(name.clone(), n);
            }
        }
        Rollout { task, repeat, metrics, info }
    }
}

/// Every metric name of some rollouts.
fn names(rollouts: &[Rollout]) -> BTreeSet<&str> {
    rollouts.iter().flat_map(|r| r.metrics.keys().map(String::as_str)).collect()
}

/// One metric's values over the rollouts that have it.
fn column(rollouts: &[Rollout], name: &str) -> Vec<f64> {
    rollouts.iter().filter_map(|r| r.metrics.get(name).copied()).collect()
}

/// `mean/`, `max/`, `min/`, `median/` and `std/` of every metric of some rollouts (pandas'
/// `describe` as Gym's `RewardProfiler` reads it).
fn describe(rollouts: &[Rollout], out: &mut Map<String, Value>) {
    for name in names(rollouts) {
        let values = Values::new(column(rollouts, name));
        out.insert(format!("mean/{name}"), json!(values.mean));
        out.insert(format!("max/{name}"), json!(values.max()));
        out.insert(format!("min/{name}"), json!(values.min()));
        out.insert(format!("median/{name}"), json!(values.quantile(0.5)));
        // pandas' std of one value is NaN, which Gym drops, except that it reads a group whose
        // every std is NaN (one rollout) as spread 0.
        if values.len() > 1 {
            out.insert(format!("std/{name}"), json!(values.sample_std()));
        } else if rollouts.len() == 1 {
            out.insert(format!("std/{name}"), json!(0.0));
        }
    }
}

/// Per repeat, when there is more than one: each metric's figures over the repeat's tasks.
fn repeat_level(rollouts: &[Rollout], quantiles: &mut TQuantiles) -> Vec<Map<String, Value>> {
    let mut by_repeat: BTreeMap<i64, Vec<&Rollout>> = BTreeMap::new();
    for rollout in rollouts {
        by_repeat.entry(rollout.repeat).or_default().push(rollout);
    }
    if by_repeat.len() < 2 {
        return Vec::new();
    }
    let tasks = rollouts.iter().map(|r| r.task).collect::<BTreeSet<_>>().len();
    let names = names(rollouts);
    by_repeat
        .into_iter()
        .map(|(repeat, members)| {
            let mut entry = Map::new();
            entry.insert(REPEAT.into(), json!(repeat));
            // One rollout per task and repeat (keys are unique).
            entry.insert("sample_count".into(), json!(members.len()));
            entry.insert("missing_count".into(), json!(tasks - members.len()));
            for name in &names {
                let values: Vec<f64> = members.iter().filter_map(|r| r.metrics.get(*name).copied()).collect();
                if values.is_empty() {
                    continue;
                }
                let values = Values::new(values);
                let std = values.sample_std();
                let sem = std / (values.len() as f64).sqrt();
                entry.insert(format!("mean/{name}"), json!(values.mean));
                entry.insert(format!("median/{name}"), json!(values.quantile(0.5)));
                entry.insert(format!("std/{name}"), json!(std));
                entry.insert(format!("sem/{name}"), json!(sem));
                entry.insert(format!("min/{name}"), json!(values.min()));
                entry.insert(format!("max/{name}"), json!(values.max()));
                entry.insert(format!("p25/{name}"), json!(values.quantile(0.25)));
                entry.insert(format!("p75/{name}"), json!(values.quantile(0.75)));
                if let Some((low, high)) = quantiles.interval(values.mean, sem, values.len()) {
                    entry.insert(format!("ci_low_95/{name}"), json!(low));
                    entry.insert(format!("ci_high_95/{name}"), json!(high));
                }
            }
            entry
        })
        .collect()
}

/// Each repeat's point estimates (`mean/...`) summarized across repeats, into `agent`.
fn across_repeats(repeats: &[Map<String, Value>], agent: &mut Map<String, Value>, quantiles: &mut TQuantiles) {
    let names: BTreeSet<&str> =
        repeats.iter().flat_map(|r| r.keys()).map(String::as_str).filter(|name| is_primary_metric(name)).collect();
    for name in names {
        let values = Values::new(repeats.iter().filter_map(|r| r.get(name).and_then(Value::as_f64)).collect());
        let std = values.sample_std();
        let se = std / (values.len() as f64).sqrt();
        agent.insert(format!("mean_across_repeats/{name}"), json!(values.mean));
        agent.insert(format!("median_across_repeats/{name}"), json!(values.quantile(0.5)));
        agent.insert(format!("std_across_repeats/{name}"), json!(std));
        agent.insert(format!("min_across_repeats/{name}"), json!(values.min()));
        agent.insert(format!("max_across_repeats/{name}"), json!(values.max()));
        agent.insert(format!("se_across_repeats/{name}"), json!(se));
        if let Some((low, high)) = quantiles.interval(values.mean, se, values.len()) {
            agent.insert(format!("ci_low_95_across_repeats/{name}"), json!(low));
            agent.insert(format!("ci_high_95_across_repeats/{name}"), json!(high));
        }
    }
}

/// Gym's `metrics_config.is_primary_metric`: a point estimate, not a spread, a bound or an
/// index, and so summarized across repeats.
fn is_primary_metric(name: &str) -> bool {
    const NAMES: [&str; 7] =
        [TASK, REPEAT, "_ng_attempt_index", "sample_count", "missing_count", "num_repeats", "token_usage_version"];
    const PREFIXES: [&str; 11] =
        ["max/", "min/", "median/", "std/", "sem/", "se/", "p25/", "p75/", "ci_low_95/", "ci_high_95/", "histogram/"];
    const SUFFIXES: [&str; 19] = [
        "/max",
        "/min",
        "/median",
        "/p5",
        "/p25",
        "/p75",
        "/p95",
        "/ci_low_95",
        "/ci_high_95",
        "/ci_lower",
        "/ci_upper",
        "_ci_lower",
        "_ci_upper",
        "_ci95_lower",
        "_ci95_upper",
        "/_ng_attempt_index",
        "/std_dev_across_runs",
        "/std_err_across_runs",
        "/avg_sample_std_dev",
    ];
    !NAMES.contains(&name)
        && !PREFIXES.iter().any(|p| name.starts_with(p))
        && !SUFFIXES.iter().any(|s| name.ends_with(s))
        && !name.contains("_across_repeats/")
}

/// Some values, sorted, with their mean.
struct Values {
    sorted: Vec<f64>,
    mean: f64,
}

impl Values {
    /// `values` must not be empty.
    fn new(mut values: Vec<f64>) -> Values {
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        values.sort_by(f64::total_cmp);
        Values { sorted: values, mean }
    }

    fn len(&self) -> usize {
        self.sorted.len()
    }

    fn min(&self) -> f64 {
        self.sorted[0]
    }

    fn max(&self) -> f64 {
        self.sorted[self.sorted.len() - 1]
    }

    /// The standard deviation with n - 1 (pandas' default), 0 for one value (as Gym reports a
    /// repeat of one task).
    fn sample_std(&self) -> f64 {
        if self.len() < 2 {
            return 0.0;
        }
        (self.sorted.iter().map(|v| (v - self.mean).powi(2)).sum::<f64>() / (self.len() - 1) as f64).sqrt()
    }

    /// The standard deviation with n (Python's `statistics.pstdev`).
    fn population_std(&self) -> f64 {
        (self.sorted.iter().map(|v| (v - self.mean).powi(2)).sum::<f64>() / self.len() as f64).sqrt()
    }

    /// The `q` quantile, interpolated linearly (pandas' and numpy's default; the median at 0.5).
    fn quantile(&self, q: f64) -> f64 {
        let position = q * (self.len() - 1) as f64;
        let below = position.floor() as usize;
        let above = position.ceil() as usize;
        let (low, high) = (self.sorted[below], self.sorted[above]);
        if below == above { low } else { low + (high - low) * (position - below as f64) }
    }
}

/// Student-t quantiles for 95% intervals, by degrees of freedom, computed once each.
#[derive(Default)]
struct TQuantiles(HashMap<usize, f64>);

impl TQuantiles {
    /// scipy's `t.interval(0.95, n - 1, loc=mean, scale=se)`: none for one value, the point
    /// itself when the spread is 0 (as Gym reports it).
    fn interval(&mut self, mean: f64, se: f64, n: usize) -> Option<(f64, f64)> {
        if n <= 1 {
            return None;
        }
        if se == 0.0 {
            return Some((mean, mean));
        }
        let t = *self.0.entry(n - 1).or_insert_with(|| t_975(n - 1));
        Some((mean - t * se, mean + t * se))
    }
}

/// The 0.975 quantile of Student's t with `df` degrees of freedom, found by bisection on
/// the exact two-sided probability.
fn t_975(df: usize) -> f64 {
    let (mut low, mut high) = (0.0, 1.0);
    while t_central(high, df) < 0.95 {
        high *= 2.0;
    }
    loop {
        let middle = 0.5 * (low + high);
        if middle <= low || middle >= high {
            return middle;
        }
        if t_central(middle, df) < 0.95 { low = middle } else { high = middle }
    }
}

/// P(|T| < t) for Student's t with an integer `df` (Abramowitz and Stegun 26.7.3-4: a finite
/// sum of positive terms in cos θ, θ = atan(t / √df)).
fn t_central(t: f64, df: usize) -> f64 {
    let nu = df as f64;
    let theta = (t / nu.sqrt()).atan();
    let sin = t / (nu + t * t).sqrt();
    let cos2 = nu / (nu + t * t);
    if df.is_multiple_of(2) {
        // sin θ (1 + 1/2 cos²θ + 1·3/(2·4) cos⁴θ + ... up to cos^(df-2)θ)
        let (mut term, mut sum) = (1.0, 1.0);
        for k in (2..df).step_by(2) {
            term *= cos2 * (k - 1) as f64 / k as f64;
            sum += term;
        }
        sin * sum
    } else {
        // 2/π (θ + sin θ (cos θ + 2/3 cos³θ + ... up to cos^(df-2)θ))
        let cos = cos2.sqrt();
        let (mut term, mut sum) = (cos, if df > 1 { cos } else { 0.0 });
        for k in (3..df).step_by(2) {
            term *= cos2 * (k - 1) as f64 / k as f64;
            sum += term;
        }
        std::f64::consts::FRAC_2_PI * (theta + sin * sum)
    }
}

/// Gym's `perf_summary` over the rows' `ng_perf` records: coverage over all `rows`, and
/// token, turn and latency figures from the records that report each field.
fn perf_summary(records: &[Map<String, Value>], rows: usize) -> Value {
    if rows == 0 || records.is_empty() {
        return Value::Null;
    }
    // Python's isinstance(v, (int, float)): booleans count as numbers there.
    let number = |value: Option<&Value>| match value {
        Some(Value::Bool(b)) => Some(f64::from(u8::from(*b))),
        Some(value) => value.as_f64(),
        None => None,
    };
    let field = |name: &str| -> Option<Values> {
        let values: Vec<f64> = records.iter().filter_map(|r| number(r.get(name))).collect();
        (!values.is_empty()).then(|| Values::new(values))
    };
    let mut summary = Map::new();
    let with_tokens = records.iter().filter(|r| number(r.get("token_observability_coverage")).is_some_and(|c| c > 0.0));
    summary.insert("overall_observability_coverage".into(), json!(records.len() as f64 / rows as f64));
    summary.insert("token_observability_coverage".into(), json!(with_tokens.count() as f64 / rows as f64));
    for name in ["prompt_tokens", "cached_prompt_tokens", "completion_tokens", "reasoning_tokens"] {
        if let Some(values) = field(name) {
            summary.insert(format!("mean_{name}"), json!(values.mean));
            summary.insert(format!("median_{name}"), json!(values.quantile(0.5)));
            summary.insert(format!("total_{name}"), json!(values.sorted.iter().sum::<f64>()));
        }
    }
    if let Some(turns) = field("num_turns") {
        summary.insert("mean_num_turns".into(), json!(turns.mean));
        summary.insert("median_num_turns".into(), json!(turns.quantile(0.5)));
        summary.insert("std_num_turns".into(), json!(turns.population_std()));
        summary.insert("min_num_turns".into(), json!(turns.min()));
        summary.insert("p90_num_turns".into(), json!(turns.quantile(0.9)));
        summary.insert("max_num_turns".into(), json!(turns.max()));
    }
    let per_turn: Vec<f64> = records
        .iter()
        .filter_map(|r| {
            let (tokens, turns) = (number(r.get("completion_tokens"))?, number(r.get("num_turns"))?);
            (turns > 0.0).then(|| tokens / turns)
        })
        .collect();
    if !per_turn.is_empty() {
        let per_turn = Values::new(per_turn);
        summary.insert("mean_tokens_per_turn".into(), json!(per_turn.mean));
        summary.insert("median_tokens_per_turn".into(), json!(per_turn.quantile(0.5)));
    }
    if let Some(latency) = field("total_latency_ms") {
        for (name, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)] {
            summary.insert(format!("total_latency_{name}_ms"), json!(latency.quantile(q)));
        }
        summary.insert("total_latency_mean_ms".into(), json!(latency.mean));
    }
    Value::Object(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer to some rows (the expected values below are NeMo Gym 0.7.0's own answers to
    /// the same rows).
    fn aggregate(rows: Value) -> Result<Value, Refused> {
        let mut aggregate = Aggregate::default();
        for row in rows.as_array().unwrap() {
            aggregate.push(row.clone())?;
        }
        aggregate.finish()
    }

    fn close(answer: &Value, pointer: &str, expected: f64) {
        let value = answer.pointer(pointer).and_then(Value::as_f64);
        assert!(value.is_some_and(|v| (v - expected).abs() < 1e-12), "{pointer}: {value:?}, not {expected}");
    }

    fn three_rollouts() -> Value {
        json!([
            {"reward": 1.0, "accuracy": true, "_ng_task_index": 0, "_ng_rollout_index": 0, "n": 3,
             "d": {"x": 1}, "response": {"usage": {"input_tokens": 10, "output_tokens": 4}}},
            {"reward": 0.0, "accuracy": false, "_ng_task_index": 0, "_ng_rollout_index": 1, "n": 5},
            {"reward": 1.0, "accuracy": true, "_ng_task_index": 1, "_ng_rollout_index": 0, "n": 2, "extra": 7.5},
        ])
    }

    #[test]
    fn a_rollouts_metrics_are_its_numbers_and_flags_and_its_usage() {
        let row = json!({"reward": 0.5, "ok": true, "name": "x", "none": null, "parts": {"a": 1}, "_private": 3,
            "input_tokens": 1, "response": {"usage": {"input_tokens": 9, "output_tokens": "n/a", "details": {}}}});
        let rollout = Rollout::new(4, 2, row.as_object().unwrap());
        let metrics: Vec<(&str, f64)> = rollout.metrics.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(metrics, [("input_tokens", 9.0), ("ok", 1.0), ("reward", 0.5)], "usage wins; no nested field");
        assert_eq!(
            Value::Object(rollout.info),
            json!({"rollout_id": "4:2", "_ng_task_index": 4, "_ng_rollout_index": 2, "reward": 0.5,
                   "input_tokens": 1, "ok": 1}),
            "the listing: the row's own number wins"
        );
    }

    #[test]
    fn per_task_and_overall_the_std_is_the_samples_and_a_lone_rollouts_is_zero() {
        let answer = aggregate(three_rollouts()).unwrap();
        let agent = &answer["agent_metrics"];
        close(&answer, "/agent_metrics/mean~1reward", 2.0 / 3.0);
        close(&answer, "/agent_metrics/std~1reward", 0.5773502691896258);
        close(&answer, "/agent_metrics/std~1n", 1.5275252316519465);
        close(&answer, "/agent_metrics/median~1n", 3.0);
        close(&answer, "/agent_metrics/mean~1accuracy", 2.0 / 3.0);
        assert!(agent.get("std/input_tokens").is_none(), "one value has no std: {agent}");
        assert!(agent.get("mean/d").is_none() && agent.get("mean/_ng_task_index").is_none());
        assert_eq!(agent["num_repeats"], 2);
        let keys: Vec<&String> = answer["key_metrics"].as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["mean/accuracy", "mean/extra", "mean/input_tokens", "mean/n", "mean/output_tokens", "mean/reward"]
        );

        let groups = answer["group_level_metrics"].as_array().unwrap();
        assert_eq!(groups.len(), 2);
        close(&answer, "/group_level_metrics/0/std~1reward", std::f64::consts::FRAC_1_SQRT_2);
        assert!(groups[0].get("std/input_tokens").is_none(), "one of two rollouts has it");
        close(&answer, "/group_level_metrics/1/std~1extra", 0.0);
        assert_eq!(groups[1]["num_rollouts"], 1);
        assert_eq!(groups[1]["sample"], json!({"agent_ref": {"name": "agent"}}));
        assert_eq!(groups[0]["rollout_infos"][1]["rollout_id"], "0:1");
        assert_eq!(groups[0]["rollout_infos"][0]["accuracy"], 1);
        assert_eq!(answer["perf_summary"], Value::Null);
    }

    #[test]
    fn each_repeat_is_summarized_and_its_means_across_repeats() {
        let answer = aggregate(three_rollouts()).unwrap();
        let repeats = answer["repeat_level_metrics"].as_array().unwrap();
        assert_eq!(repeats.len(), 2);
        assert_eq!((&repeats[1]["sample_count"], &repeats[1]["missing_count"]), (&json!(1), &json!(1)));
        close(&answer, "/repeat_level_metrics/0/p25~1n", 2.25);
        close(&answer, "/repeat_level_metrics/0/sem~1n", 0.5);
        close(&answer, "/repeat_level_metrics/0/ci_low_95~1n", -3.853102368087347);
        close(&answer, "/repeat_level_metrics/0/ci_high_95~1reward", 1.0);
        assert!(repeats[1].get("ci_low_95/n").is_none() && repeats[1].get("mean/extra").is_none());
        close(&answer, "/agent_metrics/ci_low_95_across_repeats~1mean~1n", -12.132755920218369);
        close(&answer, "/agent_metrics/se_across_repeats~1mean~1n", 1.25);
        assert!(answer["agent_metrics"].get("ci_low_95_across_repeats/mean/extra").is_none());
        assert!(answer["agent_metrics"].get("mean_across_repeats/sem/n").is_none());
        let one_repeat = aggregate(json!([{"reward": 1, "_ng_task_index": 0}, {"reward": 0, "_ng_task_index": 1}]));
        assert_eq!(one_repeat.unwrap()["repeat_level_metrics"], json!([]));
    }

    #[test]
    fn t_quantiles_are_scipys() {
        for (df, expected) in [
            (1, 12.706204736174694),
            (2, 4.302652729749462),
            (3, 3.1824463052837078),
            (4, 2.7764451051977934),
            (5, 2.5705818356363146),
            (10, 2.228138851986274),
            (30, 2.0422724563012378),
            (100, 1.9839715185235518),
            (1000, 1.9623390808264083),
            (100000, 1.9599877075346095),
        ] {
            let t = t_975(df);
            assert!((t - expected).abs() < 1e-9 * expected, "df {df}: {t}, not {expected}");
        }
    }

    #[test]
    fn masked_rows_count_as_coverage_and_their_performance_still_counts() {
        let answer = aggregate(json!([
            {"reward": 1, "_ng_task_index": 0, "_ng_rollout_index": 0, "ng_perf": {"prompt_tokens": 100,
             "completion_tokens": 30, "num_turns": 3, "total_latency_ms": 1200.5, "token_observability_coverage": 1.0}},
            {"reward": 0, "_ng_task_index": 0, "_ng_rollout_index": 1, "ng_perf": {"prompt_tokens": 80,
             "completion_tokens": 50, "num_turns": 2, "total_latency_ms": 900, "token_observability_coverage": 0}},
            {"reward": 1, "_ng_task_index": 1, "_ng_rollout_index": 0, "mask_sample": true,
             "ng_perf": {"num_turns": 0, "total_latency_ms": 300}},
            {"reward": 1, "_ng_task_index": 2, "_ng_rollout_index": 0, "mask_sample": false},
        ]))
        .unwrap();
        let coverage = json!({"coverage/measured_rollouts": 3, "coverage/masked_rollouts": 1,
            "coverage/measured_tasks": 2, "coverage/fully_masked_tasks": 1});
        for (key, value) in coverage.as_object().unwrap() {
            assert_eq!(answer["key_metrics"][key], *value, "{key}");
            assert_eq!(answer["agent_metrics"][key], *value, "{key}");
        }
        assert!(answer["agent_metrics"].get("mean/mask_sample").is_none());
        let expected = json!({"overall_observability_coverage": 0.75, "token_observability_coverage": 0.25,
            "mean_prompt_tokens": 90.0, "median_prompt_tokens": 90.0, "total_prompt_tokens": 180,
            "mean_completion_tokens": 40.0, "median_completion_tokens": 40.0, "total_completion_tokens": 80,
            "mean_num_turns": 1.6666666666666667, "median_num_turns": 2, "std_num_turns": 1.247219128924647,
            "min_num_turns": 0, "p90_num_turns": 2.8, "max_num_turns": 3, "mean_tokens_per_turn": 17.5,
            "median_tokens_per_turn": 17.5, "total_latency_p50_ms": 900.0, "total_latency_p90_ms": 1140.4,
            "total_latency_p99_ms": 1194.49, "total_latency_mean_ms": 800.1666666666666});
        let summary = answer["perf_summary"].as_object().unwrap();
        assert_eq!(summary.len(), expected.as_object().unwrap().len(), "{summary:?}");
        for (key, value) in expected.as_object().unwrap() {
            close(&answer, &format!("/perf_summary/{key}"), value.as_f64().unwrap());
        }

        let all_masked = aggregate(json!([{"reward": 1, "mask_sample": 1}, {"reward": 0, "mask_sample": true}]));
        let coverage = json!({"coverage/measured_rollouts": 0, "coverage/masked_rollouts": 2,
            "coverage/measured_tasks": 0, "coverage/fully_masked_tasks": 1});
        let answer = json!({"group_level_metrics": [], "agent_metrics": coverage, "key_metrics": coverage,
            "perf_summary": null, "repeat_level_metrics": []});
        assert_eq!(all_masked.unwrap(), answer, "two masked rows may share a key");
    }

    #[test]
    fn a_rollout_sent_twice_is_refused_and_no_rows_answer_the_empty_shape() {
        let twice = json!([{"reward": 1, "_ng_task_index": 3}, {"reward": 0, "_ng_task_index": 3}]);
        assert_eq!(aggregate(twice), Err(Refused::Duplicate { task: 3, repeat: 0 }));
        let masked_then_scored = json!([{"reward": 1, "mask_sample": true}, {"reward": 0}]);
        assert_eq!(aggregate(masked_then_scored), Err(Refused::Duplicate { task: 0, repeat: 0 }));
        let bad = aggregate(json!([{"reward": 1, "_ng_task_index": "a"}])).unwrap_err();
        assert_eq!(bad.to_string(), "verify response 0: `_ng_task_index` must be an integer, not \"a\"");
        assert_eq!(aggregate(json!([1])), Err(Refused::NotAnObject(0)));
        let empty = json!({"group_level_metrics": [], "agent_metrics": {}, "key_metrics": {},
            "perf_summary": null, "repeat_level_metrics": []});
        assert_eq!(aggregate(json!([])).unwrap(), empty);
    }
}
