//! The trainer's side of Parley's service, for `bench/`. Two client modes, each writing JSON on
//! stdout, and a server:
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
//!     parley-bench-load calls URL ROLLOUTS.jsonl COUNT CONCURRENCY
//!
//! replays a run's model calls and nothing else: each line of ROLLOUTS.jsonl is one rollout's
//! request bodies in order (a JSON array of bodies). COUNT rollouts go at a fixed concurrency,
//! each posting its bodies to URL in turn through Parley's own HTTP client (`parley_http::plain`,
//! on the runtime `parley run` drives its sessions on) and reading each answer whole, nothing of
//! it parsed. The wall seconds and the count of each status. Beside the stub, its CPU against
//! the stub's is the floor under `parley run`'s ratio: the same calls, with no JSON, no engine
//! and no store.
//!
//!     parley-bench-load echo ADDRESS
//!
//! serves OpenEnv's WebSocket and does nothing else (see [`echo`]); it prints its `ws://` URL.
//! The `openenv` mode against it measures the transport's floor under any server's step.
//!
//! A client of its own in Rust, so that its cost stays small beside the servers measured.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("echo") {
        // A server, on the runtime `parley serve` has: a worker per core.
        return tokio::runtime::Runtime::new()?.block_on(echo(&args[1..]));
    }
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(client(args))
}

async fn client(args: Vec<String>) -> anyhow::Result<()> {
    match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]).await,
        Some("calls") => calls(&args[1..]).await,
        Some("openenv") => openenv(&args[1..]).await,
        _ => bail!(
            "usage: parley-bench-load run URL BODIES.jsonl COUNT CONCURRENCY | calls URL ROLLOUTS.jsonl COUNT CONCURRENCY | openenv WS_URL SESSIONS EPISODES TASKS [THINK_MS] | echo ADDRESS"
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

async fn calls(args: &[String]) -> anyhow::Result<()> {
    let [url, rollouts, count, concurrency] = args else {
        bail!("usage: parley-bench-load calls URL ROLLOUTS.jsonl COUNT CONCURRENCY");
    };
    let uri: http::Uri = url.parse().with_context(|| format!("URL {url}"))?;
    let count: usize = count.parse().context("COUNT")?;
    let concurrency = concurrency.parse::<usize>().context("CONCURRENCY")?.max(1);
    let text = std::fs::read_to_string(rollouts).with_context(|| format!("reading {rollouts}"))?;
    let mut calls: Vec<Vec<Bytes>> = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let bodies: Vec<Value> = serde_json::from_str(line).with_context(|| format!("line {} of {rollouts}", i + 1))?;
        calls.push(bodies.iter().map(|b| Bytes::from(b.to_string())).collect());
    }
    if calls.is_empty() {
        bail!("no rollouts in {rollouts}");
    }
    let (calls, client) = (Arc::new(calls), Arc::new(parley_http::plain::Plain::new(concurrency)));
    let headers = parley_http::json_headers(http::HeaderMap::new());
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers = (0..concurrency).map(|_| {
        let (calls, client, headers, next, uri) =
            (calls.clone(), client.clone(), headers.clone(), next.clone(), uri.clone());
        async move {
            let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return statuses;
                }
                for body in &calls[i % calls.len()] {
                    let request = parley_http::Request::post(uri.clone(), headers.clone(), body.clone());
                    let status = match client.send(request, 64 << 20).await {
                        Ok(answer) => answer.status().as_u16().to_string(),
                        Err(e) => format!("error: {e}"),
                    };
                    *statuses.entry(status).or_default() += 1;
                }
            }
        }
    });
    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    for each in futures::future::join_all(workers).await {
        for (status, n) in each {
            *statuses.entry(status).or_default() += n;
        }
    }
    let wall = started.elapsed().as_secs_f64();
    println!("{}", json!({"wall_s": wall, "rollouts": count, "statuses": statuses}));
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
            // Only what the trainer's loop needs of an answer is read: its type and `done`.
            let mut exchange = async |frame: String| -> anyhow::Result<Answer> {
                ws.send(Message::text(frame)).await?;
                loop {
                    match ws.next().await {
                        Some(Ok(Message::Text(text))) => return Answer::read(&text),
                        Some(Ok(_)) => continue,
                        Some(Err(e)) => return Err(e.into()),
                        None => bail!("the connection closed"),
                    }
                }
            };
            for episode in 0..episodes {
                let task = (k * episodes + episode) % tasks;
                let answer = exchange(json!({"type": "reset", "data": {"task_index": task}}).to_string()).await?;
                if !answer.observation {
                    bail!("reset answered {}", answer.text);
                }
                for step in 0..60 {
                    if think_ms > 0.0 {
                        let spread = 0.5 + unit((k * 1_000 + episode) as u64 * 64 + step as u64);
                        tokio::time::sleep(std::time::Duration::from_secs_f64(think_ms * spread / 1e3)).await;
                    }
                    let frame = json!({"type": "step", "data": action(step)}).to_string();
                    let asked = Instant::now();
                    let answer = exchange(frame).await?;
                    let kind = if step % 3 == 2 { "text" } else { "tool" };
                    steps.push((asked.elapsed().as_secs_f64(), kind, (asked - started).as_secs_f64(), episode));
                    if !answer.observation {
                        bail!("step answered {}", answer.text);
                    }
                    if answer.done {
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

/// The transport alone: an OpenEnv WebSocket server that does nothing. It answers a reset with an
/// observation of one message, and each step with an observation of one tool result, `done` at a
/// connection's sixth step since its reset (as the `openenv` mode's episodes end on tau2 airline
/// with the stub user). What a step costs through it is what the loopback socket, the WebSocket
/// framing and the client cost, with no server work: the floor under Parley's own step time.
async fn echo(args: &[String]) -> anyhow::Result<()> {
    let [listen] = args else { bail!("usage: parley-bench-load echo ADDRESS") };
    let listener = tokio::net::TcpListener::bind(listen.as_str()).await.with_context(|| format!("binding {listen}"))?;
    println!("ws://{}", listener.local_addr()?);
    loop {
        let (socket, _) = listener.accept().await?;
        tokio::spawn(async move {
            let Ok(mut ws) = tokio_tungstenite::accept_async(socket).await else { return };
            let mut steps = 0;
            while let Some(Ok(frame)) = ws.next().await {
                let Message::Text(text) = frame else { continue };
                let kind = Answer::kind(&text);
                let done = match kind.as_deref() {
                    Some("reset") => {
                        steps = 0;
                        false
                    }
                    Some("step") => {
                        steps += 1;
                        steps == 6
                    }
                    _ => return,
                };
                let answer = json!({"type": "observation", "data": {
                    "observation": {"messages": [{"role": "tool", "tool_call_id": "c0", "content": "4.0"}]},
                    "reward": if done { json!(1.0) } else { Value::Null },
                    "done": done,
                }});
                if ws.send(Message::text(answer.to_string())).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// What the trainer's loop reads of an answer: whether it is an observation, and `done`; the
/// rest is skipped unread, as a trainer hands it on to its policy without looking.
struct Answer {
    observation: bool,
    done: bool,
    /// The answer's start, for an error's message.
    text: String,
}

impl Answer {
    fn read(text: &str) -> anyhow::Result<Answer> {
        #[derive(serde::Deserialize)]
        struct Frame<'a> {
            #[serde(rename = "type", borrow)]
            kind: std::borrow::Cow<'a, str>,
            #[serde(default)]
            data: Data,
        }
        #[derive(serde::Deserialize, Default)]
        struct Data {
            #[serde(default)]
            done: bool,
        }
        let frame: Frame = serde_json::from_str(text).context("an answer that is not a frame")?;
        let observation = frame.kind == "observation";
        let text = if observation { String::new() } else { text.chars().take(500).collect() };
        Ok(Answer { observation, done: frame.data.done, text })
    }

    /// A frame's `type`, for the echo server.
    fn kind(text: &str) -> Option<String> {
        #[derive(serde::Deserialize)]
        struct Frame {
            #[serde(rename = "type")]
            kind: String,
        }
        serde_json::from_str::<Frame>(text).ok().map(|f| f.kind)
    }
}

/// A number in [0, 1) fixed by `n` (splitmix64): the same think times in every run.
fn unit(n: u64) -> f64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as f64 / (u64::MAX as f64 + 1.0)
}
