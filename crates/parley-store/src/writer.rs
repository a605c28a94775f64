//! The single writer: it drains every session's pending turns, writes them as multi-row
//! inserts in one transaction, and acknowledges each turn after the commit. Its rows are the
//! ones PostgreSQL's writer writes (`turn_rows`), bound as rows of `VALUES`.
//!
//! Two things keep a commit cheap. Statements come in a few fixed shapes (see [`shaped`]), so
//! the connection's statement cache prepares each once instead of parsing a statement of a new
//! row count at every batch. And the WAL is checkpointed beside the writer, not in its way: every
//! [`CHECKPOINT_BYTES`] or so the writer wakes a checkpointer, a task with a connection of its
//! own, and goes on committing while the WAL is copied into the database file (the writer's
//! connection has SQLite's automatic checkpoint off, which would run inside a commit, every
//! 1,000 pages). Closing the store checkpoints what is left and truncates the WAL.
//!
//! Copying is not enough to keep the WAL small: SQLite starts the log over from its beginning
//! only when a write transaction begins on a log that is wholly copied and that no reader is
//! still reading. With the writer appending while the checkpointer copies, that moment never
//! comes, and the log grew for a whole run (12 GB over a million rollouts). So once the WAL file
//! is past the store's [`StoreOptions::wal_limit`], the writer itself, between two transactions,
//! runs a `RESTART` checkpoint: it copies what the checkpointer has not yet copied and waits for
//! the readers of the old log to finish, briefly ([`RESTART_WAIT`]: a reader that holds a
//! snapshot longer makes it give up and try again later, rather than stall the commits), and the
//! next commit writes from the log's start. The writer's `journal_size_limit` then cuts the
//! grown file back to the limit.
//!
//! Every other write of the store (creating runs, claims, scores, forks, verdicts) reaches the
//! same connection as an [`Exec`] command, run in queue order between batches: the writer's
//! connection is the only one that writes (the read pool is opened `query_only`).
//!
//! Fencing: a batch starts with `BEGIN IMMEDIATE`, so it holds the write lock before it reads the
//! fences of its sessions; a write whose claim is older than its session's fence is answered
//! [`StoreError::Fenced`] and left out, and the batch's other writes go on. (On PostgreSQL the
//! same read is `SELECT id, fence FROM sessions WHERE id = ANY($1) FOR UPDATE`.)

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use parley_core::{Fence, StoreError};
use sqlx::{Connection, QueryBuilder, Sqlite, SqliteConnection};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use crate::handle::{self, Answers, MAX_BATCH, Write};
use crate::shared::{KnownTexts, STORE_TEXT};
use crate::turn_rows::{Row, TurnRows, new_texts};
use crate::{StoreOptions, write_error};

/// A future that borrows the writer's connection.
pub(crate) type BoxFuture<'c, T> = Pin<Box<dyn Future<Output = T> + Send + 'c>>;

/// A write other than a turn, run on the writer's connection.
type Exec = Box<dyn for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, ()> + Send>;

/// Gives a closure the higher-ranked type an [`Exec`] needs (a closure passed straight to a
/// function with this bound has its signature inferred from it).
fn exec_task<F>(f: F) -> Exec
where
    F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, ()> + Send + 'static,
{
    Box::new(f)
}

/// SQLite accepts 32766 bound parameters per statement; stay under it.
const MAX_PARAMS: usize = 32_000;
/// About this much is written to the WAL between two checkpoints. Larger means fewer, longer
/// checkpoints and a larger WAL file (which is reused, not regrown, after each checkpoint).
pub(crate) const CHECKPOINT_BYTES: usize = 32 << 20;
/// How long a `RESTART` checkpoint waits for readers of the old log (and the writer with it)
/// before it gives up until the WAL has grown by another [`LOOK_EVERY`]th of the limit.
const RESTART_WAIT: Duration = Duration::from_millis(50);
/// The WAL file's size is looked at each time about this fraction of the limit was written.
const LOOK_EVERY: u64 = 16;
/// What a commit adds to the WAL besides its rows' text: the pages it touches are written whole
/// (a table's last page and the pages of its index where the new keys fall).
const COMMIT_BYTES: usize = 4 * 4096;
/// What a row adds to the WAL besides its text: its keys, numbers and record header.
const ROW_BYTES: usize = 64;

pub(crate) enum Command {
    Write(Write),
    /// Runs after the writes queued before it are committed.
    Exec(Exec),
    /// A flush that also checkpoints the whole WAL and truncates it: the store is closing.
    Close(oneshot::Sender<()>),
}

impl From<Write> for Command {
    fn from(write: Write) -> Command {
        Command::Write(write)
    }
}

/// The SQLite store's handle on its writer: turns, and the store's other writes.
pub(crate) type WriterHandle = handle::WriterHandle<Command>;

pub(crate) struct Writer {
    conn: SqliteConnection,
    /// The database file, named in the errors of writes that fail.
    path: PathBuf,
    options: StoreOptions,
    /// An estimate of what was written to the WAL since the checkpointer was last woken.
    unchecked: usize,
    /// Wakes the checkpointer (one wake-up waits at most: more would find nothing to copy).
    checkpoints: mpsc::Sender<()>,
    /// The WAL file (`<database>-wal`), whose size is watched.
    wal: PathBuf,
    /// An estimate of what was written to the WAL since its size was last looked at.
    unlooked: u64,
    /// The system prompts `texts` holds, as this writer stored them.
    texts: KnownTexts,
}

impl Writer {
    /// The writer on `conn`, and its checkpointer on `checkpointer`, a second connection to
    /// the same file.
    pub(crate) fn spawn(
        conn: SqliteConnection,
        checkpointer: SqliteConnection,
        path: PathBuf,
        options: StoreOptions,
        turns: bool,
    ) -> WriterHandle {
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = WriterHandle::new(tx, &options, turns);
        let (checkpoints, woken) = mpsc::channel(1);
        let span = tracing::info_span!("store_checkpointer", db = %path.display());
        tokio::spawn(checkpoint_when_woken(checkpointer, woken).instrument(span));
        let span = tracing::info_span!("store_writer", db = %path.display());
        let mut wal = path.clone().into_os_string();
        wal.push("-wal");
        let writer = Writer {
            conn,
            path,
            options,
            unchecked: 0,
            checkpoints,
            wal: wal.into(),
            unlooked: 0,
            texts: KnownTexts::default(),
        };
        tokio::spawn(writer.run(rx).instrument(span));
        handle
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut flushes = Vec::new();
        while let Some(command) = rx.recv().await {
            let mut closing = false;
            let mut exec = None;
            let mut next = Some(command);
            while let Some(command) = next.take() {
                match command {
                    Command::Write(w) => batch.push(w),
                    // It runs after the batch gathered so far, and ends the gathering, so that
                    // writes keep the order in which they were sent.
                    Command::Exec(task) => {
                        exec = Some(task);
                        break;
                    }
                    Command::Close(done) => {
                        flushes.push(done);
                        closing = true;
                    }
                }
                if batch.len() < MAX_BATCH {
                    next = rx.try_recv().ok();
                }
            }
            if !batch.is_empty() {
                let answers = self.write(&batch).await;
                handle::answer(batch.drain(..), answers);
            }
            let ran = exec.is_some();
            if let Some(task) = exec {
                task(&mut self.conn).await;
            }
            // Sessions go on, and the writer with them, while the WAL is copied into the database.
            if closing {
                self.checkpoint("PRAGMA wal_checkpoint(TRUNCATE)").await;
            } else {
                if self.unchecked >= CHECKPOINT_BYTES {
                    self.unchecked = 0;
                    let _ = self.checkpoints.try_send(());
                }
                // What another write wrote (a run's tasks, a thousand at a time) is not
                // estimated: the file is looked at after each.
                if ran || self.unlooked >= (self.options.wal_limit / LOOK_EVERY).max(1) {
                    self.unlooked = 0;
                    self.restart_if_grown().await;
                }
            }
            for done in flushes.drain(..) {
                let _ = done.send(());
            }
        }
        let _ = self.conn.close().await;
    }

    /// Copies the WAL's committed pages into the database file and empties the WAL file, waiting
    /// for readers (and the checkpointer) up to the busy timeout: the store is closing.
    async fn checkpoint(&mut self, pragma: &'static str) {
        match sqlx::query(pragma).execute(&mut self.conn).await {
            Ok(_) => self.unchecked = 0,
            // Not fatal: every commit is in the WAL, and the next checkpoint tries again.
            Err(e) => tracing::warn!(error = %e, "the store could not checkpoint its WAL"),
        }
    }

    /// Starts the WAL over once its file is past the limit (see the module's comment). Between
    /// transactions only: the checkpoint takes the write lock.
    async fn restart_if_grown(&mut self) {
        let size = std::fs::metadata(&self.wal).map_or(0, |m| m.len());
        if size <= self.options.wal_limit {
            return;
        }
        // Only a number goes into the text.
        let wait = |d: Duration| sqlx::AssertSqlSafe(format!("PRAGMA busy_timeout = {}", d.as_millis()));
        let _ = sqlx::query(wait(RESTART_WAIT)).execute(&mut self.conn).await;
        // A row of (busy, frames in the log, frames copied); busy when a reader (or the
        // checkpointer, copying) held on past the wait.
        let restarted =
            sqlx::query_as::<_, (i64, i64, i64)>("PRAGMA wal_checkpoint(RESTART)").fetch_one(&mut self.conn).await;
        let _ = sqlx::query(wait(crate::busy_timeout())).execute(&mut self.conn).await;
        match restarted {
            Ok((0, _, _)) => tracing::debug!(wal_bytes = size, "the WAL was copied and starts over"),
            Ok((_, frames, copied)) => {
                tracing::debug!(wal_bytes = size, frames, copied, "readers held the WAL; starting it over later")
            }
            // Not fatal: every commit is in the WAL, and the next look tries again.
            Err(e) => tracing::warn!(error = %e, "the store could not checkpoint its WAL"),
        }
    }

    /// Writes the batch in one transaction, leaving out the writes whose claim was taken over;
    /// returns, for each write in order, `Ok` or why it was left out.
    async fn write(&mut self, batch: &[Write]) -> Answers {
        let mut stored = Vec::new();
        let answers = self.write_storing(batch, &mut stored).await;
        // Texts stored in a transaction that did not commit are not there.
        if answers.is_err() {
            stored.into_iter().for_each(|id| self.texts.forget(id));
        }
        answers
    }

    /// [`Writer::write`], saying in `stored` which texts it stored in `texts` as it went.
    async fn write_storing(&mut self, batch: &[Write], stored: &mut Vec<i64>) -> Answers {
        let raw = self.options.raw_model_calls;
        let path = self.path.clone();
        let db_error = |e: sqlx::Error| write_error(e, &path);
        // IMMEDIATE: the write lock is held from here, so no other process can claim a session
        // between the fence read and the inserts.
        let mut tx = self.conn.begin_with("BEGIN IMMEDIATE").await.map_err(db_error)?;

        let ids: Vec<i64> = batch.iter().map(|w| w.claim.session).collect();
        let fences: Vec<(i64, i64)> =
            sqlx::query_as("SELECT id, fence FROM sessions WHERE id IN (SELECT value FROM json_each(?))")
                .bind(serde_json::to_string(&ids).unwrap_or_default())
                .fetch_all(&mut *tx)
                .await
                .map_err(db_error)?;
        let current: HashMap<i64, Fence> = fences.into_iter().map(|(id, f)| (id, Fence(f))).collect();
        // A session missing from the table is not refused here: its insert fails as before.
        let refused: Vec<Option<Fence>> =
            batch.iter().map(|w| current.get(&w.claim.session).copied().filter(|&f| f != w.claim.fence)).collect();
        let live: Vec<&Write> = batch.iter().zip(&refused).filter(|(_, r)| r.is_none()).map(|(w, _)| w).collect();
        let (all, batch) = (batch, live.as_slice());

        let bytes = COMMIT_BYTES + batch.iter().map(|w| wal_bytes(w, raw)).sum::<usize>();
        self.unchecked += bytes;
        self.unlooked += bytes as u64;

        for (id, text) in new_texts(batch.iter().copied(), self.texts.ids()) {
            let held: String =
                sqlx::query_scalar(STORE_TEXT).bind(id).bind(text).fetch_one(&mut *tx).await.map_err(db_error)?;
            // A text another holds stays in its row.
            if held == text {
                self.texts.add(id);
                stored.push(id);
            }
        }
        let rows = TurnRows::gather(batch.iter().copied(), raw, self.texts.ids());
        insert(
            &mut tx,
            "INSERT INTO messages (session_id, seq, role, content, tool_calls, tool_call_id, parts, reasoning, tokens, \
             content_id) ",
            "",
            &rows.messages,
        )
        .await
        .map_err(db_error)?;
        insert(
            &mut tx,
            "INSERT INTO model_calls (session_id, seq, endpoint, request, response, prompt_tokens, completion_tokens, \
             latency_ms, attempts, error, party, finish_reason, sampling) ",
            "",
            &rows.calls,
        )
        .await
        .map_err(db_error)?;
        insert(
            &mut tx,
            "INSERT INTO tool_calls (session_id, seq, party, call_id, name, arguments, output, is_error, is_write, \
             malformed, truncated, duration_us) ",
            "",
            &rows.tools,
        )
        .await
        .map_err(db_error)?;
        // One statement for all sessions that ended in this batch.
        insert(
            &mut tx,
            "WITH v (id, termination, reward, error, failure, steps, retries, duration_ms, token_contiguity, \
             user_faults) AS (",
            ") UPDATE sessions SET status = 'finished', termination = v.termination, reward = v.reward, \
             error = v.error, failure = v.failure, steps = v.steps, retries = sessions.retries + v.retries, \
             duration_ms = v.duration_ms, token_contiguity = v.token_contiguity, user_faults = v.user_faults, \
             owner = NULL, lease_until = NULL, \
             finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') FROM v WHERE sessions.id = v.id",
            &rows.ends,
        )
        .await
        .map_err(db_error)?;
        insert(
            &mut tx,
            "WITH v (session_id, value, breakdown) AS (",
            ") INSERT INTO scores (session_id, scorer, version, value, breakdown) \
             SELECT session_id, 'environment', 1, value, breakdown FROM v",
            &rows.scores,
        )
        .await
        .map_err(db_error)?;

        tx.commit().await.map_err(db_error)?;
        let answers = all.iter().zip(refused).map(|(w, refused)| match refused {
            Some(current) => Err(StoreError::Fenced { session: w.claim.session, fence: w.claim.fence, current }),
            None => Ok(()),
        });
        Ok(answers.collect())
    }
}

/// Runs a `PASSIVE` checkpoint each time the writer asks, on a connection of its own: it copies
/// the WAL's committed pages into the database file while the writer goes on appending to the
/// WAL, never waits, and leaves the pages a reader (`parley show` in another process) may still
/// need for the next checkpoint. Ends with the writer.
async fn checkpoint_when_woken(mut conn: SqliteConnection, mut woken: mpsc::Receiver<()>) {
    while woken.recv().await.is_some() {
        if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&mut conn).await {
            // Not fatal: every commit is in the WAL, and the next checkpoint tries again.
            tracing::warn!(error = %e, "the store could not checkpoint its WAL");
        }
    }
    let _ = conn.close().await;
}

/// Splits `items` into chunks of power-of-two lengths, the largest first, none over `max_rows`:
/// 300 rows become statements of 256, 32, 8 and 4 rows. A multi-row insert's SQL text depends on
/// its row count, and the connection caches prepared statements by their text, so fixed shapes
/// are prepared once per connection (a dozen per table at most) where arbitrary counts would be
/// parsed and planned again at nearly every batch.
fn shaped<T>(items: &[T], max_rows: usize) -> impl Iterator<Item = &[T]> {
    let largest = 1 << max_rows.max(1).ilog2();
    let mut rest = items;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (chunk, tail) = rest.split_at(largest.min(1 << rest.len().ilog2()));
        rest = tail;
        Some(chunk)
    })
}

/// Writes `rows` as statements of a few fixed row counts (see [`shaped`]), each `head`, the
/// rows' `VALUES`, then `tail`.
async fn insert<R: Row>(conn: &mut SqliteConnection, head: &str, tail: &str, rows: &[R]) -> Result<(), sqlx::Error> {
    for chunk in shaped(rows, MAX_PARAMS / R::COLUMNS) {
        let mut q = QueryBuilder::<Sqlite>::new(head);
        q.push_values(chunk, |values, row| row.bind(values));
        q.push(tail);
        q.build().execute(&mut *conn).await?;
    }
    Ok(())
}

impl WriterHandle {
    /// Runs `f` on the writer's connection, after every write sent before it, and returns its
    /// result. `f` opens its own transaction when it writes more than one statement.
    pub(crate) async fn exec<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, Result<T, StoreError>> + Send + 'static,
    {
        let (done, ack) = oneshot::channel();
        let task = exec_task(move |conn| {
            Box::pin(async move {
                let _ = done.send(f(conn).await);
            })
        });
        self.send(Command::Exec(task))?;
        ack.await.unwrap_or_else(|_| Err(StoreError::WriterGone("the writer task ended before writing".into())))
    }

    /// A flush that leaves the database file whole: the WAL is checkpointed and truncated.
    pub(crate) async fn close(&self) -> Result<(), StoreError> {
        self.send_flush(Command::Close).await
    }

    async fn send_flush(&self, command: fn(oneshot::Sender<()>) -> Command) -> Result<(), StoreError> {
        let (done, ack) = oneshot::channel();
        self.send(command(done))?;
        ack.await.map_err(|_| StoreError::WriterGone("the writer task ended before flushing".into()))
    }
}

/// About what a write adds to the WAL, estimated from what its session sent: each row's text
/// (with the bodies of model calls when `raw`), and what a row costs besides.
fn wal_bytes(w: &Write, raw: bool) -> usize {
    let messages = w.turn.messages.iter().map(|m| {
        let call = m.call.as_ref().map_or(0, |c| match raw {
            true => ROW_BYTES + c.request.get().len() + c.response.as_ref().map_or(0, |r| r.get().len()),
            false => ROW_BYTES,
        });
        ROW_BYTES + message_bytes(&m.message) + call
    });
    let tools = w.turn.tool_calls.iter().map(|t| ROW_BYTES + t.arguments.len() + t.output.len());
    messages.sum::<usize>() + tools.sum::<usize>()
}

/// About the bytes a message row takes: its text, its parts (an image's data URL is most of a
/// row that has one) and its reasoning.
fn message_bytes(m: &parley_core::Message) -> usize {
    let parts: usize = m
        .parts
        .iter()
        .map(|p| match p {
            parley_core::Part::Text { text } => text.len(),
            parley_core::Part::Image { url, .. } => url.len(),
            parley_core::Part::Audio { data, .. } => data.len(),
            parley_core::Part::Raw { value } => value.to_string().len(),
        })
        .sum();
    let reasoning =
        m.reasoning.as_ref().map_or(0, |r| r.text.len() + r.items.iter().map(|i| i.to_string().len()).sum::<usize>());
    m.content.as_ref().map_or(0, String::len) + parts + reasoning
}

#[cfg(test)]
mod tests {
    use super::shaped;

    #[test]
    fn chunks_have_power_of_two_lengths_and_cover_every_row() {
        let rows: Vec<usize> = (0..300).collect();
        let lengths: Vec<usize> = shaped(&rows, 2909).map(<[usize]>::len).collect();
        assert_eq!(lengths, [256, 32, 8, 4]);
        let lengths: Vec<usize> = shaped(&rows, 100).map(<[usize]>::len).collect();
        assert_eq!(lengths, [64, 64, 64, 64, 32, 8, 4]);
        assert_eq!(shaped(&rows, 100).flatten().copied().collect::<Vec<_>>(), rows);
        assert_eq!(shaped(&rows[..0], 100).count(), 0);
        assert_eq!(shaped(&rows[..1], 0).map(<[usize]>::len).collect::<Vec<_>>(), [1]);
    }
}
