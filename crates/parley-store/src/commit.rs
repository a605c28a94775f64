//! The thread that commits turns on SQLite: one connection of its own, on one thread of its own,
//! given a whole batch at a time by the writer task, which answers the batch's writes once it
//! is committed and runs the store's other writes between batches (see `writer`).
//!
//! A batch is one transaction of statements prepared once and bound in place: the rows' text, raw
//! bodies included, is bound by reference and copied once, by SQLite. A batch's messages, calls
//! and tool calls are inserted up to [`CHUNK`] rows a statement, so that a statement's own work
//! (its cursors opened and closed, its program started, halted and reset) is paid once for them.
//! Going through sqlx instead cost each statement a round trip to its connection's thread (two
//! thread wake-ups, some two dozen statements a batch) and a copy of every bound string: 12% of
//! the CPU of a persisted rollout in alternating runs (`docs/performance.md`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use parley_core::{Fence, StoreError};
use rusqlite::{Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior};
use tokio::sync::oneshot;

use crate::handle::{self, Answers, Write};
use crate::shared::{KnownTexts, PromptIds, STORE_TEXT};
use crate::turn_rows::{Row, TurnRows};

/// A batch for the thread, and where its writes go back to, with their answers.
type Job = (Vec<Write>, oneshot::Sender<(Vec<Write>, Answers)>);

/// The handle on the committing thread. The thread ends when the handle is dropped.
pub(crate) struct Committer {
    jobs: mpsc::Sender<Job>,
}

// The inserts of a batch's turns, less their values: [`insert_rows`] adds a group of
// parameters for each row. `OR FAIL`: a batch is one transaction, and a statement that fails
// fails it whole (`Thread::write_storing`), so no statement is ever undone alone, and SQLite
// need not keep a statement journal to undo one. It keeps one for a statement of several rows
// that may abort (a plain `INSERT`, whose key may be taken), with every page of the key's index
// the statement changes: a run's batches wrote four times as many bytes into those temporary
// files as into the database itself (`docs/performance.md`).
const MESSAGES: &str = "INSERT OR FAIL INTO messages (session_id, seq, role, content, tool_calls, tool_call_id, parts, \
     reasoning, tokens, content_id) VALUES ";
const CALLS: &str = "INSERT OR FAIL INTO model_calls (session_id, seq, endpoint, request, response, prompt_tokens, \
     completion_tokens, latency_ms, attempts, error, party, finish_reason, sampling) VALUES ";
const TOOLS: &str = "INSERT OR FAIL INTO tool_calls (session_id, seq, party, call_id, name, arguments, output, is_error, \
     is_write, malformed, truncated, duration_us) VALUES ";
const ENDS: &str = "UPDATE sessions SET status = 'finished', termination = ?2, reward = ?3, error = ?4, \
     failure = ?5, steps = ?6, retries = retries + ?7, duration_ms = ?8, token_contiguity = ?9, user_faults = ?10, \
     owner = NULL, lease_until = NULL, finished_at = ?11 WHERE id = ?1";
const SCORES: &str = "INSERT INTO scores (session_id, scorer, version, value, breakdown, created_at) \
     VALUES (?1, 'environment', 1, ?2, ?3, ?4)";
const FENCE: &str = "SELECT fence FROM sessions WHERE id = ?";

impl Committer {
    /// Opens a connection to the database at `path`, which the writer's connection has already
    /// created and migrated, with the writer's settings (`journal_size_limit` the WAL's limit),
    /// and starts the thread.
    pub(crate) fn open(path: &Path, wal_limit: u64, raw: bool) -> Result<Committer, StoreError> {
        let refused = |e: rusqlite::Error| crate::sqlite_refusal(code(&e), &e, path);
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(refused)?;
        conn.busy_timeout(crate::busy_timeout()).map_err(refused)?;
        // The settings of the writer's connection: no checkpoint inside a commit (the writer
        // runs them), and the log cut back to its limit after a restart. Foreign keys are not
        // checked here: every row a batch writes names the session of a write whose fence the
        // batch read from `sessions` under its write lock (`fences`), so each row's session is
        // there, and SQLite's own check, a look-up in `sessions` for every row, cost a tenth of
        // this thread's CPU (`docs/performance.md`). PostgreSQL's writer keeps them the same way.
        let settings = format!(
            "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = OFF; PRAGMA wal_autocheckpoint = 0; \
             PRAGMA journal_size_limit = {};",
            wal_limit.min(i64::MAX as u64)
        );
        conn.execute_batch(&settings).map_err(refused)?;
        // Room for each table's inserts of every number of rows up to a chunk (a batch's last
        // rows are as many as it has past its whole chunks) beside the few other statements,
        // so that none is prepared again batch after batch: with room for 32, batches of many
        // sizes had the inserts parsed and planned again, 0.4% of a run's CPU.
        conn.set_prepared_statement_cache_capacity(3 * CHUNK + 8);
        let (jobs, queue) = mpsc::channel::<Job>();
        let mut thread = Thread {
            conn,
            path: path.to_owned(),
            raw,
            texts: KnownTexts::default(),
            prompts: PromptIds::default(),
            inserts: Inserts::default(),
        };
        std::thread::Builder::new()
            .name("parley-store-commit".into())
            .spawn(move || {
                while let Ok((batch, done)) = queue.recv() {
                    let answers = thread.write(&batch);
                    let _ = done.send((batch, answers));
                }
            })
            .map_err(|e| StoreError::Database(format!("starting the thread that commits turns: {e}")))?;
        Ok(Committer { jobs })
    }

    /// Commits `batch` in one transaction, leaving out the writes whose claim was taken over;
    /// gives the batch back with, for each write in order, `Ok` or why it was left out.
    pub(crate) async fn commit(&self, batch: Vec<Write>) -> (Vec<Write>, Answers) {
        let (done, answered) = oneshot::channel();
        let gone = || StoreError::WriterGone("the store's committing thread has ended".into());
        if let Err(mpsc::SendError((batch, _))) = self.jobs.send((batch, done)) {
            return (batch, Err(gone()));
        }
        // The thread answers every job it takes; it ends only when this handle is dropped.
        answered.await.unwrap_or_else(|_| (Vec::new(), Err(gone())))
    }
}

/// What the committing thread holds.
struct Thread {
    conn: Connection,
    /// The database file, named in the errors of writes that fail.
    path: PathBuf,
    /// Whether model calls' raw bodies are kept.
    raw: bool,
    /// The system prompts `texts` holds, as this thread stored them.
    texts: KnownTexts,
    /// The ids of the system prompts this thread saw last.
    prompts: PromptIds,
    /// The text of every insert this thread has run.
    inserts: Inserts,
}

impl Thread {
    fn write(&mut self, batch: &[Write]) -> Answers {
        let mut stored = Vec::new();
        let answers = self.write_storing(batch, &mut stored);
        // Texts stored in a transaction that did not commit are not there.
        if answers.is_err() {
            stored.into_iter().for_each(|id| self.texts.forget(id));
        }
        answers
    }

    /// [`Thread::write`], saying in `stored` which texts it stored in `texts` as it went.
    fn write_storing(&mut self, batch: &[Write], stored: &mut Vec<i64>) -> Answers {
        let path = &self.path;
        let db_error = |e: rusqlite::Error| crate::sqlite_write_error(code(&e), &e, path);
        // IMMEDIATE: the write lock is held from here, so no other process can claim a session
        // between the fence read and the inserts. Dropped uncommitted, it rolls back.
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db_error)?;

        let answers = fences(&tx, batch, path).map_err(db_error)?;
        let live: Vec<&Write> = batch.iter().zip(&answers).filter(|(_, a)| a.is_ok()).map(|(w, _)| w).collect();

        let mut rows = TurnRows::gather(live.iter().copied(), self.raw, &mut self.prompts);
        for (id, text) in rows.new_texts(self.texts.ids()) {
            let held: String = tx
                .prepare_cached(STORE_TEXT)
                .and_then(|mut s| s.query_row((id, text), |r| r.get(0)))
                .map_err(db_error)?;
            // A text another holds stays in its row.
            if held == text {
                self.texts.add(id);
                stored.push(id);
            }
        }
        rows.settle(self.texts.ids());
        let inserts = &mut self.inserts;
        insert_rows(&tx, inserts, MESSAGES, &rows.messages).map_err(db_error)?;
        insert_rows(&tx, inserts, CALLS, &rows.calls).map_err(db_error)?;
        insert_rows(&tx, inserts, TOOLS, &rows.tools).map_err(db_error)?;
        // The batch's one clock reading, for its sessions' ends and their scores, when it has
        // any: SQLite's `strftime(..., 'now')` (the scores' column default) cost a microsecond a
        // row.
        if !rows.ends.is_empty() || !rows.scores.is_empty() {
            let now = now_text();
            each_row(&tx, ENDS, &rows.ends, &now).map_err(db_error)?;
            each_row(&tx, SCORES, &rows.scores, &now).map_err(db_error)?;
        }
        tx.commit().map_err(db_error)?;

        Ok(answers)
    }
}

/// SQLite's (extended) result code of an error, when SQLite gave one.
fn code(error: &rusqlite::Error) -> Option<i32> {
    error.sqlite_error().map(|e| e.extended_code)
}

/// Each write of `batch` answered by its session's fence as the table holds it (see
/// [`handle::fenced`]): only those answered `Ok` are written.
fn fences(tx: &Transaction<'_>, batch: &[Write], path: &Path) -> rusqlite::Result<Vec<Result<(), StoreError>>> {
    let mut statement = tx.prepare_cached(FENCE)?;
    batch
        .iter()
        .map(|w| {
            let current = statement.query_row([w.claim.session], |r| r.get(0).map(Fence)).optional()?;
            Ok(handle::fenced(w.claim, current, &path.display()))
        })
        .collect()
}

/// The time now as the store writes it (UTC, to the millisecond): the text of SQLite's
/// `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`, which the store's other writes use.
fn now_text() -> String {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let millis = i64::try_from(since.as_millis()).unwrap_or(i64::MAX);
    chrono::DateTime::from_timestamp_millis(millis).unwrap_or_default().format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// The most rows [`insert_rows`] inserts with one statement. Past a few dozen rows a statement's
/// own work is a small part of its rows', and a statement of this many rows of thirteen columns
/// binds far fewer parameters than SQLite allows one (32,766).
const CHUNK: usize = 32;

/// Inserts `rows` into the table `head` names (`INSERT INTO t (columns) VALUES `), up to
/// [`CHUNK`] rows a statement, each statement prepared once per connection and number of rows.
fn insert_rows<R: Row>(
    tx: &Transaction<'_>,
    inserts: &mut Inserts,
    head: &'static str,
    rows: &[R],
) -> rusqlite::Result<()> {
    for chunk in rows.chunks(CHUNK) {
        let mut statement = tx.prepare_cached(inserts.text(head, R::COLUMNS, chunk.len()))?;
        for (i, row) in chunk.iter().enumerate() {
            row.bind_after(&mut statement, i * R::COLUMNS)?;
        }
        statement.raw_execute()?;
    }
    Ok(())
}

/// The text of each insert [`insert_rows`] runs, by its head and number of rows, written once:
/// writing a chunk's text again for every chunk (a string for each of its rows, joined) was a
/// fiftieth of this thread's CPU.
#[derive(Default)]
struct Inserts(HashMap<(&'static str, usize), String>);

impl Inserts {
    /// `head` and `rows` groups of `columns` parameters: `(?, ?), (?, ?)`.
    fn text(&mut self, head: &'static str, columns: usize, rows: usize) -> &str {
        self.0.entry((head, rows)).or_insert_with(|| {
            let group = format!("({})", vec!["?"; columns].join(", "));
            format!("{head}{}", vec![group; rows].join(", "))
        })
    }
}

/// Runs `sql`, prepared once per connection, for each row of `rows`, with `last` after each
/// row's values.
fn each_row<R: Row>(tx: &Transaction<'_>, sql: &str, rows: &[R], last: &str) -> rusqlite::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut statement = tx.prepare_cached(sql)?;
    for row in rows {
        statement.execute(row.params_and(&last))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_insert_of_n_rows_binds_n_groups_of_its_columns_and_is_written_once() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (a, b, c)").unwrap();
        let mut inserts = super::Inserts::default();
        for rows in [1, 2, super::CHUNK] {
            let text = inserts.text("INSERT INTO t (a, b, c) VALUES ", 3, rows).to_owned();
            let statement = conn.prepare(&text).unwrap();
            assert_eq!(statement.parameter_count(), 3 * rows, "{text}");
            let again = inserts.text("INSERT INTO t (a, b, c) VALUES ", 3, rows);
            assert_eq!(again, text);
        }
        assert_eq!(inserts.0.len(), 3, "one text for each number of rows");
        conn.execute(inserts.text("INSERT INTO t (a, b, c) VALUES ", 3, 2), [1, 2, 3, 4, 5, 6]).unwrap();
        let sum: i64 = conn.query_row("SELECT SUM(a + b + c) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(sum, 21);
    }

    #[test]
    fn the_time_is_written_as_sqlite_writes_it() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let before: String = conn.query_row("SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')", [], |r| r.get(0)).unwrap();
        let ours = super::now_text();
        let after: String = conn.query_row("SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')", [], |r| r.get(0)).unwrap();
        assert_eq!(ours.len(), before.len(), "{ours} against {before}");
        assert!(before <= ours && ours <= after, "{before} <= {ours} <= {after}");
        let shape = |t: &str| t.chars().map(|c| if c.is_ascii_digit() { '9' } else { c }).collect::<String>();
        assert_eq!(shape(&ours), "9999-99-99T99:99:99.999Z");
        assert_eq!(shape(&ours), shape(&before));
    }

    /// A batch's inserts keep no statement journal, the temporary file in which SQLite keeps
    /// every page of the key's index a statement of several rows changes, to undo the statement
    /// alone: a plain `INSERT` of rows whose keys land all over the index keeps one, the
    /// committing thread's do not. Seen from the open files, where SQLite's temporary files
    /// (`etilqs_...`, deleted as they are opened) are, while the transaction is open.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_batchs_inserts_keep_no_statement_journal() {
        let journals = || {
            let fds = std::fs::read_dir("/proc/self/fd").unwrap();
            fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
                .filter(|target| target.to_string_lossy().contains("etilqs_"))
                .count()
        };
        for head in [super::MESSAGES, super::CALLS, super::TOOLS] {
            assert!(head.starts_with("INSERT OR FAIL INTO "), "{head}");
        }
        let dir = tempfile::tempdir().unwrap();
        let mut conn = rusqlite::Connection::open(dir.path().join("t.db")).unwrap();
        conn.execute_batch(
            "PRAGMA page_size = 16384; PRAGMA journal_mode = WAL; \
             CREATE TABLE t (s INTEGER NOT NULL, q INTEGER NOT NULL, c TEXT, PRIMARY KEY (s, q)); \
             WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 30000) \
             INSERT INTO t SELECT i % 256, i, 'earlier' FROM n;",
        )
        .unwrap();
        let heads = [("INSERT INTO t (s, q, c) VALUES ", true), ("INSERT OR FAIL INTO t (s, q, c) VALUES ", false)];
        for (head, kept) in heads {
            let tx = conn.transaction().unwrap();
            let mut inserts = super::Inserts::default();
            for chunk in 0..9_i64 {
                // The rows of one batch, of sessions all over the index.
                let values: Vec<i64> = (0..super::CHUNK as i64)
                    .flat_map(|i| [(chunk * 97 + i * 61) % 256, 100_000 + chunk * 1_000 + i, 0])
                    .collect();
                let mut statement = tx.prepare_cached(inserts.text(head, 3, super::CHUNK)).unwrap();
                statement.execute(rusqlite::params_from_iter(values)).unwrap();
            }
            assert_eq!(journals() > 0, kept, "{head}");
            tx.rollback().unwrap();
        }
    }

    /// The SQLite linked in is built as `.cargo/config.toml` asks (`LIBSQLITE3_FLAGS`): no
    /// process-wide memory counters or shared page cache, whose mutexes every allocation and
    /// page look-up of the committing thread took. A build that lost the setting fails here.
    #[test]
    fn sqlite_is_built_without_the_process_wide_counters_and_page_cache() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let mut options = conn.prepare("PRAGMA compile_options").unwrap();
        let options: Vec<String> = options.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
        assert!(options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"), "{options:?}");
        assert!(!options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"), "{options:?}");
        // Still what sqlx's in-memory databases and the rest of the store rely on.
        assert!(options.iter().any(|o| o == "THREADSAFE=1"), "{options:?}");
    }
}
