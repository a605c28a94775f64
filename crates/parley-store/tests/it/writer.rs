//! The writer against a real SQLite file: what goes in comes back exactly, a batch that fails
//! leaves nothing behind, and only the writer writes.

use std::sync::Arc;
use std::time::Duration;

use parley_core::{
    Claim, FailureClass, Message, MessageRecord, ModelCall, Party, Player, RawJson, Reward, RunSpec, Sampling,
    SessionOutcome, SessionSpec, SessionStatus, SessionStore, Task, Termination, TokenIds, ToolCall, ToolCallRecord,
    TurnRecord, Usage,
};
use parley_store::{SqliteStore, StoreOptions};
use serde_json::json;
use sqlx::Row;

pub async fn store_with_sessions(dir: &tempfile::TempDir, sessions: usize) -> (SqliteStore, Vec<i64>) {
    let store = SqliteStore::open(&dir.path().join("parley.db"), StoreOptions::default()).await.unwrap();
    let task =
        Arc::new(Task { index: 0, id: "t".into(), messages: vec![], tools: Default::default(), row: json!({}).into() });
    let specs: Vec<SessionSpec> = (0..sessions)
        .map(|i| SessionSpec { task_index: 0, trial: i as u32, seed: i as u64, player: Player::Run })
        .collect();
    let spec = RunSpec { environment: "test".into(), config: json!({}) };
    let (_, ids) = store.create_run(&spec, &[task], &specs).await.unwrap();
    (store, ids)
}

/// A turn with text that needs escaping, a raw body, a tool call and its record.
pub fn turn(first_seq: u32) -> TurnRecord {
    let call = ModelCall {
        endpoint: "http://127.0.0.1:1/v1".into(),
        request: RawJson::from_string(
            r#"{"messages": [{"role": "user", "content": "say \"hi\"\n"}], "model": "m"}"#.into(),
        )
        .unwrap(),
        response: Some(RawJson::from_string(r#"{"choices":[],"note":"ünïcödé \u2603 ☃"}"#.into()).unwrap()),
        usage: Usage { prompt_tokens: 12, completion_tokens: 3 },
        latency: Duration::from_micros(1_234_567),
        attempts: 2,
        error: None,
        finish_reason: Some("tool_calls".into()),
        sampling: Some(Sampling { temperature: Some(0.7), top_p: Some(1.0), ..Sampling::default() }),
    };
    let mut asking = Message::assistant_calls(
        Some("quotes \" backslash \\ tab \t nul-free ☃".into()),
        vec![ToolCall { id: "c1".into(), name: "add".into(), arguments: r#"{"n": 1}"#.into() }],
    );
    // Log-probs a decimal round trip could bend, and the largest token id.
    asking.tokens = Some(Arc::new(TokenIds {
        prompt: vec![1, u32::MAX],
        generation: vec![7, 0],
        log_probs: vec![-1.0 / 3.0, -1e-300],
    }));
    TurnRecord {
        messages: vec![
            MessageRecord { seq: first_seq, message: asking, call: Some(Box::new(call)) },
            MessageRecord { seq: first_seq + 1, message: Message::tool_result("c1", "1"), call: None },
        ],
        tool_calls: vec![ToolCallRecord {
            seq: first_seq + 1,
            party: Party::Agent,
            call_id: "c1".into(),
            name: "add".into(),
            arguments: r#"{"n": 1}"#.into(),
            output: "1".into(),
            is_error: false,
            write: true,
            malformed: false,
            truncated: true,
            duration: Duration::from_micros(42),
        }],
    }
}

#[tokio::test]
async fn turns_and_outcomes_come_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (store, ids) = store_with_sessions(&dir, 2).await;
    store.commit_turn(Claim::unclaimed(ids[0]), turn(0)).await.unwrap();
    // Rewards that a decimal round trip could bend, and a session without one.
    let third: f64 = 1.0 / 3.0;
    let mut reward = Reward::new(0.1 + 0.2);
    reward.breakdown.insert("part".into(), json!(third));
    let outcome = |reward, failure| SessionOutcome {
        termination: Termination::AgentStop,
        reward,
        error: Some("a \"quoted\" error".into()),
        failure,
        steps: 3,
        retries: 1,
        duration: Duration::from_millis(1500),
        token_contiguity: Some("not contiguous at 2".into()),
        user_faults: Vec::new(),
    };
    store.finish_session(Claim::unclaimed(ids[0]), turn(2), &outcome(Some(reward), None)).await.unwrap();
    store
        .finish_session(Claim::unclaimed(ids[1]), TurnRecord::default(), &outcome(None, Some(FailureClass::Timeout)))
        .await
        .unwrap();

    let transcript = store.transcript(ids[0]).await.unwrap();
    assert_eq!(transcript.messages.len(), 4);
    assert_eq!(transcript.messages[0], turn(0).messages[0].message, "tokens and log-probs to the bit");
    let call = &transcript.calls[0];
    assert_eq!((call.party, call.finish_reason.as_deref()), (Some(Party::Agent), Some("tool_calls")));
    assert_eq!(call.sampling, turn(0).messages[0].call.clone().unwrap().sampling);
    assert_eq!(transcript.messages[3], Message::tool_result("c1", "1"));
    let tool = &transcript.tool_calls[0];
    assert_eq!((tool.write, tool.truncated, tool.is_error, tool.malformed), (true, true, false, false));
    assert_eq!(tool.duration, Duration::from_micros(42));

    let pool = store.pool();
    let row =
        sqlx::query("SELECT request, response, prompt_tokens, attempts, latency_ms FROM model_calls WHERE seq = 0")
            .fetch_one(pool)
            .await
            .unwrap();
    let sent = turn(0).messages[0].call.clone().unwrap();
    assert_eq!(row.get::<String, _>("request"), sent.request.get(), "the body is stored as it was sent");
    assert_eq!(row.get::<String, _>("response"), sent.response.unwrap().get());
    assert_eq!((row.get::<i64, _>("prompt_tokens"), row.get::<i64, _>("attempts")), (12, 2));
    assert!((row.get::<f64, _>("latency_ms") - 1234.567).abs() < 1e-9);

    let sessions = sqlx::query("SELECT status, reward, error, failure, steps, retries FROM sessions ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap();
    assert_eq!(sessions[0].get::<String, _>("status"), SessionStatus::Finished.as_str());
    assert_eq!(sessions[0].get::<f64, _>("reward").to_bits(), (0.1f64 + 0.2).to_bits(), "the reward, to the bit");
    assert_eq!(sessions[0].get::<String, _>("error"), "a \"quoted\" error");
    assert_eq!(sessions[1].get::<Option<f64>, _>("reward"), None);
    assert_eq!(sessions[1].get::<String, _>("failure"), "timeout");
    let page = store.sessions_page(1, 0, 10).await.unwrap();
    assert_eq!(page[0].token_contiguity.as_deref(), Some("not contiguous at 2"));
    assert_eq!((sessions[0].get::<i64, _>("steps"), sessions[0].get::<i64, _>("retries")), (3, 1));
    let scores = store.latest_score(ids[0]).await.unwrap().unwrap();
    assert_eq!(scores.value.to_bits(), (0.1f64 + 0.2).to_bits());
    assert_eq!(scores.breakdown["part"].as_f64().unwrap().to_bits(), third.to_bits());
    assert!(store.latest_score(ids[1]).await.unwrap().is_none(), "no reward, no score");
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_batch_that_fails_keeps_nothing_and_the_writer_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (store, ids) = store_with_sessions(&dir, 1).await;
    store.commit_turn(Claim::unclaimed(ids[0]), turn(0)).await.unwrap();
    // The same seqs again: the messages insert fails, and the batch's other rows must go too.
    let again = store.commit_turn(Claim::unclaimed(ids[0]), turn(0)).await;
    assert!(again.is_err(), "a duplicate turn is refused");
    let pool = store.pool();
    let count = |table: &'static str| {
        let sql = match table {
            "messages" => "SELECT count(*) FROM messages",
            "model_calls" => "SELECT count(*) FROM model_calls",
            _ => "SELECT count(*) FROM tool_calls",
        };
        sqlx::query_scalar::<_, i64>(sql).fetch_one(pool)
    };
    let counts = (count("messages").await.unwrap(), count("model_calls").await.unwrap(), count("tools").await.unwrap());
    assert_eq!(counts, (2, 1, 1));
    store.commit_turn(Claim::unclaimed(ids[0]), turn(2)).await.unwrap();
    assert_eq!(store.transcript(ids[0]).await.unwrap().messages.len(), 4, "the next batch is written");
    store.close().await.unwrap();
}

/// Parts (an image, a part of unknown type) and reasoning (with a provider's opaque item) come
/// back exactly, from the session and from a fork of it.
#[tokio::test]
async fn parts_reasoning_and_tokens_come_back_exactly_and_forks_keep_them() {
    use parley_core::{Part, Reasoning, ReasoningSpelling, Role};
    let dir = tempfile::tempdir().unwrap();
    let (store, ids) = store_with_sessions(&dir, 1).await;
    let user = Message::with_parts(
        Role::User,
        vec![
            Part::Text { text: "what is \"this\"?".into() },
            Part::Image { url: "data:image/png;base64,iVBORw0KGgo=".into(), detail: Some("low".into()) },
            Part::Image { url: "data:image/png;base64,@@broken".into(), detail: None },
            Part::Raw { value: json!({"type": "hologram", "depth": [1, 2]}) },
        ],
    );
    let mut answer = Message::assistant("A pixel.");
    answer.reasoning = Some(Box::new(Reasoning {
        text: "It is a 1x1 png.".into(),
        spelling: ReasoningSpelling::Responses,
        items: vec![json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA=="})],
    }));
    answer.tokens = Some(Arc::new(TokenIds { prompt: vec![5, 6], generation: vec![9], log_probs: vec![-0.125] }));
    let messages = vec![
        MessageRecord { seq: 0, message: user, call: None },
        MessageRecord { seq: 1, message: answer, call: None },
    ];
    let sent: Vec<Message> = messages.iter().map(|m| m.message.clone()).collect();
    store.commit_turn(Claim::unclaimed(ids[0]), TurnRecord { messages, tool_calls: Vec::new() }).await.unwrap();
    assert_eq!(store.transcript(ids[0]).await.unwrap().messages, sent);
    let fork = store.fork_session(ids[0], 2).await.unwrap();
    assert_eq!(store.transcript(fork).await.unwrap().messages, sent);
    // Each row holds its parts or its reasoning in the new columns, not folded into `content`.
    let empty: (i64,) = sqlx::query_as("SELECT count(*) FROM messages WHERE parts IS NULL AND reasoning IS NULL")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(empty.0, 0);
    store.close().await.unwrap();
}

#[tokio::test]
async fn the_read_pool_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = store_with_sessions(&dir, 1).await;
    let write = sqlx::query("DELETE FROM sessions").execute(store.pool()).await;
    assert!(write.is_err(), "the read pool is query_only: only the writer writes");
    assert_eq!(store.sessions(1).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_tool_result_is_stored_once_and_comes_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (store, ids) = store_with_sessions(&dir, 1).await;
    let mut told = turn(0);
    // A result that says something else than its call's row keeps, and one with no call id.
    let other = ToolCallRecord { seq: 2, call_id: "c2".into(), output: "kept".into(), ..told.tool_calls[0].clone() };
    told.tool_calls.push(other);
    told.messages.push(MessageRecord { seq: 2, message: Message::tool_result("c2", "said"), call: None });
    let unpaired = Message { tool_call_id: None, ..Message::tool_result("", "1") };
    told.messages.push(MessageRecord { seq: 3, message: unpaired, call: None });
    store.commit_turn(Claim::unclaimed(ids[0]), told.clone()).await.unwrap();

    let transcript = store.transcript(ids[0]).await.unwrap();
    let messages: Vec<Message> = told.messages.iter().map(|r| r.message.clone()).collect();
    assert_eq!(transcript.messages, messages);
    let outputs = |calls: &[ToolCallRecord]| calls.iter().map(|c| (c.seq, c.output.clone())).collect::<Vec<_>>();
    assert_eq!(outputs(&transcript.tool_calls), outputs(&told.tool_calls));
    let rows: Vec<(i64, Option<String>, Option<String>)> =
        sqlx::query_as("SELECT seq, content, tool_call_id FROM messages WHERE role = 'tool' ORDER BY seq")
            .fetch_all(store.pool())
            .await
            .unwrap();
    let kept = |s: &str| Some(s.to_owned());
    assert_eq!(rows, [(1, None, None), (2, kept("said"), kept("c2")), (3, kept("1"), None)], "the output once");
}

/// A turn of more rows than one statement inserts (the committing thread inserts a few dozen
/// rows a statement), each row unlike the others, beside sessions committing at once: every row
/// comes back in its place, none of its values bound to another's.
#[tokio::test]
async fn turns_of_more_rows_than_a_statement_inserts_come_back_row_for_row() {
    let dir = tempfile::tempdir().unwrap();
    let (store, ids) = store_with_sessions(&dir, 9).await;
    let long = |session: usize, pairs: u32| {
        let mut record = TurnRecord::default();
        for i in 0..pairs {
            let mut pair = turn(2 * i);
            let said = format!("session {session}, call {i}");
            pair.messages[0].message.content = Some(format!("asking: {said}"));
            let call = pair.messages[0].call.as_mut().unwrap();
            call.usage = Usage { prompt_tokens: u64::from(i), completion_tokens: session as u64 };
            call.attempts = i + 1;
            pair.messages[1].message = Message::tool_result("c1", &said);
            pair.tool_calls[0].output = said;
            record.messages.append(&mut pair.messages);
            record.tool_calls.append(&mut pair.tool_calls);
        }
        record
    };
    // 71 pairs: 142 messages and 71 calls and tool calls, no multiple of a statement's rows.
    let turns: Vec<(usize, TurnRecord)> = ids.iter().enumerate().map(|(s, _)| (s, long(s, 71 - s as u32))).collect();
    let commits = turns.iter().map(|(s, record)| store.commit_turn(Claim::unclaimed(ids[*s]), record.clone()));
    for committed in futures::future::join_all(commits).await {
        committed.unwrap();
    }
    for (s, record) in &turns {
        let transcript = store.transcript(ids[*s]).await.unwrap();
        let messages: Vec<Message> = record.messages.iter().map(|r| r.message.clone()).collect();
        assert_eq!(transcript.messages, messages, "session {s}");
        let outputs = |calls: &[ToolCallRecord]| calls.iter().map(|c| (c.seq, c.output.clone())).collect::<Vec<_>>();
        assert_eq!(outputs(&transcript.tool_calls), outputs(&record.tool_calls), "session {s}");
        let figures: Vec<(u32, u64, u64, u32)> = transcript
            .calls
            .iter()
            .map(|c| (c.seq, c.usage.prompt_tokens, c.usage.completion_tokens, c.attempts))
            .collect();
        let sent: Vec<(u32, u64, u64, u32)> = record
            .messages
            .iter()
            .filter_map(|r| {
                r.call.as_ref().map(|c| (r.seq, c.usage.prompt_tokens, c.usage.completion_tokens, c.attempts))
            })
            .collect();
        assert_eq!(figures, sent, "session {s}");
    }
    store.close().await.unwrap();
}
