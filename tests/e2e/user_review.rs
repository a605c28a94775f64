//! The review of a simulated user's turns, through the real binary: a stub user that fails on
//! purpose is found by the rule it breaks, and its `/run` sample goes to the trainer masked
//! (`instance_config.mask_sample`, where NeMo RL reads it) with the faults named; a clean
//! user's sample is not masked.

use serde_json::Value;

use crate::harness::{Stub, Workdir};
use crate::serve::{Serve, post_run};

fn served_faults(user_args: &[&str]) -> Vec<Value> {
    let work = Workdir::new();
    let data = crate::harness::tau2_data_dir();
    let policy = Stub::start(&[]);
    let user = Stub::start(user_args);
    let serve = Serve::start(
        &work,
        &policy,
        &["--env", "tau2:airline", "--data-dir", &data, "--user", "llm", "--user-base-url", &user.url],
    );
    ["0", "7", "21"]
        .iter()
        .map(|task| {
            let row = format!(r#"{{"id": "{task}", "responses_create_params": {{"input": []}}}}"#);
            let (status, _, body) = post_run(&serve.address, &row);
            assert_eq!(status, 200, "{body}");
            serde_json::from_str(&body).unwrap()
        })
        .collect()
}

#[test]
fn a_user_that_fails_on_purpose_is_found_and_its_sample_masked() {
    for (mode, rule) in [
        ("speaks_as_agent", "speaks_as_agent"),
        ("leaks_instructions", "leaks_instructions"),
        ("ends_early", "ends_early"),
        ("talks_after_stop", "talks_after_stop"),
        ("repeats", "repeats"),
    ] {
        for answer in served_faults(&["--user-fault", &format!("{mode}:1")]) {
            let faults = answer["user_faults"].as_array().unwrap_or_else(|| panic!("{mode}: no faults: {answer}"));
            assert!(faults.iter().any(|f| f["rule"] == rule), "{mode}: {faults:?}");
            assert_eq!(answer["instance_config"]["mask_sample"], true, "{mode}");
        }
    }
}

#[test]
fn a_clean_users_sample_is_not_masked() {
    for answer in served_faults(&["--user-turns", "3"]) {
        assert!(answer.get("user_faults").is_none(), "{answer}");
        assert_ne!(answer["instance_config"]["mask_sample"], true, "{answer}");
    }
}

/// A `/run` row of tau2 naming its task by `id` alone plays that task: its simulated user is
/// given the task's own scenario, as `parley run` gives it, not an empty one.
#[test]
fn a_tau2_row_named_by_id_gives_the_user_its_tasks_scenario() {
    let work = Workdir::new();
    let data = crate::harness::tau2_data_dir();
    let tasks: Value =
        serde_json::from_str(&std::fs::read_to_string(std::path::Path::new(&data).join("airline/tasks.json")).unwrap())
            .unwrap();
    let policy = Stub::start(&[]);
    let user = crate::endpoint::Endpoint::start(|_, _| (200, crate::endpoint::completion("Thanks. ###STOP###")));
    let serve = Serve::start(
        &work,
        &policy,
        &["--env", "tau2:airline", "--data-dir", &data, "--user", "llm", "--user-base-url", &user.url],
    );
    for task in ["3", "21"] {
        let (status, _, body) =
            post_run(&serve.address, &format!(r#"{{"id": "{task}", "responses_create_params": {{"input": []}}}}"#));
        assert_eq!(status, 200, "{body}");
        let sent: Value = serde_json::from_str(user.take_bodies().first().expect("the user was asked")).unwrap();
        let system = sent["messages"][0]["content"].as_str().unwrap();
        let own = tasks.as_array().unwrap().iter().find(|t| t["id"] == task).unwrap();
        let reason = own["user_scenario"]["instructions"]["reason_for_call"].as_str().unwrap();
        let first_line = reason.lines().next().unwrap().trim();
        assert!(system.contains(first_line), "task {task}: the user's prompt holds its reason for calling: {system}");
    }
}

/// `parley run` of 20 tau2 airline tasks, the agent played by `policy` and the LLM user by
/// `user`, with `extra` flags; what it printed.
fn airline_run(work: &Workdir, policy: &Stub, user: &Stub, extra: &[&str]) -> String {
    let data = crate::harness::tau2_data_dir();
    let mut args = vec![
        "run",
        "--env",
        "tau2:airline",
        "--data-dir",
        &data,
        "--num-tasks",
        "20",
        "--base-url",
        &policy.url,
        "--user",
        "llm",
        "--user-base-url",
        &user.url,
    ];
    args.extend(extra);
    crate::harness::ok(&work.parley(&args))
}

/// `parley sessions` of run 1 in `db`: the sessions whose user broke `rule`.
fn listed(work: &Workdir, db: &str, rule: &str) -> String {
    crate::harness::ok(&work.parley(&["sessions", "1", "--db", db, "--user-fault", rule]))
}

/// The session ids of a `parley sessions` listing.
fn ids_of(listed: &str) -> Vec<String> {
    listed.lines().skip(1).filter_map(|l| l.split_whitespace().next()).map(str::to_owned).collect()
}

/// A run's faulty sessions are recorded with their faults: the summary leaves them out of the
/// rewards and pass figures and counts them apart (`--keep-user-faults` counts them in),
/// `parley sessions --user-fault RULE` lists them, and `parley show` names each fault.
#[tokio::test]
async fn a_runs_user_faults_are_recorded_counted_apart_and_listed() {
    let work = Workdir::new();
    let policy = Stub::start(&[]);
    let user = Stub::start(&["--user-turns", "3", "--tool-calls", "0", "--user-fault", "ends_early:0.5"]);
    let said = airline_run(&work, &policy, &user, &["--db", "parley.db", "--out", "out.jsonl"]);
    let line = said.lines().find(|l| l.starts_with("user faults")).unwrap_or_else(|| panic!("{said}"));
    let faulty: usize = line.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!((3..=17).contains(&faulty), "about half of 20: {line}");
    let listed = listed(&work, "parley.db", "ends_early");
    let ids = ids_of(&listed);
    assert_eq!(ids.len(), faulty, "{listed}");
    let shown = crate::harness::ok(&work.parley(&["show", &ids[0], "--db", "parley.db"]));
    assert!(shown.contains("user fault") && shown.contains("ends_early"), "{shown}");
    let metrics = |extra: &[&str]| -> Value {
        let mut args = vec!["metrics", "1", "--db", "parley.db", "--json"];
        args.extend(extra);
        serde_json::from_str(&crate::harness::ok(&work.parley(&args))).unwrap()
    };
    let (apart, kept) = (metrics(&[]), metrics(&["--keep-user-faults"]));
    assert_eq!(apart["user_faults"], faulty as u64);
    assert_eq!(kept["user_faults"], 0);
    assert_eq!(apart["reward"]["n"].as_u64().unwrap() + faulty as u64, kept["reward"]["n"].as_u64().unwrap());
    // The training figures leave them out too, unless asked to keep them.
    let (apart_sessions, kept_sessions) =
        (apart["training"]["run"]["sessions"].as_u64().unwrap(), kept["training"]["run"]["sessions"].as_u64().unwrap());
    assert_eq!(apart_sessions + faulty as u64, kept_sessions, "{}", apart["training"]);
    // A rescore runs the review's rules again over the stored transcripts: faults that the
    // record lost (as when the rules change) are found anew, and a clean record stays clean.
    work.exec(&format!("UPDATE sessions SET user_faults = NULL WHERE id = {}", ids[0])).await;
    let rescored = crate::harness::ok(&work.parley(&["rescore", "1", "--db", "parley.db"]));
    assert!(rescored.contains("the simulated user's faults found anew in 1 sessions"), "{rescored}");
    let again = crate::harness::ok(&work.parley(&["sessions", "1", "--db", "parley.db", "--user-fault", "ends_early"]));
    assert_eq!(again, listed, "the faults are recorded again");
    let rescored = crate::harness::ok(&work.parley(&["rescore", "1", "--db", "parley.db"]));
    assert!(!rescored.contains("found anew"), "nothing changed since: {rescored}");
    let bad = work.parley(&["sessions", "1", "--db", "parley.db", "--user-fault", "rude"]);
    assert_eq!(bad.status.code(), Some(64));
    // The viewer's session page names them too.
    let view = crate::view::View::start_on(&work, "parley.db", &[], &[]);
    let (status, _, page) = view.get(&format!("/sessions/{}", ids[0]), &[]);
    assert_eq!(status, 200);
    assert!(page.contains("id=\"user-faults\"") && page.contains("ends_early"), "{page}");
}

/// `--user-review judge` asks the judge endpoint, once a session, what rules cannot see: a user
/// that leaves its scenario and one that states what it was not given are found (by the rule
/// the judge names, at the message it names), counted apart and masked, while the rules alone
/// find nothing in the same conversations. A rescore re-derives the faults from the verdicts the
/// store kept, asking the judge nothing again.
#[tokio::test]
async fn a_judged_review_finds_what_rules_cannot_and_a_rescore_asks_nothing_again() {
    let work = Workdir::new();
    let policy = Stub::start(&[]);
    let user = Stub::start(&[
        "--user-turns",
        "2",
        "--tool-calls",
        "0",
        "--user-fault",
        "off_scenario:0.3",
        "--user-fault",
        "unknown_info:0.3",
    ]);
    let judge = Stub::start(&["--judge"]);
    let run = |db: &str, review: &str| {
        airline_run(&work, &policy, &user, &["--user-review", review, "--judge-base-url", &judge.url, "--db", db])
    };
    let faulted = |db: &str, rule: &str| ids_of(&listed(&work, db, rule));

    // The rules alone see nothing wrong, and ask the judge nothing.
    let said = run("rules.db", "rules");
    assert!(said.lines().all(|l| !l.starts_with("user faults")), "{said}");
    assert_eq!(judge.stats()["requests"], 0);

    let said = run("parley.db", "judge");
    assert_eq!(judge.stats()["requests"], 20, "one judge call per session");
    let (off, unknown) = (faulted("parley.db", "off_scenario"), faulted("parley.db", "unknown_info"));
    assert!(!off.is_empty() && !unknown.is_empty(), "both faults are drawn in 20 sessions: {said}");
    assert!(off.iter().all(|id| !unknown.contains(id)), "one mode per conversation");
    let line = said.lines().find(|l| l.starts_with("user faults")).unwrap_or_else(|| panic!("{said}"));
    let counted: usize = line.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert_eq!(counted, off.len() + unknown.len(), "{line}");
    // Each finding names the user's message that broke the rule, which says what the fault is.
    let shown = crate::harness::ok(&work.parley(&["show", &off[0], "--db", "parley.db"]));
    assert!(shown.contains("user fault") && shown.contains("off_scenario"), "{shown}");
    let db = work.db().await;
    for (id, rule, words) in
        [(&off[0], "off_scenario", "restaurant in Rome instead"), (&unknown[0], "unknown_info", "ZX9Q7W")]
    {
        let id: i64 = id.parse().unwrap();
        let (faults,): (String,) =
            sqlx::query_as("SELECT user_faults FROM sessions WHERE id = ?").bind(id).fetch_one(&db).await.unwrap();
        let faults: Value = serde_json::from_str(&faults).unwrap();
        assert_eq!(faults.as_array().map(Vec::len), Some(1), "{faults}");
        assert_eq!(faults[0]["rule"], rule);
        assert!(faults[0]["detail"].as_str().unwrap().starts_with("judged"), "{faults}");
        let (role, content): (String, String) =
            sqlx::query_as("SELECT role, content FROM messages WHERE session_id = ? AND seq = ?")
                .bind(id)
                .bind(faults[0]["seq"].as_i64().unwrap())
                .fetch_one(&db)
                .await
                .unwrap();
        assert!(role == "user" && content.contains(words), "{rule}: {role}: {content}");
    }
    db.close().await;

    // A rescore finds the same faults from the stored verdicts, without a judge call; one
    // whose record lost its faults has them found anew.
    work.exec(&format!("UPDATE sessions SET user_faults = NULL WHERE id = {}", unknown[0])).await;
    let rescored = crate::harness::ok(&work.parley(&["rescore", "1", "--db", "parley.db"]));
    assert!(rescored.contains("the simulated user's faults found anew in 1 sessions"), "{rescored}");
    assert!(rescored.contains("0 judge calls, 20 verdicts reused"), "{rescored}");
    assert_eq!(judge.stats()["requests"], 20);
    assert_eq!(faulted("parley.db", "unknown_info"), unknown);
}
