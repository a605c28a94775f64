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
    usage_error(&work, &["stub", "--threads", "0"], "--threads");
    usage_error(&work, &["run", "--max-tool-output", "0"], "--max-tool-output");
    usage_error(&work, &["run", "--max-response-bytes", "0"], "--max-response-bytes");
    usage_error(&work, &["run", "--shutdown-grace=-1"], "--shutdown-grace");
    usage_error(&work, &["run", "--bad-rows", "maybe"], "invalid value 'maybe' for '--bad-rows");
    usage_error(&work, &["run", "--session-timeout", "NaN"], "--session-timeout");
    usage_error(&work, &["run", "--env", "tau2:airline", "--data-dir", "no-such-dir"], "no-such-dir");
    usage_error(&work, &["sessions", "1", "--failure", "gremlins"], "--failure `gremlins`");
}

/// Durations and sizes too large for any clock are refused up front by name, from the flags and
/// from `parley.toml` alike, never panicked on.
#[test]
fn huge_durations_and_sizes_are_refused_before_any_work() {
    let work = Workdir::new();
    for flag in ["--session-timeout", "--call-timeout", "--shutdown-grace"] {
        usage_error(&work, &["run", flag, "1e20"], flag);
        usage_error(&work, &["run", flag, "inf"], flag);
    }
    usage_error(&work, &["run", "--max-response-bytes", "18446744073709551615"], "--max-response-bytes");
    usage_error(&work, &["run", "--concurrency", "18446744073709551615"], "--concurrency");
    for key in ["session_timeout", "call_timeout", "shutdown_grace"] {
        std::fs::write(work.path("parley.toml"), format!("[run]\n{key} = 1e20\n")).unwrap();
        usage_error(&work, &["run"], &format!("--{}", key.replace('_', "-")));
    }
    std::fs::remove_file(work.path("parley.toml")).unwrap();
}

/// Inputs and outputs that cannot work are named for what is wrong with them, before the run is
/// recorded.
#[test]
fn unusable_paths_are_named_for_what_is_wrong_before_any_work() {
    let work = Workdir::new();
    std::fs::create_dir(work.path("folder")).unwrap();
    std::fs::write(work.path("file.txt"), "x").unwrap();
    usage_error(&work, &["run", "--out", "missing/out.jsonl"], "does not exist");
    usage_error(&work, &["run", "--out", "folder"], "is a directory");
    usage_error(&work, &["run", "--tasks", "folder"], "is a directory");
    usage_error(&work, &["run", "--tasks", "/dev/null"], "not a regular file");
    usage_error(&work, &["run", "--env", "tau2:mock", "--data-dir", "file.txt"], "is a file, not a folder");
    usage_error(&work, &["run", "--db", "folder"], "is a directory");
    usage_error(&work, &["runs", "--db", "folder"], "is a directory");
    let out = work.parley(&["sessions", "1", "--status", "bogus"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(text(&out.stderr).contains("pending") && text(&out.stderr).contains("finished"), "{}", text(&out.stderr));
    assert!(!work.path("parley.db").exists());
}

/// A task file saved with a UTF-8 byte-order mark (as some editors write it) is read.
#[test]
fn a_task_file_with_a_byte_order_mark_is_read() {
    let work = Workdir::new();
    work.tasks(2);
    let rows = std::fs::read_to_string(work.path("tasks.jsonl")).unwrap();
    std::fs::write(work.path("bom.jsonl"), format!("\u{feff}{rows}")).unwrap();
    let out = work.parley(&["run", "--tasks", "bom.jsonl", "--out", "out.jsonl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("2 sessions"), "{}", text(&out.stdout));
}

#[test]
fn bad_rows_are_named_by_line_and_either_stop_the_run_or_are_skipped() {
    let work = Workdir::new();
    work.tasks(3);
    let good: Vec<String> =
        std::fs::read_to_string(work.path("tasks.jsonl")).unwrap().lines().map(str::to_owned).collect();
    let mut unknown_tool: serde_json::Value = serde_json::from_str(&good[0]).unwrap();
    unknown_tool["responses_create_params"]["tools"][0]["name"] = "launch_rockets".into();
    let rows = [good[0].clone(), "{not json".into(), good[1].clone(), unknown_tool.to_string(), good[2].clone()];
    std::fs::write(work.path("mixed.jsonl"), rows.join("\n") + "\n").unwrap();

    let out = work.parley(&["run", "--tasks", "mixed.jsonl"]);
    assert_eq!(out.status.code(), Some(64));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("2 of the rows in mixed.jsonl cannot be read"), "{stderr}");
    assert!(stderr.contains("mixed.jsonl:2: not a JSON row"), "{stderr}");
    assert!(stderr.contains("mixed.jsonl:4: the row declares the tool `launch_rockets`"), "{stderr}");
    assert!(stderr.contains("--bad-rows skip"), "the fix is named: {stderr}");
    assert!(!work.path("parley.db").exists());

    let out = work.parley(&["run", "--tasks", "mixed.jsonl", "--bad-rows", "skip", "--out", "out.jsonl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("skipping mixed.jsonl:2") && stderr.contains("skipping mixed.jsonl:4"), "{stderr}");
    assert!(text(&out.stdout).contains("3 sessions"), "the other rows ran: {}", text(&out.stdout));
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
