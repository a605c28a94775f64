//! An MCP server whose answer is larger than `max_response_bytes` fails that call at once as too
//! large, rather than waiting out the call's timeout as if the server hung; the connection keeps
//! serving the calls after it.

use std::time::{Duration, Instant};

use parley_core::{Environment, Message, Party, Task};
use parley_remote::{McpEnvironment, McpServerSpec, ServerOptions};
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
    Task {
        index: 0,
        id: "t".into(),
        messages: vec![Message::user("hi")],
        tools: Default::default(),
        row: json!({}).into(),
    }
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
        McpEnvironment::connect("mcp", vec![spec], crate::mcp::answer_contained(), &options).await.unwrap();
    let mut session = environment.open(&task()).await.unwrap();

    let started = Instant::now();
    let error = session.call(Party::Agent, "big", &json!({})).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(20), "it failed after {:?}", started.elapsed());
    assert!(error.message.contains("larger than the limit of 1048576 bytes"), "{error}");
    assert!(!error.message.contains("hangs"), "{error}");

    let small = session.call(Party::Agent, "small", &json!({})).await.unwrap();
    assert_eq!(small.content, "ok", "the connection goes on serving");
    session.close().await;
    environment.shutdown().await;
}

/// A streamable HTTP MCP server in JSON mode, by hand: the same two tools, `big` answering with a
/// body of 20 MB.
async fn http_server() -> String {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;

    async fn handle(axum::Json(msg): axum::Json<serde_json::Value>) -> axum::response::Response {
        let Some(id) = msg.get("id").cloned() else {
            return StatusCode::ACCEPTED.into_response();
        };
        let result = match msg["method"].as_str().unwrap_or_default() {
            "initialize" => json!({
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "big", "version": "1"}
            }),
            "tools/list" => json!({"tools": [
                {"name": "small", "description": "small", "inputSchema": {"type": "object"}},
                {"name": "big", "description": "big", "inputSchema": {"type": "object"}}
            ]}),
            "tools/call" => {
                let text = if msg["params"]["name"] == "big" { "x".repeat(20 << 20) } else { "ok".into() };
                json!({"content": [{"type": "text", "text": text}]})
            }
            _ => json!({}),
        };
        axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
    }

    let app =
        axum::Router::new().route("/mcp", axum::routing::post(handle).get(|| async { StatusCode::METHOD_NOT_ALLOWED }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn an_oversized_streamable_http_answer_fails_at_once_as_too_large() {
    let spec = McpServerSpec::http("big", &http_server().await);
    let options =
        ServerOptions { timeout: Duration::from_secs(60), max_response_bytes: 1 << 20, ..ServerOptions::default() };
    let environment =
        McpEnvironment::connect("mcp", vec![spec], crate::mcp::answer_contained(), &options).await.unwrap();
    let mut session = environment.open(&task()).await.unwrap();
    assert_eq!(session.call(Party::Agent, "small", &json!({})).await.unwrap().content, "ok");

    let started = Instant::now();
    let error = session.call(Party::Agent, "big", &json!({})).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(20), "it failed after {:?}", started.elapsed());
    assert!(error.message.contains("larger than the limit of 1048576 bytes"), "{error}");
    session.close().await;
    environment.shutdown().await;
}
