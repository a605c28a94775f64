//! The client against the stub served on a loopback port: replies, retries, timeouts.

use std::time::{Duration, Instant};

use parley_core::{ChatRequest, Message, ModelClient, ModelFailureKind, Sampling, ToolSpec};
use parley_llm::{ChatClient, EndpointConfig};
use parley_stub::{Faults, StubConfig};
use serde_json::json;

async fn stub(config: StubConfig) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(parley_stub::serve(listener, config, std::future::pending()));
    format!("http://{address}/v1")
}

fn client(base_url: String, max_retries: u32, timeout: Duration) -> ChatClient {
    ChatClient::new(&EndpointConfig { base_url, max_retries, timeout, ..EndpointConfig::default() }).unwrap()
}

fn tools() -> parley_core::ToolList {
    parley_core::ToolList::from(vec![ToolSpec {
        name: "lookup".into(),
        description: "look up".into(),
        parameters: json!({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}),
        strict: false,
    }])
}

async fn ask(client: &ChatClient) -> Result<parley_core::ChatReply, parley_core::ModelFailure> {
    ask_in(client, None).await
}

/// [`ask`] in the place `ready` holds, when it holds one.
async fn ask_in(
    client: &ChatClient,
    ready: Option<&parley_core::Ready>,
) -> Result<parley_core::ChatReply, parley_core::ModelFailure> {
    let messages = [Message::user("hello")];
    let tools = tools();
    let sampling = Sampling { seed: Some(3), ..Sampling::default() };
    client
        .chat(ChatRequest {
            model: "m",
            messages: &messages,
            tools: &tools,
            sampling: &sampling,
            response_format: None,
            session: None,
            ready,
        })
        .await
}

#[tokio::test]
async fn a_tool_call_reply_is_parsed_and_recorded() {
    let client = client(stub(StubConfig::default()).await, 0, Duration::from_secs(5));
    let reply = ask(&client).await.unwrap();
    assert_eq!(reply.message.tool_calls.len(), 1);
    assert_eq!(reply.message.tool_calls[0].name, "lookup");
    assert_eq!(reply.message.tool_calls[0].arguments, r#"{"key":"Key"}"#);
    assert_eq!(reply.call.attempts, 1);
    assert!(reply.call.usage.prompt_tokens > 0);
    assert_eq!(reply.call.request.to_value()["seed"], 3);
    assert_eq!(reply.call.response.as_ref().unwrap().to_value()["object"], "chat.completion");
}

#[tokio::test]
async fn a_429_waits_as_long_as_retry_after_asks() {
    let config = StubConfig {
        faults: Faults { rate_limit: 0.5, ..Faults::default() },
        retry_after_secs: 1,
        ..StubConfig::default()
    };
    let client = client(stub(config).await, 20, Duration::from_secs(5));
    // Over several calls some meet a 429; each of those waits a whole second before its retry.
    let started = Instant::now();
    let mut retried = 0;
    for _ in 0..4 {
        let reply = ask(&client).await.unwrap();
        retried += reply.call.attempts - 1;
    }
    assert!(retried > 0, "with half the answers rate-limited, some call was retried");
    assert!(
        started.elapsed() >= Duration::from_secs(u64::from(retried)),
        "{retried} retries took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn persistent_server_errors_fail_after_the_retry_budget() {
    let config = StubConfig { faults: Faults { server_error: 1.0, ..Faults::default() }, ..StubConfig::default() };
    let client = client(stub(config).await, 2, Duration::from_secs(5));
    let failure = ask(&client).await.unwrap_err();
    assert_eq!(failure.kind, ModelFailureKind::Status(500));
    assert_eq!(failure.call.attempts, 3);
    assert!(failure.message.contains("after 3 attempt(s)"), "{}", failure.message);
}

#[tokio::test]
async fn a_hang_is_cut_off_by_the_per_call_timeout() {
    let config = StubConfig { faults: Faults { hang: 1.0, ..Faults::default() }, ..StubConfig::default() };
    let client = client(stub(config).await, 1, Duration::from_millis(200));
    let started = Instant::now();
    let failure = ask(&client).await.unwrap_err();
    assert_eq!(failure.kind, ModelFailureKind::Timeout);
    assert_eq!(failure.call.attempts, 2);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_truncated_body_is_a_malformed_response() {
    let config = StubConfig { faults: Faults { malformed: 1.0, ..Faults::default() }, ..StubConfig::default() };
    let client = client(stub(config).await, 1, Duration::from_secs(5));
    let failure = ask(&client).await.unwrap_err();
    assert_eq!(failure.kind, ModelFailureKind::MalformedResponse);
    assert_eq!(failure.call.attempts, 2, "the malformed body is retried once, within the budget");
}

#[tokio::test]
async fn a_closed_port_is_a_transport_failure() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let failure = ask(&client(url, 1, Duration::from_secs(2))).await.unwrap_err();
    assert_eq!(failure.kind, ModelFailureKind::Transport);
}

#[test]
fn a_missing_key_variable_is_named() {
    let config = EndpointConfig { api_key_env: Some("PARLEY_NO_SUCH_KEY".into()), ..EndpointConfig::default() };
    let err = ChatClient::new(&config).unwrap_err();
    assert!(err.to_string().contains("PARLEY_NO_SUCH_KEY"));
}

/// A base URL with a user and password is refused: no client sends them, and a client made with
/// one would put them in every model call's record and every error's text.
#[test]
fn a_base_url_with_credentials_is_refused_without_showing_them() {
    for url in ["http://me:hunter2@10.0.0.7:8000/v1", "https://hunter2@api.example/v1/"] {
        let config = EndpointConfig { base_url: url.into(), ..EndpointConfig::default() };
        let err = ChatClient::new(&config).unwrap_err().to_string();
        assert!(!err.contains("hunter2"), "{err}");
        assert!(err.contains("`http://10.0.0.7:8000/v1`") || err.contains("`https://api.example/v1`"), "{err}");
    }
    // Without them, the same URL makes a client.
    let config = EndpointConfig { base_url: "http://10.0.0.7:8000/v1".into(), ..EndpointConfig::default() };
    assert_eq!(ChatClient::new(&config).unwrap().endpoint(), "http://10.0.0.7:8000/v1");
}

/// An endpoint on loopback that answers every request with `head` (status line and headers) and
/// an empty body, over raw HTTP/1.1.
async fn answering(head: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                // The request is small: one read takes its headers, and the answer closes the
                // connection, so its body need not be read.
                let mut buffer = vec![0u8; 64 << 10];
                let _ = socket.read(&mut buffer).await;
                let answer = format!("{head}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    format!("http://{address}/v1")
}

#[tokio::test]
async fn a_retry_after_too_large_for_a_duration_fails_the_call_without_a_panic() {
    let url = answering("HTTP/1.1 429 Too Many Requests\r\nretry-after: 1e300").await;
    let client = client(url, 3, Duration::from_secs(5));
    // Under a session's deadline, a wait longer than the time left gives up at once.
    let deadline = parley_core::Deadline::after(Duration::from_secs(30));
    let started = Instant::now();
    let failure = deadline.scope(ask(&client)).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(failure.kind, ModelFailureKind::Status(429));
    assert_eq!(failure.kind.class(), parley_core::FailureClass::RateLimited);
    assert_eq!(failure.call.attempts, 1);
}

#[tokio::test]
async fn a_timeout_too_large_for_the_clock_never_panics() {
    let url = stub(StubConfig::default()).await;
    let reply = ask(&client(url, 1, Duration::MAX)).await.unwrap();
    assert_eq!(reply.call.attempts, 1);
}

/// A caller that takes its place first (`ready`) builds its request once the endpoint has room:
/// the call made with it takes no second place (with a bound of one it would wait forever), a
/// second caller waits until the first is done, and a place of another endpoint does not count.
#[tokio::test]
async fn a_place_taken_before_the_request_is_the_calls_own() {
    let base = stub(StubConfig::default()).await;
    let bounded = |base: &str| {
        ChatClient::new(&EndpointConfig { base_url: base.into(), max_concurrency: 1, ..EndpointConfig::default() })
            .unwrap()
    };
    let (client, other) = (bounded(&base), bounded(&stub(StubConfig::default()).await));
    async fn within<F: std::future::Future>(f: F) -> Result<F::Output, tokio::time::error::Elapsed> {
        tokio::time::timeout(Duration::from_secs(5), f).await
    }

    let ready = client.ready().await;
    assert!(
        tokio::time::timeout(Duration::from_millis(200), client.ready()).await.is_err(),
        "a second place waits while the only one is held"
    );
    let reply = within(ask_in(&client, Some(&ready))).await.expect("the call uses the place it was given");
    assert!(reply.is_ok());
    let elsewhere = other.ready().await;
    assert!(
        tokio::time::timeout(Duration::from_millis(200), ask_in(&client, Some(&elsewhere))).await.is_err(),
        "another endpoint's place is not this one's: the call waits for its own"
    );
    drop(ready);
    assert!(within(ask_in(&client, Some(&elsewhere))).await.expect("its own place came free").is_ok());
    assert!(within(client.ready()).await.is_ok(), "every place is back");
}
