//! Each reward component on crafted trajectories that pass and fail it.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use environment_tau2::{DomainOptions, load};
use parley_core::{
    ChatReply, ChatRequest, EnvSession, Message, ModelCall, ModelClient, ModelFailure, Reward, Role, Task, Termination,
    ToolCall,
};
use serde_json::{Value, json};

use crate::common::{domain, folder, open};

fn task<'a>(domain: &'a environment_tau2::Domain, id: &str) -> &'a Task {
    domain.tasks.iter().find(|t| t.id == id).unwrap()
}

/// The task's opening messages, then each `(party, tool, args)` call with the result the
/// session returns, then the agent's closing text.
async fn trajectory(
    domain: &environment_tau2::Domain,
    task: &Task,
    calls: &[(&str, &str, Value)],
    closing: &str,
) -> (environment_tau2::Tau2Session, Vec<Message>) {
    let mut session = open(domain, task);
    let mut messages = task.messages.clone();
    for (i, (party, name, args)) in calls.iter().enumerate() {
        let call = ToolCall { id: format!("c{i}"), name: (*name).into(), arguments: args.to_string() };
        let role = if *party == "user" { Role::User } else { Role::Assistant };
        messages.push(Message { tool_calls: vec![call], ..Message::empty(role) });
        let out = crate::common::call(&mut session, party, name, args.clone()).await;
        messages.push(Message::tool_result(format!("c{i}"), out.content));
    }
    messages.push(Message::assistant(closing));
    (session, messages)
}

async fn score(session: &mut environment_tau2::Tau2Session, messages: &[Message]) -> Reward {
    session.score(messages, Termination::AgentStop).await.unwrap()
}

#[tokio::test]
async fn only_agent_stop_and_user_stop_are_scored() {
    let mock = domain("mock");
    let t = task(&mock, "update_task_1");
    let calls = [("agent", "update_task_status", json!({"task_id": "task_1", "status": "completed"}))];
    let (mut s, messages) = trajectory(&mock, t, &calls, "Done.").await;
    for termination in [Termination::MaxSteps, Termination::TooManyErrors, Termination::Timeout] {
        let r = s.score(&messages, termination).await.unwrap();
        assert_eq!(r.value, 0.0, "{termination}");
        assert!(r.breakdown["info"]["note"].as_str().unwrap().contains("terminated prematurely"));
    }
    assert_eq!(s.score(&messages, Termination::UserStop).await.unwrap().value, 1.0);
}

#[tokio::test]
async fn db_passes_on_the_gold_end_state_and_fails_elsewhere() {
    let mock = domain("mock");
    let t = task(&mock, "update_task_1");
    let good = [("agent", "update_task_status", json!({"task_id": "task_1", "status": "completed"}))];
    let (mut s, m) = trajectory(&mock, t, &good, "Done.").await;
    let r = score(&mut s, &m).await;
    assert_eq!(r.value, 1.0);
    assert_eq!(r.breakdown["db_check"], json!({"db_match": true, "db_reward": 1.0}));
    assert_eq!(r.breakdown["reward_basis"], json!(["DB", "COMMUNICATE"]));
    assert_eq!(r.breakdown["empty_criteria"], false);

    let bad = [("agent", "create_task", json!({"user_id": "user_1", "title": "Extra"}))];
    let (mut s, m) = trajectory(&mock, t, &bad, "Done.").await;
    let r = score(&mut s, &m).await;
    assert_eq!(r.value, 0.0);
    assert_eq!(r.breakdown["reward_breakdown"]["DB"], 0.0);
}

#[tokio::test]
async fn env_assertions_gate_the_reward() {
    let mock = domain("mock");
    let t = task(&mock, "create_task_1_with_env_assertions");
    let good = [("agent", "create_task", json!({"user_id": "user_1", "title": "Important Meeting"}))];
    let (mut s, m) = trajectory(&mock, t, &good, "Created.").await;
    let r = score(&mut s, &m).await;
    assert_eq!(r.value, 1.0);
    assert_eq!(r.breakdown["env_assertions"][0]["met"], true);

    let (mut s, m) = trajectory(&mock, t, &[], "Nothing to do.").await;
    let r = score(&mut s, &m).await;
    assert_eq!(r.value, 0.0);
    // assert_task_status raises for a missing task: tau2 grades the whole evaluation 0.
    assert!(r.breakdown["error"].as_str().unwrap().contains("Task task_2 not found"), "{:?}", r.breakdown);
}

#[tokio::test]
async fn actions_must_all_be_matched_on_compare_args() {
    let mock = domain("mock");
    let t = task(&mock, "impossible_task_1");
    // compare_args is [], so any summary matches.
    let good = [("agent", "transfer_to_human_agents", json!({"summary": "anything"}))];
    let (mut s, m) = trajectory(&mock, t, &good, "Transferring you.").await;
    let r = score(&mut s, &m).await;
    assert_eq!(r.value, 1.0);
    assert_eq!(r.breakdown["action_checks"][0]["action_match"], true);
    assert_eq!(r.breakdown["action_checks"][0]["tool_type"], "generic");

    let (mut s, m) = trajectory(&mock, t, &[], "I cannot delete tasks.").await;
    let r = score(&mut s, &m).await;
    assert_eq!(r.value, 0.0);
    assert_eq!(r.breakdown["reward_breakdown"], json!({"DB": 1.0, "ACTION": 0.0}));
}

#[tokio::test]
async fn communicate_info_is_a_case_insensitive_substring_without_commas() {
    let mock = domain("mock");
    let t = task(&mock, "update_task_with_initialization_data");
    let good = [("agent", "update_task_status", json!({"task_id": "task_2", "status": "completed"}))];
    let closing = "THE AGENT ACKNOWLEDGED THE PREVIOUS CONTEXT, and the agent confirmed the task status was updated, successfully";
    let (mut s, m) = trajectory(&mock, t, &good, closing).await;
    let r = score(&mut s, &m).await;
    assert_eq!(r.value, 1.0, "{:?}", r.breakdown);

    let (mut s, m) = trajectory(&mock, t, &good, "Updated.").await;
    let r = score(&mut s, &m).await;
    assert_eq!(r.value, 0.0);
    assert_eq!(r.breakdown["reward_breakdown"]["COMMUNICATE"], 0.0);
    assert_eq!(r.breakdown["communicate_checks"][0]["met"], false);
}

#[tokio::test]
async fn a_basis_with_nothing_to_check_is_flagged() {
    let mock = domain("mock");
    let t = task(&mock, "create_task_1_nl_eval");
    let (mut s, m) = trajectory(&mock, t, &[], "Hello.").await;
    let r = score(&mut s, &m).await;
    assert_eq!(r.value, 1.0, "tau2 passes it");
    assert_eq!(r.breakdown["empty_criteria"], true);
    assert_eq!(r.breakdown["vacuous_components"], json!(["DB", "COMMUNICATE"]));
}

#[tokio::test]
async fn replay_refuses_a_transcript_the_tools_would_not_have_produced() {
    let mock = domain("mock");
    let t = task(&mock, "update_task_1");
    let good = [("agent", "update_task_status", json!({"task_id": "task_1", "status": "completed"}))];
    let (mut s, mut m) = trajectory(&mock, t, &good, "Done.").await;
    let result = m.iter_mut().find(|x| x.role == Role::Tool).unwrap();
    result.content = Some(r#"{"task_id": "task_1", "status": "pending"}"#.into());
    let r = score(&mut s, &m).await;
    assert_eq!(r.value, 0.0);
    assert!(r.breakdown["error"].as_str().unwrap().starts_with("replaying update_task_status"));
}

#[tokio::test]
async fn calls_the_engine_rejected_are_not_replayed() {
    let mock = domain("mock");
    let t = task(&mock, "update_task_1");
    let (mut s, mut m) = trajectory(
        &mock,
        t,
        &[("agent", "update_task_status", json!({"task_id": "task_1", "status": "completed"}))],
        "Done.",
    )
    .await;
    // A malformed extra write the engine answered itself: it never reached the environment.
    let rejected = ToolCall {
        id: "bad".into(),
        name: "create_task".into(),
        arguments: r#"{"user_id": "user_1", "title": "x"}"#.into(),
    };
    m.insert(m.len() - 1, Message::assistant_calls(None, vec![rejected]));
    m.insert(m.len() - 1, Message::tool_result("bad", r#"{"error":"arguments must match the schema"}"#));
    assert_eq!(score(&mut s, &m).await.value, 1.0);
}

/// A judge that records its prompts and answers with a fixed body.
struct Judge {
    answer: String,
    seen: Mutex<Vec<Vec<Message>>>,
}

#[async_trait]
impl ModelClient for Judge {
    fn endpoint(&self) -> &str {
        "scripted://judge"
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatReply, ModelFailure> {
        assert_eq!(request.sampling.temperature, Some(0.0));
        self.seen.lock().unwrap().push(request.messages.to_vec());
        Ok(ChatReply { message: Message::assistant(self.answer.clone()), call: ModelCall::default() })
    }
}

async fn judged(answer: &str) -> (Reward, Arc<Judge>) {
    let judge = Arc::new(Judge { answer: answer.into(), seen: Mutex::new(Vec::new()) });
    let options =
        DomainOptions { judge: Some(judge.clone()), judge_model: Some("judge-model".into()), ..Default::default() };
    let retail = load(&folder(), "retail", options).unwrap();
    let t = retail
        .tasks
        .iter()
        .find(|t| {
            t.row.pointer("/evaluation_criteria/nl_assertions").and_then(Value::as_array).is_some_and(|a| !a.is_empty())
        })
        .unwrap();
    let gold: Vec<(&str, &str, Value)> = t.row["evaluation_criteria"]["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| ("agent", a["name"].as_str().unwrap(), a["arguments"].clone()))
        .collect();
    let (mut s, m) = trajectory(&retail, t, &gold, "All done.").await;
    (score(&mut s, &m).await, judge)
}

#[tokio::test]
async fn nl_assertions_follow_the_judge_and_its_prompt_is_taus() {
    let met = r#"{"results": [{"expectedOutcome": "x", "reasoning": "fine", "metExpectation": true}]}"#;
    let (r, judge) = judged(met).await;
    assert_eq!(r.value, 1.0);
    assert_eq!(r.breakdown["nl_assertions"][0]["justification"], "fine");
    let seen = judge.seen.lock().unwrap().clone();
    let [system, user] = &seen[0][..] else { panic!("two messages") };
    assert!(
        system.content_str().starts_with("\n        TASK\n        - You will be given a list of expected outcomes")
    );
    assert!(system.content_str().ends_with("        }\n        "));
    assert!(
        user.content_str().starts_with("\n        conversation:\n        assistant: Hi! How can I help you today?\n")
    );
    assert!(user.content_str().contains("\nassistant: None\ntool: "), "tool calls and results are in the conversation");
    assert!(user.content_str().contains("\n        \n        expectedOutcomes:\n        ['"));

    let unmet = r#"{"results": [{"expectedOutcome": "x", "reasoning": "no", "metExpectation": false}]}"#;
    let (r, _) = judged(unmet).await;
    assert_eq!(r.value, 0.0);
    assert_eq!(r.breakdown["reward_breakdown"], json!({"DB": 1.0, "NL_ASSERTION": 0.0}));

    let (r, _) = judged("not json").await;
    assert_eq!(r.value, 0.0);
    assert!(r.breakdown["error"].as_str().unwrap().contains("did not answer with JSON"));
}

#[tokio::test]
async fn calls_pair_with_results_by_position_when_ids_repeat() {
    let mock = domain("mock");
    let t = task(&mock, "update_task_1");
    let calls = [
        ("agent", "update_task_status", json!({"task_id": "task_404", "status": "completed"})),
        ("agent", "update_task_status", json!({"task_id": "task_1", "status": "completed"})),
    ];
    let (mut s, mut m) = trajectory(&mock, t, &calls, "Done.").await;
    // Local servers give every turn's call the same id.
    for message in &mut m {
        message.tool_calls.iter_mut().for_each(|c| c.id = "call_0".into());
        if message.tool_call_id.is_some() {
            message.tool_call_id = Some("call_0".into());
        }
    }
    let r = score(&mut s, &m).await;
    assert_eq!(r.breakdown.get("error"), None, "{:?}", r.breakdown);
    assert_eq!(r.value, 1.0);
}

#[tokio::test]
async fn passengers_in_another_order_are_another_database() {
    let airline = domain("airline");
    let t = task(&airline, "40");
    let actions = t.row["evaluation_criteria"]["actions"].as_array().unwrap();
    let update = actions.iter().find(|a| a["name"] == "update_reservation_passengers").unwrap();
    let gold = update["arguments"].clone();
    let mut reversed = gold.clone();
    reversed["passengers"].as_array_mut().unwrap().reverse();
    let (mut s, m) = trajectory(&airline, t, &[("agent", "update_reservation_passengers", reversed)], "Done.").await;
    let r = score(&mut s, &m).await;
    assert_eq!(r.breakdown["db_check"]["db_match"], false, "tau2 hashes the passengers in their order");
    let (mut s, m) = trajectory(&airline, t, &[("agent", "update_reservation_passengers", gold)], "Done.").await;
    let (gold_hash, _) = s.db_hashes();
    let r = score(&mut s, &m).await;
    assert_eq!(r.breakdown["db_check"]["db_match"], true);
    assert_eq!(r.breakdown["db_hashes"]["db"], json!(gold_hash), "the final hashes are kept");
}

#[tokio::test]
async fn a_gold_write_that_raises_still_compares_the_databases() {
    let retail = domain("retail");
    for id in ["64", "105"] {
        let t = task(&retail, id);
        let gold: Vec<(&str, &str, Value)> = t.row["evaluation_criteria"]["actions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| ("agent", a["name"].as_str().unwrap(), a["arguments"].clone()))
            .collect();
        let (mut s, m) = trajectory(&retail, t, &gold, "Done.").await;
        let r = score(&mut s, &m).await;
        assert_eq!(r.breakdown["db_check"], json!({"db_match": true, "db_reward": 1.0}), "task {id}");
        assert_eq!(r.breakdown["reward_breakdown"]["DB"], 1.0, "task {id}");
        assert!(r.breakdown["info"]["env"]["failed_mutating_actions"].is_array(), "task {id}");
    }
}
