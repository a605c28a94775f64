//! Parley's built-in scorers against NeMo Gym's own servers on the same rows and the same
//! answers: the stub answers every row from the row itself (right, wrong or malformed), NeMo
//! Gym's `mcqa` server scores one run (`--env nemo-gym`), Parley's `choice` scorer another
//! (`--env custom`), and every row's reward must be equal.

use serde_json::{Value, json};

use crate::harness::{Stub, Workdir, ok, read_jsonl, root};

/// The venv `.ci/setup-peers` makes; missing, the test skips loudly, or fails under
/// `PARLEY_REQUIRE_PEERS=1`.
fn venv() -> Option<std::path::PathBuf> {
    let venv = root().join(".venv-nemo-gym");
    if venv.join(".parley-ready-0.7.0").is_file() {
        return Some(venv);
    }
    crate::harness::skip("NeMo Gym is not installed; run .ci/setup-peers");
    None
}

/// mcqa's shipped rows (both example files), and generated rows in every grading mode.
fn mcqa_rows(server: &std::path::Path) -> Vec<Value> {
    let mut rows: Vec<Value> = ["example.jsonl", "example_with_template_metadata.jsonl"]
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(server.join("data").join(f)).unwrap().lines().map(str::to_owned).collect::<Vec<_>>()
        })
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect();
    // A row may name three of the four modes; `lenient_answer_colon_md` is the server's to choose
    // (mcqa refuses a row that names it).
    let modes = ["strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon"];
    let letters = ["A", "B", "C", "D"];
    for i in 0..60 {
        let options: Vec<Value> = letters.iter().map(|l| json!({*l: format!("option {l} of question {i}")})).collect();
        let listed: Vec<String> = letters.iter().map(|l| format!("{l}: option {l} of question {i}")).collect();
        rows.push(json!({
            "responses_create_params": {"input": [{"role": "user",
                "content": format!("Question {i}: which option is right?\n{}", listed.join("\n"))}]},
            "options": options,
            "expected_answer": letters[i % 4],
            "grading_mode": modes[i % 3],
        }));
    }
    rows
}

#[test]
fn choice_agrees_with_nemo_gyms_mcqa_on_right_wrong_and_malformed_answers() {
    let Some(venv) = venv() else { return };
    let server = venv.join("lib/python3.13/site-packages/resources_servers/mcqa");
    let work = Workdir::new();
    let rows = mcqa_rows(&server);
    let text: Vec<String> = rows.iter().map(Value::to_string).collect();
    std::fs::write(work.path("rows.jsonl"), text.join("\n") + "\n").unwrap();
    // A letter every grading mode can read, a wrong letter for 30% of rows, none for 20%.
    let stub = Stub::start(&[
        "--answers",
        work.path("rows.jsonl").to_str().unwrap(),
        "--answer-format",
        "Answer: {answer}\n\\boxed{{answer}}",
        "--wrong-answers",
        "0.3",
        "--malformed-answers",
        "0.2",
    ]);
    // The config named as `gym` names it, relative to NeMo Gym's package.
    let config = std::path::PathBuf::from("resources_servers/mcqa/configs/mcqa.yaml");
    let common = ["--tasks", "rows.jsonl", "--base-url", &stub.url, "--db", "parley.db"];
    let mut gym = vec!["run", "--env", "nemo-gym", "--config", config.to_str().unwrap()];
    gym.extend(["--gym-venv", venv.to_str().unwrap(), "--out", "gym.jsonl"]);
    gym.extend(common);
    ok(&work.parley(&gym));
    let mut ours = vec!["run", "--env", "custom", "--reward", "choice", "--out", "parley.jsonl"];
    ours.extend(common);
    ok(&work.parley(&ours));

    let by_task = |file: &str| -> std::collections::BTreeMap<u64, Value> {
        read_jsonl(&work.path(file)).into_iter().map(|r| (r["_ng_task_index"].as_u64().unwrap(), r)).collect()
    };
    let (gym, parley) = (by_task("gym.jsonl"), by_task("parley.jsonl"));
    assert_eq!((gym.len(), parley.len()), (rows.len(), rows.len()));
    let mut rewards = std::collections::BTreeMap::<String, usize>::new();
    for (task, theirs) in &gym {
        let mine = &parley[task];
        assert_eq!(mine["reward"], theirs["reward"], "task {task}: parley {mine}\nmcqa {theirs}");
        assert_eq!(
            mine["reward_details"]["choice"]["extracted_answer"], theirs["extracted_answer"],
            "task {task}: the letters read"
        );
        *rewards.entry(theirs["reward"].to_string()).or_default() += 1;
    }
    // Right, wrong and malformed answers all occurred, so the rewards are not all alike.
    assert!(rewards.get("1.0").is_some_and(|n| *n >= 20), "{rewards:?}");
    assert!(rewards.get("0.0").is_some_and(|n| *n >= 15), "{rewards:?}");
    let unread = gym.values().filter(|r| r["extracted_answer"].is_null()).count();
    assert!(unread >= 8, "malformed answers: {unread}");
}

/// Parley's math scorer (boxed answers only, as `math_with_judge` grades) against NeMo Gym's
/// `math_with_judge` server (math-verify 0.8.0, no judge) on generated arithmetic rows and the
/// server's shipped rows, answered right, wrong and malformed.
#[test]
fn math_agrees_with_nemo_gyms_math_with_judge_on_right_wrong_and_malformed_answers() {
    let Some(venv) = venv() else { return };
    let server = venv.join("lib/python3.13/site-packages/resources_servers/math_with_judge");
    let work = Workdir::new();
    ok(&work.parley(&["tasks", "arithmetic", "--count", "80", "--seed", "3", "--out", "arith.jsonl"]));
    let mut rows: Vec<Value> = std::fs::read_to_string(work.path("arith.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    rows.extend(
        std::fs::read_to_string(server.join("data/example.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap()),
    );
    for row in &mut rows {
        // math_with_judge reads the question from the row.
        let question = row["responses_create_params"]["input"][0]["content"].clone();
        row.as_object_mut().unwrap().entry("question").or_insert(question);
    }
    let text: Vec<String> = rows.iter().map(Value::to_string).collect();
    std::fs::write(work.path("rows.jsonl"), text.join("\n") + "\n").unwrap();
    let stub = Stub::start(&[
        "--answers",
        work.path("rows.jsonl").to_str().unwrap(),
        "--answer-format",
        "Working it out, the result is $\\boxed{{answer}}$.",
        "--wrong-answers",
        "0.3",
        "--malformed-answers",
        "0.2",
    ]);
    let config = "resources_servers/math_with_judge/configs/math_with_judge.yaml";
    let common = ["--tasks", "rows.jsonl", "--base-url", &stub.url, "--db", "parley.db"];
    let mut gym = vec!["run", "--env", "nemo-gym", "--config", config, "--gym-venv", venv.to_str().unwrap()];
    gym.extend(["--out", "gym.jsonl"]);
    gym.extend(common);
    ok(&work.parley(&gym));
    let mut ours = vec!["run", "--env", "custom", "--reward", "math:require_boxed=true", "--out", "parley.jsonl"];
    ours.extend(common);
    ok(&work.parley(&ours));

    let by_task = |file: &str| -> std::collections::BTreeMap<u64, Value> {
        read_jsonl(&work.path(file)).into_iter().map(|r| (r["_ng_task_index"].as_u64().unwrap(), r)).collect()
    };
    let (gym, parley) = (by_task("gym.jsonl"), by_task("parley.jsonl"));
    assert_eq!((gym.len(), parley.len()), (rows.len(), rows.len()));
    let (mut right, mut zero) = (0, 0);
    for (task, theirs) in &gym {
        let mine = &parley[task];
        assert_eq!(mine["reward"], theirs["reward"], "task {task}: parley {mine}\nmath_with_judge {theirs}");
        right += usize::from(theirs["reward"] == json!(1.0));
        zero += usize::from(theirs["reward"] == json!(0.0));
    }
    assert!(right >= 25 && zero >= 25, "right {right}, zero {zero}");
}

/// NeMo Gym's `equivalence_llm_judge` with its swap check on, started by Parley from two configs
/// (the server's and `openai_model`, pointed at a judge stub by `--judge-base-url`), against
/// Parley's `judge` scorer talking to the same judge stub: the same rewards on every row.
#[test]
fn judge_agrees_with_nemo_gyms_equivalence_llm_judge_with_the_swap_check() {
    let Some(venv) = venv() else { return };
    let work = Workdir::new();
    ok(&work.parley(&["tasks", "arithmetic", "--count", "60", "--seed", "5", "--out", "rows.jsonl"]));
    let config = work.path("equivalence.yaml");
    std::fs::write(
        &config,
        "equivalence_llm_judge:\n  resources_servers:\n    equivalence_llm_judge:\n      entrypoint: app.py\n\
         \x20     judge_model_server: {type: responses_api_models, name: policy_model}\n\
         \x20     judge_responses_create_params: {input: []}\n\
         \x20     judge_prompt_template_fpath: prompt_templates/equivalence_llm_judge.txt\n\
         \x20     check_twice_swap: true\n      reward_if_swap_fails: 0.0\n",
    )
    .unwrap();
    let agent = Stub::start(&[
        "--answers",
        work.path("rows.jsonl").to_str().unwrap(),
        "--wrong-answers",
        "0.3",
        "--malformed-answers",
        "0.2",
    ]);
    let judge = Stub::start(&["--judge"]);
    let common =
        ["--tasks", "rows.jsonl", "--base-url", &agent.url, "--judge-base-url", &judge.url, "--db", "parley.db"];
    let mut gym = vec!["run", "--env", "nemo-gym", "--config", config.to_str().unwrap(), "--config"];
    gym.extend(["responses_api_models/openai_model/configs/openai_model.yaml", "--gym-venv", venv.to_str().unwrap()]);
    gym.extend(["--server-name", "equivalence_llm_judge", "--out", "gym.jsonl"]);
    gym.extend(common);
    ok(&work.parley(&gym));
    let gym_judgements = judge.stats()["requests"].as_u64().unwrap();
    let mut ours = vec!["run", "--env", "custom", "--reward", "judge", "--out", "parley.jsonl"];
    ours.extend(common);
    ok(&work.parley(&ours));

    let by_task = |file: &str| -> std::collections::BTreeMap<u64, Value> {
        read_jsonl(&work.path(file)).into_iter().map(|r| (r["_ng_task_index"].as_u64().unwrap(), r)).collect()
    };
    let (gym, parley) = (by_task("gym.jsonl"), by_task("parley.jsonl"));
    assert_eq!((gym.len(), parley.len()), (60, 60));
    let mut right = 0;
    for (task, theirs) in &gym {
        let mine = &parley[task];
        assert_eq!(mine["reward"], theirs["reward"], "task {task}: parley {mine}\nequivalence_llm_judge {theirs}");
        let asked = |evaluations: &Value| evaluations.as_array().map_or(0, Vec::len);
        assert_eq!(
            asked(&mine["reward_details"]["judge"]["judge_verdicts"]),
            asked(&theirs["judge_evaluations"]),
            "task {task}: both asked the judge as often"
        );
        right += usize::from(theirs["reward"] == json!(1.0));
    }
    assert!((20..=50).contains(&right), "right answers: {right}");
    assert!(gym_judgements >= 60 + right as u64, "NeMo Gym asked the judge twice for right answers");
}

/// `equivalence_llm_judge` whose judge answers 500: NeMo Gym's failsafe answers
/// `mask_sample: true`, `failure_kind: judge_failed`.
fn failing_judge_config(work: &Workdir) -> std::path::PathBuf {
    ok(&work.parley(&["tasks", "arithmetic", "--count", "3", "--out", "rows.jsonl"]));
    let config = work.path("equivalence.yaml");
    std::fs::write(
        &config,
        "equivalence_llm_judge:\n  resources_servers:\n    equivalence_llm_judge:\n      entrypoint: app.py\n\
         \x20     judge_model_server: {type: responses_api_models, name: policy_model}\n\
         \x20     judge_responses_create_params: {input: []}\n\
         \x20     judge_prompt_template_fpath: prompt_templates/equivalence_llm_judge.txt\n",
    )
    .unwrap();
    config
}

/// The arguments that run `equivalence_llm_judge` from `config`, its judge at `judge`.
fn judged_by<'a>(config: &'a std::path::Path, venv: &'a std::path::Path, judge: &'a Stub) -> Vec<&'a str> {
    vec![
        "--env",
        "nemo-gym",
        "--config",
        config.to_str().unwrap(),
        "--config",
        "responses_api_models/openai_model/configs/openai_model.yaml",
        "--gym-venv",
        venv.to_str().unwrap(),
        "--server-name",
        "equivalence_llm_judge",
        "--judge-base-url",
        &judge.url,
    ]
}

/// A verifier that reports its own failure fails the session as a classified failure
/// (`verifier_failed`), left out of the rewards.
#[test]
fn a_verifier_reporting_its_own_failure_is_a_classified_failure() {
    let Some(venv) = venv() else { return };
    let work = Workdir::new();
    let config = failing_judge_config(&work);
    let agent = Stub::start(&["--answers", work.path("rows.jsonl").to_str().unwrap()]);
    let judge = Stub::start(&["--server-error", "1.0"]);
    let mut args = vec!["run"];
    args.extend(judged_by(&config, &venv, &judge));
    args.extend(["--tasks", "rows.jsonl", "--base-url", &agent.url, "--db", "parley.db", "--out", "out.jsonl"]);
    let out = ok(&work.parley(&args));
    assert!(out.contains("failures       verifier_failed 3") && out.contains("no scored sessions"), "{out}");
    let failures = read_jsonl(&work.path("out_failures.jsonl"));
    assert_eq!(failures.len(), 3);
    for row in failures {
        let message = row["_ng_failure_message"].as_str().unwrap();
        assert!(message.contains("judge_failed, mask_sample"), "{message}");
    }
}

/// The same verdict served to a trainer: `/run` answers 200 with the trajectory, reward 0 and
/// `instance_config.mask_sample: true`, where NeMo RL reads it to leave the sample out of the
/// loss (a 5xx would count as an infrastructure failure instead).
#[test]
fn a_verifier_reporting_its_own_failure_is_served_masked() {
    let Some(venv) = venv() else { return };
    let work = Workdir::new();
    let config = failing_judge_config(&work);
    let agent = Stub::start(&["--answers", work.path("rows.jsonl").to_str().unwrap()]);
    let judge = Stub::start(&["--server-error", "1.0"]);
    let serve = crate::serve::Serve::start(&work, &agent, &judged_by(&config, &venv, &judge));
    for row in std::fs::read_to_string(work.path("rows.jsonl")).unwrap().lines() {
        let (status, _, body) = crate::serve::post_run(&serve.address, row);
        assert_eq!(status, 200, "{body}");
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["instance_config"]["mask_sample"], json!(true), "{answer}");
        assert_eq!(answer["reward"], json!(0.0));
        assert_eq!(answer["failure_kind"], json!("verifier_failed"));
        assert!(answer["failure_reason"].as_str().unwrap().contains("judge_failed"), "{answer}");
        assert!(!answer["response"]["output"].as_array().unwrap().is_empty(), "the trajectory comes back");
    }
}

/// Reward-hack probes through an environment's own verifier: NeMo Gym's `mcqa` server (`--env
/// nemo-gym`) gives each probe the same mean reward and paid share as Parley's `choice` scorer on
/// the same rows, and pays none of them, while it pays the right answer in the same format.
#[test]
fn probes_through_nemo_gyms_mcqa_verifier_agree_with_the_choice_scorer() {
    let Some(venv) = venv() else { return };
    let server = venv.join("lib/python3.13/site-packages/resources_servers/mcqa");
    let work = Workdir::new();
    let rows: Vec<Value> =
        mcqa_rows(&server).into_iter().filter(|r| r.get("grading_mode").is_some()).take(12).collect();
    let text: Vec<String> = rows.iter().map(Value::to_string).collect();
    std::fs::write(work.path("rows.jsonl"), text.join("\n") + "\n").unwrap();
    let format = "Answer: {answer}\n\\boxed{{answer}}";
    let config = "resources_servers/mcqa/configs/mcqa.yaml";
    let gym = ["--env", "nemo-gym", "--config", config, "--gym-venv", venv.to_str().unwrap()];
    let probe = |env: &[&str]| -> Value {
        let mut args = vec!["rewards", "probe", "--tasks", "rows.jsonl", "--answer-format", format, "--json"];
        args.extend(env);
        serde_json::from_str(&ok(&work.parley(&args))).unwrap()
    };
    let (theirs, ours) = (probe(&gym), probe(&["--env", "custom", "--reward", "choice"]));
    let figures = |report: &Value| -> Vec<(String, Value, Value, Value)> {
        report["probes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["probe"].as_str().unwrap().to_owned(),
                    p["scored"].clone(),
                    p["mean_reward"].clone(),
                    p["paid"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(figures(&theirs), figures(&ours), "mcqa {theirs}\nchoice {ours}");
    assert_eq!(theirs["paid"], serde_json::json!([]), "{theirs}");
    let scored = figures(&theirs).iter().filter(|(_, n, _, _)| *n == serde_json::json!(rows.len())).count();
    assert!(scored >= 6, "the probes that apply to choice rows scored every row: {theirs}");
    // The right answer in that format is paid: "none paid" above means something.
    let stub = Stub::start(&["--answers", work.path("rows.jsonl").to_str().unwrap(), "--answer-format", format]);
    let mut run =
        vec!["run", "--tasks", "rows.jsonl", "--base-url", &stub.url, "--db", "right.db", "--out", "right.jsonl"];
    run.extend(gym);
    ok(&work.parley(&run));
    let rewards: Vec<f64> =
        read_jsonl(&work.path("right.jsonl")).iter().map(|r| r["reward"].as_f64().unwrap()).collect();
    assert_eq!(rewards, vec![1.0; rows.len()], "mcqa pays the right answer");
}
