//! Shared helpers: finding the data, opening a session on a synthetic or real task, calling.

use std::path::PathBuf;

use environment_tau2::{Data, Domain, DomainOptions, Tau2Session, load};
use parley_core::{EnvSession, Party, Task};
use serde_json::{Value, json};

/// The data is always at `../shared/data/tau2` next to the workspace (or `PARLEY_TAU2_DATA`):
/// without it these tests fail rather than pass having checked nothing.
pub fn data() -> PathBuf {
    let dir = std::env::var_os("PARLEY_TAU2_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/tau2"));
    assert!(dir.join("derived/tools.openai.json").exists(), "no tau2 data at {} (set PARLEY_TAU2_DATA)", dir.display());
    dir
}

/// That folder as the loader reads it.
pub fn folder() -> Data {
    Data::Folder(data())
}

pub fn domain(name: &str) -> Domain {
    load(&folder(), name, DomainOptions::default()).unwrap()
}

pub fn blank_task() -> Task {
    Task {
        index: 0,
        id: "blank".into(),
        messages: vec![],
        tools: Default::default(),
        row: json!({"id": "blank"}).into(),
    }
}

pub fn open(domain: &Domain, task: &Task) -> Tau2Session {
    domain.tau2_environment().open_session(task).unwrap()
}

pub async fn call(session: &mut Tau2Session, party: &str, name: &str, args: Value) -> parley_core::ToolOutput {
    let party = if party == "user" { Party::User } else { Party::Agent };
    session.call(party, name, &args).await.unwrap()
}

pub fn sha256_hex(text: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}
