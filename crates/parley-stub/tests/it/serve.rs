//! The stub on a real socket: plain HTTP/1.1 over TCP, graceful shutdown, and hangs cut short.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use parley_stub::{Faults, StubConfig, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::support::{USER, chat_request};

async fn start(config: StubConfig) -> (SocketAddr, oneshot::Sender<()>, JoinHandle<io::Result<()>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, config, async {
        let _ = stopped.await;
    }));
    (address, stop, server)
}

/// Sends one request on a fresh connection and reads the whole answer.
async fn exchange(address: SocketAddr, method: &str, path: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8(answer).unwrap()
}

#[tokio::test]
async fn serves_http_until_shut_down() {
    let (address, stop, server) = start(StubConfig::default()).await;

    let models = exchange(address, "GET", "/v1/models", "").await;
    assert!(models.starts_with("HTTP/1.1 200 OK\r\n"), "{models}");
    assert!(models.contains(r#""id":"parley-stub""#));

    let body = chat_request(USER).to_string();
    let completion = exchange(address, "POST", "/v1/chat/completions", &body).await;
    assert!(completion.starts_with("HTTP/1.1 200 OK\r\n"), "{completion}");
    assert!(completion.contains("get_synonym_value"));

    let stats = exchange(address, "GET", "/stub/stats", "").await;
    assert!(stats.contains(r#""requests":1"#), "{stats}");

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("the server stops").unwrap().unwrap();
}

#[tokio::test]
async fn shutdown_cuts_hangs_short() {
    let (address, stop, server) =
        start(StubConfig { faults: Faults { hang: 1.0, ..Faults::default() }, ..StubConfig::default() }).await;
    let body = chat_request(USER).to_string();
    let hanging = tokio::spawn(async move { exchange(address, "POST", "/v1/chat/completions", &body).await });
    // Let the request arrive and start its hour-long hang.
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.send(()).unwrap();
    let answer =
        tokio::time::timeout(Duration::from_secs(5), hanging).await.expect("the hanging request ends").unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("the server stops").unwrap().unwrap();
}

#[tokio::test]
async fn refuses_an_invalid_configuration() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = StubConfig { faults: Faults { rate_limit: 2.0, ..Faults::default() }, ..StubConfig::default() };
    let error = serve(listener, config, std::future::pending()).await.unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    assert!(error.to_string().contains("rate_limit"));
}

#[tokio::test]
async fn repeated_call_ids_name_every_call_alike() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let config = StubConfig::default();
    let server =
        tokio::spawn(parley_stub::serve_with(listener, config, parley_stub::CallIds::Repeated, std::future::pending()));
    let body = chat_request(USER).to_string();
    let completion = exchange(address, "POST", "/v1/chat/completions", &body).await;
    assert!(completion.contains(r#""id":"call_0000000000000000""#), "{completion}");
    server.abort();
}
