//! NeMo Gym's `example_multi_turn_gymnasium` driven by `GymnasiumEnvironment`: the scripted
//! follow-ups reach the agent through `GymnasiumUser`, and the summed step rewards score it.

use futures::future::join_all;
use parley_core::{Role, UserSimulator};
use parley_remote::{GymnasiumEnvironment, GymnasiumUser};
use parley_stub::StubConfig;

use crate::agents::stub_agent;
use crate::driver;
use crate::peers;

pub const CONFIG: &str = "resources_servers/example_multi_turn_gymnasium/configs/example_multi_turn_gymnasium.yaml";

/// A final text that contains every example row's expected answer.
pub const ALL_ANSWERS: &str = "Paris: the Eiffel Tower; 120 / 6 = 20; 95 moons; 1991; 2.";

#[tokio::test]
async fn example_multi_turn_gymnasium_with_follow_ups() {
    let Some(venv) = peers::venv("example_multi_turn_gymnasium") else { return };
    let servers = peers::start(&venv, CONFIG).await;
    let server = &servers.servers()[0];
    let environment = GymnasiumEnvironment::new(&server.name, &server.url, &peers::options()).unwrap();
    let tasks = peers::tasks(&venv, "example_multi_turn_gymnasium", 5);
    let (base, stop) = peers::stub(StubConfig { final_text: Some(ALL_ANSWERS.into()), ..StubConfig::default() }).await;
    let agent = stub_agent(&base);
    let user = GymnasiumUser;

    let runs = tasks.iter().map(|t| driver::run(&agent, &environment, Some(&user as &dyn UserSimulator), t, 10));
    let outcomes: Vec<_> = join_all(runs).await.into_iter().map(|o| o.unwrap()).collect();
    for (outcome, task) in outcomes.iter().zip(&tasks) {
        let reward = outcome.reward.as_ref().unwrap();
        assert_eq!(reward.value, 1.0, "{:?}", outcome.transcript);
        assert_eq!(reward.breakdown["terminated"], true);
        assert_eq!(reward.breakdown["truncated"], false);
        assert_eq!(outcome.termination, parley_core::Termination::UserStop);
        // The agent heard every follow-up, in order, as a user message.
        let heard: Vec<String> = parley_core::agent_view(&outcome.transcript)
            .iter()
            .filter(|m| m.role == Role::User)
            .skip(1)
            .map(|m| m.content_str().to_owned())
            .collect();
        let follow_ups: Vec<String> =
            task.row["follow_ups"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
        assert_eq!(heard[..follow_ups.len()], follow_ups[..]);
        // The agent never sees the relay.
        assert!(parley_core::agent_view(&outcome.transcript).iter().all(|m| m.role != Role::Tool));
    }

    // Without a user, the session ends on the first text: a task with follow-ups is not over,
    // so it scores 0 and counts as truncated.
    let alone = driver::run(&agent, &environment, None, &tasks[0], 10).await.unwrap();
    let reward = alone.reward.unwrap();
    assert_eq!(reward.value, 0.0);
    assert_eq!(reward.breakdown["truncated"], true);

    // A wrong answer scores 0 after the follow-ups.
    let (wrong_base, wrong_stop) = peers::stub(StubConfig::default()).await;
    let wrong = driver::run(&stub_agent(&wrong_base), &environment, Some(&user), &tasks[0], 10).await.unwrap();
    assert_eq!(wrong.reward.unwrap().value, 0.0);
    let _ = (stop.send(()), wrong_stop.send(()));
    servers.shutdown().await;
}
