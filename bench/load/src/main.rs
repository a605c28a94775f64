//! The trainer's side of Parley's service, for `bench/`. Two modes, each writing JSON on stdout:
//!
//!     parley-bench-load run URL BODIES.jsonl COUNT CONCURRENCY
//!
//! posts task rows to `/run` at a fixed concurrency (one `POST` per rollout, the whole row as the
//! body, as NeMo RL's collection does): the wall seconds, the count of each status, and per
//! request its latency, the session that answered it (`_parley_session`) and its reward.
//!
//!     parley-bench-load openenv WS_URL SESSIONS EPISODES TASKS [THINK_MS]
//!
//! holds SESSIONS OpenEnv WebSocket connections at once, each playing EPISODES episodes (task
//! `k % TASKS`): two tool calls (`calculate`, run by the environment alone), then a text to the
//! simulated user, and again, until the episode is done. Per step its latency, kind (`tool`
//! or `text`), when it was asked (seconds from the start) and its episode (from 0), and the wall
//! seconds. With THINK_MS, each session thinks before each step, as a
//! trainer's policy generates its action: THINK_MS on average, spread evenly over half to one and
//! a half times that (so that sessions do not step in lockstep); without it, they step at once.
//!
//! A client of its own in Rust, so that its cost stays small beside the servers measured.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]).await,
        Some("openenv") => openenv(&args[1..]).await,
        _ => bail!(
            "usage: parley-bench-load run URL BODIES.jsonl COUNT CONCURRENCY | openenv WS_URL SESSIONS EPISODES TASKS"
        ),
    }
}

async fn run(args: &[String]) -> anyhow::Result<()> {
    let [url, bodies, count, concurrency] = args else {
        bail!("usage: parley-bench-load run URL BODIES.jsonl COUNT CONCURRENCY");
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

/// One step's frame: every third a text to the user, the others a `calculate` call.
fn action(step: usize) -> Value {
    match step % 3 {
        2 => json!({"content": "Is there anything else I can help you with?"}),
        _ => json!({"tool_calls": [{"id": format!("c{step}"), "type": "function",
            "function": {"name": "calculate", "arguments": format!("{{\"expression\": \"{step} + 2\"}}")}}]}),
    }
}

async fn openenv(args: &[String]) -> anyhow::Result<()> {
    let (url, sessions, episodes, tasks, think_ms) = match args {
        [url, sessions, episodes, tasks] => (url, sessions, episodes, tasks, 0.0),
        [url, sessions, episodes, tasks, think] => (url, sessions, episodes, tasks, think.parse().context("THINK_MS")?),
        _ => bail!("usage: parley-bench-load openenv WS_URL SESSIONS EPISODES TASKS [THINK_MS]"),
    };
    let sessions: usize = sessions.parse().context("SESSIONS")?;
    let episodes: usize = episodes.parse().context("EPISODES")?;
    let tasks: usize = tasks.parse().context("TASKS")?;
    let started = Instant::now();
    let players = (0..sessions).map(|k| {
        let url = url.clone();
        async move {
            let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str()).await.context("connecting")?;
            let mut steps: Vec<(f64, &'static str, f64, usize)> = Vec::new();
            let mut exchange = async |frame: Value| -> anyhow::Result<Value> {
                ws.send(Message::text(frame.to_string())).await?;
                loop {
                    match ws.next().await {
                        Some(Ok(Message::Text(text))) => return Ok(serde_json::from_str(&text)?),
                        Some(Ok(_)) => continue,
                        Some(Err(e)) => return Err(e.into()),
                        None => bail!("the connection closed"),
                    }
                }
            };
            for episode in 0..episodes {
                let task = (k * episodes + episode) % tasks;
                let answer = exchange(json!({"type": "reset", "data": {"task_index": task}})).await?;
                if answer["type"] != "observation" {
                    bail!("reset answered {answer}");
                }
                for step in 0..60 {
                    if think_ms > 0.0 {
                        let spread = 0.5 + unit((k * 1_000 + episode) as u64 * 64 + step as u64);
                        tokio::time::sleep(std::time::Duration::from_secs_f64(think_ms * spread / 1e3)).await;
                    }
                    let asked = Instant::now();
                    let answer = exchange(json!({"type": "step", "data": action(step)})).await?;
                    let kind = if step % 3 == 2 { "text" } else { "tool" };
                    steps.push((asked.elapsed().as_secs_f64(), kind, (asked - started).as_secs_f64(), episode));
                    if answer["type"] != "observation" {
                        bail!("step answered {answer}");
                    }
                    if answer["data"]["done"] == true {
                        break;
                    }
                }
            }
            let _ = ws.send(Message::text(json!({"type": "close", "data": {}}).to_string())).await;
            anyhow::Ok(steps)
        }
    });
    let played = futures::future::join_all(players).await;
    let wall = started.elapsed().as_secs_f64();
    let mut steps = Vec::new();
    let mut errors = Vec::new();
    for p in played {
        match p {
            Ok(s) => steps.extend(s.into_iter().map(|(took, kind, at, episode)| json!([took, kind, at, episode]))),
            Err(e) => errors.push(e.to_string()),
        }
    }
    println!("{}", json!({"wall_s": wall, "steps": steps, "errors": errors}));
    Ok(())
}

/// A number in [0, 1) fixed by `n` (splitmix64): the same think times in every run.
fn unit(n: u64) -> f64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as f64 / (u64::MAX as f64 + 1.0)
}
