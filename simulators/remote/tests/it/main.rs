//! The remote user against small axum servers on loopback: what it sends, a user that answers,
//! one that stops, one that fails (an error naming its URL, quoting an excerpt, its key
//! redacted), one that is not there, and one whose words leak its instructions (the review
//! flags them).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use parley_core::review::Rule;
use parley_core::{
    Message, ModelFailureKind, Task, ToolCall, ToolList, ToolSpec, UserFailure, UserSimulator, UserStop, UserView,
    user_view,
};
use parley_http::client::Limits;
use serde_json::{Value, json};
use simulator_remote::{Brief, RemoteUser, RemoteUserConfig};

const KEY: &str = "sk-remote-user-0123456789";

const SCENARIO: &str = "You want to know why your phone shows no signal since this morning, and you will \
                        not share your account password with anyone.";

fn limits(max_retries: u32) -> Limits {
    Limits { max_retries, backoff: Duration::from_millis(1), timeout: Duration::from_secs(5), ..Limits::default() }
}

fn user(base: &str, max_retries: u32) -> RemoteUser {
    RemoteUser::new(RemoteUserConfig {
        url: base.to_owned(),
        limits: limits(max_retries),
        key: Some(KEY.to_owned()),
        briefing: Arc::new(|row: &Value| Brief {
            scenario: row["user_scenario"]["instructions"].as_str().unwrap_or_default().to_owned(),
            persona: row["user_scenario"]["persona"].as_str().map(str::to_owned),
        }),
    })
    .unwrap()
}

/// Serves `router` on a loopback port and gives its base URL.
async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{address}")
}

/// A server answering every turn with `answer`, keeping each request's bearer header and body.
type Seen = Arc<Mutex<Vec<(Option<String>, Value)>>>;

async fn answering(status: StatusCode, answer: Value) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let router = Router::new().route(
        "/turn",
        post(move |headers: HeaderMap, body: axum::Json<Value>| async move {
            let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
            log.lock().unwrap().push((auth, body.0));
            (status, answer.to_string())
        }),
    );
    (serve(router).await, seen)
}

fn tool() -> ToolSpec {
    ToolSpec {
        name: "toggle_airplane_mode".into(),
        description: "Turn airplane mode on or off.".into(),
        parameters: json!({"type": "object", "properties": {"on": {"type": "boolean"}}}),
        strict: false,
    }
}

fn task() -> Task {
    Task {
        index: 4,
        id: "no_signal".into(),
        messages: vec![],
        tools: ToolList::default(),
        row: json!({"id": "no_signal", "user_scenario": {"persona": "Terse.", "instructions": SCENARIO}}).into(),
    }
}

/// The whole transcript so far: the agent's system prompt, its greeting, the user's first
/// words, an agent tool call and its result, a question, a user call and its result.
fn transcript() -> Vec<Message> {
    let call = |id: &str, name: &str| ToolCall { id: id.into(), name: name.into(), arguments: "{}".into() };
    vec![
        Message::system("You are the agent. Secret policy."),
        Message::assistant("Hi! How can I help you today?"),
        Message::user("My phone has no signal."),
        Message::assistant_calls(Some("Let me check.".into()), vec![call("a1", "get_line")]),
        Message::tool_result("a1", "line active"),
        Message::assistant("Please turn airplane mode off."),
        Message::user_calls(vec![call("u1", "toggle_airplane_mode")]),
        Message::tool_result("u1", "airplane mode is off"),
    ]
}

async fn respond(
    user: &RemoteUser,
    messages: &[Message],
    tools: &[ToolSpec],
) -> Result<parley_core::UserTurn, UserFailure> {
    let task = task();
    let view = user_view(messages);
    let tools = ToolList::from(tools.to_vec());
    user.respond(UserView { task: &task, trial: 1, messages: &view, tools: &tools, seed: 77 }).await
}

#[tokio::test]
async fn a_user_that_answers_gets_its_view_scenario_tools_and_seed() {
    let (base, seen) = answering(StatusCode::OK, json!({"content": "It works now, thanks.", "usage": {"x": 1}})).await;
    let user = user(&base, 0);
    let tools = [tool()];
    let turn = respond(&user, &transcript(), &tools).await.unwrap();
    assert_eq!((turn.message.content_str(), turn.stop), ("It works now, thanks.", None));
    let call = turn.call.expect("the exchange is recorded");
    assert_eq!(call.endpoint, format!("{base}/turn"));
    assert_eq!(call.response.unwrap().to_value()["content"], "It works now, thanks.");

    let seen = seen.lock().unwrap();
    let (auth, body) = &seen[0];
    assert_eq!(auth.as_deref(), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(body["version"], 1);
    assert_eq!(body["session"], json!({"task_id": "no_signal", "task_index": 4, "trial": 1, "seed": 77}));
    assert_eq!(body["scenario"], SCENARIO);
    assert_eq!(body["persona"], "Terse.");
    assert_eq!(body["task"]["id"], "no_signal");
    assert_eq!(body["tools"][0]["function"]["name"], "toggle_airplane_mode");
    // The user's view with the conversation's roles: no system prompt, no agent call or its
    // result, the agent's text beside its call kept.
    let messages = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["assistant", "user", "assistant", "assistant", "user", "tool"]);
    assert_eq!(messages[2], json!({"role": "assistant", "content": "Let me check."}));
    assert_eq!(messages[4]["tool_calls"][0]["id"], "u1");
    assert_eq!(messages[5], json!({"role": "tool", "content": "airplane mode is off", "tool_call_id": "u1"}));
    assert!(!body.to_string().contains("Secret policy") && !body.to_string().contains("line active"));
}

#[tokio::test]
async fn a_user_that_stops_ends_with_tau2s_marker() {
    let (base, _) = answering(StatusCode::OK, json!({"content": "That is all.", "stop": true})).await;
    let turn = respond(&user(&base, 0), &transcript(), &[]).await.unwrap();
    assert_eq!(turn.stop, Some(UserStop::Stop));
    assert_eq!(turn.message.content_str(), "That is all. ###STOP###");

    let (base, _) = answering(StatusCode::OK, json!({"content": "###TRANSFER###"})).await;
    assert_eq!(respond(&user(&base, 0), &transcript(), &[]).await.unwrap().stop, Some(UserStop::Transfer));
}

#[tokio::test]
async fn a_user_that_fails_is_an_error_naming_its_url_with_an_excerpt_and_no_key() {
    let broken = format!("{{\"detail\": \"traceback ... {KEY} ...{}\"}}", "x".repeat(2000));
    let (base, seen) = answering(StatusCode::INTERNAL_SERVER_ERROR, Value::String(broken)).await;
    let Err(UserFailure::Model(failure)) = respond(&user(&base, 2), &transcript(), &[]).await else {
        panic!("a failing user is a failed call");
    };
    assert_eq!(seen.lock().unwrap().len(), 3, "asked again within the retries");
    assert_eq!(failure.kind, ModelFailureKind::Status(500));
    assert_eq!(failure.call.attempts, 3);
    let message = failure.message;
    assert!(message.contains(&format!("the remote user at {base}/turn answered HTTP 500 after 3")), "{message}");
    assert!(message.contains("traceback"), "an excerpt is quoted: {message}");
    assert!(!message.contains(KEY), "the key is redacted: {message}");
    assert!(message.len() < 800, "an excerpt only: {} bytes", message.len());
}

#[tokio::test]
async fn an_answer_outside_the_contract_is_asked_again_then_named() {
    let (base, seen) = answering(StatusCode::OK, json!({"content": 42})).await;
    let Err(UserFailure::Model(failure)) = respond(&user(&base, 1), &transcript(), &[]).await else {
        panic!("a body that is no answer is a failed call");
    };
    assert_eq!(seen.lock().unwrap().len(), 2);
    assert_eq!(failure.kind, ModelFailureKind::MalformedResponse);
    assert!(failure.message.contains("not an answer of the user contract"), "{}", failure.message);

    let (base, _) = answering(StatusCode::OK, json!({"content": ""})).await;
    let Err(UserFailure::User { message, .. }) = respond(&user(&base, 0), &transcript(), &[]).await else {
        panic!("an empty turn is the user's failure");
    };
    assert!(message.contains(&base) && message.contains("an empty turn"), "{message}");
}

#[tokio::test]
async fn a_user_that_is_not_there_is_a_connection_failure_naming_it() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let Err(UserFailure::Model(failure)) = respond(&user(&base, 1), &transcript(), &[]).await else {
        panic!("an absent user is a failed call");
    };
    assert_eq!(failure.kind, ModelFailureKind::Transport);
    assert!(failure.message.contains(&format!("the remote user at {base}/turn")), "{}", failure.message);
}

#[tokio::test]
async fn a_user_that_leaks_its_instructions_is_flagged_by_the_review() {
    let leak = format!("As I was told: {SCENARIO}");
    let (base, _) = answering(StatusCode::OK, json!({"content": leak})).await;
    let leaky = user(&base, 0);
    let mut messages = transcript();
    let turn = respond(&leaky, &messages, &[]).await.unwrap();
    messages.push(turn.message);
    let faults = leaky.review(&task(), &messages, &[tool()]).await;
    let leaked: Vec<u32> = faults.iter().filter(|f| f.rule == Rule::LeaksInstructions).map(|f| f.seq).collect();
    assert_eq!(leaked, [messages.len() as u32 - 1], "{faults:?}");

    // A user that keeps to its part is not flagged.
    let (base, _) = answering(StatusCode::OK, json!({"content": "Still no bars on my screen."})).await;
    let mut messages = transcript();
    messages.push(respond(&user(&base, 0), &messages, &[]).await.unwrap().message);
    assert!(user(&base, 0).review(&task(), &messages, &[tool()]).await.is_empty());
}
