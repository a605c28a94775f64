//! Every task of every domain, played by the oracle and scored.

use std::path::PathBuf;
use std::sync::Arc;

use agent_oracle::{Oracle, gold_script};
use async_trait::async_trait;
use environment_tau2::{Data, DomainOptions, load};
use parley_core::{
    Agent, AgentView, ChatReply, ChatRequest, EnvSession, Message, ModelCall, ModelClient, ModelFailure, Party, Reward,
    Task, Termination,
};

fn data() -> Option<PathBuf> {
    let dir = std::env::var_os("PARLEY_TAU2_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/tau2"));
    let found = dir.join("derived/tools.openai.json").exists();
    // CI sets PARLEY_REQUIRE_PEERS: there, missing data is a failure, not a skip.
    assert!(found || std::env::var("PARLEY_REQUIRE_PEERS").as_deref() != Ok("1"), "no tau2 data at {}", dir.display());
    found.then_some(dir)
}

/// A judge that finds every NL assertion met, so that the oracle test measures everything else.
struct AcceptingJudge;

#[async_trait]
impl ModelClient for AcceptingJudge {
    fn endpoint(&self) -> &str {
        "scripted://accept-all"
    }

    async fn chat(&self, _request: ChatRequest<'_>) -> Result<ChatReply, ModelFailure> {
        let content = r#"{"results": [{"expectedOutcome": "all", "reasoning": "scripted", "metExpectation": true}]}"#;
        Ok(ChatReply { message: Message::assistant(content), call: ModelCall::default() })
    }
}

async fn execute(session: &mut dyn EnvSession, party: Party, call: &parley_core::ToolCall) -> Message {
    let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
    let out = session.call(party, &call.name, &args).await.unwrap();
    Message::tool_result(call.id.clone(), out.content)
}

/// Plays the task's gold trajectory (agent steps from `Oracle::act`) and scores it.
pub async fn play(env: &dyn parley_core::Environment, task: &Task) -> (Reward, Vec<Message>) {
    let mut session = env.open(task).await.unwrap();
    let mut transcript = task.messages.clone();
    for (party, call) in gold_script(task) {
        match party {
            Party::Agent => {
                let view = AgentView { task, messages: &transcript, tools: session.tools(), seed: 0, session: 0 };
                let turn = Oracle.act(view).await.unwrap();
                assert_eq!(turn.message.tool_calls.len(), 1, "task {}", task.id);
                assert_eq!(turn.message.tool_calls[0], call, "task {}", task.id);
                transcript.push(turn.message);
            }
            Party::User => {
                transcript.push(Message::user_calls(vec![call.clone()]));
            }
        }
        let result = execute(session.as_mut(), party, &call).await;
        transcript.push(result);
    }
    let view = AgentView { task, messages: &transcript, tools: session.tools(), seed: 0, session: 0 };
    let closing = Oracle.act(view).await.unwrap().message;
    assert!(closing.tool_calls.is_empty());
    transcript.push(closing);
    let reward = session.score(&transcript, Termination::AgentStop).await.unwrap();
    (reward, transcript)
}

/// Tasks the oracle cannot pass, with the reason (also in environments/tau2/README.md).
const EXCEPTIONS: &[(&str, &str)] = &[
    (
        "update_task_with_history_and_env_assertions",
        "no gold actions: the env assertion wants task_2 completed, which only a real agent does",
    ),
    (
        "update_task_with_user_tools",
        "the env assertion wants notif_1 read, but no gold action dismisses it (DB and ENV_ASSERTION contradict)",
    ),
];

#[tokio::test]
async fn the_oracle_passes_every_task_but_the_documented_ones() {
    let Some(dir) = data() else {
        eprintln!("skipped: no tau2 data (set PARLEY_TAU2_DATA)");
        return;
    };
    let judge: Arc<dyn ModelClient> = Arc::new(AcceptingJudge);
    let mut report = Vec::new();
    let mut unexpected = Vec::new();
    for name in environment_tau2::DOMAINS {
        let options = DomainOptions { judge: Some(judge.clone()), ..DomainOptions::default() };
        let domain = load(&Data::Folder(dir.clone()), name, options).unwrap();
        let env = domain.environment();
        let mut passed = 0;
        for task in &domain.tasks {
            let (reward, _) = play(env.as_ref(), task).await;
            let excepted = EXCEPTIONS.iter().any(|(id, _)| *id == task.id);
            if reward.value == 1.0 {
                passed += 1;
                if excepted {
                    unexpected.push(format!("{name}/{}: passes but is listed as an exception", task.id));
                }
            } else if !excepted {
                unexpected.push(format!("{name}/{}: {}", task.id, serde_json::Value::Object(reward.breakdown)));
            }
        }
        report.push(format!("{name}: {passed}/{}", domain.tasks.len()));
    }
    eprintln!("oracle scores 1.0 on {}", report.join(", "));
    assert!(unexpected.is_empty(), "{}", unexpected.join("\n\n"));
}

#[tokio::test]
async fn without_a_judge_nl_assertions_in_the_basis_fail_loudly() {
    let Some(dir) = data() else { return };
    let domain = load(&Data::Folder(dir.clone()), "retail", DomainOptions::default()).unwrap();
    let env = domain.environment();
    let task = domain
        .tasks
        .iter()
        .find(|t| {
            t.row
                .pointer("/evaluation_criteria/nl_assertions")
                .and_then(|v| v.as_array())
                .is_some_and(|a| !a.is_empty())
        })
        .unwrap();
    let (reward, _) = play(env.as_ref(), task).await;
    assert_eq!(reward.value, 0.0);
    let info = &reward.breakdown["info"]["nl"]["error"];
    assert!(info.as_str().unwrap().contains("no judge is configured"), "{info}");
    assert_eq!(reward.breakdown["reward_breakdown"]["DB"], 1.0);
}
