//! Injected faults: each kind at fraction 1.0, retries getting through, and validation.

use std::time::{Duration, Instant};

use parley_stub::{ConfigError, Faults, StubConfig};
use serde_json::{Value, json};

use crate::support::{USER, chat_request, post, responses_tools};

fn with_faults(faults: Faults) -> StubConfig {
    StubConfig { faults, ..StubConfig::default() }
}

#[tokio::test]
async fn rate_limit_answers_429_with_retry_after() {
    let (router, stats) = parley_stub::router(with_faults(Faults { rate_limit: 1.0, ..Faults::default() }));
    let reply = post(&router, "/v1/chat/completions", &chat_request(USER)).await;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.headers["retry-after"], "1");
    let error = &reply.json()["error"];
    assert_eq!(error["type"], "rate_limit_error");
    assert_eq!(error["code"], "rate_limit_exceeded");
    assert_eq!(stats.by_status(), vec![(429, 1)]);

    let (router, _) = parley_stub::router(StubConfig {
        retry_after_secs: 0,
        ..with_faults(Faults { rate_limit: 1.0, ..Faults::default() })
    });
    let reply = post(&router, "/v1/responses", &json!({"model": "m", "input": "hi"})).await;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.headers["retry-after"], "0");
}

#[tokio::test]
async fn server_error_answers_500() {
    let (router, _) = parley_stub::router(with_faults(Faults { server_error: 1.0, ..Faults::default() }));
    let reply = post(&router, "/v1/chat/completions", &chat_request(USER)).await;
    assert_eq!(reply.status, 500);
    assert_eq!(reply.json()["error"]["type"], "server_error");
}

#[tokio::test]
async fn hang_sleeps_then_answers_normally() {
    let hang = Duration::from_millis(80);
    let (router, _) =
        parley_stub::router(StubConfig { hang, ..with_faults(Faults { hang: 1.0, ..Faults::default() }) });
    let (normal, _) = router_without_faults();
    let started = Instant::now();
    let reply = post(&router, "/v1/chat/completions", &chat_request(USER)).await;
    assert!(started.elapsed() >= hang);
    assert_eq!(reply.status, 200);
    let expected = post(&normal, "/v1/chat/completions", &chat_request(USER)).await;
    assert_eq!(reply.bytes, expected.bytes);
}

#[tokio::test]
async fn reset_drops_the_connection_before_the_body() {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let (router, _) = parley_stub::router(with_faults(Faults { reset: 1.0, ..Faults::default() }));
    let request = axum::http::Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(chat_request(USER).to_string()))
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200, "the status line goes out");
    let body = response.into_body().collect().await;
    assert!(body.is_err(), "then the body breaks off");
}

#[tokio::test]
async fn huge_answers_are_valid_and_as_long_as_configured() {
    let config = StubConfig { huge_bytes: 100_000, ..with_faults(Faults { huge: 1.0, ..Faults::default() }) };
    let (router, _) = parley_stub::router(config);
    let reply = post(&router, "/v1/chat/completions", &chat_request(USER)).await;
    assert_eq!(reply.status, 200);
    let content = reply.json()["choices"][0]["message"]["content"].as_str().unwrap().len();
    assert_eq!(content, 100_000);
}

fn router_without_faults() -> (axum::Router, parley_stub::Stats) {
    parley_stub::router(StubConfig::default())
}

#[tokio::test]
async fn malformed_answers_truncated_json() {
    let (router, _) = parley_stub::router(with_faults(Faults { malformed: 1.0, ..Faults::default() }));
    let reply = post(&router, "/v1/chat/completions", &chat_request(USER)).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers["content-type"], "application/json");
    assert_eq!(&reply.bytes[..], br#"{"id": "chatcmpl-broken", "choices": ["#);
    assert!(serde_json::from_slice::<Value>(&reply.bytes).is_err());

    let reply = post(&router, "/v1/responses", &json!({"model": "m", "input": "hi"})).await;
    assert_eq!(reply.status, 200);
    assert!(serde_json::from_slice::<Value>(&reply.bytes).is_err());
}

#[tokio::test]
async fn bad_arguments_break_tool_calls_both_ways() {
    let (router, _) = parley_stub::router(with_faults(Faults { bad_arguments: 1.0, ..Faults::default() }));
    let mut seen = Vec::new();
    for i in 0..32 {
        let reply = post(&router, "/v1/chat/completions", &chat_request(&format!("q{i}"))).await;
        assert_eq!(reply.status, 200);
        let reply = reply.json();
        let arguments =
            reply["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap().to_owned();
        assert!(arguments == r#"{"oops": "# || arguments == "{}", "unexpected arguments {arguments}");
        seen.push(arguments);
    }
    assert!(seen.iter().any(|a| a == "{}"));
    assert!(seen.iter().any(|a| a != "{}"));

    // The Responses format breaks them the same way.
    let request = json!({"model": "m", "input": "hi", "tools": responses_tools()});
    let reply = post(&router, "/v1/responses", &request).await.json();
    let arguments = reply["output"][0]["arguments"].as_str().unwrap();
    assert!(arguments == r#"{"oops": "# || arguments == "{}");

    // A text answer has no arguments to break.
    let request = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let reply = post(&router, "/v1/chat/completions", &request).await.json();
    assert_eq!(reply["choices"][0]["message"]["content"], "Hello from parley-stub.");
}

#[tokio::test]
async fn retries_of_a_rate_limited_body_get_through() {
    let (router, stats) = parley_stub::router(with_faults(Faults { rate_limit: 0.5, ..Faults::default() }));
    let (normal, _) = router_without_faults();
    let request = chat_request(USER);
    let expected = post(&normal, "/v1/chat/completions", &request).await.bytes;
    let mut statuses = Vec::new();
    for _ in 0..64 {
        let reply = post(&router, "/v1/chat/completions", &request).await;
        if reply.status == 200 {
            assert_eq!(reply.bytes, expected);
        }
        statuses.push(reply.status.as_u16());
    }
    assert!(statuses.contains(&200));
    assert!(statuses.contains(&429));
    // Every attempt asked for the same turn.
    assert_eq!(stats.repeated_turns().len(), 1);
    assert_eq!(stats.repeated_turns()[0].2, 64);

    // The same seed replays the same sequence of decisions.
    let (again, _) = parley_stub::router(with_faults(Faults { rate_limit: 0.5, ..Faults::default() }));
    let mut replay = Vec::new();
    for _ in 0..64 {
        replay.push(post(&again, "/v1/chat/completions", &request).await.status.as_u16());
    }
    assert_eq!(statuses, replay);
}

#[test]
fn validate_rejects_impossible_fractions() {
    assert_eq!(StubConfig::default().validate(), Ok(()));
    let everything = Faults {
        rate_limit: 0.2,
        server_error: 0.2,
        hang: 0.2,
        malformed: 0.1,
        bad_arguments: 0.1,
        reset: 0.1,
        huge: 0.1,
    };
    assert_eq!(with_faults(everything).validate(), Ok(()));
    let negative = Faults { hang: -0.1, ..Faults::default() };
    assert!(matches!(with_faults(negative).validate(), Err(ConfigError::FractionOutOfRange { name: "hang", .. })));
    let nan = Faults { malformed: f64::NAN, ..Faults::default() };
    assert!(with_faults(nan).validate().is_err());
    let too_much = Faults { rate_limit: 0.7, server_error: 0.7, ..Faults::default() };
    assert!(matches!(with_faults(too_much).validate(), Err(ConfigError::FractionsExceedOne { .. })));
}
