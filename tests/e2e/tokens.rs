//! Token capture through the binary: `parley run --token-ids` against `parley stub --token-ids`
//! (which answers as a vLLM server serving an RL trainer does), then the store and every export.
//! Contiguity is checked the way NeMo RL checks a batch, and a stub that breaks it on purpose
//! (`--token-ids retokenize`) must be caught.

use serde_json::Value;

use crate::harness::{Stub, Workdir, ok, read_jsonl, run};

/// NeMo RL's check of one rollout row: the trainable output items (non-empty
/// `generation_token_ids`) each carry all three fields, one log-prob per generated token, and
/// each one's prompt begins with every token of the trainable items before it. Returns how many
/// items are trainable.
pub fn check_trainable(row: &Value) -> Result<usize, String> {
    let mut seen: Vec<u64> = Vec::new();
    let mut trainable = 0;
    let ids = |item: &Value, field: &str| -> Vec<u64> {
        item[field].as_array().map(|a| a.iter().filter_map(Value::as_u64).collect()).unwrap_or_default()
    };
    for item in row["response"]["output"].as_array().ok_or("no output")? {
        let generation = ids(item, "generation_token_ids");
        if generation.is_empty() {
            continue;
        }
        trainable += 1;
        let prompt = ids(item, "prompt_token_ids");
        let log_probs = item["generation_log_probs"].as_array().ok_or("no generation_log_probs")?;
        if log_probs.len() != generation.len() {
            return Err(format!("{} log-probs for {} tokens", log_probs.len(), generation.len()));
        }
        if !prompt.starts_with(&seen) {
            return Err("Non-contiguous messages found".into());
        }
        seen = prompt;
        seen.extend(generation);
    }
    Ok(trainable)
}

/// The output items of a row, grouped into the agent's turns: each turn ends at the item
/// before a `function_call_output` or user message. Returns, per turn, whether its last item
/// carries tokens and whether any other item does.
fn turns(row: &Value) -> Vec<(bool, bool)> {
    let mut turns = Vec::new();
    let mut current: Vec<&Value> = Vec::new();
    let close = |current: &mut Vec<&Value>, turns: &mut Vec<(bool, bool)>| {
        if let Some((last, rest)) = current.split_last() {
            let carries = |i: &Value| i.get("generation_token_ids").is_some();
            turns.push((carries(last), rest.iter().any(|i| carries(i))));
        }
        current.clear();
    };
    for item in row["response"]["output"].as_array().unwrap() {
        let agents = item["type"] == "function_call" || (item["type"] == "message" && item["role"] == "assistant");
        if agents {
            current.push(item);
        } else {
            close(&mut current, &mut turns);
        }
    }
    close(&mut current, &mut turns);
    turns
}

#[tokio::test]
async fn token_ids_go_from_the_policy_through_the_store_to_every_export() {
    let work = Workdir::new();
    work.tasks(6);
    let stub = Stub::start(&["--token-ids"]);
    ok(&run(&work, &stub, &["--token-ids", "--temperature", "0.7", "--top-p", "0.95"]));
    let rows = read_jsonl(&work.path("out.jsonl"));
    assert_eq!(rows.len(), 6);
    for row in &rows {
        // Three model calls per multi-step session, each one trainable and contiguous.
        assert_eq!(check_trainable(row), Ok(3), "{row}");
        assert!(row.get("_parley_token_contiguity").is_none());
        for (last, others) in turns(row) {
            assert!(last && !others, "a turn's tokens are on its last item only: {row}");
        }
    }

    let db = work.db().await;
    // Every call after the first sent the earlier turns back with their tokens, unchanged.
    let requests: Vec<String> = sqlx::query_scalar("SELECT request FROM model_calls WHERE session_id = 1 ORDER BY seq")
        .fetch_all(&db)
        .await
        .unwrap();
    let first: Value = serde_json::from_str(&requests[0]).unwrap();
    assert_eq!((first["logprobs"].clone(), first["top_logprobs"].clone()), (Value::Bool(true), Value::from(0)));
    assert_eq!(first["return_tokens_as_token_ids"], true);
    // Stored requests after the first hold only their new messages (the store's deltas): the
    // assistant messages among them are the earlier turns as they went back.
    let later: Vec<Value> = requests[1..].iter().map(|r| serde_json::from_str(r).unwrap()).collect();
    let sent_back: Vec<&Value> =
        later.iter().flat_map(|r| r["messages"].as_array().unwrap()).filter(|m| m["role"] == "assistant").collect();
    let stored: Vec<String> = sqlx::query_scalar(
        "SELECT tokens FROM messages WHERE session_id = 1 AND role = 'assistant' AND tokens IS NOT NULL ORDER BY seq",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    assert_eq!((sent_back.len(), stored.len()), (2, 3));
    for (sent, stored) in sent_back.iter().zip(&stored) {
        let stored: Value = serde_json::from_str(stored).unwrap();
        for field in ["prompt_token_ids", "generation_token_ids", "generation_log_probs"] {
            assert_eq!(sent[field], stored[field], "{field} went back as it came");
        }
    }
    // Per call: the party, the finish reason and the sampling actually sent.
    let calls: Vec<(String, String, String)> =
        sqlx::query_as("SELECT party, finish_reason, sampling FROM model_calls WHERE session_id = 1 ORDER BY seq")
            .fetch_all(&db)
            .await
            .unwrap();
    let finishes: Vec<&str> = calls.iter().map(|c| c.1.as_str()).collect();
    assert_eq!(finishes, ["tool_calls", "tool_calls", "stop"]);
    assert!(calls.iter().all(|c| c.0 == "agent"));
    let sampling: Value = serde_json::from_str(&calls[0].2).unwrap();
    assert_eq!((sampling["temperature"].as_f64(), sampling["top_p"].as_f64()), (Some(0.7), Some(0.95)));

    // The exports: NeMo Gym rows equal the live ones; chat rows carry the fields per message.
    ok(&work.parley(&["export", "1", "--db", "parley.db", "--format", "nemo-gym", "--out", "gym.jsonl"]));
    let exported = read_jsonl(&work.path("gym.jsonl"));
    for again in &exported {
        let live = rows.iter().find(|r| r["_ng_task_index"] == again["_ng_task_index"]).unwrap();
        assert_eq!(live["response"]["output"], again["response"]["output"]);
    }
    ok(&work.parley(&["export", "1", "--db", "parley.db", "--format", "openai-chat", "--out", "chat.jsonl"]));
    let chat = read_jsonl(&work.path("chat.jsonl"));
    let carrying = chat[0]["messages"].as_array().unwrap().iter().filter(|m| m["generation_token_ids"].is_array());
    assert_eq!(carrying.count(), 3);
}

#[tokio::test]
async fn a_policy_that_breaks_contiguity_is_caught_and_its_tokens_held_back() {
    let work = Workdir::new();
    work.tasks(2);
    let stub = Stub::start(&["--token-ids", "retokenize"]);
    ok(&run(&work, &stub, &["--token-ids"]));
    let rows = read_jsonl(&work.path("out.jsonl"));
    for row in &rows {
        // The first generation is fine; the second's prompt re-renders the first, so it and
        // every later one go out without tokens, and the row says why.
        assert_eq!(check_trainable(row), Ok(1), "{row}");
        let why = row["_parley_token_contiguity"].as_str().unwrap();
        assert!(why.contains("do not begin with"), "{why}");
    }
    let db = work.db().await;
    let recorded: Vec<Option<String>> =
        sqlx::query_scalar("SELECT token_contiguity FROM sessions ORDER BY id").fetch_all(&db).await.unwrap();
    assert!(recorded.iter().all(|r| r.as_deref().is_some_and(|r| r.contains("position"))), "{recorded:?}");
    // The tokens the policy sent are kept in the store, as they came.
    let stored: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE tokens IS NOT NULL").fetch_one(&db).await.unwrap();
    assert_eq!(stored, 6);
    let show = ok(&work.parley(&["show", "1", "--db", "parley.db"]));
    assert!(show.contains("token ids"), "{show}");
}

#[tokio::test]
async fn without_the_flag_nothing_asks_for_tokens() {
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&["--token-ids"]);
    ok(&run(&work, &stub, &[]));
    let rows = read_jsonl(&work.path("out.jsonl"));
    assert_eq!(check_trainable(&rows[0]), Ok(0));
    let db = work.db().await;
    let asked: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM model_calls WHERE request LIKE '%logprobs%'")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(asked, 0);
}
