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

    // The splits.
    let lines = |f: &str| std::fs::read_to_string(work.path(f)).unwrap().lines().count();
    assert_eq!(
        [lines("all.jsonl"), lines("train.jsonl"), lines("validation.jsonl"), lines("test.jsonl")],
        [10_000, 8_000, 1_000, 1_000]
    );
    // The baseline's figures, as the tutorial states them.
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(work.path("baseline-metrics.json")).unwrap()).unwrap();
    let run = &metrics["training"]["run"];
    assert_eq!(run["sessions"], 4000);
    let mean = run["mean_reward"].as_f64().unwrap();
    let correct = run["components"]["correct"].as_f64().unwrap();
    assert!((mean - 0.593).abs() < 0.0005 && (correct - 0.527).abs() < 0.0005, "{run}");
    // Success is the `correct` component's: every right answer, 0.527 / 0.9 of the sessions.
    let success = run["success_rate"].as_f64().unwrap();
    assert!((success - 0.527 / 0.9).abs() < 0.001, "{run}");
    assert_eq!(run["mean_steps"].as_f64(), Some(1.0));
    assert!(stdout.contains("components     correct 0.527 · format 0.091 · steps -0.025"), "{stdout}");
    assert!(stdout.contains("rescored 4000 sessions of run 1: 0 changed"), "{stdout}");
}
