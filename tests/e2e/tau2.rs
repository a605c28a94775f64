//! tau2's domains through the binary: the oracle with a scripted user solves every solvable
//! task; the mock domain in a multi-turn conversation with the LLM user (the stub playing both
//! sides); `parley envs` lists the domains. The data is read from `../shared/data/tau2`, except
//! where a test shows the copy built into the binary at work, with no folder named.

use std::path::PathBuf;

use crate::harness::{Stub, Workdir, ok, read_jsonl, text};

fn data() -> String {
    crate::harness::tau2_data_dir()
}

#[tokio::test]
async fn the_oracle_solves_every_airline_task() {
    let work = Workdir::new();
    let data = data();
    let out = ok(&work.parley(&[
        "run",
        "--env",
        "tau2:airline",
        "--agent",
        "oracle",
        "--user",
        "scripted",
        "--data-dir",
        &data,
        "--db",
        "parley.db",
        "--out",
        "out.jsonl",
    ]));
    assert!(out.contains("terminations   user_stop 50"), "{out}");
    assert!(out.contains("reward         1.000 ± 0.000 (95% interval, n=50)"), "{out}");
    let rows = read_jsonl(&work.path("out.jsonl"));
    assert!(rows.iter().all(|r| r["reward"] == 1.0 && r["db_check"]["db_match"] == true), "{:?}", rows[0]);
    // Resume, show and export work on tau2 runs too: their tasks are rebuilt from the domain.
    let show = ok(&work.parley(&["show", "1", "--db", "parley.db"]));
    assert!(show.contains("Hi! How can I help you today?"), "{show}");
    let replay = ok(&work.parley(&["replay", "--run", "1", "--db", "parley.db"]));
    assert!(replay.contains("replayed 50 sessions of run 1: 0 tool outputs drifted, 0 rewards changed"), "{replay}");

    // The run exported as tau2's results document, which tau2 itself re-scores the same.
    ok(&work.parley(&["export", "1", "--format", "tau2", "--db", "parley.db", "--out", "results.json"]));
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(work.path("results.json")).unwrap()).unwrap();
    let simulations = results["simulations"].as_array().unwrap();
    assert_eq!(simulations.len(), 50);
    assert!(simulations.iter().all(|s| s["reward_info"]["reward"] == 1.0), "{}", simulations[0]);
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv-tau2");
    if venv.join(".parley-ready-26.3").is_file() {
        let out = std::process::Command::new(venv.join("bin/tau2"))
            .args(["evaluate-trajs", "results.json", "--output-dir", "rescored"])
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env("NO_COLOR", "1")
            .current_dir(work.dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let rescored: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(work.path("rescored/updated_results.json")).unwrap())
                .unwrap();
        let rewards: Vec<f64> = rescored["simulations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["reward_info"]["reward"].as_f64().unwrap())
            .collect();
        assert_eq!(rewards, vec![1.0; 50], "tau2 re-scores the run as Parley did");
    } else {
        crate::harness::skip("tau2's half: tau2 is not installed; run .ci/setup-tau2");
    }
}

#[tokio::test]
async fn a_split_selects_tasks_and_dual_control_solves_telecom() {
    let work = Workdir::new();
    let data = data();
    let out = ok(&work.parley(&[
        "run",
        "--env",
        "tau2:retail",
        "--split",
        "test",
        "--agent",
        "oracle",
        "--user",
        "scripted",
        "--data-dir",
        &data,
        "--db",
        "parley.db",
        "--out",
        "retail.jsonl",
    ]));
    assert!(out.contains("40 sessions"), "{out}");
    let out = ok(&work.parley(&[
        "run",
        "--env",
        "tau2:telecom",
        "--agent",
        "oracle",
        "--user",
        "scripted",
        "--data-dir",
        &data,
        "--db",
        "parley.db",
        "--out",
        "telecom.jsonl",
    ]));
    assert!(out.contains("reward         1.000 ± 0.000 (95% interval, n=20)"), "{out}");
    let db = work.db().await;
    let user_calls: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM tool_calls t JOIN sessions s ON s.id = t.session_id WHERE s.run_id = 2 AND t.party = 'user'",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert!(user_calls > 0, "telecom's users act on their own phones");
}

#[tokio::test]
async fn the_mock_domain_in_conversation_with_the_llm_user() {
    let work = Workdir::new();
    let data = data();
    let agent = Stub::start(&[]);
    let user = Stub::start(&["--user-turns", "3"]);
    let out = ok(&work.parley(&[
        "run",
        "--env",
        "tau2:mock",
        "--data-dir",
        &data,
        "--base-url",
        &agent.url,
        "--user",
        "llm",
        "--user-base-url",
        &user.url,
        "--db",
        "parley.db",
        "--out",
        "out.jsonl",
    ]));
    assert!(out.contains("10 sessions"), "{out}");
    assert!(out.contains("user tokens"), "{out}");
    let db = work.db().await;
    // The agent got tau2's policy as its system prompt, stored once for every session, and the
    // users their scenarios.
    let (system, sharing): (String, i64) = sqlx::query_as(
        "SELECT x.text, (SELECT COUNT(*) FROM messages WHERE content_id = x.id) FROM messages m
         JOIN texts x ON x.id = m.content_id WHERE m.session_id = 1 AND m.seq = 0",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert!(system.contains("<policy>"), "{system}");
    assert_eq!(sharing, 10, "one policy for the 10 sessions");
    let user_requests: Vec<String> = sqlx::query_scalar(
        "SELECT c.request FROM model_calls c JOIN messages m ON m.session_id = c.session_id AND m.seq = c.seq
         WHERE m.role = 'user' AND c.session_id = 1",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    assert!(!user_requests.is_empty());
    assert!(user_requests[0].contains("<scenario>"), "{}", user_requests[0]);
    let stops: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sessions WHERE termination = 'user_stop'")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(stops, 10, "every conversation ended with the user's stop");
}

#[test]
fn envs_lists_the_domains_with_their_counts() {
    let work = Workdir::new();
    let out = ok(&work.parley(&["envs", "--data-dir", &data()]));
    for line in ["tau2:airline", "tau2:retail", "tau2:telecom", "tau2:mock", "multi-step", "nemo-gym", "mcp"] {
        assert!(out.contains(line), "{out}");
    }
    let airline = out.lines().find(|l| l.starts_with("tau2:airline")).unwrap();
    assert!(airline.split_whitespace().any(|w| w == "50"), "{airline}");
}

/// With no `--data-dir` and no `PARLEY_TAU2_DATA`, tau2's domains come from the copy built into
/// the binary: `parley envs` counts their tasks and credits the data, a multi-turn run of the mock
/// domain with the LLM user (the in-process stub on both sides) and the oracle's airline run need
/// no download. A folder named by the flag or the variable wins over the built-in copy.
#[test]
fn the_built_in_data_needs_no_folder() {
    let work = Workdir::new();
    let unset = ["PARLEY_TAU2_DATA"];
    let out = ok(&work.parley_without_env(&["envs"], &unset));
    for (env, tasks) in [("tau2:mock", "10"), ("tau2:airline", "50"), ("tau2:retail", "114"), ("tau2:telecom", "20")] {
        let line = out.lines().find(|l| l.starts_with(env)).unwrap_or_else(|| panic!("{env} listed: {out}"));
        assert!(line.split_whitespace().nth(3) == Some(tasks) && line.contains("(built in)"), "{line}");
    }
    assert!(out.contains("tau2-bench (MIT License, Copyright (c) 2025 Sierra Research"), "{out}");

    let out =
        ok(&work.parley_without_env(&["run", "--env", "tau2:mock", "--user", "llm", "--db", "parley.db"], &unset));
    assert!(out.contains("10 sessions"), "{out}");
    assert!(out.contains("user tokens"), "the simulated user spoke: {out}");
    let args = ["run", "--env", "tau2:airline", "--agent", "oracle", "--user", "scripted", "--db", "parley.db"];
    let out = ok(&work.parley_without_env(&args, &unset));
    assert!(out.contains("reward         1.000 ± 0.000 (95% interval, n=50)"), "{out}");

    let folder = ok(&work.parley_without_env(&["envs", "--data-dir", &data()], &unset));
    assert!(folder.contains(&format!("tau2's airline domain (from {})", data())), "{folder}");
    assert!(!folder.contains("built in"), "{folder}");
    let missing = ok(&work.parley_with_env(&["envs"], &[("PARLEY_TAU2_DATA", "/nonexistent-tau2-data")]));
    assert!(missing.contains("tau2 data directory /nonexistent-tau2-data does not exist"), "{missing}");
}

/// `--num-tasks` takes the first N tasks of the split; `--tasks` is refused, as the domain brings
/// its own.
#[test]
fn num_tasks_takes_the_first_tasks_of_a_split() {
    let work = Workdir::new();
    let data = data();
    let args = ["run", "--env", "tau2:airline", "--agent", "oracle", "--user", "scripted", "--data-dir", &data];
    let out = ok(&work.parley(&[&args[..], &["--split", "test", "--num-tasks", "3", "--out", "out.jsonl"]].concat()));
    assert!(out.contains("terminations   user_stop 3"), "{out}");
    let mut rows = read_jsonl(&work.path("out.jsonl"));
    rows.sort_by_key(|r| r["_ng_task_index"].as_u64());
    let test_split: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(PathBuf::from(&data).join("airline/split_tasks.json")).unwrap())
            .unwrap();
    let tasks: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(PathBuf::from(&data).join("airline/tasks.json")).unwrap())
            .unwrap();
    let test = test_split["test"].as_array().unwrap();
    // The split's tasks in the domain's order, as every split is run.
    let first: Vec<&serde_json::Value> =
        tasks.as_array().unwrap().iter().map(|t| &t["id"]).filter(|id| test.contains(id)).take(3).collect();
    let ids: Vec<&serde_json::Value> = rows.iter().map(|r| &r["id"]).collect();
    assert_eq!(ids, first);

    let out = work.parley(&[&args[..], &["--tasks", "rows.jsonl"]].concat());
    assert_eq!(out.status.code(), Some(64));
    assert!(text(&out.stderr).contains("bring their own tasks"), "{}", text(&out.stderr));
}
