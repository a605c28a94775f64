//! Several environments in one `parley serve` (`[[environment]]` tables beside the default):
//! a mixed batch goes row by row to the environment each names and gets from it the reward the
//! same row gets from that environment served alone; an unknown environment is a 400 naming
//! the known ones; each environment records under its own service run, reported by `parley
//! metrics`, `/aggregate_metrics` and `/metrics` apart (and as a whole); OpenEnv resets choose
//! by name; a stalled environment, bounded by its own admission, does not starve another, and
//! the whole service's bound holds beside each environment's. With NeMo Gym installed: `gym eval
//! run` over a mixed file through one Parley agent server, and a NeMo Gym config naming two
//! resources servers served whole.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Stub, Workdir, ok, read_jsonl, tau2_data_dir};
use crate::http::{get, post, post_json};
use crate::serve::{Serve, post_run};

/// The math environment's reward, as flags.
const MATH_REWARD: [&str; 4] = ["--reward", "math:weight=0.8", "--reward", "format:pattern=\\\\boxed,weight=0.2"];

/// The rows of a mixed batch, each with the environment that must play it: multi-step rows
/// naming none (or the default by `agent_ref`), math rows naming theirs in `environment`, and
/// tau2 airline conversations naming theirs in `agent_ref.name`. Each is its own task.
fn mixed_batch(work: &Workdir) -> Vec<(Value, &'static str)> {
    let mut batch = Vec::new();
    for (i, mut row) in read_jsonl(&work.path("tasks.jsonl")).into_iter().enumerate() {
        if i % 2 == 1 {
            row["agent_ref"] = json!({"type": "responses_api_agents", "name": "default"});
        }
        batch.push((row, "default"));
    }
    for mut row in read_jsonl(&work.path("math.jsonl")) {
        row["environment"] = json!("math");
        batch.push((row, "math"));
    }
    for task in ["0", "7"] {
        let row = json!({"id": task, "responses_create_params": {"input": []},
                         "agent_ref": {"type": "responses_api_agents", "name": "airline"}});
        batch.push((row, "airline"));
    }
    for (index, (row, _)) in batch.iter_mut().enumerate() {
        row["_ng_task_index"] = json!(index);
        row["_ng_rollout_index"] = json!(0);
    }
    batch
}

/// Posts every row at once and answers them in order.
fn post_all(address: &str, rows: &[Value]) -> Vec<Value> {
    std::thread::scope(|scope| {
        let posted: Vec<_> = rows.iter().map(|row| scope.spawn(move || post_run(address, &row.to_string()))).collect();
        posted
            .into_iter()
            .map(|answer| {
                let (status, _, body) = answer.join().unwrap();
                assert_eq!(status, 200, "{body}");
                serde_json::from_str(&body).unwrap()
            })
            .collect()
    })
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// What a mixed batch needs: its task files, a policy, the math environment's own policy (which
/// answers from the math rows, some wrong) and the tau2 user's model.
struct Mixed {
    work: Workdir,
    data: String,
    policy: Stub,
    math_policy: Stub,
    user: Stub,
}

impl Mixed {
    fn new() -> Mixed {
        let work = Workdir::new();
        work.tasks(4);
        let math = crate::rewards::math_tasks(&work, 6);
        let math_policy = Stub::start(&[
            "--answers",
            math.to_str().unwrap(),
            "--answer-format",
            "So it is \\boxed{{answer}}.",
            "--wrong-answers",
            "0.3",
        ]);
        let mixed = Mixed {
            data: tau2_data_dir(),
            policy: Stub::start(&[]),
            math_policy,
            user: Stub::start(&["--user-turns", "2"]),
            work,
        };
        // The default environment is the flags' multi-step; the others are tables.
        std::fs::write(
            mixed.work.path("multi.toml"),
            format!(
                "[[environment]]\nname = \"math\"\nenv = \"custom\"\ntasks = \"math.jsonl\"\nbase_url = \"{}\"\n\n\
                 [[environment.reward]]\nscorer = \"math\"\nweight = 0.8\n\n\
                 [[environment.reward]]\nscorer = \"format\"\nweight = 0.2\noptions = {{ pattern = '\\\\boxed' }}\n\n\
                 [[environment]]\nname = \"airline\"\nenv = \"tau2:airline\"\ndata_dir = \"{}\"\nuser = \"llm\"\n\
                 user_base_url = \"{}\"\n",
                mixed.math_policy.url, mixed.data, mixed.user.url
            ),
        )
        .unwrap();
        mixed
    }

    /// Each row played by its environment served alone (`parley serve` with that environment's
    /// flags), answered in order.
    fn alone(&self, batch: &[(Value, &str)]) -> Vec<Value> {
        let mut answers = vec![Value::Null; batch.len()];
        let alone: [(&str, &Stub, Vec<&str>); 3] = [
            ("default", &self.policy, vec![]),
            ("math", &self.math_policy, [&["--env", "custom", "--tasks", "math.jsonl"][..], &MATH_REWARD[..]].concat()),
            (
                "airline",
                &self.policy,
                vec![
                    "--env",
                    "tau2:airline",
                    "--data-dir",
                    &self.data,
                    "--user",
                    "llm",
                    "--user-base-url",
                    &self.user.url,
                ],
            ),
        ];
        for (environment, stub, flags) in alone {
            let serve = Serve::start(&self.work, stub, &flags);
            let own: Vec<usize> = (0..batch.len()).filter(|&i| batch[i].1 == environment).collect();
            let played = post_all(&serve.address, &own.iter().map(|&i| batch[i].0.clone()).collect::<Vec<_>>());
            for (i, answer) in own.into_iter().zip(played) {
                answers[i] = answer;
            }
        }
        answers
    }
}

#[test]
fn a_mixed_batch_gets_from_each_environment_the_reward_it_gets_alone() {
    let mixed = Mixed::new();
    let (work, policy) = (&mixed.work, &mixed.policy);
    let batch = mixed_batch(work);
    let rows: Vec<Value> = batch.iter().map(|(row, _)| row.clone()).collect();

    let serve = Serve::start(work, policy, &["--settings", "multi.toml"]);
    let answers = post_all(&serve.address, &rows);
    let mut runs: BTreeMap<&str, i64> = BTreeMap::new();
    for ((row, environment), answer) in batch.iter().zip(&answers) {
        assert_eq!(answer["_parley_environment"], *environment, "{row}: {answer}");
        assert_eq!(answer["id"], row["id"], "the row's fields come back");
        let run = answer["_parley_run"].as_i64().unwrap();
        assert_eq!(*runs.entry(environment).or_insert(run), run, "one service run per environment");
    }
    assert_eq!(runs.len(), 3, "{runs:?}");
    let airline = answers.iter().filter(|a| a["_parley_environment"] == "airline");
    assert!(
        airline.clone().all(|a| a["response"]["output"].as_array().unwrap().iter().any(|i| i["role"] == "user")),
        "tau2 conversations with the LLM user"
    );

    // An environment the service does not host is a 400 that names those it does.
    for named in [json!({"environment": "chess"}), json!({"agent_ref": {"name": "chess"}})] {
        let mut row = rows[0].clone();
        row.as_object_mut().unwrap().extend(named.as_object().unwrap().clone());
        let (status, _, body) = post_run(&serve.address, &row.to_string());
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("`chess`") && body.contains("`default`, `math`, `airline`"), "{body}");
    }

    // Figures per environment and for the whole: `/aggregate_metrics` over the answers...
    let rewards = |environment: &str| -> Vec<f64> {
        answers
            .iter()
            .filter(|a| environment.is_empty() || a["_parley_environment"] == environment)
            .map(|a| a["reward"].as_f64().unwrap())
            .collect()
    };
    for environment in ["default", "math"] {
        assert!(rewards(environment).iter().any(|r| (r - 1.0).abs() < 1e-9), "{environment} scored some rows right");
    }
    let aggregate = post_json(&serve.address, "/aggregate_metrics", &json!({"verify_responses": answers}).to_string());
    let whole = aggregate["agent_metrics"]["mean/reward"].as_f64().unwrap();
    assert!((whole - mean(&rewards(""))).abs() < 1e-9, "{aggregate}");
    for environment in ["default", "math", "airline"] {
        let figures = &aggregate["environments"][environment];
        let own = figures["agent_metrics"]["mean/reward"].as_f64().unwrap_or_else(|| panic!("{aggregate}"));
        assert!((own - mean(&rewards(environment))).abs() < 1e-9, "{environment}: {figures}");
        assert_eq!(figures["group_level_metrics"].as_array().unwrap().len(), rewards(environment).len());
        let flat = &aggregate["key_metrics"][format!("env/{environment}/mean/reward")];
        assert_eq!(flat.as_f64(), Some(own), "flat, where Gym keeps it: {aggregate}");
    }
    // ... and `/metrics`, every sample labelled with its environment.
    let (_, _, metrics) = get(&serve.address, "/metrics");
    for (environment, n) in [("default", 4.0), ("math", 6.0), ("airline", 2.0)] {
        let finished: f64 = metrics
            .lines()
            .filter(|l| l.starts_with(&format!("parley_sessions_finished_total{{environment=\"{environment}\"")))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
            .sum();
        assert_eq!(finished, n, "{environment}: {metrics}");
        let count = format!("parley_run_seconds_count{{environment=\"{environment}\"}} {n}");
        assert!(metrics.lines().any(|l| l == count), "{count}: {metrics}");
    }

    // OpenEnv: a reset names its environment; `/metadata` and `/schema` describe each.
    let (status, _, body) = post(&serve.address, "/reset", r#"{"environment": "math", "task_index": 2}"#);
    assert_eq!(status, 200, "{body}");
    let episode: Value = serde_json::from_str(&body).unwrap();
    let first = episode["observation"]["messages"].to_string();
    assert!(first.contains("What is 2 times 3?"), "math's task 2: {episode}");
    let (status, _, body) = post(&serve.address, "/reset", r#"{"environment": "chess"}"#);
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("`default`, `math`, `airline`"), "{body}");
    let metadata: Value = serde_json::from_str(&get(&serve.address, "/metadata").2).unwrap();
    assert_eq!(metadata["environments"]["math"]["tasks"], 6, "{metadata}");
    assert_eq!(metadata["environments"]["airline"]["env"], "tau2:airline", "{metadata}");
    let schema: Value = serde_json::from_str(&get(&serve.address, "/schema").2).unwrap();
    assert_eq!(schema["environments"]["default"]["run"], runs["default"], "{schema}");
    drop(serve);

    // `parley metrics` reports each environment's run from the store.
    for (environment, run) in &runs {
        let report = ok(&work.parley(&["metrics", &run.to_string(), "--db", "serve.db", "--json"]));
        let report: Value = serde_json::from_str(&report).unwrap();
        let scored = rewards(environment);
        assert_eq!(report["reward"]["n"], scored.len(), "{environment}: {report}");
        let own = report["reward"]["mean"].as_f64().unwrap();
        assert!((own - mean(&scored)).abs() < 1e-9, "{environment}: {report}");
    }

    // ... and the three as a whole, each environment's tasks its own.
    let all: Vec<String> = runs.values().map(ToString::to_string).collect();
    let mut args = vec!["metrics"];
    args.extend(all.iter().map(String::as_str));
    args.extend(["--db", "serve.db", "--json"]);
    let whole: Value = serde_json::from_str(&ok(&work.parley(&args))).unwrap();
    assert_eq!(whole["reward"]["n"], rewards("").len(), "{whole}");
    assert!((whole["reward"]["mean"].as_f64().unwrap() - mean(&rewards(""))).abs() < 1e-9, "{whole}");
    assert_eq!(whole["training"]["tasks"].as_object().map(|t| t.len()), Some(rewards("").len()), "{whole}");
    args.retain(|a| *a != "--json");
    let table = ok(&work.parley(&args));
    assert!(table.starts_with(&format!("runs {}", all.join(", "))), "{table}");
    // The viewer shows the whole too: a run's page `?with=` the others has the same figures.
    let view = crate::view::View::start_on(work, "serve.db", &[], &[]);
    let (first, rest) = all.split_first().unwrap();
    let (status, _, page) = view.get(&format!("/runs/{first}?with={}", rest.join(",")), &[]);
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("id=\"together\""), "{page}");
    let n = whole["reward"]["n"].as_u64().unwrap();
    let shown =
        format!("{:.3} ± {:.3}", whole["reward"]["mean"].as_f64().unwrap(), whole["reward"]["ci95"].as_f64().unwrap());
    assert!(page.contains(&shown) && page.contains(&format!("n = {n})")), "{shown}, n = {n}: {page}");
    let (_, _, alone) = view.get(&format!("/runs/{first}"), &[]);
    assert!(!alone.contains("id=\"together\"") && !alone.contains(&format!("n = {n})")), "{alone}");
    let (status, _, _) = view.get(&format!("/runs/{first}?with=999"), &[]);
    assert_eq!(status, 404, "a run that is not there");

    // Each environment alone, on the same rows: the same rewards and trajectories.
    for (i, alone) in mixed.alone(&batch).iter().enumerate() {
        assert_eq!(answers[i]["reward"], alone["reward"], "row {i}");
        assert_eq!(answers[i]["response"]["output"], alone["response"]["output"], "row {i}");
    }
}

/// A service of two environments bounded at 2 sessions in all, no queue: the default, and
/// `name`, whose own bound is `concurrency` and whose model never answers in time; `hanging`
/// rows for it are posted and left in flight.
struct Stalled {
    _work: Workdir,
    _policy: Stub,
    _stalled: Stub,
    serve: Serve,
    /// A row for the default environment.
    row: Value,
    /// The same row for the stalled one.
    to_stalled: Value,
}

impl Stalled {
    fn start(name: &str, concurrency: usize, hanging: usize) -> Stalled {
        let work = Workdir::new();
        work.tasks(2);
        let policy = Stub::start(&[]);
        let stalled = Stub::start(&["--hang", "1", "--hang-secs", "120"]);
        let table = format!(
            "[[environment]]\nname = \"{name}\"\nbase_url = \"{}\"\nconcurrency = {concurrency}\nqueue = 0\n",
            stalled.url
        );
        std::fs::write(work.path("stall.toml"), table).unwrap();
        let serve = Serve::start(&work, &policy, &["--settings", "stall.toml", "--concurrency", "2", "--queue", "0"]);
        let row: Value = serde_json::from_str(&work.first_task_row()).unwrap();
        let mut to_stalled = row.clone();
        to_stalled["environment"] = json!(name);
        for _ in 0..hanging {
            let (address, body) = (serve.address.clone(), to_stalled.to_string());
            std::thread::spawn(move || post_run(&address, &body));
        }
        let in_flight = format!("parley_sessions_in_flight{{environment=\"{name}\"}} {hanging}");
        let since = Instant::now();
        while !get(&serve.address, "/metrics").2.lines().any(|l| l == in_flight) {
            assert!(since.elapsed() < Duration::from_secs(20), "the `{name}` environment's sessions never started");
            std::thread::sleep(Duration::from_millis(50));
        }
        Stalled { _work: work, _policy: policy, _stalled: stalled, serve, row, to_stalled }
    }

    /// Posts `row`, which must be refused at once: 503 with `Retry-After`.
    fn refused(&self, row: &Value) {
        let (status, head, body) = post_run(&self.serve.address, &row.to_string());
        assert_eq!(status, 503, "{body}");
        assert!(head.contains("retry-after: 1"), "{head}");
    }

    /// Whether every line of `lines` is a line of `/metrics`.
    fn metrics_hold(&self, lines: &[&str]) {
        let metrics = get(&self.serve.address, "/metrics").2;
        for line in lines {
            assert!(metrics.lines().any(|l| l == *line), "{line}: {metrics}");
        }
    }
}

#[test]
fn a_stalled_environment_does_not_starve_another() {
    // The stalled environment's model never answers in time; its own bound is one session.
    let stalled = Stalled::start("stalled", 1, 1);
    // Its own bound is full: another request for it is refused at once...
    stalled.refused(&stalled.to_stalled);
    // ... while the default environment serves one row after another.
    for _ in 0..3 {
        let (status, _, body) = post_run(&stalled.serve.address, &stalled.row.to_string());
        assert_eq!(status, 200, "{body}");
    }
    stalled.metrics_hold(&[
        "parley_sessions_in_flight{environment=\"stalled\"} 1",
        "parley_requests_refused_total{environment=\"stalled\"} 1",
        "parley_requests_refused_total{environment=\"default\"} 0",
        "parley_run_seconds_count{environment=\"default\"} 3",
    ]);
}

/// The whole service's bound holds beside each environment's: an environment whose own bound
/// is as large as the whole's (set so on purpose) can fill the whole, and then a row for another
/// is refused before its body is read, counted under `environment=""`.
#[test]
fn the_whole_service_is_bounded_beside_each_environment() {
    let greedy = Stalled::start("greedy", 2, 2);
    greedy.refused(&greedy.row);
    greedy.metrics_hold(&[
        "parley_requests_refused_total{environment=\"\"} 1",
        "parley_requests_refused_total{environment=\"default\"} 0",
    ]);
}

/// OpenEnv's own client, over WebSocket and HTTP, resets in the environment it names and is
/// scored by that environment's reward (math's composite: a boxed right answer 1, a bare wrong
/// one 0), its steps finding the session among the environments.
#[test]
fn openenv_clients_reset_in_the_environment_they_name() {
    let Some(python) = crate::openenv::client() else { return };
    let mixed = Mixed::new();
    let serve = Serve::start(&mixed.work, &mixed.policy, &["--settings", "multi.toml"]);
    let script = |task: usize, text: &str| json!({"task_index": task, "environment": "math", "actions": [{"role": "assistant", "content": text}]});
    let scripts = json!([script(2, "So it is \\boxed{6}."), script(1, "It is 7.")]);
    std::fs::write(mixed.work.path("math-episodes.json"), scripts.to_string()).unwrap();
    let url = format!("http://{}", serve.address);
    for transport in ["ws", "http"] {
        let played = crate::openenv::trainer(&mixed.work, &python, "play", &url, &["math-episodes.json", transport]);
        let rewards: Vec<Option<f64>> = played.as_array().unwrap().iter().map(|e| e["reward"].as_f64()).collect();
        assert_eq!(rewards, [Some(1.0), Some(0.0)], "{transport}: {played}");
        assert!(played.as_array().unwrap().iter().all(|e| e["done"] == true), "{transport}: {played}");
    }
}

/// NeMo Gym 0.7.0's `gym eval run` over one file mixing multi-step rows, math rows and tau2
/// airline conversations, through one Parley agent server hosting the three: the rows name
/// Parley's agent, and choose their environment by the `environment` field (multi-step's by
/// naming none). Every row comes back once, with the reward the same row gets from its
/// environment served alone, and Gym's aggregate carries each environment's figures.
#[test]
fn nemo_gym_collects_a_mixed_file_through_one_parley() {
    let venv = crate::harness::root().join(".venv-nemo-gym");
    let Some(venv) = crate::remote::peer(venv.clone(), venv.join(".parley-ready-0.7.0")) else { return };
    let mixed = Mixed::new();
    let mut batch = mixed_batch(&mixed.work);
    for (row, environment) in &mut batch {
        row["agent_ref"] = json!({"type": "responses_api_agents", "name": "parley_agent"});
        if *environment != "default" {
            row["environment"] = json!(environment);
        }
    }
    let rows: Vec<String> = batch.iter().map(|(row, _)| row.to_string()).collect();
    std::fs::write(mixed.work.path("rows.jsonl"), rows.join("\n") + "\n").unwrap();
    let args = format!(
        "[--env,multi-step,--db,{},--settings,{}]",
        mixed.work.path("parley-serve.db").display(),
        mixed.work.path("multi.toml").display()
    );
    let (collected, eval_log) = crate::gym_agent::collect(&mixed.work, &venv, &mixed.policy.url, &args, 11_318);
    assert_eq!(collected.len(), batch.len(), "every row once:\n{eval_log}");
    let alone = mixed.alone(&batch);
    let mut seen = std::collections::BTreeSet::new();
    for row in &collected {
        let i = row["_ng_task_index"].as_u64().unwrap() as usize;
        assert!(seen.insert(i), "row {i} twice");
        assert_eq!(row["_parley_environment"], batch[i].1, "row {i}: {row}");
        assert_eq!(row["reward"], alone[i]["reward"], "row {i}");
        assert_eq!(row["response"]["output"], alone[i]["response"]["output"], "row {i}");
    }
    let metrics = std::fs::read_to_string(mixed.work.path("gym_aggregate_metrics.json")).unwrap_or_default();
    for environment in ["default", "math", "airline"] {
        assert!(metrics.contains(&format!("env/{environment}/mean/reward")), "{environment}: {metrics}");
    }
}

/// `--env nemo-gym` with a config naming two resources servers serves both, as `gym env start`
/// does: their servers started once, each an environment named by its instance name, which a
/// row names in `environment` or reaches through the agent the config binds to it. Each row gets
/// the reward the same row gets from its server served alone (`--server-name`).
#[test]
fn a_nemo_gym_config_with_several_resources_servers_serves_them_all() {
    let venv = crate::harness::root().join(".venv-nemo-gym");
    let Some(venv) = crate::remote::peer(venv.clone(), venv.join(".parley-ready-0.7.0")) else { return };
    let servers = venv.join("lib/python3.13/site-packages/resources_servers");
    let configs = [
        servers.join("example_multi_step/configs/example_multi_step.yaml"),
        servers.join("example_single_tool_call/configs/example_single_tool_call.yaml"),
    ];
    let work = Workdir::new();
    let rows = |server: &str| -> Vec<Value> {
        let text = std::fs::read_to_string(servers.join(server).join("data/example.jsonl")).unwrap();
        text.lines().take(3).map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let mut batch: Vec<(Value, &str)> = Vec::new();
    for (i, mut row) in rows("example_multi_step").into_iter().enumerate() {
        if i == 0 {
            row["expected_synonym_values"] = json!([0]);
        }
        row["agent_ref"] = json!({"type": "responses_api_agents", "name": "example_multi_step_simple_agent"});
        batch.push((row, "example_multi_step_resources_server"));
    }
    for mut row in rows("example_single_tool_call") {
        row["environment"] = json!("example_single_tool_call");
        batch.push((row, "example_single_tool_call"));
    }
    let stub = Stub::start(&[]);
    let venv_arg = venv.to_str().unwrap();
    let (a, b) = (configs[0].to_str().unwrap(), configs[1].to_str().unwrap());
    let gym = ["--env", "nemo-gym", "--config", a, "--config", b, "--gym-venv", venv_arg];
    let serve = Serve::start(&work, &stub, &gym);
    let answers = post_all(&serve.address, &batch.iter().map(|(row, _)| row.clone()).collect::<Vec<_>>());
    for ((row, environment), answer) in batch.iter().zip(&answers) {
        assert_eq!(answer["_parley_environment"], *environment, "{row}: {answer}");
    }
    assert_eq!(answers[0]["reward"], 1.0, "NeMo Gym's own verify: {}", answers[0]);
    let mut unknown = batch[0].0.clone();
    unknown["agent_ref"]["name"] = json!("chess_agent");
    let (status, _, body) = post_run(&serve.address, &unknown.to_string());
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("`example_multi_step_resources_server`, `example_single_tool_call`"), "{body}");
    drop(serve);

    for server in ["example_multi_step_resources_server", "example_single_tool_call"] {
        let serve = Serve::start(&work, &stub, &[&gym[..], &["--server-name", server]].concat());
        let own: Vec<usize> = (0..batch.len()).filter(|&i| batch[i].1 == server).collect();
        let played = post_all(&serve.address, &own.iter().map(|&i| batch[i].0.clone()).collect::<Vec<_>>());
        for (&i, alone) in own.iter().zip(&played) {
            assert_eq!(answers[i]["reward"], alone["reward"], "{server} row {i}");
            assert_eq!(answers[i]["response"]["output"], alone["response"]["output"], "{server} row {i}");
        }
    }
}
