//! Messages as models write them: a row's image travels to the model and is stored once per
//! session, not once per turn; a reasoning model's thoughts are stored, shown, exported, and
//! sent back on later turns only when the run says so; forks and resumes keep both.

use parley_core::SessionStatus;
use serde_json::{Value, json};

use crate::harness::{Stub, Workdir, ok, read_jsonl, run, text};

const STEP_0: &str = "Step 0: the task needs get_synonym_value, so I call it.";

/// The stored request of one call, whole again (requests after a session's first are deltas).
async fn request(db: &sqlx::SqlitePool, session: i64, seq: u32) -> Value {
    let rows: Vec<(i64, String)> =
        sqlx::query_as("SELECT seq, request FROM model_calls WHERE session_id = ? AND request IS NOT NULL")
            .bind(session)
            .fetch_all(db)
            .await
            .unwrap();
    let by_seq =
        |s: u32| rows.iter().find(|(q, _)| *q == i64::from(s)).map(|(_, r)| serde_json::from_str::<Value>(r).unwrap());
    // The texts a first request keeps apart (its tool list).
    let texts: Vec<(i64, String)> = sqlx::query_as("SELECT id, text FROM texts").fetch_all(db).await.unwrap();
    let text = |id: i64| texts.iter().find(|(i, _)| *i == id).map(|(_, t)| t.clone());
    parley_store::reconstruct(&by_seq(seq).expect("a stored request"), &by_seq, &text).expect("its bases are stored")
}

async fn reasoning_of(db: &sqlx::SqlitePool, session: i64, seq: i64) -> Option<Value> {
    let (json,): (Option<String>,) = sqlx::query_as("SELECT reasoning FROM messages WHERE session_id = ? AND seq = ?")
        .bind(session)
        .bind(seq)
        .fetch_one(db)
        .await
        .unwrap();
    json.map(|j| serde_json::from_str(&j).unwrap())
}

/// Whether any message of a request carries reasoning in either Chat Completions field.
fn sends_reasoning(request: &Value) -> bool {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m.get("reasoning_content").is_some() || m.get("reasoning").is_some())
}

#[tokio::test]
async fn reasoning_is_stored_shown_exported_and_sent_back_only_when_kept() {
    // `rotate`: reasoning_content at steps 0 and 2, reasoning at step 1.
    let stub = Stub::start(&["--reasoning", "rotate"]);
    let keep = Workdir::new();
    keep.tasks(1);
    ok(&run(&keep, &stub, &["--reasoning", "keep"]));
    let db = keep.db().await;
    // Messages: 0 system, 1 user, 2 call, 3 result, 4 call, 5 result, 6 answer.
    let first = reasoning_of(&db, 1, 2).await.unwrap();
    assert_eq!(first, json!({"text": STEP_0, "spelling": "reasoning_content"}));
    assert_eq!(reasoning_of(&db, 1, 4).await.unwrap()["spelling"], "reasoning");
    assert!(reasoning_of(&db, 1, 6).await.unwrap()["text"].as_str().unwrap().starts_with("Step 2: "));
    assert_eq!(reasoning_of(&db, 1, 3).await, None);

    // Kept: each earlier answer goes back with its reasoning, in the field it came in.
    let last = request(&db, 1, 6).await;
    assert_eq!(last["messages"][2]["reasoning_content"], STEP_0);
    assert!(last["messages"][2].get("reasoning").is_none());
    assert!(last["messages"][4]["reasoning"].as_str().unwrap().starts_with("Step 1: "));
    assert!(!sends_reasoning(&request(&db, 1, 2).await), "the first request has no earlier answer");

    // By default (what vLLM and OpenAI expect) it is stored but never sent back.
    let auto = Workdir::new();
    auto.tasks(1);
    ok(&run(&auto, &stub, &[]));
    let auto_db = auto.db().await;
    assert_eq!(reasoning_of(&auto_db, 1, 2).await.unwrap(), first);
    for seq in [4, 6] {
        assert!(!sends_reasoning(&request(&auto_db, 1, seq).await), "seq {seq}");
    }

    // Shown folded under the answer.
    let show = ok(&keep.parley(&["show", "1", "--db", "parley.db"]));
    assert!(show.contains("┆ reasoning (reasoning_content, 55 chars)"), "{show}");
    assert!(show.contains(&format!("┆   {STEP_0}")), "{show}");
    let call = show.find("→ get_synonym_value(").expect("the first call");
    assert!(call < show.find("┆ reasoning (reasoning_content, 55 chars)").unwrap(), "under the call: {show}");
    let answer = show.find("Result: ").expect("the final answer");
    assert!(show[answer..].contains("┆ reasoning (reasoning_content"), "the reasoning follows its answer: {show}");

    // NeMo Gym rollouts: a `reasoning` item before each answer; OpenAI chat rows: `reasoning_content`.
    let rollout = &read_jsonl(&keep.path("out.jsonl"))[0];
    let output = rollout["response"]["output"].as_array().unwrap();
    assert_eq!(output[0]["type"], "reasoning");
    assert_eq!(output[0]["summary"][0]["text"], STEP_0);
    assert_eq!(output[1]["type"], "function_call");
    assert_eq!(output.iter().filter(|i| i["type"] == "reasoning").count(), 3);
    ok(&keep.parley(&["export", "1", "--format", "openai-chat", "--db", "parley.db", "--out", "chat.jsonl"]));
    let chat = &read_jsonl(&keep.path("chat.jsonl"))[0];
    assert_eq!(chat["messages"][2]["reasoning_content"], STEP_0);
    assert!(chat["messages"][4]["reasoning_content"].as_str().unwrap().starts_with("Step 1: "));

    // A fork keeps the prefix's reasoning and, under the run's `keep`, sends it on.
    let out = ok(&keep.parley(&["fork", "1", "--at", "4", "--db", "parley.db"]));
    assert!(out.contains("session 2: forked from session 1"), "{out}");
    assert_eq!(reasoning_of(&db, 2, 2).await.unwrap(), first);
    assert_eq!(request(&db, 2, 4).await["messages"][2]["reasoning_content"], STEP_0);
    db.close().await;
}

#[tokio::test]
async fn a_resumed_session_keeps_its_reasoning_and_sends_it_back() {
    let stub = Stub::start(&["--reasoning", "reasoning"]);
    let work = Workdir::new();
    work.tasks(1);
    ok(&run(&work, &stub, &["--reasoning", "keep"]));
    // As if the run had died after its first tool result: the later turns are gone.
    let db = work.db().await;
    for sql in [
        "DELETE FROM messages WHERE session_id = 1 AND seq >= 4",
        "DELETE FROM model_calls WHERE session_id = 1 AND seq >= 4",
        "DELETE FROM tool_calls WHERE session_id = 1 AND seq >= 4",
        "DELETE FROM scores WHERE session_id = 1",
        "UPDATE sessions SET status = 'pending', termination = NULL, reward = NULL, finished_at = NULL, \
         owner = NULL, lease_until = NULL WHERE id = 1",
        "UPDATE runs SET status = 'running', finished_at = NULL",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&db).await.unwrap();
    }
    let out = work.parley(&["resume", "1", "--db", "parley.db"]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let (status,): (String,) = sqlx::query_as("SELECT status FROM sessions WHERE id = 1").fetch_one(&db).await.unwrap();
    assert_eq!(status, SessionStatus::Finished.as_str());
    assert_eq!(reasoning_of(&db, 1, 2).await.unwrap()["spelling"], "reasoning");
    // The first request after the resume is stored whole and carries the stored reasoning back.
    let resumed = request(&db, 1, 4).await;
    assert_eq!(resumed["messages"][2]["reasoning"], STEP_0);
    assert!(reasoning_of(&db, 1, 6).await.is_some());
    db.close().await;
}

/// A data URL of a 1 MiB PNG-typed image (its bytes do not matter to a model that only reads it).
fn megabyte_image() -> String {
    // 1,398,104 base64 characters decode to 1,048,576 bytes.
    format!("data:image/png;base64,{}AA==", "A".repeat(1_398_100))
}

#[tokio::test]
async fn an_image_row_runs_end_to_end_and_its_image_is_stored_once_per_session() {
    let work = Workdir::new();
    let path = work.tasks(1);
    let image = megabyte_image();
    let mut row = read_jsonl(&path).remove(0);
    let input = row["responses_create_params"]["input"].as_array_mut().unwrap();
    let user = input.iter_mut().find(|m| m["role"] == "user").unwrap();
    let question = user["content"].as_str().unwrap().to_owned();
    // Beside the image: a part of a type Parley does not know and a data URL that does not decode.
    user["content"] = json!([
        {"type": "input_text", "text": question},
        {"type": "input_image", "image_url": image, "detail": "low"},
        {"type": "hologram", "depth": 3},
        {"type": "input_image", "image_url": "data:image/png;base64,@@not base64@@"},
    ]);
    std::fs::write(&path, format!("{row}\n")).unwrap();

    // Four tool calls, then the answer: five model calls, each with the whole transcript.
    let stub = Stub::start(&["--tool-calls", "4"]);
    let out = run(&work, &stub, &[]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("message 1: part 2: a part of unknown type `hologram`, kept as given"), "{stderr}");
    assert!(stderr.contains("message 1: part 3: an image with a broken data URL"), "{stderr}");

    let db = work.db().await;
    // The image reached the model, in the Chat Completions form, with the bad parts as given.
    let first = request(&db, 1, 2).await;
    let parts = &first["messages"][1]["content"];
    assert_eq!(parts[0], json!({"type": "text", "text": question}));
    assert_eq!(parts[1], json!({"type": "image_url", "image_url": {"url": image, "detail": "low"}}));
    assert_eq!(parts[2], json!({"type": "hologram", "depth": 3}));
    assert_eq!(parts[3]["image_url"]["url"], "data:image/png;base64,@@not base64@@");
    assert_eq!(request(&db, 1, 10).await["messages"][1]["content"][1]["image_url"]["url"], image);
    let calls: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT seq, instr(request, 'base64,AAAA') > 0 FROM model_calls WHERE session_id = 1 ORDER BY seq",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    assert_eq!(calls.len(), 5);
    assert_eq!(
        calls.iter().filter(|(_, has)| *has == 1).count(),
        1,
        "only the first request holds the image: {calls:?}"
    );
    // Stored with the transcript, parts whole.
    let (stored,): (String,) =
        sqlx::query_as("SELECT parts FROM messages WHERE session_id = 1 AND seq = 1").fetch_one(&db).await.unwrap();
    assert!(stored.contains(&image));
    db.close().await;

    // The file holds the image three times: the task row, the opening message, the first
    // request. Stored whole every turn, the five requests would hold it five times (7 in all).
    let size = std::fs::metadata(work.path("parley.db")).unwrap().len()
        + std::fs::metadata(work.path("parley.db-wal")).map_or(0, |m| m.len());
    let copies = size as f64 / image.len() as f64;
    eprintln!("database: {size} bytes, {copies:.2} times the image's data URL");
    assert!(copies < 3.5, "{size} bytes: {copies:.2} copies of the image");

    // Replayed against a fresh environment, the session's tool calls give what they gave.
    let replay = ok(&work.parley(&["replay", "1", "--db", "parley.db"]));
    assert!(replay.contains("0 tool outputs drifted"), "{replay}");

    // `show` names the parts by type and size; it never prints the data.
    let show = ok(&work.parley(&["show", "1", "--db", "parley.db"]));
    assert!(show.contains("[image (image/png data URL, 1.0 MiB)]"), "{show}");
    assert!(show.contains("[raw part `hologram` (29 B)]"), "{show}");
    assert!(show.contains("[image (broken data URL, 36 B)]"), "{show}");
    assert!(show.len() < 8_000, "{} bytes of show output", show.len());

    // NeMo Gym rollouts keep the row's parts; OpenAI chat rows carry them as content parts.
    let rollout = &read_jsonl(&work.path("out.jsonl"))[0];
    assert_eq!(rollout["responses_create_params"]["input"][1]["content"][1]["image_url"], image);
    ok(&work.parley(&["export", "1", "--format", "openai-chat", "--db", "parley.db", "--out", "chat.jsonl"]));
    let chat = &read_jsonl(&work.path("chat.jsonl"))[0];
    assert_eq!(chat["messages"][1]["content"][1]["image_url"]["url"], image);
    assert_eq!(chat["messages"][1]["content"][2]["type"], "hologram");
}

#[tokio::test]
async fn the_simulated_user_never_sees_the_agents_reasoning() {
    let work = Workdir::new();
    work.tasks(1);
    let agent = Stub::start(&["--reasoning", "reasoning_content"]);
    let user = Stub::start(&["--user-turns", "2"]);
    let args = ["--user", "llm", "--user-base-url", &user.url, "--user-model", "user-model", "--reasoning", "keep"];
    ok(&run(&work, &agent, &args));
    let db = work.db().await;
    let requests: Vec<(String, String)> = sqlx::query_as(
        "SELECT msg.role, c.request FROM model_calls c
         JOIN messages msg ON msg.session_id = c.session_id AND msg.seq = c.seq WHERE c.session_id = 1",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    let (users, agents): (Vec<_>, Vec<_>) = requests.iter().partition(|(role, _)| role == "user");
    assert_eq!(users.len(), 2);
    // The agent's own later requests carry its kept reasoning; the user's never do.
    assert!(agents.iter().any(|(_, r)| r.contains("Step 0: the task needs")), "{agents:?}");
    assert!(users.iter().all(|(_, r)| !r.contains("Step ") && !r.contains("reasoning")), "{users:?}");
    db.close().await;
}
