//! The trainer's side of `/run`, for `bench/`: posts task rows to an agent server at a fixed
//! concurrency (one `POST` per rollout, the whole row as the body, as NeMo RL's collection does)
//! and writes JSON on stdout: the wall seconds, the count of each status, and per request its
//! latency, the session that answered it (`_parley_session`) and its reward. A client of its own
//! in Rust, so that the client's cost stays small beside the servers measured, whichever they are.
//!
//!     parley-bench-load URL BODIES.jsonl COUNT CONCURRENCY

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::{Value, json};

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, bodies, count, concurrency] = args.as_slice() else {
        bail!("usage: parley-bench-load URL BODIES.jsonl COUNT CONCURRENCY");
    };
    let count: usize = count.parse().context("COUNT")?;
    let concurrency: usize = concurrency.parse().context("CONCURRENCY")?;
    let text = std::fs::read_to_string(bodies).with_context(|| format!("reading {bodies}"))?;
    let bodies: Arc<Vec<String>> = Arc::new(text.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect());
    if bodies.is_empty() {
        bail!("no bodies in the file");
    }
    let client = reqwest::Client::builder().pool_max_idle_per_host(concurrency).build()?;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers = (0..concurrency.max(1)).map(|_| {
        let (client, bodies, next, url) = (client.clone(), bodies.clone(), next.clone(), url.clone());
        async move {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return done;
                }
                let asked = Instant::now();
                let sent = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(bodies[i % bodies.len()].clone())
                    .send()
                    .await;
                let (status, answer) = match sent {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        let body = response.bytes().await.unwrap_or_default();
                        (status, serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null))
                    }
                    Err(_) => (0, Value::Null),
                };
                let took = asked.elapsed().as_secs_f64();
                done.push((status, json!([took, answer["_parley_session"], answer["reward"]])));
            }
        }
    });
    let results: Vec<(u16, Value)> = futures::future::join_all(workers).await.into_iter().flatten().collect();
    let wall = started.elapsed().as_secs_f64();
    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    for (status, _) in &results {
        *statuses.entry(status.to_string()).or_default() += 1;
    }
    let rollouts: Vec<Value> = results.into_iter().map(|(_, r)| r).collect();
    println!("{}", json!({"wall_s": wall, "statuses": statuses, "rollouts": rollouts}));
    Ok(())
}
