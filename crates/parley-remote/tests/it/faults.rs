//! Servers that die or hang: each fails its sessions with an `EnvError` that names the server
//! and the call, after bounded retries and within the timeout. Never a panic, never a hang.

use std::time::{Duration, Instant};

use parley_core::{Environment, Party, Task};
use parley_remote::{NemoGymEnvironment, ServerOptions};
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

use crate::peers;

fn task() -> Task {
    parley_core::nemo_gym::task_from_row(
        0,
        json!({"responses_create_params": {"input": "hi"}, "initial_count": 1, "expected_count": 2}),
    )
    .unwrap()
}

fn quick() -> ServerOptions {
    ServerOptions {
        timeout: Duration::from_millis(500),
        max_retries: 2,
        backoff: Duration::from_millis(20),
        max_concurrency: 4,
        ..ServerOptions::default()
    }
}

#[tokio::test]
async fn a_server_that_dies_mid_session_fails_the_session_clearly() {
    let Some(venv) = peers::venv("a server that dies") else { return };
    let mut servers =
        peers::start(&venv, "resources_servers/example_session_state_mgmt/configs/example_session_state_mgmt.yaml")
            .await;
    let server = servers.servers()[0].clone();
    let environment = NemoGymEnvironment::new(&server.name, &server.url, &quick()).unwrap();
    let mut session = environment.open(&task()).await.expect("seeded");
    let ok = session.call(Party::Agent, "increment_counter", &json!({"count": 1})).await.unwrap();
    assert_eq!(ok.content, "{\"success\":true}");

    // SIGKILL, as an out-of-memory kill would.
    let status = std::process::Command::new("kill").args(["-s", "KILL", &server.pid.to_string()]).status().unwrap();
    assert!(status.success());
    let mut died = servers.check();
    for _ in 0..50 {
        if died.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        died = servers.check();
    }
    let died = died.unwrap_err().to_string();
    assert!(died.contains(&server.name) && died.contains("exited"), "{died}");

    let error = session.call(Party::Agent, "increment_counter", &json!({"count": 1})).await.unwrap_err();
    let text = error.to_string();
    assert!(text.contains(&server.name), "{text}");
    assert!(text.contains("POST /increment_counter"), "{text}");
    assert!(text.contains("could not connect after 3 attempt(s)"), "{text}");
    let error = session.score(&[], parley_core::Termination::AgentStop).await.unwrap_err();
    assert!(error.message.contains("POST /verify"), "{error}");
    session.close().await;
    servers.shutdown().await;
}

/// A server that accepts connections and never answers.
async fn hanging_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    format!("http://{address}")
}

/// A server that reads the request and closes the connection without a word.
async fn dropping_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buffer = [0u8; 4096];
            let _ = socket.read(&mut buffer).await;
        }
    });
    format!("http://{address}")
}

#[tokio::test]
async fn a_server_that_hangs_times_out_with_a_clear_cause() {
    let url = hanging_server().await;
    let environment = NemoGymEnvironment::new("stuck", &url, &quick()).unwrap();
    let started = Instant::now();
    let error = environment.open(&task()).await.err().expect("the seed times out");
    // Seeds are not retried after a timeout (they may have reached the server): one attempt.
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    let text = error.to_string();
    assert!(text.contains("server `stuck`") && text.contains("POST /seed_session"), "{text}");
    assert!(text.contains("no answer within 500ms"), "{text}");

    let aggregate = environment.aggregate_metrics(&[]).await.unwrap_err().to_string();
    // Idempotent calls are retried after timeouts: three attempts.
    assert!(aggregate.contains("POST /aggregate_metrics") && aggregate.contains("3 attempt(s)"), "{aggregate}");
}

#[tokio::test]
async fn a_connection_dropped_mid_call_is_an_env_error() {
    let url = dropping_server().await;
    let environment = NemoGymEnvironment::new("dropper", &url, &quick()).unwrap();
    let error = environment.open(&task()).await.err().expect("the seed fails").to_string();
    assert!(error.contains("server `dropper`") && error.contains("POST /seed_session"), "{error}");
    assert!(error.contains("may have died"), "{error}");
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error_after_bounded_retries() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let environment = NemoGymEnvironment::new("gone", &format!("http://127.0.0.1:{port}"), &quick()).unwrap();
    let error = environment.open(&task()).await.err().unwrap().to_string();
    assert!(error.contains("could not connect after 3 attempt(s)"), "{error}");
}
