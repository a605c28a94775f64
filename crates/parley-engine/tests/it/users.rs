//! Conversations with a user: every transition between agent, user and environment, the
//! openings, the stop markers and the premature-stop guard.

use std::sync::Arc;

use parley_core::{Claim, Limits, Message, Player, Role, SessionSpec, Termination};
use parley_engine::{Job, Parties, Stop, run_session};

use crate::parties::{Counter, Line, MemoryStore, Play, ScriptedAgent, ScriptedUser, task};

struct Talk {
    agent: Arc<ScriptedAgent>,
    user: Arc<ScriptedUser>,
    store: Arc<MemoryStore>,
    parties: Parties,
}

fn talk(plays: Vec<Play>, lines: Vec<Line>) -> Talk {
    let agent = ScriptedAgent::new(plays);
    let user = ScriptedUser::new(lines);
    let store = Arc::new(MemoryStore::default());
    let parties = Parties {
        agent: agent.clone(),
        user: Some(user.clone()),
        environment: Arc::new(Counter { fail_open: false }),
        store: store.clone(),
        leases: Default::default(),
    };
    Talk { agent, user, store, parties }
}

fn job() -> Job {
    let spec = SessionSpec { task_index: 0, trial: 0, seed: 7, player: Player::Run };
    Job::new(Claim::unclaimed(1), task(), spec, None)
}

async fn run(t: &Talk, limits: Limits) -> parley_engine::SessionResult {
    run_session(&t.parties, job(), &limits, &Stop::default()).await
}

#[tokio::test]
async fn agent_text_goes_to_the_user_and_user_text_to_the_agent() {
    let t = talk(
        vec![Play::Say("Which number?"), Play::Say("Noted.")],
        vec![Line::Say("Two."), Line::Say("Bye ###STOP###")],
    );
    let r = run(&t, Limits::default()).await;
    assert_eq!(r.outcome.termination, Termination::UserStop);
    let user_seen = t.user.seen.lock().unwrap();
    assert_eq!(user_seen[0].last().unwrap(), &Message::assistant("Which number?"));
    assert!(user_seen[0].iter().all(|m| m.role != Role::System), "the user never sees the system prompt");
    let agent_seen = t.agent.seen.lock().unwrap();
    assert_eq!(agent_seen[1].last().unwrap(), &Message::user("Two."));
    let roles: Vec<Role> = r.transcript.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::User, Role::Assistant, Role::User]);
    assert_eq!(r.user_usage.prompt_tokens, 20, "user tokens are counted apart");
    assert_eq!(t.store.messages(1), r.transcript, "every turn is committed");
}

#[tokio::test]
async fn the_user_never_sees_the_agents_tool_calls() {
    let t = talk(vec![Play::Call("add", r#"{"n": 1}"#), Play::Say("Done: 1.")], vec![Line::Say("ok ###STOP###")]);
    let r = run(&t, Limits::default()).await;
    assert_eq!(r.outcome.termination, Termination::UserStop);
    let seen = t.user.seen.lock().unwrap();
    assert_eq!(seen[0], [Message::user("add two then stop"), Message::assistant("Done: 1.")]);
}

#[tokio::test]
async fn user_tool_calls_go_to_the_environment_and_back_to_the_user() {
    let t = talk(
        vec![Play::Say("Please flip the switch."), Play::Say("Great.")],
        vec![Line::Call("toggle", "{}"), Line::Say("It is on now."), Line::Say("###STOP###")],
    );
    let r = run(&t, Limits::default()).await;
    assert_eq!(r.outcome.termination, Termination::UserStop);
    assert_eq!(r.outcome.reward.unwrap().breakdown["switch"], true, "the user's call changed the user's state");
    let user_seen = t.user.seen.lock().unwrap();
    assert_eq!(user_seen[1].last().unwrap().content_str(), "switch on", "the result goes back to the user");
    let agent_seen = t.agent.seen.lock().unwrap();
    assert!(agent_seen[1].iter().all(|m| m.content_str() != "switch on"), "the agent never sees it");
    assert_eq!(agent_seen[1].last().unwrap(), &Message::user("It is on now."));
    let turns = t.store.turns.lock().unwrap();
    let user_call = turns.iter().flat_map(|(_, t)| &t.tool_calls).find(|c| c.name == "toggle").unwrap();
    assert_eq!(user_call.party, parley_core::Party::User);
}

#[tokio::test]
async fn the_agent_may_not_use_the_users_tools() {
    let t = talk(vec![Play::Call("toggle", "{}"), Play::Say("hm")], vec![Line::Say("###STOP###")]);
    let r = run(&t, Limits::default()).await;
    let error = r.transcript.iter().find(|m| m.role == Role::Tool).unwrap();
    assert!(error.content_str().contains("Unknown tool `toggle`"));
}

#[tokio::test]
async fn each_stop_marker_ends_the_session_as_user_stop() {
    for marker in ["###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"] {
        let line: &'static str = Box::leak(format!("Thanks. {marker}").into_boxed_str());
        let t = talk(vec![Play::Say("Anything else?")], vec![Line::Say(line)]);
        let r = run(&t, Limits::default()).await;
        assert_eq!(r.outcome.termination, Termination::UserStop, "{marker}");
        assert!(r.outcome.error.unwrap().contains(marker));
    }
}

#[tokio::test]
async fn the_agent_can_end_the_conversation() {
    let t = talk(vec![Play::Say("Goodbye. ###STOP###")], vec![]);
    let r = run(&t, Limits::default()).await;
    assert_eq!(r.outcome.termination, Termination::AgentStop);
    assert!(t.user.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_agent_greeting_opens_when_the_task_has_no_user_message() {
    struct Greeter(Arc<ScriptedAgent>);
    #[async_trait::async_trait]
    impl parley_core::Agent for Greeter {
        fn greeting(&self) -> Option<&str> {
            Some("Hi! How can I help you today?")
        }
        async fn act(
            &self,
            view: parley_core::AgentView<'_>,
        ) -> Result<parley_core::AgentTurn, parley_core::AgentFailure> {
            self.0.act(view).await
        }
    }
    let mut t = talk(vec![Play::Say("Sure.")], vec![Line::Say("I need help."), Line::Say("###STOP###")]);
    t.parties.agent = Arc::new(Greeter(t.agent.clone()));
    let mut silent = (*task()).clone();
    silent.messages = vec![Message::system("count")];
    let job = with(job(), |j| j.task = Arc::new(silent));
    let r = run_session(&t.parties, job, &Limits::default(), &Stop::default()).await;
    assert_eq!(r.transcript[1], Message::assistant("Hi! How can I help you today?"));
    assert_eq!(r.transcript[2], Message::user("I need help."));
    assert_eq!(t.user.seen.lock().unwrap()[0], [Message::assistant("Hi! How can I help you today?")]);
}

#[tokio::test]
async fn without_an_opening_or_greeting_the_user_speaks_first() {
    let t = talk(vec![Play::Say("Hello.")], vec![Line::Say("Hi, my order is late."), Line::Say("###STOP###")]);
    let mut silent = (*task()).clone();
    silent.messages = vec![];
    let r =
        run_session(&t.parties, with(job(), |j| j.task = Arc::new(silent)), &Limits::default(), &Stop::default()).await;
    assert_eq!(r.transcript[0], Message::user("Hi, my order is late."));
    assert_eq!(r.outcome.termination, Termination::UserStop);
}

#[tokio::test]
async fn the_turn_limit_ends_the_session() {
    let t = talk(
        vec![Play::Say("a"), Play::Say("b"), Play::Say("c")],
        vec![Line::Say("1"), Line::Say("2"), Line::Say("3")],
    );
    let r = run(&t, Limits { max_turns: 2, ..Limits::default() }).await;
    assert_eq!(r.outcome.termination, Termination::MaxTurns);
    assert_eq!(t.user.seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_failing_simulator_is_a_user_error() {
    let t = talk(vec![Play::Say("Hello?")], vec![Line::Fail]);
    let r = run(&t, Limits::default()).await;
    assert_eq!(r.outcome.termination, Termination::UserError);
    assert_eq!(r.outcome.error.as_deref(), Some("the script ran dry"));
}

/// The agent asks, the user confirms and stops in the same message, before anything was done.
fn premature_stop() -> Talk {
    talk(
        vec![Play::Say("Shall I add three?"), Play::Call("add", r#"{"n": 3}"#), Play::Say("Added three.")],
        vec![Line::Say("Yes, please go ahead. ###STOP###")],
    )
}

#[tokio::test]
async fn a_premature_stop_gives_the_agent_one_more_turn() {
    let t = premature_stop();
    let r = run(&t, Limits::default()).await;
    assert_eq!(r.outcome.termination, Termination::UserStop);
    assert_eq!(r.outcome.reward.unwrap().value, 3.0, "the confirmed action was carried out");
    assert_eq!(r.transcript.last().unwrap(), &Message::assistant("Added three."));
    assert_eq!(t.user.seen.lock().unwrap().len(), 1, "the user is not asked again");
}

#[tokio::test]
async fn the_guard_can_be_turned_off() {
    let t = premature_stop();
    let r = run(&t, Limits { stop_grace: 0, ..Limits::default() }).await;
    assert_eq!(r.outcome.termination, Termination::UserStop);
    assert_eq!(r.outcome.reward.unwrap().value, 0.0);
}

#[tokio::test]
async fn a_stop_after_the_action_was_done_is_not_premature() {
    let t = talk(
        vec![
            Play::Say("Shall I add three?"),
            Play::Call("add", r#"{"n": 3}"#),
            Play::Say("Done. Anything else?"),
            Play::Say("never"),
        ],
        vec![Line::Say("Yes please."), Line::Say("Yes, that's all. ###STOP###")],
    );
    let r = run(&t, Limits::default()).await;
    assert_eq!(r.outcome.termination, Termination::UserStop);
    assert_eq!(t.agent.seen.lock().unwrap().len(), 3, "no grace turn");
}

#[tokio::test]
async fn a_stop_right_after_a_confirmation_is_premature_too() {
    let t = talk(
        vec![
            Play::Say("Shall I add three?"),
            Play::Say("I will do it now."),
            Play::Call("add", r#"{"n": 3}"#),
            Play::Say("Done."),
        ],
        vec![Line::Say("Yes."), Line::Say("###STOP###")],
    );
    let r = run(&t, Limits::default()).await;
    assert_eq!(r.outcome.reward.unwrap().value, 3.0);
}

#[tokio::test]
async fn a_resumed_session_continues_a_grace_turn_where_it_stopped() {
    // Killed after the user's premature stop was committed: the agent still owes its grace turn.
    let t = talk(vec![Play::Call("add", r#"{"n": 3}"#), Play::Say("Added three.")], vec![]);
    let mut messages = task().messages.clone();
    messages.push(Message::assistant("Shall I add three?"));
    messages.push(Message::user("Yes, go ahead. ###STOP###"));
    let prior = parley_engine::Prior { messages, ..Default::default() };
    let r = run_session(&t.parties, with(job(), |j| j.prior = Some(prior)), &Limits::default(), &Stop::default()).await;
    assert_eq!(r.outcome.termination, Termination::UserStop);
    assert_eq!(r.outcome.reward.unwrap().value, 3.0);
    assert!(t.user.seen.lock().unwrap().is_empty(), "the user is not asked again");
}

#[tokio::test]
async fn a_resumed_conversation_goes_back_to_whoever_was_next() {
    // The last committed message is the agent's text: the user answers next.
    let t = talk(vec![], vec![Line::Say("###STOP###")]);
    let mut messages = task().messages.clone();
    messages.push(Message::assistant("What else?"));
    let prior = parley_engine::Prior { messages, ..Default::default() };
    let r = run_session(&t.parties, with(job(), |j| j.prior = Some(prior)), &Limits::default(), &Stop::default()).await;
    assert_eq!(r.outcome.termination, Termination::UserStop);
    assert!(t.agent.seen.lock().unwrap().is_empty());
}

/// `job` with one thing changed.
fn with(mut job: Job, change: impl FnOnce(&mut Job)) -> Job {
    change(&mut job);
    job
}
