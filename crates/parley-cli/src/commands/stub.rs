//! `parley stub`: serve the deterministic stub model until Ctrl-C.

use std::time::Duration;

use anyhow::Context;
use parley_stub::{Faults, StubConfig};

use crate::cli::StubArgs;
use crate::error::usage;

pub fn config(args: &StubArgs) -> anyhow::Result<StubConfig> {
    let config = StubConfig {
        tool_calls: args.tool_calls,
        latency: Duration::from_millis(args.latency_ms),
        latency_spread: Duration::from_millis(args.latency_spread_ms),
        faults: Faults {
            rate_limit: args.rate_limit,
            server_error: args.server_error,
            hang: args.hang,
            malformed: args.malformed,
            bad_arguments: args.bad_arguments,
            reset: args.reset,
            huge: args.huge,
        },
        seed: args.seed,
        hang: Duration::from_secs(args.hang_secs),
        retry_after_secs: args.retry_after,
        final_text: args.final_text.clone(),
        user_turns: args.user_turns,
        user_faults: args.user_fault.clone(),
        huge_bytes: args.huge_bytes,
        reasoning: args.reasoning,
        answers: answers(args)?,
        judge: args.judge,
        token_ids: args.token_ids,
        probe: args.probe,
        scripts: None,
    };
    config.validate().map_err(|e| usage(e.to_string()))?;
    Ok(config)
}

/// The answer key of `--answers`, checked: its fractions lie in [0, 1] and add up to at most 1.
fn answers(args: &StubArgs) -> anyhow::Result<Option<std::sync::Arc<parley_stub::AnswerKey>>> {
    let Some(path) = &args.answers else { return Ok(None) };
    let (wrong, malformed) = (args.wrong_answers, args.malformed_answers);
    if !(0.0..=1.0).contains(&wrong) || !(0.0..=1.0).contains(&malformed) || wrong + malformed > 1.0 + 1e-9 {
        return Err(usage(format!(
            "--wrong-answers {wrong} and --malformed-answers {malformed}: each between 0 and 1, together at most 1"
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| usage(format!("--answers {}: {e}", path.display())))?;
    let mut key = parley_stub::AnswerKey::from_jsonl(&text, &args.answer_field)
        .map_err(|e| usage(format!("--answers {}: {e}", path.display())))?;
    if key.is_empty() {
        return Err(usage(format!(
            "--answers {}: no row has a first user message and a `{}` field",
            path.display(),
            args.answer_field
        )));
    }
    key.format = args.answer_format.clone();
    key.wrong = wrong;
    key.malformed = malformed;
    if let Some(rate) = args.learner {
        if !(rate.is_finite() && (0.0..=1.0).contains(&rate)) {
            return Err(usage(format!("--learner {rate}: a rate between 0 and 1")));
        }
        key.learner = Some(std::sync::Arc::new(parley_stub::Learner::new(rate)));
    }
    Ok(Some(std::sync::Arc::new(key)))
}

/// Connections a run opens at once and the stub has not accepted yet. A run of thousands of
/// sessions connects them all in its first moments; with the usual backlog of 128, the kernel
/// drops the connections past it, and each one waits a second for TCP to try again. The kernel
/// caps this at `net.core.somaxconn`.
const BACKLOG: u32 = 8192;

/// Binds the first address `host` resolves to, with a backlog for thousands of sessions.
async fn listen(host: &str, port: u16) -> std::io::Result<tokio::net::TcpListener> {
    let address = tokio::net::lookup_host((host, port))
        .await?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "the host has no address"))?;
    let socket = if address.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(BACKLOG)
}

pub async fn stub(args: StubArgs) -> anyhow::Result<()> {
    let config = config(&args)?;
    let listener =
        listen(&args.host, args.port).await.with_context(|| format!("binding {}:{}", args.host, args.port))?;
    let address = listener.local_addr()?;
    eprintln!("parley stub (a deterministic test double, not a model) listening on http://{address}/v1");
    // The address on stdout, alone, so scripts can read it.
    println!("http://{address}/v1");
    let call_ids = if args.repeat_call_ids { parley_stub::CallIds::Repeated } else { parley_stub::CallIds::PerTurn };
    parley_stub::serve_with(listener, config, call_ids, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
    .context("serving the stub")
}
