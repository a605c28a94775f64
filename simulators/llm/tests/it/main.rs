//! The LLM user against a recording model client: what it sends and how it reads the answers.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use parley_core::{
    ChatReply, ChatRequest, Message, ModelCall, ModelClient, ModelFailure, Role, Task, ToolCall, ToolList,
    UserSimulator, UserStop, UserView, stable_seed,
};
use serde_json::json;
use simulator_llm::{LlmUser, LlmUserConfig, Prompt};

/// What one request carried: its messages, its seed, and how many tools it offered.
type Request = (Vec<Message>, Option<u64>, usize);

/// Answers with the next scripted text and keeps every request it saw.
struct Recorder {
    replies: Mutex<Vec<&'static str>>,
    seen: Mutex<Vec<Request>>,
}

#[async_trait]
impl ModelClient for Recorder {
    fn endpoint(&self) -> &str {
        "recorder"
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatReply, ModelFailure> {
        self.seen.lock().unwrap().push((request.messages.to_vec(), request.sampling.seed, request.tools.len()));
        let text = self.replies.lock().unwrap().remove(0);
        Ok(ChatReply { message: Message::assistant(text), call: ModelCall::default() })
    }
}

fn user(replies: Vec<&'static str>) -> (LlmUser, Arc<Recorder>) {
    let recorder = Arc::new(Recorder { replies: Mutex::new(replies), seen: Mutex::new(Vec::new()) });
    let config = LlmUserConfig { model: "user-model".into(), sampling: Default::default(), prompt: Prompt::default() };
    (LlmUser::new(recorder.clone(), config), recorder)
}

fn task() -> Task {
    Task {
        index: 0,
        id: "cancel_1".into(),
        messages: vec![],
        tools: Default::default(),
        row: json!({"user_scenario": {"instructions": {"reason_for_call": "Cancel order #W1."}}}).into(),
    }
}

#[tokio::test]
async fn roles_are_flipped_and_the_agents_calls_are_hidden() {
    let (user, recorder) = user(vec!["I want to cancel order #W1."]);
    let task = task();
    // The engine passes the user's view: agent text only, never its tool calls.
    let transcript = vec![
        Message::assistant("Hi! How can I help you today?"),
        Message::user("Hello."),
        Message::assistant_calls(
            Some("Checking.".into()),
            vec![ToolCall { id: "a".into(), name: "find".into(), arguments: "{}".into() }],
        ),
        Message::tool_result("a", "secret"),
    ];
    let view = parley_core::user_view(&transcript);
    let seed = stable_seed(&task.id, 2);
    let turn =
        user.respond(UserView { task: &task, trial: 2, messages: &view, tools: ToolList::none(), seed }).await.unwrap();
    assert_eq!(turn.message, Message::user("I want to cancel order #W1."));
    assert_eq!(turn.stop, None);
    let seen = recorder.seen.lock().unwrap();
    let (messages, sent_seed, _) = &seen[0];
    assert_eq!(messages[0].role, Role::System);
    assert!(messages[0].content_str().contains("Cancel order #W1."));
    let roles: Vec<Role> = messages[1..].iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::User]);
    assert_eq!(messages[3].content_str(), "Checking.");
    assert!(messages.iter().all(|m| m.content_str() != "secret" && m.tool_calls.is_empty()));
    assert_eq!(*sent_seed, Some(seed), "the session's seed is sent");
}

#[tokio::test]
async fn stop_markers_end_the_conversation() {
    let (user, _) = user(vec!["Thanks, that is all. ###STOP###", "###TRANSFER###", "I can't say. ###OUT-OF-SCOPE###"]);
    let task = task();
    let view = [Message::assistant("Done.")];
    for expected in [UserStop::Stop, UserStop::Transfer, UserStop::OutOfScope] {
        let turn = user
            .respond(UserView { task: &task, trial: 0, messages: &view, tools: ToolList::none(), seed: 1 })
            .await
            .unwrap();
        assert_eq!(turn.stop, Some(expected));
    }
}

#[tokio::test]
async fn seeds_are_stable_across_runs() {
    // Two separate runs of the same task and trial ask the same question with the same seed.
    let task = task();
    let mut asked = Vec::new();
    for _run in 0..2 {
        let (user, recorder) = user(vec!["hi"]);
        let view = [Message::assistant("Hello?")];
        let seed = stable_seed(&task.id, 1);
        user.respond(UserView { task: &task, trial: 1, messages: &view, tools: ToolList::none(), seed }).await.unwrap();
        asked.push(recorder.seen.lock().unwrap()[0].clone());
    }
    assert_eq!(asked[0], asked[1]);
    assert_ne!(stable_seed(&task.id, 1), stable_seed(&task.id, 2));
}

#[tokio::test]
async fn an_empty_answer_is_a_user_error() {
    let (user, _) = user(vec!["   "]);
    let task = task();
    let err = user
        .respond(UserView { task: &task, trial: 0, messages: &[], tools: ToolList::none(), seed: 0 })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("empty"));
}
