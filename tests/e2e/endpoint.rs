//! A scripted OpenAI-compatible endpoint on loopback, for faults the stub does not make: each
//! request is answered by a function of its number and its `Authorization` header, and its body
//! is kept for the test to read.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

/// What the endpoint answers to request `n` (counted from 0) carrying `authorization`.
pub type Script = dyn Fn(usize, &str) -> (u16, String) + Send + Sync;

/// The endpoint, served from a thread of its own so that tests may block on `parley`.
pub struct Endpoint {
    pub url: String,
    requests: Arc<AtomicUsize>,
    bodies: Arc<Mutex<Vec<String>>>,
}

impl Endpoint {
    pub fn start(script: impl Fn(usize, &str) -> (u16, String) + Send + Sync + 'static) -> Endpoint {
        let script: Arc<Script> = Arc::new(script);
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let kept = bodies.clone();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let app = axum::Router::new().route(
                    "/v1/chat/completions",
                    axum::routing::post(move |headers: HeaderMap, body: String| {
                        let n = counter.fetch_add(1, Ordering::SeqCst);
                        kept.lock().unwrap().push(body);
                        let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                        let (status, body) = script(n, &auth);
                        async move {
                            let status = StatusCode::from_u16(status).unwrap();
                            let response: Response =
                                (status, [("content-type", "application/json")], body).into_response();
                            response
                        }
                    }),
                );
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        Endpoint { url, requests, bodies }
    }

    /// Requests answered so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// The bodies of the requests received since the last call, in the order they came.
    pub fn take_bodies(&self) -> Vec<String> {
        std::mem::take(&mut *self.bodies.lock().unwrap())
    }
}

/// A chat completion whose answer is `text`.
pub fn completion(text: &str) -> String {
    serde_json::json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "scripted",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1}
    })
    .to_string()
}
