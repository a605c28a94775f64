//! Multi-turn conversations through the binary: an LLM user (the stub playing it), a scripted
//! user, a replayed user and a person typing through a pipe.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::harness::{PARLEY, Stub, Workdir, ok, read_jsonl, run, text};

#[tokio::test]
async fn an_llm_user_talks_with_the_agent_until_it_stops() {
    let work = Workdir::new();
    work.tasks(3);
    let agent = Stub::start(&[]);
    let user = Stub::start(&["--user-turns", "2"]);
    let out = ok(&run(&work, &agent, &["--user", "llm", "--user-base-url", &user.url, "--user-model", "user-model"]));
    assert!(out.contains("terminations   user_stop 3"), "{out}");
    assert!(out.contains("user tokens    prompt"), "user tokens are reported apart: {out}");
    let db = work.db().await;
    // Per session: the opening, then two agent rounds (2 tool calls and a text each), the
    // user's answer between them and its stop at the end. The opening counts as the user's
    // first turn, so with two turns the stub's user answers once, then stops.
    let roles: Vec<String> =
        sqlx::query_scalar("SELECT role FROM messages WHERE session_id = 1 ORDER BY seq").fetch_all(&db).await.unwrap();
    let users = roles.iter().filter(|r| *r == "user").count();
    assert_eq!(users, 1 + 2, "the task's message, an answer, the stop: {roles:?}");
    let user_calls: Vec<(String, String)> = sqlx::query_as(
        "SELECT json_extract(c.request, '$.model'), msg.content FROM model_calls c
         JOIN messages msg ON msg.session_id = c.session_id AND msg.seq = c.seq
         WHERE c.session_id = 1 AND msg.role = 'user' ORDER BY c.seq",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    assert_eq!(user_calls.len(), 2, "each user turn is stored with its own model call");
    assert!(user_calls.iter().all(|(model, _)| model == "user-model"));
    assert!(user_calls.last().unwrap().1.contains("###STOP###"));
    // The user's endpoint never saw a tool: its requests hold no tool calls of the agent.
    let requests: Vec<String> = sqlx::query_scalar(
        "SELECT c.request FROM model_calls c JOIN messages msg ON msg.session_id = c.session_id AND msg.seq = c.seq
         WHERE msg.role = 'user'",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    assert!(requests.iter().all(|r| !r.contains("get_synonym_value") && !r.contains("tool_calls")));
    assert!(agent.stats()["requests"].as_u64().unwrap() > 0 && user.stats()["requests"] == 6);
    let show = ok(&work.parley(&["show", "1", "--db", "parley.db"]));
    assert!(show.contains("] user  ("), "user turns show their own figures: {show}");

    // The rows written live and the rows exported from the store count the agent's tokens
    // alone: the user's calls are the user's.
    let live = read_jsonl(&work.path("out.jsonl"));
    ok(&work.parley(&["export", "1", "--format", "nemo-gym", "--out", "exported.jsonl"]));
    let exported = read_jsonl(&work.path("exported.jsonl"));
    assert_eq!(live.len(), 3);
    let usage = |rows: &[serde_json::Value]| -> Vec<(u64, serde_json::Value)> {
        let mut all: Vec<_> =
            rows.iter().map(|r| (r["_ng_task_index"].as_u64().unwrap(), r["response"]["usage"].clone())).collect();
        all.sort_by_key(|(i, _)| *i);
        all
    };
    assert_eq!(usage(&live), usage(&exported));
    let agent_prompt: i64 = sqlx::query_scalar(
        "SELECT SUM(c.prompt_tokens) FROM model_calls c JOIN messages m ON m.session_id = c.session_id AND m.seq = c.seq
         WHERE c.session_id = 1 AND m.role = 'assistant'",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    let row = exported.iter().find(|r| r["_parley_session"].is_null() && r["_ng_task_index"] == 0).unwrap();
    assert_eq!(row["response"]["usage"]["input_tokens"], agent_prompt);
}

#[tokio::test]
async fn a_scripted_user_says_the_rows_follow_ups() {
    let work = Workdir::new();
    let row = serde_json::json!({
        "responses_create_params": {"input": [{"role": "user", "content": "What is the capital of France?"}]},
        "follow_ups": ["What is its population?", "Name one landmark."],
        "expected_synonym_values": [0],
    });
    std::fs::write(work.path("tasks.jsonl"), format!("{row}\n")).unwrap();
    let stub = Stub::start(&[]);
    let out = ok(&run(&work, &stub, &["--user", "scripted"]));
    assert!(out.contains("terminations   user_stop 1"), "{out}");
    let db = work.db().await;
    let users: Vec<String> = sqlx::query_scalar("SELECT content FROM messages WHERE role = 'user' ORDER BY seq")
        .fetch_all(&db)
        .await
        .unwrap();
    assert_eq!(
        users,
        ["What is the capital of France?", "What is its population?", "Name one landmark.", "###STOP###"]
    );
}

#[tokio::test]
async fn a_replayed_user_says_the_recorded_turns_again() {
    let work = Workdir::new();
    work.tasks(2);
    let stub = Stub::start(&["--user-turns", "1"]);
    ok(&run(&work, &stub, &["--user", "llm"]));
    let out = ok(&work.parley(&[
        "run",
        "--tasks",
        "tasks.jsonl",
        "--base-url",
        &stub.url,
        "--db",
        "parley.db",
        "--out",
        "replayed.jsonl",
        "--user",
        "replay",
        "--user-replay-run",
        "1",
    ]));
    assert!(out.contains("user_stop 2"), "{out}");
    let db = work.db().await;
    let said = |run: i64| {
        let db = db.clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "SELECT m.content FROM messages m JOIN sessions s ON s.id = m.session_id
                 WHERE s.run_id = ? AND m.role = 'user' ORDER BY s.task_index, m.seq",
            )
            .bind(run)
            .fetch_all(&db)
            .await
            .unwrap()
        }
    };
    assert_eq!(said(1).await, said(2).await);
    let user_calls: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM model_calls c JOIN sessions s ON s.id = c.session_id
         JOIN messages m ON m.session_id = c.session_id AND m.seq = c.seq WHERE s.run_id = 2 AND m.role = 'user'",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!(user_calls, 0, "a replayed user calls no model");
    let out = work.parley(&["run", "--user", "replay"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(text(&out.stderr).contains("--user-replay-run"));
}

#[test]
fn a_person_can_play_the_user_through_a_pipe() {
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&[]);
    let mut child = Command::new(PARLEY)
        .current_dir(work.dir.path())
        .args(["run", "--tasks", "tasks.jsonl", "--base-url", &stub.url, "--db", "parley.db", "--out", "out.jsonl"])
        .args(["--user", "human", "--concurrency", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"Can you check again?\nThanks, bye ###STOP###\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = ok(&out);
    assert!(stdout.contains("terminations   user_stop 1"), "{stdout}");
    let shown = text(&out.stderr);
    assert!(shown.contains("agent> Result: {\"success\":true}"), "the person sees the agent's text: {shown}");
    let rows = read_jsonl(&work.path("out.jsonl"));
    let output = rows[0]["response"]["output"].as_array().unwrap();
    assert!(output.iter().any(|i| i["role"] == "user" && i["content"] == "Can you check again?"));
}
