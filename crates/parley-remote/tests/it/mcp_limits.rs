//! An MCP server whose answer is larger than `max_response_bytes` fails that call at once as too
//! large, rather than waiting out the call's timeout as if the server hung; the connection keeps
//! serving the calls after it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parley_core::{Environment, Message, Party, Task};
use parley_remote::{ExactMatch, McpEnvironment, McpServerSpec, ServerOptions};
use serde_json::json;

/// A stdio MCP server in a few lines of Python: tools `small` and `big`, whose answer is one
/// JSON-RPC line of 20 MB.
const SERVER: &str = r#"
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "big", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": n, "description": n, "inputSchema": {"type": "object"}} for n in ("small", "big")]}
    elif method == "tools/call":
        text = "x" * (20 << 20) if msg["params"]["name"] == "big" else "ok"
        result = {"content": [{"type": "text", "text": text}]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
"#;

fn task() -> Task {
    Task { index: 0, id: "t".into(), messages: vec![Message::user("hi")], tools: Default::default(), row: json!({}) }
}

#[tokio::test]
async fn an_oversized_stdio_answer_fails_at_once_as_too_large() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("server.py");
    std::fs::write(&script, SERVER).unwrap();
    let spec = McpServerSpec::stdio("big", "python3", &[script.to_str().unwrap()]);
    let options =
        ServerOptions { timeout: Duration::from_secs(60), max_response_bytes: 1 << 20, ..ServerOptions::default() };
    let environment =
        McpEnvironment::connect("mcp", vec![spec], Arc::new(ExactMatch::default()), &options).await.unwrap();
    let mut session = environment.open(&task()).await.unwrap();

    let started = Instant::now();
    let error = session.call(Party::Agent, "big", &json!({})).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(20), "it failed after {:?}", started.elapsed());
    assert!(error.0.contains("larger than the limit of 1048576 bytes"), "{error}");
    assert!(!error.0.contains("hangs"), "{error}");

    let small = session.call(Party::Agent, "small", &json!({})).await.unwrap();
    assert_eq!(small.content, "ok", "the connection goes on serving");
    session.close().await;
    environment.shutdown().await;
}
