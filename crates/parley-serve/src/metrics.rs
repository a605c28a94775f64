//! What `GET /metrics` reports, in Prometheus' text format: sessions in flight and queued,
//! sessions finished by termination and failure class, requests refused, and the latency of
//! `/run`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the `/run` latency buckets, in seconds.
const BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0];

#[derive(Debug, Default)]
pub struct Metrics {
    in_flight: AtomicI64,
    queued: AtomicI64,
    refused: AtomicU64,
    /// Sessions ended, by (termination, failure class).
    ended: Mutex<BTreeMap<(String, String), u64>>,
    /// `/run` latencies: a count per bucket, the sum and the count.
    run_buckets: [AtomicU64; BUCKETS.len()],
    run_sum_micros: AtomicU64,
    run_count: AtomicU64,
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

    pub(crate) fn ended(&self, termination: &str, failure: Option<&str>) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Ok(mut ended) = self.ended.lock() {
            *ended.entry((termination.to_owned(), failure.unwrap_or("").to_owned())).or_default() += 1;
        }
    }

    pub(crate) fn run_took(&self, took: Duration) {
        let secs = took.as_secs_f64();
        for (bound, count) in BUCKETS.iter().zip(&self.run_buckets) {
            if secs <= *bound {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.run_sum_micros.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.run_count.fetch_add(1, Ordering::Relaxed);
    }

    /// Sessions ended so far.
    pub fn sessions_ended(&self) -> u64 {
        self.ended.lock().map(|e| e.values().sum()).unwrap_or(0)
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let load = |a: &AtomicI64| a.load(Ordering::Relaxed);
        let _ = writeln!(out, "# HELP parley_sessions_in_flight Sessions being driven now.");
        let _ = writeln!(out, "# TYPE parley_sessions_in_flight gauge");
        let _ = writeln!(out, "parley_sessions_in_flight {}", load(&self.in_flight));
        let _ = writeln!(out, "# HELP parley_sessions_queued Requests waiting for a free slot.");
        let _ = writeln!(out, "# TYPE parley_sessions_queued gauge");
        let _ = writeln!(out, "parley_sessions_queued {}", load(&self.queued));
        let _ =
            writeln!(out, "# HELP parley_requests_refused_total Requests answered 503: every slot and the queue full.");
        let _ = writeln!(out, "# TYPE parley_requests_refused_total counter");
        let _ = writeln!(out, "parley_requests_refused_total {}", self.refused.load(Ordering::Relaxed));
        let _ =
            writeln!(out, "# HELP parley_sessions_finished_total Sessions ended, by termination and failure class.");
        let _ = writeln!(out, "# TYPE parley_sessions_finished_total counter");
        if let Ok(ended) = self.ended.lock() {
            for ((termination, failure), n) in ended.iter() {
                let _ = writeln!(
                    out,
                    "parley_sessions_finished_total{{termination=\"{termination}\",failure=\"{failure}\"}} {n}"
                );
            }
        }
        let _ = writeln!(out, "# HELP parley_run_seconds Time from a /run request to its answer.");
        let _ = writeln!(out, "# TYPE parley_run_seconds histogram");
        for (bound, count) in BUCKETS.iter().zip(&self.run_buckets) {
            let _ = writeln!(out, "parley_run_seconds_bucket{{le=\"{bound}\"}} {}", count.load(Ordering::Relaxed));
        }
        let count = self.run_count.load(Ordering::Relaxed);
        let _ = writeln!(out, "parley_run_seconds_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "parley_run_seconds_sum {}", self.run_sum_micros.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "parley_run_seconds_count {count}");
        out
    }
}
