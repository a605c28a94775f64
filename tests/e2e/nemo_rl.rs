//! NeMo RL's own rollout code, unchanged, trains on Parley: `tests/e2e/nemo_rl_peer.py` loads NeMo
//! RL's modules from `../shared/peers/nemo-rl` (commit 7ea279a), starts NeMo Gym with them the way
//! NeMo RL's `NemoGym` actor does (three policy ranks, a node address of a network namespace of
//! its own as Gym's default host), Gym starts Parley from `integrations/nemo-gym`'s shipped
//! config, and every `/run` answer goes through NeMo RL's post-processing and checks. Once with
//! NeMo Gym 0.5.1 (what NeMo RL pins; `.ci/setup-nemo-rl`) and once with 0.7.0
//! (`.ci/setup-peers`).
//!
//! Without the peers, NeMo RL's source, tau2's data or root (the namespace needs it) the tests
//! say SKIPPED; under `PARLEY_REQUIRE_PEERS=1` they fail instead.

use std::process::Command;

use serde_json::Value;

use crate::harness::{PARLEY, Workdir, root, skip, tau2_data, text};
use crate::remote::peer;

/// The driver's exit status when it cannot run here (not root, no `ip`, no namespaces).
const CANNOT_RUN: i32 = 77;

/// Runs the driver with the Python of `venv` (NeMo Gym `version` installed by `setup`) and
/// returns its summary, or None when it was skipped.
fn drive(venv: &str, version: &str, setup: &str) -> Option<Value> {
    let venv = root().join(venv);
    let Some(venv) = peer(venv.clone(), venv.join(format!(".parley-ready-{version}"))) else {
        eprintln!("(NeMo Gym {version} comes from {setup})");
        return None;
    };
    let nemo_rl = root().join("../shared/peers/nemo-rl");
    if !nemo_rl.join("nemo_rl/environments/nemo_gym.py").is_file() {
        skip("NeMo RL's source is not at ../shared/peers/nemo-rl");
        return None;
    }
    let Some(tau2) = tau2_data() else {
        skip("tau2's data is not at ../shared/data/tau2 (or PARLEY_TAU2_DATA)");
        return None;
    };
    let work = Workdir::new();
    let out = Command::new(venv.join("bin/python"))
        .arg(root().join("tests/e2e/nemo_rl_peer.py"))
        .args(["--parley", PARLEY, "--work"])
        .arg(work.path("trainer"))
        .arg("--nemo-rl")
        .arg(&nemo_rl)
        .arg("--tau2-data")
        .arg(&tau2)
        .output()
        .expect("run tests/e2e/nemo_rl_peer.py");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let summary: Value = stdout
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| panic!("no summary from the driver ({}):\n{stdout}\n{stderr}", out.status));
    if out.status.code() == Some(CANNOT_RUN) {
        skip(&format!("NeMo RL's driver cannot run here: {}", summary["skipped"]));
        return None;
    }
    let failures = summary["failures"].as_array().cloned().unwrap_or_default();
    let listed: Vec<String> = failures.iter().map(|f| format!("  - {}", f.as_str().unwrap_or_default())).collect();
    assert!(
        out.status.success() && failures.is_empty(),
        "NeMo RL with NeMo Gym {version} ({}):\n{}\n\nsummary: {summary:#}\n\nthe driver's stderr (tail):\n{}",
        out.status,
        listed.join("\n"),
        tail(&stderr, 6_000)
    );
    assert_eq!(summary["nemo_gym"], version, "{summary}");
    Some(summary)
}

fn tail(text: &str, bytes: usize) -> &str {
    let mut start = text.len().saturating_sub(bytes);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// What both versions must show in the summary beside an empty list of failures.
fn check(summary: &Value) {
    let node = summary["node_address"].as_str().unwrap();
    assert!(node.starts_with("10.77."), "a namespace's address, not loopback: {summary}");
    assert_eq!(summary["default_host"], node, "NeMo RL's default host is the node's address");
    let cases = &summary["cases"];
    for case in ["grpo_multi_step", "tau2_airline_llm_user"] {
        let spread: Vec<u64> =
            cases[case]["calls_per_rank"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
        assert_eq!(spread.len(), 3, "{case}: {summary}");
        assert!(spread.iter().all(|&c| c > 0), "{case}: every rank served agent calls: {spread:?}");
    }
    assert_eq!(cases["grpo_multi_step"]["sessions"], 32);
    let columns = cases["composite_reward"]["gdpo_columns"].as_array().unwrap();
    assert!(columns.contains(&"reward/environment".into()) && columns.contains(&"reward/steps".into()), "{summary}");
    assert_eq!(cases["policy_answers_500"]["class"], "infra", "{summary}");
    assert_eq!(cases["malformed_row"]["class"], "data", "{summary}");
    assert!(cases["row_policy_base_url"]["own_policy_calls"].as_u64().unwrap() > 0, "{summary}");
}

#[test]
fn nemo_rls_rollout_code_trains_on_parley_through_nemo_gym_0_5_1() {
    if let Some(summary) = drive(".venv-nemo-gym-0.5.1", "0.5.1", ".ci/setup-nemo-rl") {
        check(&summary);
    }
}

#[test]
fn nemo_rls_rollout_code_trains_on_parley_through_nemo_gym_0_7_0() {
    if let Some(summary) = drive(".venv-nemo-gym", "0.7.0", ".ci/setup-peers") {
        check(&summary);
        // Gym 0.7.0's judge failsafe answers mask_sample (0.5.1's verify raises instead).
        let masked = &summary["cases"]["judge_failed_mask_sample"];
        assert_eq!(masked["mask_sample"], serde_json::json!([true, true]), "{summary}");
        assert_eq!(masked["instance_config_mask_sample"], serde_json::json!([true, true]), "{summary}");
    }
}
