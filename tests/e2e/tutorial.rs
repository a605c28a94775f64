//! `docs/training-environment.md`, run: every `sh` block of the tutorial, in order, as one bash
//! script in a scratch folder with the built `parley` first on the PATH.

use serde_json::Value;

use crate::harness::{PARLEY, Workdir, root, text};

#[test]
fn every_command_of_the_tutorial_runs_and_does_what_it_says() {
    let doc = std::fs::read_to_string(root().join("docs/training-environment.md")).unwrap();
    let mut script = String::from("set -euo pipefail\n");
    let mut in_block = false;
    for line in doc.lines() {
        match (in_block, line) {
            (false, "```sh") => in_block = true,
            (true, "```") => in_block = false,
            (true, line) => script.push_str(&format!("{line}\n")),
            _ => {}
        }
    }
    assert!(script.lines().count() > 20, "the tutorial's commands were found");
    let work = Workdir::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bin = std::path::Path::new(PARLEY).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(work.dir.path())
        .env("PATH", path)
        .env("PORT", port.to_string())
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "the tutorial failed:\n{stdout}\n{}", text(&out.stderr));

    // The splits: their shares, by each question's seeded hash, and no question in two parts.
    let lines = |f: &str| std::fs::read_to_string(work.path(f)).unwrap().lines().count();
    assert_eq!(
        [lines("all.jsonl"), lines("train.jsonl"), lines("validation.jsonl"), lines("test.jsonl")],
        [10_000, 8_038, 976, 986]
    );
    assert!(stdout.contains("test.jsonl: 986 rows, 834 good, 152 named (near_duplicate 152)"), "{stdout}");
    // The tutorial's reward pays none of the probes on 200 validation rows.
    assert!(stdout.contains("200 tasks; paid means a reward above 0.5; paid probes: none"), "{stdout}");
    // The baseline's figures, as the tutorial states them.
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(work.path("baseline-metrics.json")).unwrap()).unwrap();
    let run = &metrics["training"]["run"];
    assert_eq!(run["sessions"], 3944);
    let mean = run["mean_reward"].as_f64().unwrap();
    let correct = run["components"]["correct"].as_f64().unwrap();
    assert!((mean - 0.582).abs() < 0.0005 && (correct - 0.518).abs() < 0.0005, "{run}");
    // Success is the `correct` component's: every right answer, 0.5175 / 0.9 of the sessions.
    let success = run["success_rate"].as_f64().unwrap();
    assert!((success - 0.5175 / 0.9).abs() < 0.001, "{run}");
    assert_eq!(run["mean_steps"].as_f64(), Some(1.0));
    assert!(stdout.contains("components     correct 0.518 · format 0.090 · steps -0.025"), "{stdout}");
    assert!(stdout.contains("rescored 3944 sessions of run 1: 0 changed"), "{stdout}");
}

/// `parley tasks check` through the binary: a row that leaks into another split or cannot be
/// scored fails the check (exit 1) and is named by line; repeated rows are named without
/// failing it; `--json` gives the same findings as one object.
#[test]
fn a_task_file_check_names_leaks_and_unscorable_rows_and_fails_on_them() {
    let work = Workdir::new();
    let row = |q: &str| format!(r#"{{"responses_create_params":{{"input":"{q}"}},"expected_answer":"1"}}"#);
    std::fs::write(work.path("test.jsonl"), row("What is 0+1?") + "\n").unwrap();
    let clean = [row("What is 1+0?"), row("what is  1+0?")].join("\n");
    std::fs::write(work.path("train.jsonl"), &clean).unwrap();
    let check = |file: &str, extra: &[&str]| {
        let mut args = vec!["tasks", "check", file, "--env", "custom", "--reward", "math", "--against", "test.jsonl"];
        args.extend(extra);
        work.parley(&args)
    };
    let out = check("train.jsonl", &[]);
    assert!(out.status.success(), "a repeated row alone does not fail it: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("train.jsonl:2: the same question as line 1"), "{}", text(&out.stdout));
    assert_eq!(check("train.jsonl", &["--fail-on-duplicates"]).status.code(), Some(1));

    let leaky = [row("What is 1+0?"), row("WHAT IS 0+1?"), r#"{"responses_create_params":{"input":"2?"}}"#.into()];
    std::fs::write(work.path("leaky.jsonl"), leaky.join("\n")).unwrap();
    let out = check("leaky.jsonl", &[]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("leaky.jsonl:2: also in test.jsonl:1"), "{said}");
    assert!(said.contains("leaky.jsonl:3: cannot run: the row has no `expected_answer`"), "{said}");
    let json: Value = serde_json::from_slice(&check("leaky.jsonl", &["--json"]).stdout).unwrap();
    assert_eq!(json["counts"], serde_json::json!({"leaked": 1, "unrunnable": 1}), "{json}");
    assert_eq!((json["rows"].as_u64(), json["good"].as_u64()), (Some(3), Some(1)));
}

/// `parley tasks select` through the binary: a run's tasks by their stored pass rates, a band
/// that is not one refused as usage (64), a run without scored sessions named.
#[test]
fn tasks_are_selected_by_their_stored_pass_rates() {
    let work = Workdir::new();
    work.tasks(6);
    let stub = crate::harness::Stub::start(&[]);
    crate::harness::ok(&crate::harness::run(&work, &stub, &["--trials", "2"]));
    let out = work.parley(&["tasks", "select", "--run", "1", "--pass-between", "0", "1", "--out", "all.jsonl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows = std::fs::read_to_string(work.path("all.jsonl")).unwrap();
    assert_eq!(rows.lines().count(), 6, "the whole band holds every scored task");
    assert!(text(&out.stderr).contains("6 tasks in the band written"), "{}", text(&out.stderr));
    let none = work.parley(&["tasks", "select", "--run", "1", "--pass-between", "0.4", "0.6"]);
    assert!(
        text(&none.stderr).contains("0 tasks in the band written"),
        "the stub's trials agree: {}",
        text(&none.stderr)
    );
    let bad = work.parley(&["tasks", "select", "--run", "1", "--pass-between", "0.9", "0.1"]);
    assert_eq!(bad.status.code(), Some(64), "{}", text(&bad.stderr));
}

/// `parley run --budget N`: N sessions drawn from the tasks a round at a time, the tasks in turn
/// (`uniform`) or by their outcomes so far (`learnable`), which count the store's earlier runs of
/// the environment: a task no run has seen is drawn first.
#[tokio::test]
async fn a_budget_is_drawn_from_the_tasks_in_turn_or_unseen_first() {
    let work = Workdir::new();
    work.tasks(6);
    let stub = crate::harness::Stub::start(&[]);
    let run = |extra: &[&str]| crate::harness::run(&work, &stub, extra);
    let out = run(&["--budget", "14", "--concurrency", "4"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("14 sessions drawn (uniform sampler) from 6 tasks"), "{}", text(&out.stderr));
    assert_eq!(crate::harness::read_jsonl(&work.path("out.jsonl")).len(), 14);
    let db = work.db().await;
    let drawn = |run: i64| {
        let db = db.clone();
        async move {
            let rows: Vec<(i64, i64)> = sqlx::query_as(
                "SELECT task_index, COUNT(*) FROM sessions WHERE run_id = ? AND status = 'finished' GROUP BY task_index",
            )
            .bind(run)
            .fetch_all(&db)
            .await
            .unwrap();
            rows
        }
    };
    assert_eq!(drawn(1).await, [(0, 3), (1, 3), (2, 2), (3, 2), (4, 2), (5, 2)], "in turn");

    // In a store of its own, a run of the tasks' first half gives them outcomes; then the
    // learnable sampler draws the tasks no run has seen before any other.
    let fresh = Workdir::new();
    let tasks = std::fs::read_to_string(work.path("tasks.jsonl")).unwrap();
    std::fs::write(fresh.path("tasks.jsonl"), &tasks).unwrap();
    std::fs::write(fresh.path("half.jsonl"), tasks.lines().take(3).collect::<Vec<_>>().join("\n") + "\n").unwrap();
    let seen = fresh.parley(&[
        "run",
        "--tasks",
        "half.jsonl",
        "--base-url",
        &stub.url,
        "--db",
        "parley.db",
        "--out",
        "a.jsonl",
    ]);
    assert!(seen.status.success(), "{}", text(&seen.stderr));
    let args = ["run", "--tasks", "tasks.jsonl", "--base-url", &stub.url, "--db", "parley.db", "--out", "b.jsonl"];
    let out = fresh.parley(&[&args[..], &["--budget", "3", "--sampler", "learnable", "--concurrency", "3"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let db = fresh.db().await;
    let rows: Vec<(i64,)> = sqlx::query_as("SELECT task_index FROM sessions WHERE run_id = 2 ORDER BY task_index")
        .fetch_all(&db)
        .await
        .unwrap();
    assert_eq!(rows, [(3,), (4,), (5,)], "the tasks the first run never saw come first");

    // Bad input: a learnable sampler with no budget, a budget of 0, a budget left to workers.
    for (extra, says) in [
        (&["--sampler", "learnable"][..], "--budget N"),
        (&["--budget", "0"][..], "--budget must be greater than 0"),
        (&["--budget", "5", "--detach"][..], "--detach"),
    ] {
        let out = fresh.parley(&[&args[..], extra].concat());
        assert_eq!(out.status.code(), Some(64), "{extra:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains(says), "{extra:?}: {}", text(&out.stderr));
    }
}
