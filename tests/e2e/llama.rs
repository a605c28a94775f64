//! A real model, run locally, on both sides of a conversation: llama.cpp's `llama-server` with
//! SmolLM2-135M-Instruct (both from PyPI, built by `.ci/setup-llama`) plays the agent, through
//! the JSON-schema tool mode since it cannot call tools natively, and the simulated user.

use parley_core::SessionStatus;
use std::process::Command;

use crate::harness::{Workdir, root, text};

/// Stops the server when the test ends, however it ends.
struct Server {
    port: &'static str,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new(root().join(".ci/llama-serve")).args(["stop", self.port]).status();
    }
}

#[tokio::test]
async fn a_local_model_plays_agent_and_user() {
    // Built for this processor's instruction sets: a build from another processor does not count.
    let cached = Command::new(root().join(".ci/setup-llama")).arg("--cached").output().unwrap();
    if !cached.status.success() {
        crate::harness::skip("llama-server is not built for this processor; run .ci/setup-llama");
        return;
    }
    let port = "18188";
    let started = Command::new(root().join(".ci/llama-serve"))
        .args(["start", port])
        // One thread: the tests around it share the machine's two cores.
        .env("LLAMA_THREADS", "1")
        .output()
        .unwrap();
    assert!(started.status.success(), "{}", text(&started.stderr));
    let _server = Server { port };
    let url = text(&started.stdout).trim().to_owned();
    assert_eq!(url, format!("http://127.0.0.1:{port}/v1"));

    let work = Workdir::new();
    work.tasks(2);
    let out = work.parley(&[
        "run",
        "--tasks",
        "tasks.jsonl",
        "--base-url",
        &url,
        "--model",
        "smollm2",
        "--tool-mode",
        "json",
        "--temperature",
        "0",
        "--max-tokens",
        "64",
        "--max-steps",
        "3",
        "--user",
        "llm",
        "--user-max-tokens",
        "40",
        "--max-turns",
        "2",
        "--call-timeout",
        "180",
        "--concurrency",
        "1",
        "--db",
        "parley.db",
        "--out",
        "out.jsonl",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {}", text(&out.stderr));
    assert!(!stdout.contains("infrastructure_error"), "{stdout}");

    let db = work.db().await;
    let sessions: Vec<(String, String)> =
        sqlx::query_as("SELECT status, termination FROM sessions").fetch_all(&db).await.unwrap();
    assert_eq!(sessions.len(), 2);
    assert!(sessions.iter().all(|(status, _)| status == SessionStatus::Finished.as_str()), "{sessions:?}");
    // Turns on both sides were stored, each with the real model call that produced it.
    let by_role: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT m.role, COUNT(*), SUM(c.completion_tokens) FROM model_calls c
         JOIN messages m ON m.session_id = c.session_id AND m.seq = c.seq GROUP BY m.role ORDER BY m.role",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    let agent = by_role.iter().find(|(role, ..)| role == "assistant").expect("agent turns");
    let user = by_role.iter().find(|(role, ..)| role == "user").expect("user turns");
    assert!(agent.1 >= 2 && agent.2 > 0, "{by_role:?}");
    assert!(user.1 >= 1 && user.2 > 0, "{by_role:?}");
    // The agent's requests carried the JSON-schema tool format, not native tools.
    let request: String = sqlx::query_scalar(
        "SELECT c.request FROM model_calls c JOIN messages m ON m.session_id = c.session_id AND m.seq = c.seq
         WHERE m.role = 'assistant' LIMIT 1",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert!(request.contains("json_schema") && !request.contains("\"tools\""), "{request}");
}
