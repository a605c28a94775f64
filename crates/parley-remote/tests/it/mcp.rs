//! MCP over stdio and streamable HTTP against the reference server `server-everything`: tools
//! listed with their schemas, a call's result, errors passed back as tool output, clean stops.

use std::sync::Arc;
use std::time::Duration;

use parley_core::{Environment, Message, Party, Task, Termination};
use parley_remote::{McpEnvironment, McpServerSpec, ServerOptions};
use parley_rewards::text::ExactMatch;
use serde_json::json;

use crate::peers;

fn task() -> Task {
    Task {
        index: 0,
        id: "sum".into(),
        messages: vec![Message::user("What is 2 + 3?")],
        tools: Default::default(),
        row: json!({"expected_answer": "5"}).into(),
    }
}

fn options() -> ServerOptions {
    ServerOptions { timeout: Duration::from_secs(30), ..ServerOptions::default() }
}

/// Lists, calls, fails and scores through one environment.
async fn exercise(environment: &McpEnvironment) {
    let mut session = environment.open(&task()).await.expect("a session opens");
    let tools = session.tools();
    let echo = tools.iter().find(|t| t.name == "echo").expect("the echo tool is listed");
    assert_eq!(echo.parameters["properties"]["message"]["type"], "string", "{:?}", echo.parameters);
    assert!(tools.iter().any(|t| t.name == "get-sum"));

    let output = session.call(Party::Agent, "echo", &json!({"message": "hi"})).await.unwrap();
    assert_eq!(output.content, "Echo: hi");
    assert!(!output.is_error);
    let sum = session.call(Party::Agent, "get-sum", &json!({"a": 2, "b": 3})).await.unwrap();
    assert!(sum.content.contains('5'), "{sum:?}");

    // Bad arguments and unknown tools are tool errors the model can read, not failures.
    let bad = session.call(Party::Agent, "get-sum", &json!({"a": "two"})).await.unwrap();
    assert!(bad.is_error, "{bad:?}");
    assert!(!bad.content.is_empty());
    let unknown = session.call(Party::Agent, "no-such-tool", &json!({})).await.unwrap();
    assert!(unknown.is_error);

    let transcript = [task().messages[0].clone(), Message::assistant(format!("It is {}.", sum.content))];
    let reward = session.score(&transcript, Termination::AgentStop).await.unwrap();
    assert_eq!(reward.value, 1.0, "{reward:?}");
    session.close().await;
}

#[tokio::test]
async fn mcp_over_stdio_shared_and_per_session() {
    let Some(script) = peers::mcp_everything("MCP over stdio") else { return };
    let script = script.to_str().unwrap();
    let shared = McpServerSpec::stdio("everything", "node", &[script, "stdio"]);
    let environment = McpEnvironment::connect("mcp", vec![shared], answer_contained(), &options())
        .await
        .expect("the stdio server starts");
    exercise(&environment).await;
    environment.shutdown().await;

    // After a clean stop the shared server is gone: a call fails with a clear cause.
    let mut session = environment.open(&task()).await.unwrap();
    let error = session.call(Party::Agent, "echo", &json!({"message": "x"})).await.unwrap_err();
    assert!(
        error.message.contains("MCP server `everything`") && error.message.contains("tools/call `echo`"),
        "{error}"
    );

    let per_session = McpServerSpec::stdio("everything", "node", &[script, "stdio"]).per_session();
    let environment = McpEnvironment::connect("mcp", vec![per_session], answer_contained(), &options()).await.unwrap();
    exercise(&environment).await;
}

#[tokio::test]
async fn mcp_over_streamable_http() {
    let Some(script) = peers::mcp_everything("MCP over streamable HTTP") else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = tokio::process::Command::new("node")
        .arg(&script)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let spec = McpServerSpec::http("everything", &url);
    // The connection retries while the server is still starting.
    let options = ServerOptions { max_retries: 8, backoff: Duration::from_millis(100), ..options() };
    let environment = McpEnvironment::connect("mcp", vec![spec], answer_contained(), &options).await.unwrap();
    exercise(&environment).await;
    environment.shutdown().await;
    server.kill().await.unwrap();
}

/// The scorer MCP environments get by default: the final answer contains the row's
/// `expected_answer`.
pub(crate) fn answer_contained() -> Arc<ExactMatch> {
    Arc::new(ExactMatch { contains: true, ..ExactMatch::new("expected_answer") })
}
