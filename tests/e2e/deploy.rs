//! The Kubernetes manifests in `deploy/kubernetes`: valid against Kubernetes' own schemas
//! (`kubernetes-validate` from PyPI, strict: no unknown fields), and every `parley` command they
//! run names only flags that command has, so a manifest cannot drift from the binary unnoticed.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::harness::{PARLEY, root, text};

/// `.venv-kube`, or `None` (a failure under `PARLEY_REQUIRE_PEERS=1`) when it is not installed.
fn venv() -> Option<PathBuf> {
    let venv = root().join(".venv-kube");
    if venv.join(".parley-ready-1.37.0").is_file() {
        return Some(venv);
    }
    crate::harness::skip("kubernetes-validate is not installed; run .ci/setup-kube-validate");
    None
}

fn manifests() -> Vec<PathBuf> {
    let dir = root().join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn the_manifests_are_valid_kubernetes() {
    let Some(venv) = venv() else { return };
    let files = manifests();
    assert!(files.len() >= 3, "{files:?}");
    let out = Command::new(venv.join("bin/kubernetes-validate")).arg("--strict").args(&files).output().unwrap();
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let kinds = text(&out.stdout) + &text(&out.stderr);
    for kind in ["secret/parley", "deployment/parley-serve", "service/parley-serve", "job/parley-sweep-workers"] {
        assert!(kinds.contains(&format!("passed for resource {kind}")), "{kinds}");
    }
}

#[test]
fn every_parley_command_in_the_manifests_has_the_flags_it_uses() {
    let Some(venv) = venv() else { return };
    let to_json =
        "import json, sys, yaml\nfor f in sys.argv[1:]:\n    print(json.dumps(list(yaml.safe_load_all(open(f)))))";
    let out = Command::new(venv.join("bin/python")).args(["-c", to_json]).args(manifests()).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut commands = 0;
    for line in text(&out.stdout).lines() {
        let documents: Vec<Value> = serde_json::from_str(line).unwrap();
        for document in documents {
            let Some(containers) = document.pointer("/spec/template/spec/containers").and_then(Value::as_array) else {
                continue;
            };
            for container in containers {
                let args: Vec<&str> = container["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
                let help = Command::new(PARLEY).args([args[0], "--help"]).output().unwrap();
                assert!(help.status.success(), "`parley {}` is not a command: {}", args[0], text(&help.stderr));
                let help = text(&help.stdout);
                for flag in args.iter().filter(|a| a.starts_with("--")) {
                    assert!(
                        help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
                        "`parley {}` has no {flag}",
                        args[0]
                    );
                }
                commands += 1;
            }
        }
    }
    assert_eq!(commands, 3, "serve, run --detach and worker");
}
