//! Bad usage and bad configuration exit with 64 and name the bad value, before any work.

use crate::harness::{Workdir, text};

fn usage_error(work: &Workdir, args: &[&str], needle: &str) {
    let out = work.parley(args);
    assert_eq!(out.status.code(), Some(64), "{args:?}: {}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(needle), "{args:?}: `{stderr}` should name `{needle}`");
    assert!(!work.path("parley.db").exists(), "{args:?}: no work may start");
}

#[test]
fn bad_flags_and_values_exit_64() {
    let work = Workdir::new();
    usage_error(&work, &["run", "--concurrency", "0"], "--concurrency");
    usage_error(&work, &["run", "--env", "chess"], "chess");
    usage_error(&work, &["run", "--tasks", "missing.jsonl"], "missing.jsonl");
    usage_error(&work, &["run", "--base-url", "localhost:8000"], "localhost:8000");
    usage_error(&work, &["run", "--api-key-env", "PARLEY_UNSET_VARIABLE"], "PARLEY_UNSET_VARIABLE");
    usage_error(&work, &["run", "--temperature", "7"], "--temperature");
    usage_error(&work, &["run", "--trials", "many"], "many");
    usage_error(&work, &["run", "--no-such-flag"], "--no-such-flag");
    usage_error(&work, &["stub", "--rate-limit", "1.5"], "rate_limit");
}

#[test]
fn bad_task_rows_and_config_files_are_named() {
    let work = Workdir::new();
    std::fs::write(work.path("bad.jsonl"), "{\"responses_create_params\": {\"input\": \"hi\"}}\n{oops\n").unwrap();
    usage_error(&work, &["run", "--tasks", "bad.jsonl"], "bad.jsonl:2");
    std::fs::write(work.path("norow.jsonl"), "{\"input\": \"hi\"}\n").unwrap();
    usage_error(&work, &["run", "--tasks", "norow.jsonl"], "responses_create_params");
    std::fs::write(work.path("parley.toml"), "[run]\nconcurency = 3\n").unwrap();
    usage_error(&work, &["run"], "concurency");
}

#[test]
fn help_is_not_an_error() {
    let work = Workdir::new();
    let out = work.parley(&["run", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("--concurrency"));
}
