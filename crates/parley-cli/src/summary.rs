//! The summary of a run, computed from the store alone; or of several runs as one (the
//! environments of one `parley serve`, each its own service run, as a whole).

use std::io::Write;
use std::time::Duration;

use parley_scoring::training::{TrainingAccumulator, TrainingMetrics};
use parley_scoring::{Summary, percentile, summarize};
use parley_store::{CallTotals, RunOutcomes, Store, TokenTotals};

pub struct Report {
    pub run: i64,
    /// The runs reported with `run` as one, each with the offset its task indexes take, so that
    /// task 0 of one and task 0 of another stay two tasks.
    pub with: Vec<(i64, usize)>,
    pub summary: Summary,
    pub tokens: TokenTotals,
    pub call_ms_p50: Option<f64>,
    pub call_ms_p99: Option<f64>,
    pub user_call_ms_p50: Option<f64>,
    pub user_call_ms_p99: Option<f64>,
    pub unfinished: usize,
    /// Failed sessions by failure class.
    pub failures: std::collections::BTreeMap<String, usize>,
    /// Model-call retries over the run.
    pub retries: i64,
    /// Reward variance, success rate, turns and reward components, for the run and per task
    /// (read by `parley metrics` only: it reads every session's turns).
    pub training: Option<TrainingMetrics>,
}

impl Report {
    /// The run's report, reading its sessions a page at a time: a run of a million sessions
    /// keeps only what the metrics need of each.
    /// Sessions whose simulated user failed its part are counted apart from the rewards and
    /// pass figures, unless `keep_user_faults`.
    pub async fn load(store: &Store, run: i64, trials: usize, keep_user_faults: bool) -> anyhow::Result<Report> {
        Report::load_runs(store, run, &[], trials, keep_user_faults).await
    }

    /// The report of `run` and `with` as one run, each run's tasks its own.
    pub async fn load_runs(
        store: &Store,
        run: i64,
        with: &[i64],
        trials: usize,
        keep_user_faults: bool,
    ) -> anyhow::Result<Report> {
        let (mut each_outcomes, mut calls) = (Vec::new(), CallTotals::default());
        let runs: Vec<i64> = std::iter::once(run).chain(with.iter().copied()).collect();
        for &each in &runs {
            each_outcomes.push(store.run_outcomes(each).await?);
            calls.merge(store.call_totals(each).await?);
        }
        let (whole, offsets) = RunOutcomes::together(each_outcomes);
        let offsets: Vec<(i64, usize)> = runs.into_iter().zip(offsets).skip(1).collect();
        let RunOutcomes { mut outcomes, failures, unfinished, retries, .. } = whole;
        if keep_user_faults {
            outcomes.iter_mut().for_each(|o| o.user_fault = false);
        }
        let CallTotals { tokens, latencies, user_latencies } = calls.sorted();
        Ok(Report {
            run,
            with: offsets,
            // By name, as the summary lists them.
            failures: failures.into_iter().map(|(f, n)| (f.as_str().to_owned(), n)).collect(),
            retries,
            unfinished,
            summary: summarize(&outcomes, trials),
            tokens,
            call_ms_p50: percentile(&latencies, 0.5),
            call_ms_p99: percentile(&latencies, 0.99),
            user_call_ms_p50: percentile(&user_latencies, 0.5),
            user_call_ms_p99: percentile(&user_latencies, 0.99),
            training: None,
        })
    }

    /// Adds the training metrics, reading the run's finished sessions a page at a time; the
    /// sessions whose simulated user failed its part are left out unless `keep_user_faults`.
    pub async fn with_training(mut self, store: &Store, keep_user_faults: bool) -> anyhow::Result<Report> {
        let mut acc = TrainingAccumulator::default();
        for (run, offset) in std::iter::once((self.run, 0)).chain(self.with.iter().copied()) {
            let mut after = 0;
            loop {
                let page = store.session_shapes(run, after, 4096).await?;
                let Some(last) = page.last() else { break };
                after = last.id;
                for mut shape in page.iter().filter_map(|s| parley_runtime::curriculum::shaped(s, keep_user_faults)) {
                    shape.task += offset;
                    acc.add(&shape);
                }
            }
        }
        self.training = acc.finish();
        Ok(self)
    }

    pub fn print(&self, w: &mut impl Write, elapsed: Option<Duration>) -> std::io::Result<()> {
        let s = &self.summary;
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1} ms"));
        match elapsed {
            Some(elapsed) => {
                let secs = elapsed.as_secs_f64();
                let rate = s.sessions as f64 / secs.max(1e-9);
                writeln!(w, "run {}        {} sessions in {secs:.2} s ({rate:.1} sessions/s)", self.run, s.sessions)?
            }
            None if !self.with.is_empty() => {
                let runs: Vec<String> =
                    std::iter::once(self.run).chain(self.with.iter().map(|(r, _)| *r)).map(|r| r.to_string()).collect();
                writeln!(w, "runs {}        {} sessions", runs.join(", "), s.sessions)?
            }
            None => writeln!(w, "run {}        {} sessions", self.run, s.sessions)?,
        }
        if self.unfinished > 0 {
            writeln!(w, "unfinished     {}", self.unfinished)?;
        }
        let terminations: Vec<String> = s.terminations.iter().map(|(t, n)| format!("{t} {n}")).collect();
        writeln!(w, "terminations   {}", terminations.join(" · "))?;
        if !self.failures.is_empty() {
            let failures: Vec<String> = self.failures.iter().map(|(f, n)| format!("{f} {n}")).collect();
            writeln!(w, "failures       {} (excluded from rewards and pass^k)", failures.join(" · "))?;
        }
        if self.retries > 0 {
            writeln!(w, "retries        {} model-call retries", self.retries)?;
        }
        if s.user_faults > 0 {
            writeln!(
                w,
                "user faults    {} sessions whose simulated user failed its part (excluded from rewards and pass; \
                 --keep-user-faults counts them)",
                s.user_faults
            )?;
        }
        match s.reward {
            Some(m) => writeln!(w, "reward         {:.3} ± {:.3} (95% interval, n={})", m.mean, m.ci95, m.n)?,
            None => writeln!(w, "reward         no scored sessions")?,
        }
        writeln!(w, "pass@k         {}", pass_line(&s.pass, |&(k, at, _)| (k, at)))?;
        writeln!(w, "pass^k         {}", pass_line(&s.pass, |&(k, _, hat)| (k, hat)))?;
        if let Some(share) = s.groups.alike_share() {
            writeln!(
                w,
                "groups         {} of {} tasks with 2+ rollouts scored all alike ({:.1}%: they teach GRPO nothing)",
                s.groups.alike,
                s.groups.groups,
                share * 100.0
            )?;
        }
        let t = self.tokens.agent;
        writeln!(
            w,
            "tokens         prompt {} · completion {} · {} model calls",
            t.prompt_tokens, t.completion_tokens, t.model_calls
        )?;
        let u = self.tokens.user;
        if u.model_calls > 0 {
            writeln!(
                w,
                "user tokens    prompt {} · completion {} · {} model calls · p50 {} p99 {}",
                u.prompt_tokens,
                u.completion_tokens,
                u.model_calls,
                ms(self.user_call_ms_p50),
                ms(self.user_call_ms_p99)
            )?;
        }
        writeln!(
            w,
            "latency        model call p50 {} p99 {} · session p50 {} p99 {}",
            ms(self.call_ms_p50),
            ms(self.call_ms_p99),
            ms(s.session_ms_p50),
            ms(s.session_ms_p99)
        )?;
        if let Some(t) = &self.training {
            let r = &t.run;
            writeln!(
                w,
                "training       variance {:.4} · success {:.3} · steps/session {:.2}",
                r.reward_variance, r.success_rate, r.mean_steps
            )?;
            if !r.components.is_empty() {
                let parts: Vec<String> = r.components.iter().map(|(k, v)| format!("{k} {v:.3}")).collect();
                writeln!(w, "components     {} (means; they sum to the mean reward)", parts.join(" · "))?;
            }
            writeln!(w, "per task       task  sessions  reward  variance  success  steps  components")?;
            // The table shows the first tasks; `--json` has every one.
            const SHOWN: usize = 20;
            for (task, f) in t.tasks.iter().take(SHOWN) {
                let parts: Vec<String> = f.components.iter().map(|(k, v)| format!("{k} {v:.3}")).collect();
                let line = format!(
                    "               {task:>4}  {:>8}  {:>6.3}  {:>8.4}  {:>7.3}  {:>5.2}  {}",
                    f.sessions,
                    f.mean_reward,
                    f.reward_variance,
                    f.success_rate,
                    f.mean_steps,
                    parts.join(" · ")
                );
                writeln!(w, "{}", line.trim_end())?;
            }
            if t.tasks.len() > SHOWN {
                writeln!(
                    w,
                    "               ... {} more tasks (parley metrics --json has them all)",
                    t.tasks.len() - SHOWN
                )?;
            }
        }
        Ok(())
    }
}

impl Report {
    /// The same figures as the table, as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let s = &self.summary;
        let mut json = serde_json::json!({
            "run": self.run,
            "sessions": s.sessions,
            "unfinished": self.unfinished,
            "terminations": s.terminations,
            "failures": self.failures,
            "retries": self.retries,
            "user_faults": s.user_faults,
            "reward": s.reward,
            "pass": s.pass.iter().map(|(k, at, hat)| serde_json::json!({"k": k, "pass_at_k": at, "pass_hat_k": hat})).collect::<Vec<_>>(),
            "groups": s.groups,
            "tokens": {"prompt": self.tokens.agent.prompt_tokens, "completion": self.tokens.agent.completion_tokens, "model_calls": self.tokens.agent.model_calls},
            "user_tokens": {"prompt": self.tokens.user.prompt_tokens, "completion": self.tokens.user.completion_tokens, "model_calls": self.tokens.user.model_calls},
            "latency_ms": {"model_call_p50": self.call_ms_p50, "model_call_p99": self.call_ms_p99,
                           "user_call_p50": self.user_call_ms_p50, "user_call_p99": self.user_call_ms_p99,
                           "session_p50": s.session_ms_p50, "session_p99": s.session_ms_p99},
            "training": self.training,
        });
        if !self.with.is_empty() {
            // The runs reported with `run` as one.
            json["with"] = self.with.iter().map(|(r, _)| *r).collect();
        }
        json
    }
}

/// How many k a summary's text shows every one of; past them, the powers of two and the last.
const EVERY_K_UP_TO: usize = 8;

/// One figure's line of `(k, value)` for each k of `pass`: every k up to [`EVERY_K_UP_TO`], then
/// the powers of two and the last, so that a run of a thousand trials still reads on one line
/// (`--json` gives every k).
fn pass_line(
    pass: &[(usize, Option<f64>, Option<f64>)],
    figure: impl Fn(&(usize, Option<f64>, Option<f64>)) -> (usize, Option<f64>),
) -> String {
    let last = pass.last().map_or(0, |&(k, _, _)| k);
    let shown = |k: usize| k <= EVERY_K_UP_TO || k.is_power_of_two() || k == last;
    let mut line: Vec<String> = pass
        .iter()
        .map(figure)
        .filter(|&(k, _)| shown(k))
        .map(|(k, v)| format!("k={k} {}", v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"))))
        .collect();
    if pass.iter().any(|&(k, _, _)| !shown(k)) {
        line.push("(every k: --json)".to_owned());
    }
    line.join("  ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ks(line: &str) -> Vec<&str> {
        line.split("  ").filter_map(|entry| entry.strip_prefix("k=")?.split(' ').next()).collect()
    }

    #[test]
    fn a_pass_line_shows_every_k_of_a_few_trials_and_some_of_many() {
        let pass = |trials: usize| (1..=trials).map(|k| (k, Some(1.0 / k as f64), None)).collect::<Vec<_>>();
        let four = pass_line(&pass(4), |&(k, at, _)| (k, at));
        assert_eq!(four, "k=1 1.000  k=2 0.500  k=3 0.333  k=4 0.250");
        let hats = pass_line(&pass(4), |&(k, _, hat)| (k, hat));
        assert_eq!(hats, "k=1 -  k=2 -  k=3 -  k=4 -");
        let many = pass_line(&pass(2000), |&(k, at, _)| (k, at));
        let shown = ["1", "2", "3", "4", "5", "6", "7", "8", "16", "32", "64", "128", "256", "512", "1024", "2000"];
        assert_eq!(ks(&many), shown, "{many}");
        assert!(many.ends_with("k=2000 0.001  (every k: --json)"), "{many}");
        assert_eq!(pass_line(&[], |&(k, at, _)| (k, at)), "");
    }
}
