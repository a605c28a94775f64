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
