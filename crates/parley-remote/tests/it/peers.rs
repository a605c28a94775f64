//! Where the installed peers are, and how tests start them. Tests skip loudly when
//! `.ci/setup-peers` has not been run; with `PARLEY_REQUIRE_PEERS=1` they fail instead.

use std::path::{Path, PathBuf};
use std::time::Duration;

use parley_core::Task;
use parley_core::nemo_gym::task_from_row;
use parley_remote::{LaunchOptions, NemoGymServers, ServerOptions};
use parley_stub::StubConfig;
use tokio::sync::oneshot;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository root")
}

fn skip(what: &str) {
    let message = format!("SKIPPED {what}: the test peers are not installed; run .ci/setup-peers");
    assert!(std::env::var("PARLEY_REQUIRE_PEERS").as_deref() != Ok("1"), "{message}");
    eprintln!("\n**********\n*** {message}\n**********\n");
}

/// The NeMo Gym venv, or `None` (after a loud message) when it is not installed.
pub fn venv(test: &str) -> Option<PathBuf> {
    let venv = root().join(".venv-nemo-gym");
    if venv.join(".parley-ready-0.7.0").is_file() {
        Some(venv)
    } else {
        skip(test);
        None
    }
}

/// `dist/index.js` of the MCP reference server, or `None` when it is not installed.
pub fn mcp_everything(test: &str) -> Option<PathBuf> {
    let script = root().join(".mcp-peers/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if root().join(".mcp-peers/.parley-ready").is_file() && script.is_file() {
        Some(script)
    } else {
        skip(test);
        None
    }
}

pub fn site_packages(venv: &Path) -> PathBuf {
    venv.join("lib/python3.13/site-packages")
}

/// Starts the resources server(s) of one NeMo Gym config shipped with the wheel.
pub async fn start(venv: &Path, config: &str) -> NemoGymServers {
    let options = LaunchOptions::with_venv(venv);
    NemoGymServers::start(Path::new(config), &options).await.expect("the NeMo Gym servers start")
}

/// The first `n` rows of a server's `data/example.jsonl` as tasks.
pub fn tasks(venv: &Path, server: &str, n: usize) -> Vec<Task> {
    let path = site_packages(venv).join("resources_servers").join(server).join("data/example.jsonl");
    let text = std::fs::read_to_string(&path).expect("the example rows");
    text.lines()
        .take(n)
        .enumerate()
        .map(|(i, line)| {
            task_from_row(i, serde_json::from_str::<serde_json::Value>(line).expect("a JSON row")).expect("a task row")
        })
        .collect()
}

pub fn options() -> ServerOptions {
    ServerOptions { timeout: Duration::from_secs(60), ..ServerOptions::default() }
}

/// `parley-stub` on a loopback port: its `/v1` base URL, and a sender that stops it.
pub async fn stub(config: StubConfig) -> (String, oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(parley_stub::serve(listener, config, async move {
        let _ = stopped.await;
    }));
    (format!("http://{address}/v1"), stop)
}
