//! Turns on PostgreSQL: a few writer tasks take every turn queued at once, write them in one
//! statement, and acknowledge each after it commits (group commit, as on SQLite).
//!
//! Unlike SQLite, PostgreSQL takes writes from many connections at once, so [`WRITERS`] tasks
//! share the queue, each on a connection of the pool: one batch is being committed (waiting on
//! the server's WAL flush) while the next is gathered and written. A batch is one statement
//! ([`BATCH`]), so one round trip and one transaction: its rows go in as arrays bound whole
//! (`INSERT ... SELECT ... FROM UNNEST($1, $2, ...)`), one fixed text for any number of rows, so
//! the connection prepares it once and no batch meets the limit on bound parameters. Round trips,
//! not rows, are most of what a small batch costs both sides. The rows are the SQLite writer's
//! (`turn_rows`), bound as columns.
//!
//! Fencing: the statement locks its sessions' rows in id order (`SELECT ... ORDER BY id FOR
//! UPDATE`), so no claim can raise a fence between the check and the commit, and two batches
//! never wait on each other in a cycle; only rows of sessions whose fence is the one the write
//! was made under go in. A write whose claim is older is answered [`StoreError::Fenced`] and
//! left out, and the batch's other writes go on.

use std::collections::HashMap;
use std::sync::Arc;

use parley_core::{Fence, SessionId, StoreError};
use sqlx::error::BoxDynError;
use sqlx::postgres::PgArguments;
use sqlx::{Arguments, PgPool};
use tokio::sync::{Mutex, mpsc};
use tracing::Instrument;

use super::pg_now_text;
use crate::StoreOptions;
use crate::handle::{self, MAX_BATCH, Write, WriterHandle};
use crate::shared::{KnownTexts, PromptIds, STORE_TEXT};
use crate::turn_rows::{CallColumns, EndColumns, MessageColumns, ScoreColumns, ToolColumns, TurnRows};

/// Writer tasks sharing the queue. Two keep the server busy while a commit waits on its WAL
/// flush; more only split the same turns into smaller batches.
const WRITERS: usize = 2;
/// How long a batch waits for more turns after its first. A statement's fixed cost (its round
/// trip, its locks, its commit) is most of what a small batch costs both sides; half a
/// millisecond more per commit, spent beside the session's next model call, gathers several
/// times as many turns into each.
const GATHER: std::time::Duration = std::time::Duration::from_micros(500);
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
        let task = Task {
            pool: pool.clone(),
            name: Arc::clone(&name),
            raw: options.raw_model_calls,
            texts: KnownTexts::default(),
            prompts: PromptIds::default(),
        };
        tokio::spawn(task.run(Arc::clone(&rx)).instrument(span));
    }
    WriterHandle::new(tx, &options, turns)
}

struct Task {
    pool: PgPool,
    /// The database, named in the errors of writes that fail.
    name: Arc<str>,
    raw: bool,
    /// The system prompts `texts` holds, as this task stored them.
    texts: KnownTexts,
    /// The ids of the system prompts this task saw last.
    prompts: PromptIds,
}

impl Task {
    async fn run(mut self, rx: Arc<Mutex<mpsc::UnboundedReceiver<Write>>>) {
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
            let answers = result.map_err(|(Failed::Retry(e) | Failed::Other(e))| {
                let sessions = session_list(batch.iter().map(|w| w.claim.session));
                StoreError::Database(format!("{}: writing the turns of sessions {sessions}: {e}", self.name))
            });
            handle::answer(batch.into_iter(), answers);
        }
    }

    /// Writes the batch in one statement (one round trip, its own transaction), leaving out
    /// the writes it refuses; returns, for each write in order, `Ok` or why it was left out.
    async fn write(&mut self, batch: &[Write]) -> Result<Vec<Result<(), StoreError>>, Failed> {
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

        let kept: Vec<&Write> = batch.iter().zip(&answers).filter(|(_, a)| a.is_ok()).map(|(w, _)| w).collect();
        // Each in a statement of its own, kept whatever becomes of the batch.
        let mut rows = TurnRows::gather(kept, self.raw, &mut self.prompts);
        for (id, text) in rows.new_texts(self.texts.ids()) {
            let held: String =
                sqlx::query_scalar(STORE_TEXT).bind(id).bind(text).fetch_one(&self.pool).await.map_err(Failed::from)?;
            // A text another holds stays in its row.
            if held == text {
                self.texts.add(id);
            }
        }
        rows.settle(self.texts.ids());
        let arguments = arguments(&ids, &fences, rows).map_err(|e| Failed::Other(e.to_string()))?;
        let locked: Vec<(i64, i64)> =
            sqlx::query_as_with(BATCH, arguments).fetch_all(&self.pool).await.map_err(Failed::from)?;

        // What the server found under its locks says which writes went in.
        let current: HashMap<i64, Fence> = locked.into_iter().map(|(id, f)| (id, Fence(f))).collect();
        for (w, answer) in batch.iter().zip(&mut answers) {
            if answer.is_err() {
                continue;
            }
            *answer = handle::fenced(w.claim, current.get(&w.claim.session).copied(), &self.name);
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
         INSERT INTO messages (session_id, seq, role, content, tool_calls, tool_call_id, parts, reasoning, tokens,
                               content_id)
         SELECT u.* FROM UNNEST($3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[],
                                $9::text[], $10::text[], $11::text[], $12::bigint[])
             AS u (session_id, seq, role, content, tool_calls, tool_call_id, parts, reasoning, tokens, content_id)
         WHERE u.session_id IN (SELECT id FROM live)
     ),
     c AS (
         INSERT INTO model_calls (session_id, seq, endpoint, request, response, prompt_tokens, completion_tokens,
                                  latency_ms, attempts, error, party, finish_reason, sampling)
         SELECT u.* FROM UNNEST($13::bigint[], $14::bigint[], $15::text[], $16::text[], $17::text[], $18::bigint[],
                                $19::bigint[], $20::float8[], $21::bigint[], $22::text[], $23::text[], $24::text[],
                                $25::text[])
             AS u (session_id, seq, endpoint, request, response, prompt_tokens, completion_tokens, latency_ms,
                   attempts, error, party, finish_reason, sampling)
         WHERE u.session_id IN (SELECT id FROM live)
     ),
     t AS (
         INSERT INTO tool_calls (session_id, seq, party, call_id, name, arguments, output, is_error, is_write,
                                 malformed, truncated, duration_us)
         SELECT u.* FROM UNNEST($26::bigint[], $27::bigint[], $28::text[], $29::text[], $30::text[], $31::text[],
                                $32::text[], $33::bool[], $34::bool[], $35::bool[], $36::bool[], $37::bigint[])
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
         FROM UNNEST($38::bigint[], $39::text[], $40::float8[], $41::text[], $42::text[], $43::bigint[],
                     $44::bigint[], $45::float8[], $46::text[], $47::text[])
              AS v (id, termination, reward, error, failure, steps, retries, duration_ms, token_contiguity,
                    user_faults)
         WHERE sessions.id = v.id AND v.id IN (SELECT id FROM live)
     ),
     s AS (
         INSERT INTO scores (session_id, scorer, version, value, breakdown)
         SELECT u.s, 'environment', 1, u.v, u.b FROM UNNEST($48::bigint[], $49::float8[], $50::text[]) AS u (s, v, b)
         WHERE u.s IN (SELECT id FROM live)
     )
     SELECT id, fence FROM locked"
);

/// A batch's arguments, in the order [`BATCH`] numbers them: its sessions' ids and the fences
/// it writes under, then each table's rows ([`TurnRows`]), one array per column.
fn arguments(ids: &[i64], fences: &[i64], rows: TurnRows<'_>) -> Result<PgArguments, BoxDynError> {
    let mut arguments = PgArguments::default();
    arguments.add(ids)?;
    arguments.add(fences)?;
    MessageColumns::from_iter(rows.messages).bind(&mut arguments)?;
    CallColumns::from_iter(rows.calls).bind(&mut arguments)?;
    ToolColumns::from_iter(rows.tools).bind(&mut arguments)?;
    EndColumns::from_iter(rows.ends).bind(&mut arguments)?;
    ScoreColumns::from_iter(rows.scores).bind(&mut arguments)?;
    Ok(arguments)
}

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
