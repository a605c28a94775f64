//! Turns on PostgreSQL: a few writer tasks take every turn queued at once, write them in one
//! statement, and acknowledge each after it commits (group commit, as on SQLite).
//!
//! Unlike SQLite, PostgreSQL takes writes from many connections at once, so [`WRITERS`] tasks
//! share the queue, each on a connection of the pool: one batch is being committed (waiting on
//! the server's WAL flush) while the next is gathered and written. A batch is one statement
//! ([`BATCH`]), so one round trip and one transaction: its rows go in as arrays bound whole
//! (`INSERT ... SELECT ... FROM UNNEST($1, $2, ...)`), one fixed text for any number of rows, so
//! the connection prepares it once and no batch meets the limit on bound parameters. Round trips,
//! not rows, are most of what a small batch costs both sides.
//!
//! Fencing: the statement locks its sessions' rows in id order (`SELECT ... ORDER BY id FOR
//! UPDATE`), so no claim can raise a fence between the check and the commit, and two batches
//! never wait on each other in a cycle; only rows of sessions whose fence is the one the write
//! was made under go in. A write whose claim is older is answered [`StoreError::Fenced`] and
//! left out, and the batch's other writes go on.

use std::collections::HashMap;
use std::sync::Arc;

use parley_core::{Fence, Party, Role, SessionId, SessionOutcome, StoreError};
use sqlx::PgPool;
use tokio::sync::{Mutex, mpsc};
use tracing::Instrument;

use super::pg_now_text;
use crate::StoreOptions;
use crate::handle::{Write, WriterHandle};

/// Writer tasks sharing the queue. Two keep the server busy while a commit waits on its WAL
/// flush; more only split the same turns into smaller batches.
const WRITERS: usize = 2;
/// How long a batch waits for more turns after its first. A statement's fixed cost (its round
/// trip, its locks, its commit) is most of what a small batch costs both sides; half a
/// millisecond more per commit, spent beside the session's next model call, gathers several
/// times as many turns into each.
const GATHER: std::time::Duration = std::time::Duration::from_micros(500);
/// Turns taken into one transaction at most.
const MAX_BATCH: usize = 1024;
/// How often a batch is tried when the server cancels it to break a deadlock or a serialization
/// conflict (neither should happen, as rows are locked in id order; this is the server's word).
const ATTEMPTS: usize = 3;

/// The PostgreSQL store's handle on its writer tasks: turns alone (its other writes go to the
/// pool).
pub(crate) type PgWriter = WriterHandle<Write>;

/// Starts the writer tasks on `pool`.
pub(crate) fn spawn(pool: PgPool, name: Arc<str>, options: StoreOptions, turns: bool) -> PgWriter {
    let (tx, rx) = mpsc::unbounded_channel();
    let rx = Arc::new(Mutex::new(rx));
    for n in 0..WRITERS {
        let span = tracing::info_span!("store_writer", db = %name, writer = n);
        let task = Task { pool: pool.clone(), name: Arc::clone(&name), raw: options.raw_model_calls };
        tokio::spawn(task.run(Arc::clone(&rx)).instrument(span));
    }
    WriterHandle::new(tx, &options, turns)
}

struct Task {
    pool: PgPool,
    /// The database, named in the errors of writes that fail.
    name: Arc<str>,
    raw: bool,
}

impl Task {
    async fn run(self, rx: Arc<Mutex<mpsc::UnboundedReceiver<Write>>>) {
        loop {
            // The queue is held while a batch is gathered, not while it is written.
            let batch = {
                let mut rx = rx.lock().await;
                let Some(first) = rx.recv().await else { return };
                // Turns arriving together share a statement.
                tokio::time::sleep(GATHER).await;
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(w) => batch.push(w),
                        Err(_) => break,
                    }
                }
                batch
            };
            let mut result = self.write(&batch).await;
            for _ in 1..ATTEMPTS {
                match &result {
                    Err(Failed::Retry(e)) => {
                        tracing::warn!(error = %e, turns = batch.len(), "the server cancelled a batch; trying again");
                        result = self.write(&batch).await;
                    }
                    _ => break,
                }
            }
            match result {
                Ok(answers) => {
                    for (w, answer) in batch.into_iter().zip(answers) {
                        let _ = w.done.send(answer);
                    }
                }
                Err(Failed::Retry(e) | Failed::Other(e)) => {
                    let sessions = session_list(batch.iter().map(|w| w.claim.session));
                    let e =
                        StoreError::Database(format!("{}: writing the turns of sessions {sessions}: {e}", self.name));
                    tracing::error!(error = %e, turns = batch.len(), "the store could not commit a batch");
                    for w in batch {
                        let _ = w.done.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// Writes the batch in one statement (one round trip, its own transaction), leaving out
    /// the writes it refuses; returns, for each write in order, `Ok` or why it was left out.
    async fn write(&self, batch: &[Write]) -> Result<Vec<Result<(), StoreError>>, Failed> {
        let mut answers: Vec<Result<(), StoreError>> =
            batch.iter().map(|w| unstorable(w).map_or(Ok(()), Err)).collect();
        // One fence per session goes to the server: a write under an older claim than another
        // write of the same session in this batch is stale whatever the store holds.
        let mut newest: HashMap<SessionId, Fence> = HashMap::new();
        for w in batch {
            let f = newest.entry(w.claim.session).or_insert(w.claim.fence);
            *f = (*f).max(w.claim.fence);
        }
        for (w, answer) in batch.iter().zip(&mut answers) {
            let current = newest[&w.claim.session];
            if answer.is_ok() && current != w.claim.fence {
                *answer = Err(StoreError::Fenced { session: w.claim.session, fence: w.claim.fence, current });
            }
        }
        let mut claims: Vec<(i64, i64)> = newest.iter().map(|(&id, f)| (id, f.0)).collect();
        claims.sort_unstable();
        let (ids, fences): (Vec<i64>, Vec<i64>) = claims.into_iter().unzip();

        let mut m = MessageRows::default();
        let mut c = CallRows::default();
        let mut t = ToolRows::default();
        let mut e = EndRows::default();
        let mut s = ScoreRows::default();
        for (w, _) in batch.iter().zip(&answers).filter(|(_, a)| a.is_ok()) {
            let session = w.claim.session;
            for r in &w.turn.messages {
                m.push(session, r);
                if let Some(call) = &r.call {
                    c.push(session, r.seq, r.message.role, call, self.raw);
                }
            }
            for r in &w.turn.tool_calls {
                t.push(session, r);
            }
            if let Some(o) = &w.outcome {
                e.push(session, o);
                if let Some(r) = &o.reward {
                    s.push(session, r);
                }
            }
        }
        let locked: Vec<(i64, i64)> = sqlx::query_as(BATCH)
            .bind(&ids)
            .bind(&fences)
            .bind(&m.session)
            .bind(&m.seq)
            .bind(&m.role)
            .bind(&m.content)
            .bind(&m.tool_calls)
            .bind(&m.tool_call_id)
            .bind(&m.parts)
            .bind(&m.reasoning)
            .bind(&m.tokens)
            .bind(&c.session)
            .bind(&c.seq)
            .bind(&c.endpoint)
            .bind(&c.request)
            .bind(&c.response)
            .bind(&c.prompt_tokens)
            .bind(&c.completion_tokens)
            .bind(&c.latency_ms)
            .bind(&c.attempts)
            .bind(&c.error)
            .bind(&c.party)
            .bind(&c.finish_reason)
            .bind(&c.sampling)
            .bind(&t.session)
            .bind(&t.seq)
            .bind(&t.party)
            .bind(&t.call_id)
            .bind(&t.name)
            .bind(&t.arguments)
            .bind(&t.output)
            .bind(&t.is_error)
            .bind(&t.write)
            .bind(&t.malformed)
            .bind(&t.truncated)
            .bind(&t.duration_us)
            .bind(&e.session)
            .bind(&e.termination)
            .bind(&e.reward)
            .bind(&e.error)
            .bind(&e.failure)
            .bind(&e.steps)
            .bind(&e.retries)
            .bind(&e.duration_ms)
            .bind(&e.token_contiguity)
            .bind(&s.session)
            .bind(&s.value)
            .bind(&s.breakdown)
            .bind(&e.user_faults)
            .fetch_all(&self.pool)
            .await
            .map_err(Failed::from)?;

        // What the server found under its locks says which writes went in.
        let current: HashMap<i64, Fence> = locked.into_iter().map(|(id, f)| (id, Fence(f))).collect();
        for (w, answer) in batch.iter().zip(&mut answers) {
            if answer.is_err() {
                continue;
            }
            *answer = match current.get(&w.claim.session) {
                Some(&now) if now == w.claim.fence => Ok(()),
                Some(&now) => Err(StoreError::Fenced { session: w.claim.session, fence: w.claim.fence, current: now }),
                None => Err(StoreError::Database(format!(
                    "{}: session {} is not in table `sessions`; its turn was not written",
                    self.name, w.claim.session
                ))),
            };
        }
        Ok(answers)
    }
}

/// A batch in one statement. `locked` takes the batch's sessions' rows in id order (`FOR
/// UPDATE`: no claim raises a fence before the statement commits, and two batches never wait on
/// each other in a cycle); `live` is those whose fence is the one the batch writes under; every
/// insert and update takes only rows of `live` sessions. The statement answers what it locked,
/// so that each write can be told whether it went in. Arrays are bound whole (`UNNEST`): one
/// fixed text for any batch, prepared once per connection.
const BATCH: &str = concat!(
    "WITH locked AS (
         SELECT id, fence FROM sessions WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE
     ),
     live AS (
         SELECT l.id FROM locked l JOIN UNNEST($1::bigint[], $2::bigint[]) AS c (id, fence)
             ON c.id = l.id AND c.fence = l.fence
     ),
     m AS (
         INSERT INTO messages (session_id, seq, role, content, tool_calls, tool_call_id, parts, reasoning, tokens)
         SELECT u.* FROM UNNEST($3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[],
                                $9::text[], $10::text[], $11::text[])
             AS u (session_id, seq, role, content, tool_calls, tool_call_id, parts, reasoning, tokens)
         WHERE u.session_id IN (SELECT id FROM live)
     ),
     c AS (
         INSERT INTO model_calls (session_id, seq, endpoint, request, response, prompt_tokens, completion_tokens,
                                  latency_ms, attempts, error, party, finish_reason, sampling)
         SELECT u.* FROM UNNEST($12::bigint[], $13::bigint[], $14::text[], $15::text[], $16::text[], $17::bigint[],
                                $18::bigint[], $19::float8[], $20::bigint[], $21::text[], $22::text[], $23::text[],
                                $24::text[])
             AS u (session_id, seq, endpoint, request, response, prompt_tokens, completion_tokens, latency_ms,
                   attempts, error, party, finish_reason, sampling)
         WHERE u.session_id IN (SELECT id FROM live)
     ),
     t AS (
         INSERT INTO tool_calls (session_id, seq, party, call_id, name, arguments, output, is_error, is_write,
                                 malformed, truncated, duration_us)
         SELECT u.* FROM UNNEST($25::bigint[], $26::bigint[], $27::text[], $28::text[], $29::text[], $30::text[],
                                $31::text[], $32::bool[], $33::bool[], $34::bool[], $35::bool[], $36::bigint[])
             AS u (session_id, seq, party, call_id, name, arguments, output, is_error, is_write, malformed,
                   truncated, duration_us)
         WHERE u.session_id IN (SELECT id FROM live)
     ),
     e AS (
         -- A session's end releases its claim.
         UPDATE sessions SET status = 'finished', termination = v.termination, reward = v.reward,
                error = v.error, failure = v.failure, steps = v.steps, retries = sessions.retries + v.retries,
                duration_ms = v.duration_ms, token_contiguity = v.token_contiguity, user_faults = v.user_faults,
                owner = NULL,
                lease_until = NULL, finished_at = ",
    pg_now_text!(),
    "
         FROM UNNEST($37::bigint[], $38::text[], $39::float8[], $40::text[], $41::text[], $42::bigint[],
                     $43::bigint[], $44::float8[], $45::text[], $49::text[])
              AS v (id, termination, reward, error, failure, steps, retries, duration_ms, token_contiguity,
                    user_faults)
         WHERE sessions.id = v.id AND v.id IN (SELECT id FROM live)
     ),
     s AS (
         INSERT INTO scores (session_id, scorer, version, value, breakdown)
         SELECT u.s, 'environment', 1, u.v, u.b FROM UNNEST($46::bigint[], $47::float8[], $48::text[]) AS u (s, v, b)
         WHERE u.s IN (SELECT id FROM live)
     )
     SELECT id, fence FROM locked"
);

/// Why a batch was not written: the server cancelled it and it may be tried again, or not.
enum Failed {
    Retry(String),
    Other(String),
}

impl From<sqlx::Error> for Failed {
    fn from(e: sqlx::Error) -> Failed {
        // Deadlock detected, serialization failure.
        let code = e.as_database_error().and_then(|d| d.code()).unwrap_or_default().into_owned();
        match code.as_str() {
            "40P01" | "40001" => Failed::Retry(e.to_string()),
            _ => Failed::Other(e.to_string()),
        }
    }
}

/// Session ids for an error message: the first few and how many more.
fn session_list(ids: impl Iterator<Item = SessionId>) -> String {
    let mut ids: Vec<SessionId> = ids.collect();
    ids.sort_unstable();
    ids.dedup();
    let shown: Vec<String> = ids.iter().take(8).map(i64::to_string).collect();
    match ids.len() {
        n if n > 8 => format!("{} and {} more", shown.join(", "), n - 8),
        _ => shown.join(", "),
    }
}

/// Why PostgreSQL cannot store this write, if it cannot: its text holds U+0000, which a text
/// column refuses. Answered for the write alone, before its batch is sent, so that the other
/// sessions' turns in the batch are still written. (JSON columns escape it; plain text does not.)
fn unstorable(w: &Write) -> Option<StoreError> {
    let session = w.claim.session;
    let refuse = |table: &str, column: &str, seq: u32| {
        Some(StoreError::Database(format!(
            "session {session}: column `{column}` of table `{table}` (seq {seq}) holds the character U+0000, which \
             PostgreSQL text cannot store; the turn was not written"
        )))
    };
    let nul = |s: &str| s.contains('\0');
    for r in &w.turn.messages {
        let m = &r.message;
        if m.content.as_deref().is_some_and(nul) {
            return refuse("messages", "content", r.seq);
        }
        if m.tool_call_id.as_deref().is_some_and(nul) {
            return refuse("messages", "tool_call_id", r.seq);
        }
        if let Some(c) = &r.call {
            if nul(&c.endpoint) {
                return refuse("model_calls", "endpoint", r.seq);
            }
            if c.error.as_deref().is_some_and(nul) {
                return refuse("model_calls", "error", r.seq);
            }
            if c.finish_reason.as_deref().is_some_and(nul) {
                return refuse("model_calls", "finish_reason", r.seq);
            }
        }
    }
    for t in &w.turn.tool_calls {
        for (column, text) in
            [("call_id", &t.call_id), ("name", &t.name), ("arguments", &t.arguments), ("output", &t.output)]
        {
            if nul(text) {
                return refuse("tool_calls", column, t.seq);
            }
        }
    }
    if let Some(o) = &w.outcome {
        let texts = [o.error.as_deref(), o.token_contiguity.as_deref()];
        if texts.into_iter().flatten().any(nul) {
            return Some(StoreError::Database(format!(
                "session {session}: its end (table `sessions`) holds the character U+0000, which PostgreSQL text \
                 cannot store; the end was not written"
            )));
        }
    }
    None
}

/// The columns of the batch's `messages` rows, one array each.
#[derive(Default)]
struct MessageRows<'a> {
    session: Vec<i64>,
    seq: Vec<i64>,
    role: Vec<&'static str>,
    content: Vec<Option<&'a str>>,
    tool_calls: Vec<Option<String>>,
    tool_call_id: Vec<Option<&'a str>>,
    parts: Vec<Option<String>>,
    reasoning: Vec<Option<String>>,
    tokens: Vec<Option<String>>,
}

impl<'a> MessageRows<'a> {
    fn push(&mut self, session: SessionId, r: &'a parley_core::MessageRecord) {
        let m = &r.message;
        // Tool calls, parts, reasoning and tokens are plain data (strings, numbers and JSON
        // values): they serialize.
        let json = |v: Result<String, serde_json::Error>| v.unwrap_or_default();
        self.session.push(session);
        self.seq.push(i64::from(r.seq));
        self.role.push(m.role.as_str());
        self.content.push(m.content.as_deref());
        self.tool_calls.push((!m.tool_calls.is_empty()).then(|| json(serde_json::to_string(&m.tool_calls))));
        self.tool_call_id.push(m.tool_call_id.as_deref());
        self.parts.push((!m.parts.is_empty()).then(|| json(serde_json::to_string(&m.parts))));
        self.reasoning.push(m.reasoning.as_ref().map(|r| json(serde_json::to_string(r))));
        self.tokens.push(m.tokens.as_ref().map(|t| json(serde_json::to_string(t))));
    }
}

/// The columns of the batch's `model_calls` rows.
#[derive(Default)]
struct CallRows<'a> {
    session: Vec<i64>,
    seq: Vec<i64>,
    endpoint: Vec<&'a str>,
    request: Vec<Option<&'a str>>,
    response: Vec<Option<&'a str>>,
    prompt_tokens: Vec<i64>,
    completion_tokens: Vec<i64>,
    latency_ms: Vec<f64>,
    attempts: Vec<i64>,
    error: Vec<Option<&'a str>>,
    party: Vec<&'static str>,
    finish_reason: Vec<Option<&'a str>>,
    sampling: Vec<Option<String>>,
}

impl<'a> CallRows<'a> {
    fn push(&mut self, session: SessionId, seq: u32, role: Role, c: &'a parley_core::ModelCall, raw: bool) {
        // The agent's calls produce its messages, the user's theirs.
        let party = match role {
            Role::User => Party::User,
            _ => Party::Agent,
        };
        self.session.push(session);
        self.seq.push(i64::from(seq));
        self.endpoint.push(&c.endpoint);
        // The bodies are bound as the text that went over the wire: no copy, no second
        // serialization.
        self.request.push(raw.then(|| c.request.get()));
        self.response.push(if raw { c.response.as_ref().map(|r| r.get()) } else { None });
        self.prompt_tokens.push(c.usage.prompt_tokens as i64);
        self.completion_tokens.push(c.usage.completion_tokens as i64);
        self.latency_ms.push(c.latency.as_secs_f64() * 1e3);
        self.attempts.push(i64::from(c.attempts));
        self.error.push(c.error.as_deref());
        self.party.push(party.as_str());
        self.finish_reason.push(c.finish_reason.as_deref());
        self.sampling.push(c.sampling.as_ref().map(|s| serde_json::to_string(s).unwrap_or_default()));
    }
}

/// The columns of the batch's `tool_calls` rows.
#[derive(Default)]
struct ToolRows<'a> {
    session: Vec<i64>,
    seq: Vec<i64>,
    party: Vec<&'static str>,
    call_id: Vec<&'a str>,
    name: Vec<&'a str>,
    arguments: Vec<&'a str>,
    output: Vec<&'a str>,
    is_error: Vec<bool>,
    write: Vec<bool>,
    malformed: Vec<bool>,
    truncated: Vec<bool>,
    duration_us: Vec<i64>,
}

impl<'a> ToolRows<'a> {
    fn push(&mut self, session: SessionId, t: &'a parley_core::ToolCallRecord) {
        self.session.push(session);
        self.seq.push(i64::from(t.seq));
        self.party.push(t.party.as_str());
        self.call_id.push(&t.call_id);
        self.name.push(&t.name);
        self.arguments.push(&t.arguments);
        self.output.push(&t.output);
        self.is_error.push(t.is_error);
        self.write.push(t.write);
        self.malformed.push(t.malformed);
        self.truncated.push(t.truncated);
        self.duration_us.push(i64::try_from(t.duration.as_micros()).unwrap_or(i64::MAX));
    }
}

/// The columns of the ends of the batch's finished sessions.
#[derive(Default)]
struct EndRows<'a> {
    session: Vec<i64>,
    termination: Vec<&'static str>,
    reward: Vec<Option<f64>>,
    error: Vec<Option<&'a str>>,
    failure: Vec<Option<&'static str>>,
    steps: Vec<i64>,
    retries: Vec<i64>,
    duration_ms: Vec<f64>,
    token_contiguity: Vec<Option<&'a str>>,
    user_faults: Vec<Option<String>>,
}

impl<'a> EndRows<'a> {
    fn push(&mut self, session: SessionId, o: &'a SessionOutcome) {
        self.session.push(session);
        self.termination.push(o.termination.as_str());
        self.reward.push(o.reward.as_ref().map(|r| r.value));
        self.error.push(o.error.as_deref());
        self.failure.push(o.failure.map(|f| f.as_str()));
        self.steps.push(i64::from(o.steps));
        self.retries.push(i64::from(o.retries));
        self.duration_ms.push(o.duration.as_secs_f64() * 1e3);
        self.token_contiguity.push(o.token_contiguity.as_deref());
        self.user_faults.push(crate::row::faults_text(&o.user_faults));
    }
}

/// The environment's scores of the batch's finished sessions.
#[derive(Default)]
struct ScoreRows {
    session: Vec<i64>,
    value: Vec<f64>,
    breakdown: Vec<String>,
}

impl ScoreRows {
    fn push(&mut self, session: SessionId, r: &parley_core::Reward) {
        self.session.push(session);
        self.value.push(r.value);
        self.breakdown.push(serde_json::Value::Object(r.breakdown.clone()).to_string());
    }
}
