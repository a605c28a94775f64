//! Progress on long work: a bar on a terminal, a log line every few seconds otherwise.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
    total: u64,
    state: Mutex<State>,
}

struct State {
    done: u64,
    reward_sum: f64,
    rewarded: u64,
    last_log: Instant,
    started: Instant,
}

const LOG_EVERY: Duration = Duration::from_secs(5);

impl Progress {
    pub fn new(total: u64) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template("{elapsed_precise} [{wide_bar}] {pos}/{len} sessions · {per_sec} · {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        });
        let now = Instant::now();
        Progress {
            bar,
            total,
            state: Mutex::new(State { done: 0, reward_sum: 0.0, rewarded: 0, last_log: now, started: now }),
        }
    }

    pub fn finish_one(&self, reward: Option<f64>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.done += 1;
        if let Some(r) = reward {
            s.reward_sum += r;
            s.rewarded += 1;
        }
        let mean = if s.rewarded > 0 { s.reward_sum / s.rewarded as f64 } else { 0.0 };
        match &self.bar {
            Some(bar) => {
                bar.inc(1);
                bar.set_message(format!("mean reward {mean:.3}"));
            }
            None if s.last_log.elapsed() >= LOG_EVERY => {
                s.last_log = Instant::now();
                let rate = s.done as f64 / s.started.elapsed().as_secs_f64();
                eprintln!("{}/{} sessions · {rate:.1}/s · mean reward {mean:.3}", s.done, self.total);
            }
            None => {}
        }
    }

    pub fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
