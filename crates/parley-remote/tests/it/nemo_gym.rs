//! NeMo Gym resources servers driven by `NemoGymEnvironment`: the stub policy on every example
//! row, and oracles that must reach reward 1 (which needs the session cookie to carry state
//! from the seed through the tools to verify).

use futures::future::join_all;
use parley_core::{Agent, Task};
use parley_remote::NemoGymEnvironment;
use parley_stub::StubConfig;
use serde_json::{Value, json};

use crate::agents::{Oracle, stub_agent};
use crate::driver::{self, Outcome};
use crate::peers;

async fn run_all(agent: &dyn Agent, environment: &NemoGymEnvironment, tasks: &[Task]) -> Vec<Outcome> {
    let runs = tasks.iter().map(|t| driver::run(agent, environment, None, t, 10));
    join_all(runs).await.into_iter().map(|o| o.expect("the session runs")).collect()
}

fn rewards(outcomes: &[Outcome]) -> Vec<f64> {
    outcomes.iter().map(|o| o.reward.as_ref().expect("verify answers").value).collect()
}

fn calls(turns: &[&[(&str, Value)]]) -> Vec<Vec<(String, String)>> {
    turns.iter().map(|t| t.iter().map(|(n, a)| ((*n).to_owned(), a.to_string())).collect()).collect()
}

#[tokio::test]
async fn example_multi_step_stub_and_oracle() {
    let Some(venv) = peers::venv("example_multi_step") else { return };
    let servers = peers::start(&venv, "resources_servers/example_multi_step/configs/example_multi_step.yaml").await;
    let server = &servers.servers()[0];
    let environment = NemoGymEnvironment::new(&server.name, &server.url, &peers::options()).unwrap();
    let tasks = peers::tasks(&venv, "example_multi_step", 5);
    let (base, stop) = peers::stub(StubConfig::default()).await;

    let stub = run_all(&stub_agent(&base), &environment, &tasks).await;
    for outcome in &stub {
        // Two tool calls (get_synonym_value, extract_synonym_values) and a text, as in NeMo Gym.
        assert_eq!(outcome.transcript.len() - 2, 5, "{:?}", outcome.transcript);
        let reward = outcome.reward.as_ref().unwrap();
        assert!(reward.breakdown.contains_key("set_overlap"), "{reward:?}");
        assert!(reward.breakdown.contains_key("parsed_synonym_values"));
    }
    // The stub extracts [0]: never the expected values.
    assert_eq!(rewards(&stub), [0.0; 5]);
    assert_eq!(stub[0].transcript[5].content.as_deref(), Some("{\"success\":true}"));

    let oracle = Oracle::new(
        |row| calls(&[&[("extract_synonym_values", json!({"synonym_values": row["expected_synonym_values"]}))]]),
        |_| "done".into(),
    );
    let gold = run_all(&oracle, &environment, &tasks).await;
    assert_eq!(rewards(&gold), [1.0; 5]);
    assert_eq!(gold[0].reward.as_ref().unwrap().breakdown["accuracy"], json!(true));

    // NeMo Gym's own summary of the output rows.
    let rows: Vec<Value> = gold
        .iter()
        .zip(&tasks)
        .map(|(o, t)| {
            let response = parley_core::nemo_gym::response_object("parley", &o.transcript[2..], Default::default());
            parley_core::nemo_gym::rollout_row(&t.row, response, o.reward.as_ref().unwrap(), t.index, 0)
        })
        .collect();
    let metrics = environment.aggregate_metrics(&rows).await.expect("aggregate_metrics answers");
    assert_eq!(metrics["agent_metrics"]["mean/reward"], json!(1.0), "{metrics}");
    let _ = stop.send(());
    servers.shutdown().await;
}

#[tokio::test]
async fn example_session_state_mgmt_keeps_one_cookie_jar_per_session() {
    let Some(venv) = peers::venv("example_session_state_mgmt") else { return };
    let servers =
        peers::start(&venv, "resources_servers/example_session_state_mgmt/configs/example_session_state_mgmt.yaml")
            .await;
    let server = &servers.servers()[0];
    let environment = NemoGymEnvironment::new(&server.name, &server.url, &peers::options()).unwrap();
    let tasks = peers::tasks(&venv, "example_session_state_mgmt", 5);
    // Each session adds what its own seed is missing; all run at once, so a shared or lost
    // cookie would show as a wrong count.
    let oracle = Oracle::new(
        |row| {
            let add = row["expected_count"].as_i64().unwrap() - row["initial_count"].as_i64().unwrap();
            calls(&[&[("increment_counter", json!({"count": add}))], &[("get_counter_value", json!({}))]])
        },
        |_| "done".into(),
    );
    let gold = run_all(&oracle, &environment, &tasks).await;
    assert_eq!(rewards(&gold), [1.0; 5]);
    let expected = tasks[0].row["expected_count"].as_i64().unwrap();
    assert_eq!(gold[0].transcript.last().unwrap().role, parley_core::Role::Assistant);
    assert_eq!(gold[0].transcript[gold[0].transcript.len() - 2].content_str(), format!("{{\"count\":{expected}}}"));

    let (base, stop) = peers::stub(StubConfig::default()).await;
    let stub = run_all(&stub_agent(&base), &environment, &tasks).await;
    // The stub adds 0, so a row scores 1 exactly when its seed already is the expected count.
    let same: Vec<f64> =
        tasks.iter().map(|t| f64::from(u8::from(t.row["expected_count"] == t.row["initial_count"]))).collect();
    assert_eq!(rewards(&stub), same);
    let _ = stop.send(());
    servers.shutdown().await;
}

#[tokio::test]
async fn workplace_assistant_gold_calls_score_one() {
    let Some(venv) = peers::venv("workplace_assistant") else { return };
    let servers = peers::start(&venv, "resources_servers/workplace_assistant/configs/workplace_assistant.yaml").await;
    let server = &servers.servers()[0];
    let environment = NemoGymEnvironment::new(&server.name, &server.url, &peers::options()).unwrap();
    let tasks = peers::tasks(&venv, "workplace_assistant", 4);
    let oracle = Oracle::new(
        |row| {
            row["ground_truth"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| vec![(c["name"].as_str().unwrap().to_owned(), c["arguments"].as_str().unwrap().to_owned())])
                .collect()
        },
        |_| "Done.".into(),
    );
    let gold = run_all(&oracle, &environment, &tasks).await;
    assert_eq!(rewards(&gold), [1.0; 4]);

    let (base, stop) = peers::stub(StubConfig::default()).await;
    let stub = run_all(&stub_agent(&base), &environment, &tasks).await;
    assert_eq!(rewards(&stub), [0.0; 4]);
    // A tool error comes back as the tool output, whatever the status, as in NeMo Gym.
    let mut session = parley_core::Environment::open(&environment, &tasks[0]).await.unwrap();
    let output = session.call(parley_core::Party::Agent, "no_such_tool", &json!({})).await.unwrap();
    assert!(!output.content.is_empty());
    session.close().await;
    let _ = stop.send(());
    servers.shutdown().await;
}

#[tokio::test]
async fn calendar_and_mcqa_score_the_final_text() {
    let Some(venv) = peers::venv("calendar and mcqa") else { return };
    let configs = [
        std::path::PathBuf::from("resources_servers/calendar/configs/calendar.yaml"),
        std::path::PathBuf::from("resources_servers/mcqa/configs/mcqa.yaml"),
    ];
    let options = parley_remote::LaunchOptions::with_venv(&venv);
    let servers = parley_remote::NemoGymServers::start_all(&configs, &options).await.expect("servers start");
    let url = |implementation: &str| {
        let s = servers.servers().iter().find(|s| s.implementation == implementation).unwrap();
        NemoGymEnvironment::new(&s.name, &s.url, &peers::options()).unwrap()
    };
    let (calendar, mcqa) = (url("calendar"), url("mcqa"));

    let mcqa_tasks = peers::tasks(&venv, "mcqa", 5);
    let oracle = Oracle::new(|_| Vec::new(), |row| format!("\\boxed{{{}}}", row["expected_answer"].as_str().unwrap()));
    let gold = run_all(&oracle, &mcqa, &mcqa_tasks).await;
    assert_eq!(rewards(&gold), [1.0; 5]);
    assert!(gold[0].reward.as_ref().unwrap().breakdown.contains_key("extracted_answer"));

    let (base, stop) = peers::stub(StubConfig::default()).await;
    let stub = run_all(&stub_agent(&base), &mcqa, &mcqa_tasks).await;
    assert_eq!(rewards(&stub), [0.0; 5]);

    let calendar_tasks = peers::tasks(&venv, "calendar", 5);
    let stub = run_all(&stub_agent(&base), &calendar, &calendar_tasks).await;
    // "Hello from parley-stub." is no calendar.
    assert_eq!(rewards(&stub), [0.0; 5]);
    let _ = stop.send(());
    servers.shutdown().await;
}
