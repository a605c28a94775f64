//! The single writer: it drains every session's pending turns (after letting the sessions ready
//! to send theirs do so, when turns are coming in from many: [`gather`]), has them committed in
//! one transaction by the committing thread (`commit`: its own connection, a whole batch at a
//! time), and acknowledges each turn after the commit. Its rows are the ones PostgreSQL's writer
//! writes (`turn_rows`).
//!
//! The WAL is checkpointed beside the writer, not in its way: every [`CHECKPOINTS`]th of the
//! store's WAL limit or so the writer wakes a checkpointer, a task with a connection of its own,
//! and goes on committing while the WAL is copied into the database file (the writer's
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
//! A log started over is written over the file's own pages, which the kernel already holds; a
//! log that grows allocates a new page for each page it writes, three times the CPU of a write
//! in place (8.9 against 2.8 µs for a 16 KiB page here). So the limit is kept small
//! ([`crate::WAL_LIMIT`]) and the log starts over often.
//!
//! Every other write of the store (creating runs, claims, scores, forks, verdicts) reaches the
//! writer's own connection as an [`Exec`] command, run in queue order between batches: the
//! writer's connection and the committing thread's, which it waits for, are the only ones that
//! write (the read pool is opened `query_only`).
//!
//! Fencing: a batch starts with `BEGIN IMMEDIATE`, so it holds the write lock before it reads the
//! fences of its sessions; a write whose claim is older than its session's fence is answered
//! [`StoreError::Fenced`] and left out, and the batch's other writes go on; so is a write for a
//! session the table does not hold, answered with an error that names it. (On PostgreSQL the
//! same read is `SELECT id, fence FROM sessions WHERE id = ANY($1) FOR UPDATE`.)

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use parley_core::StoreError;
use sqlx::{Connection, SqliteConnection};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use crate::StoreOptions;
use crate::commit::Committer;
use crate::handle::{self, MAX_BATCH, Write};

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

/// The checkpointer is woken each time about this fraction of the WAL limit was written, so that
/// a restart at the limit finds most of the log already copied.
const CHECKPOINTS: u64 = 4;
/// How long a `RESTART` checkpoint waits for readers of the old log (and the writer with it)
/// before it gives up until the WAL has grown by another [`LOOK_EVERY`]th of the limit.
const RESTART_WAIT: Duration = Duration::from_millis(50);
/// The WAL file's size is looked at each time about this fraction of the limit was written.
const LOOK_EVERY: u64 = 16;
/// What a commit adds to the WAL besides its rows' text: the pages it touches are written whole
/// (a table's last page and the pages of its index where the new keys fall).
const COMMIT_BYTES: usize = 4 * crate::PAGE_SIZE as usize;
/// What a row adds to the WAL besides its text: its keys, numbers and record header.
const ROW_BYTES: usize = 64;
/// The scheduler's turns the writer lets pass at most to gather a larger batch (see [`gather`]).
const GATHER_TURNS: usize = 3;

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
    /// Commits the batches of turns.
    committer: Committer,
    options: StoreOptions,
    /// An estimate of what was written to the WAL since the checkpointer was last woken.
    unchecked: u64,
    /// Wakes the checkpointer (one wake-up waits at most: more would find nothing to copy).
    checkpoints: mpsc::Sender<()>,
    /// The WAL file (`<database>-wal`), whose size is watched.
    wal: PathBuf,
    /// An estimate of what was written to the WAL since its size was last looked at.
    unlooked: u64,
    /// Held by the checkpointer while it copies, and by the writer's own checkpoints: SQLite
    /// runs one checkpoint at a time, and a `RESTART` that found the checkpointer copying gave
    /// up at once, so that under load the log grew to ten times its limit.
    copying: Arc<tokio::sync::Mutex<()>>,
}

impl Writer {
    /// The writer on `conn`, with `committer` committing its batches, and its checkpointer on
    /// `checkpointer`, a third connection to the same file.
    pub(crate) fn spawn(
        conn: SqliteConnection,
        committer: Committer,
        checkpointer: SqliteConnection,
        path: PathBuf,
        options: StoreOptions,
        turns: bool,
    ) -> WriterHandle {
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = WriterHandle::new(tx, &options, turns);
        let (checkpoints, woken) = mpsc::channel(1);
        let copying = Arc::new(tokio::sync::Mutex::new(()));
        let span = tracing::info_span!("store_checkpointer", db = %path.display());
        tokio::spawn(checkpoint_when_woken(checkpointer, woken, Arc::clone(&copying)).instrument(span));
        let span = tracing::info_span!("store_writer", db = %path.display());
        let mut wal = path.clone().into_os_string();
        wal.push("-wal");
        let writer =
            Writer { conn, committer, options, unchecked: 0, checkpoints, wal: wal.into(), unlooked: 0, copying };
        tokio::spawn(writer.run(rx).instrument(span));
        handle
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut flushes = Vec::new();
        let mut previous_batch = 0;
        while let Some(command) = rx.recv().await {
            gather(previous_batch).await;
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
            previous_batch = batch.len();
            if !batch.is_empty() {
                let raw = self.options.raw_model_calls;
                let bytes = (COMMIT_BYTES + batch.iter().map(|w| wal_bytes(w, raw)).sum::<usize>()) as u64;
                self.unchecked += bytes;
                self.unlooked += bytes;
                let answers;
                (batch, answers) = self.committer.commit(std::mem::take(&mut batch)).await;
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
                if self.unchecked >= (self.options.wal_limit / CHECKPOINTS).max(1) {
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
        let _copying = self.copying.lock().await;
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
        // The checkpointer's copy, if one is under way, is finished first: it leaves this one less
        // to copy.
        let _copying = self.copying.lock().await;
        // Only a number goes into the text.
        let wait = |d: Duration| sqlx::AssertSqlSafe(format!("PRAGMA busy_timeout = {}", d.as_millis()));
        let _ = sqlx::query(wait(RESTART_WAIT)).execute(&mut self.conn).await;
        // A row of (busy, frames in the log, frames copied); busy when a reader held on past
        // the wait.
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
}

/// Lets the sessions that are sending turns send more before the writer takes its batch: when
/// the batch before held more than one write, the writer lets the scheduler turn a few times
/// first, and the sessions ready on its worker send theirs. A commit writes every page it touches
/// whole (the last of each table and index among them), so fewer, larger commits write less. A
/// lone session's writes, each alone in its batch, are not held back.
async fn gather(previous_batch: usize) {
    if previous_batch > 1 {
        for _ in 0..GATHER_TURNS {
            tokio::task::yield_now().await;
        }
    }
}

/// Runs a `PASSIVE` checkpoint each time the writer asks, on a connection of its own: it copies
/// the WAL's committed pages into the database file while the writer goes on appending to the
/// WAL, never waits, and leaves the pages a reader (`parley show` in another process) may still
/// need for the next checkpoint. It holds `copying` while it copies (see [`Writer`]). Ends with
/// the writer.
async fn checkpoint_when_woken(
    mut conn: SqliteConnection,
    mut woken: mpsc::Receiver<()>,
    copying: Arc<tokio::sync::Mutex<()>>,
) {
    while woken.recv().await.is_some() {
        let _copying = copying.lock().await;
        if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&mut conn).await {
            // Not fatal: every commit is in the WAL, and the next checkpoint tries again.
            tracing::warn!(error = %e, "the store could not checkpoint its WAL");
        }
    }
    let _ = conn.close().await;
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
    use super::*;

    /// On one thread, a spawned sender runs only when the writer lets the scheduler turn.
    #[tokio::test(flavor = "current_thread")]
    async fn the_writer_gathers_ready_senders_and_holds_back_no_lone_write() {
        // After a batch of one write, the next is not held back: the sender spawned meanwhile
        // has not run when the writer takes its batch.
        let (tx, rx) = mpsc::unbounded_channel::<u32>();
        let late = tokio::spawn({
            let tx = tx.clone();
            async move { tx.send(1).unwrap() }
        });
        gather(1).await;
        assert_eq!(rx.len(), 0, "a lone write waited for another");
        late.await.unwrap();

        // After a batch of several, the ready senders send theirs before the batch is taken.
        let (tx, rx) = mpsc::unbounded_channel::<u32>();
        for i in 0..5 {
            let tx = tx.clone();
            tokio::spawn(async move { tx.send(i).unwrap() });
        }
        gather(2).await;
        assert_eq!(rx.len(), 5);

        // Senders that never stop: the writer takes its batch after a few turns all the same.
        let endless = tokio::spawn(async move {
            for i in 0.. {
                let _ = tx.send(i);
                tokio::task::yield_now().await;
            }
        });
        let before = rx.len();
        gather(MAX_BATCH).await;
        assert!(rx.len() <= before + GATHER_TURNS, "{} queued after {before}", rx.len());
        endless.abort();
    }
}
