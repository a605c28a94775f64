//! `parley rewards probe` end to end: a naive reward is shown paid for the shortcuts that hack
//! it (and `--fail-on-paid` exits 1), a sound one pays none of them (and exits 0), probes that
//! cannot be played on a task count it as not applicable, the probes' runs are ordinary runs of
//! the store, and bad input is refused with exit 64, naming the input and the fix.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::harness::{Workdir, ok, text};

/// `count` arithmetic rows whose answer goes in `\boxed{}`.
fn math_rows(work: &Workdir, count: usize) -> PathBuf {
    let rows: Vec<String> = (0..count)
        .map(|i| {
            json!({"id": i, "responses_create_params": {"input": [{"role": "user",
                "content": format!("Multiply {} by 7. Put the answer in \\boxed{{}}.", i + 2)}]},
                "expected_answer": (7 * (i + 2)).to_string()})
            .to_string()
        })
        .collect();
    let path = work.path("math.jsonl");
    std::fs::write(&path, rows.join("\n") + "\n").unwrap();
    path
}

const LETTERS: [&str; 4] = ["A", "B", "C", "D"];

/// `count` multiple-choice rows in NeMo Gym `mcqa`'s shape, the right letter turning with `i`.
fn choice_rows(work: &Workdir, count: usize) -> PathBuf {
    let rows: Vec<String> = (0..count)
        .map(|i| {
            json!({"id": i, "responses_create_params": {"input": [{"role": "user",
                "content": format!("Question {i}: which colour? Answer with \\boxed{{LETTER}}.")}]},
                "options": [{"A": "red"}, {"B": "green"}, {"C": "blue"}, {"D": "white"}],
                "expected_answer": LETTERS[i % 4]})
            .to_string()
        })
        .collect();
    let path = work.path("choice.jsonl");
    std::fs::write(&path, rows.join("\n") + "\n").unwrap();
    path
}

/// The `--json` report's probes by name.
fn probes(report: &Value) -> BTreeMap<String, Value> {
    let list = report["probes"].as_array().unwrap_or_else(|| panic!("no probes in {report}"));
    list.iter().map(|p| (p["probe"].as_str().unwrap().to_owned(), p.clone())).collect()
}

fn probe_json(work: &Workdir, args: &[&str]) -> Value {
    let mut all = vec!["rewards", "probe", "--json"];
    all.extend(args);
    serde_json::from_str(&ok(&work.parley(&all))).unwrap()
}

#[test]
fn a_containment_reward_is_paid_by_the_probes_that_list_or_bury_the_answer() {
    let work = Workdir::new();
    math_rows(&work, 8);
    let args = ["--env", "custom", "--tasks", "math.jsonl", "--reward", "exact:contains=true"];
    let report = probe_json(&work, &args);
    let by = probes(&report);
    assert_eq!(report["tasks"], json!(8));
    for paid in ["all-choices", "long", "hedges"] {
        assert_eq!((by[paid]["paid"].clone(), by[paid]["mean_reward"].clone()), (json!(8), json!(1.0)), "{paid}");
    }
    for unpaid in ["empty", "wrong-value"] {
        assert_eq!((by[unpaid]["scored"].clone(), by[unpaid]["paid"].clone()), (json!(8), json!(0)), "{unpaid}");
    }
    // No tools in these rows: the tool probes are not applicable, not unpaid.
    for tools in ["copy-tool-outputs", "tool-flood"] {
        assert_eq!(by[tools]["not_applicable"], json!(8), "{tools}");
        assert_eq!((by[tools]["scored"].clone(), by[tools]["paid_share"].clone()), (json!(0), Value::Null));
    }
    assert_eq!(report["paid"], json!(["all-choices", "long", "hedges"]));

    // For an environment's CI: exit 1, naming the probes paid; the table still goes to stdout.
    let mut failing = vec!["rewards", "probe", "--fail-on-paid"];
    failing.extend(args);
    let out = work.parley(&failing);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("the reward pays 3 of 8 probes: all-choices, long, hedges"));
    let table = text(&out.stdout);
    assert!(table.contains("paid probes: all-choices, long, hedges"), "{table}");
    let hedges = table.lines().find(|l| l.starts_with("hedges")).unwrap();
    assert!(hedges.contains("1.000") && hedges.contains("100%"), "{hedges}");
}

#[test]
fn a_format_reward_is_paid_by_a_wrong_value_in_the_right_format() {
    let work = Workdir::new();
    math_rows(&work, 4);
    let report =
        probe_json(&work, &["--env", "custom", "--tasks", "math.jsonl", "--reward", "format:pattern=\\\\boxed"]);
    let by = probes(&report);
    assert_eq!(by["wrong-value"]["paid"], json!(4));
    assert_eq!(by["empty"]["paid"], json!(0));
}

#[test]
fn sound_rewards_pay_no_probe_and_pass_the_probe_check() {
    let work = Workdir::new();
    math_rows(&work, 8);
    choice_rows(&work, 8);
    for (tasks, reward) in [("math.jsonl", "math"), ("math.jsonl", "exact"), ("choice.jsonl", "choice")] {
        let out = work.parley(&[
            "rewards",
            "probe",
            "--env",
            "custom",
            "--tasks",
            tasks,
            "--reward",
            reward,
            "--fail-on-paid",
        ]);
        let table = ok(&out);
        assert!(table.contains("paid probes: none"), "{tasks} {reward}: {table}");
    }
    // The same reward on multiple-choice rows, made naive: a letter anywhere in the answer.
    let report = probe_json(&work, &["--env", "custom", "--tasks", "choice.jsonl", "--reward", "exact:contains=true"]);
    let by = probes(&report);
    assert_eq!((by["all-choices"]["paid"].clone(), by["hedges"]["paid"].clone()), (json!(8), json!(8)));
}

#[test]
fn tool_probes_are_played_on_rows_with_tools_and_scored_by_the_reward_named_in_a_settings_file() {
    let work = Workdir::new();
    // A reward that pays any answer citing a tool's result, from `[[reward]]` tables.
    std::fs::write(
        work.path("probe.toml"),
        "[run]\nenv = \"multi-step\"\nnum_tasks = 3\n\n[[reward]]\nscorer = \"format\"\noptions = { pattern = \
         \"synonym_value\" }\n",
    )
    .unwrap();
    let report = probe_json(&work, &["--settings", "probe.toml"]);
    let by = probes(&report);
    let copied = &by["copy-tool-outputs"];
    assert_eq!((copied["paid"].clone(), copied["scored"].clone()), (json!(3), json!(3)), "{report}");
    // The flood makes its calls, then has no right answer to give (these rows have none).
    assert_eq!((by["tool-flood"]["scored"].clone(), by["tool-flood"]["paid"].clone()), (json!(3), json!(0)));
    // No `expected_answer` in these rows: nothing to list, bury or change.
    for needs_answer in ["all-choices", "wrong-value", "hedges"] {
        assert_eq!(by[needs_answer]["not_applicable"], json!(3), "{needs_answer}");
    }
    // A probe is an ordinary run of the store `--db` names: the flood's session holds its calls.
    let flood = ["--settings", "probe.toml", "--num-tasks", "1", "--probe", "tool-flood", "--db", "flood.db"];
    let report = probe_json(&work, &flood);
    assert_eq!((report["db"].clone(), report["probes"][0]["run"].clone()), (json!("flood.db"), json!(1)));
    let show = ok(&work.parley(&["show", "1", "--db", "flood.db"]));
    // Twenty calls, each answered, then the (empty) answer.
    assert_eq!((show.matches("→ ").count(), show.matches("] tool").count()), (20, 20), "{show}");
    // The built-in verifier pays none of them.
    let report = probe_json(&work, &["--env", "multi-step", "--num-tasks", "3"]);
    assert_eq!(report["paid"], json!([]));
}

#[test]
fn bad_probe_input_is_refused_naming_the_input_and_the_fix() {
    let work = Workdir::new();
    math_rows(&work, 2);
    std::fs::write(work.path("empty.jsonl"), "\n").unwrap();
    for (args, says) in [
        (vec!["--tasks", "math.jsonl", "--reward", "chess"], "scorers: exact, choice, math"),
        (vec!["--tasks", "missing.jsonl", "--reward", "math"], "--tasks missing.jsonl: no such file"),
        (vec!["--tasks", "empty.jsonl", "--reward", "math"], "--tasks empty.jsonl: no task rows"),
        (
            vec!["--tasks", "math.jsonl", "--reward", "math", "--base-url", "http://127.0.0.1:9/v1"],
            "leave --base-url out",
        ),
        (vec!["--tasks", "math.jsonl", "--reward", "judge"], "pass --judge-base-url"),
        (
            vec!["--tasks", "math.jsonl", "--reward", "math", "--probe", "cheat"],
            "the probes are empty, repeat-question",
        ),
        (vec!["--tasks", "math.jsonl", "--reward", "math", "--answer-format", "boxed"], "has no `{answer}`"),
    ] {
        let mut all = vec!["rewards", "probe", "--env", "custom"];
        all.extend(&args);
        let out = work.parley(&all);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
