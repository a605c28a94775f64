//! Stored rows read the same way on both stores: a column read and decoded, or an error naming
//! the column, its table and what the row belongs to (a session, a run), in the words of the
//! store it came from (SQLite: damage, and how to recover the rest of the file; PostgreSQL: the
//! server). The mappers from rows to the store's types are written once, here, over either row.

use std::fmt::Display;
use std::time::Duration;

use parley_core::{
    FailureClass, Fence, Message, Party, Player, Role, RunStatus, SessionId, SessionStatus, StoreError, Termination,
    ToolCallRecord, Usage,
};
use serde::de::DeserializeOwned;
use sqlx::postgres::{PgRow, Postgres};
use sqlx::sqlite::{Sqlite, SqliteRow};

use crate::{CallFigures, ClaimedSession, RunRecord, SessionInfo, SessionRow, SessionShape};

/// A column type both stores decode.
pub(crate) trait Value:
    for<'r> sqlx::Decode<'r, Sqlite> + sqlx::Type<Sqlite> + for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>
{
}

impl<T> Value for T where
    T: for<'r> sqlx::Decode<'r, Sqlite>
        + sqlx::Type<Sqlite>
        + for<'r> sqlx::Decode<'r, Postgres>
        + sqlx::Type<Postgres>
{
}

/// A row of either store.
pub(crate) trait StoredRow {
    fn value<T: Value>(&self, column: &str) -> Result<T, sqlx::Error>;
    /// A text column, borrowed from the row.
    fn text(&self, column: &str) -> Result<Option<&str>, sqlx::Error>;
}

impl StoredRow for SqliteRow {
    fn value<T: Value>(&self, column: &str) -> Result<T, sqlx::Error> {
        sqlx::Row::try_get(self, column)
    }

    fn text(&self, column: &str) -> Result<Option<&str>, sqlx::Error> {
        sqlx::Row::try_get(self, column)
    }
}

impl StoredRow for PgRow {
    fn value<T: Value>(&self, column: &str) -> Result<T, sqlx::Error> {
        sqlx::Row::try_get(self, column)
    }

    fn text(&self, column: &str) -> Result<Option<&str>, sqlx::Error> {
        sqlx::Row::try_get(self, column)
    }
}

/// How a store says that something it holds cannot be read: `what` names it (a column, its
/// table and its row), `error` says why.
pub(crate) trait Unreadable {
    fn unreadable(&self, what: &str, error: &dyn Display) -> StoreError;
}

/// What a row belongs to, as an error names it ("session 4", "run 2"): written only when a
/// column cannot be read, where a `String` made for every row read cost an allocation each.
#[derive(Clone, Copy)]
pub(crate) enum Of {
    /// A row whose own id is not read yet.
    A(&'static str),
    Session(SessionId),
    /// A session's row at a seq (a message).
    SessionAt(SessionId, i64),
    Run(i64),
}

impl Display for Of {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Of::A(what) => write!(f, "a {what}"),
            Of::Session(id) => write!(f, "session {id}"),
            Of::SessionAt(id, seq) => write!(f, "session {id} (seq {seq})"),
            Of::Run(id) => write!(f, "run {id}"),
        }
    }
}

/// One row of `table`, belonging to `of`, read column by column.
pub(crate) struct Columns<'a, R> {
    pub row: &'a R,
    pub table: &'a str,
    pub of: Of,
    pub store: &'a dyn Unreadable,
}

impl<'a, R: StoredRow> Columns<'a, R> {
    pub fn new(store: &'a dyn Unreadable, row: &'a R, table: &'a str, of: Of) -> Columns<'a, R> {
        Columns { row, table, of, store }
    }

    /// The error for `column` of this row.
    pub fn unreadable(&self, column: &str, error: &dyn Display) -> StoreError {
        self.store.unreadable(&format!("column `{column}` of table `{}` for {}", self.table, self.of), error)
    }

    pub fn get<T: Value>(&self, column: &str) -> Result<T, StoreError> {
        self.row.value(column).map_err(|e| self.unreadable(column, &e))
    }

    /// A JSON column, `None` when NULL.
    pub fn json<T: DeserializeOwned>(&self, column: &str) -> Result<Option<T>, StoreError> {
        match self.get::<Option<String>>(column)? {
            Some(text) => serde_json::from_str(&text).map(Some).map_err(|e| self.unreadable(column, &e)),
            None => Ok(None),
        }
    }

    /// An integer column that must fit `T` (a seq, a count).
    pub fn number<T: TryFrom<i64>>(&self, column: &str) -> Result<T, StoreError> {
        let n: i64 = self.get(column)?;
        T::try_from(n).map_err(|_| self.unreadable(column, &format!("{n} is out of range")))
    }

    /// A column holding one of a closed set of names, `None` when NULL; a name this build does
    /// not know is an error of the column.
    pub fn named<T>(&self, column: &str, parse: fn(&str) -> Option<T>) -> Result<Option<T>, StoreError> {
        match self.row.text(column).map_err(|e| self.unreadable(column, &e))? {
            Some(name) => match parse(name) {
                Some(value) => Ok(Some(value)),
                None => Err(self.unreadable(column, &format!("unknown {column} {name:?}"))),
            },
            None => Ok(None),
        }
    }

    /// A column that must hold one of a closed set of names.
    pub fn required<T>(&self, column: &str, parse: fn(&str) -> Option<T>) -> Result<T, StoreError> {
        self.named(column, parse)?.ok_or_else(|| self.unreadable(column, &"NULL"))
    }
}

/// The columns of a [`SessionRow`], as a macro so that statements stay literals.
macro_rules! session_columns {
    () => {
        "id, task_index, trial, seed, status, termination, reward, error, failure, retries, duration_ms, \
         token_contiguity, user_faults"
    };
}
pub(crate) use session_columns;

/// The id of a row of [`session_columns!`].
pub(crate) fn session_id(store: &dyn Unreadable, row: &impl StoredRow) -> Result<i64, StoreError> {
    Columns::new(store, row, "sessions", Of::A("session")).get("id")
}

/// A row of [`session_columns!`] as a [`SessionRow`].
pub(crate) fn session_row(store: &dyn Unreadable, row: &impl StoredRow) -> Result<SessionRow, StoreError> {
    session_fields(store, row, session_id(store, row)?)
}

/// A row of [`session_columns!`] whose id is known as a [`SessionRow`]: a column that cannot be
/// read is named with the session.
pub(crate) fn session_fields(store: &dyn Unreadable, row: &impl StoredRow, id: i64) -> Result<SessionRow, StoreError> {
    let c = Columns::new(store, row, "sessions", Of::Session(id));
    Ok(SessionRow {
        id,
        task_index: c.get("task_index")?,
        trial: c.get("trial")?,
        seed: c.get("seed")?,
        status: c.required("status", SessionStatus::parse)?,
        termination: c.named("termination", Termination::parse)?,
        reward: c.get("reward")?,
        error: c.get("error")?,
        failure: c.named("failure", FailureClass::parse)?,
        retries: c.get("retries")?,
        duration_ms: c.get("duration_ms")?,
        token_contiguity: c.get("token_contiguity")?,
        user_faults: c.named("user_faults", |text| serde_json::from_str(text).ok())?.unwrap_or_default(),
    })
}

/// A session's user faults as stored: a JSON list, or NULL for none.
pub(crate) fn faults_text(faults: &[parley_core::review::UserFault]) -> Option<String> {
    (!faults.is_empty()).then(|| serde_json::to_string(faults).unwrap_or_default())
}

/// A row of [`session_columns!`] and `run_id, forked_from, fork_at, finished_at` as a
/// [`SessionInfo`].
pub(crate) fn session_info(store: &dyn Unreadable, row: &impl StoredRow) -> Result<SessionInfo, StoreError> {
    let row_of = session_row(store, row)?;
    let c = Columns::new(store, row, "sessions", Of::Session(row_of.id));
    Ok(SessionInfo {
        run: c.get("run_id")?,
        forked_from: c.get("forked_from")?,
        fork_at: c.get("fork_at")?,
        finished_at: c.get("finished_at")?,
        row: row_of,
    })
}

/// A row of `fence, player` and [`session_columns!`] (a claim's) as a [`ClaimedSession`].
pub(crate) fn claimed_session(store: &dyn Unreadable, row: &impl StoredRow) -> Result<ClaimedSession, StoreError> {
    let row_of = session_row(store, row)?;
    let c = Columns::new(store, row, "sessions", Of::Session(row_of.id));
    Ok(ClaimedSession {
        fence: Fence(c.get("fence")?),
        player: Player::from_stored(c.get::<Option<String>>("player")?.as_deref()),
        row: row_of,
    })
}

/// The columns of a [`RunRecord`], as a macro so that statements stay literals.
macro_rules! run_columns {
    () => {
        "id, created_at, environment, config, status, finished_at"
    };
}
pub(crate) use run_columns;

/// A row of [`run_columns!`] as a [`RunRecord`].
pub(crate) fn run_record(store: &dyn Unreadable, row: &impl StoredRow) -> Result<RunRecord, StoreError> {
    let id = Columns::new(store, row, "runs", Of::A("run")).get("id")?;
    let c = Columns::new(store, row, "runs", Of::Run(id));
    Ok(RunRecord {
        id,
        created_at: c.get("created_at")?,
        environment: c.get("environment")?,
        config: c.json("config")?.unwrap_or_default(),
        status: c.required("status", RunStatus::parse)?,
        finished_at: c.get("finished_at")?,
    })
}

/// A row of a session-shapes page (`id, task_index, termination, failure, reward, steps,
/// breakdown`) as a [`SessionShape`].
pub(crate) fn session_shape(store: &dyn Unreadable, row: &impl StoredRow) -> Result<SessionShape, StoreError> {
    let id = session_id(store, row)?;
    let c = Columns::new(store, row, "sessions", Of::Session(id));
    Ok(SessionShape {
        id,
        task_index: c.get("task_index")?,
        termination: c.named("termination", Termination::parse)?,
        failure: c.named("failure", FailureClass::parse)?,
        reward: c.get("reward")?,
        steps: c.get("steps")?,
        breakdown: c.get("breakdown")?,
        user_faulted: c.get::<i32>("user_faulted")? != 0,
    })
}

/// The columns of a transcript's messages (of `messages m`, its shared texts `texts x` joined),
/// tool calls and model calls, in the order the rows are read (by seq), as macros so that
/// statements stay literals.
macro_rules! message_columns {
    () => {
        "m.seq, m.role, COALESCE(m.content, x.text) AS content, m.tool_calls, m.tool_call_id, m.parts, m.reasoning, \
         m.tokens"
    };
}
macro_rules! tool_call_columns {
    () => {
        "seq, party, call_id, name, arguments, output, is_error, is_write, malformed, truncated, duration_us"
    };
}
macro_rules! call_figure_columns {
    () => {
        "seq, prompt_tokens, completion_tokens, latency_ms, attempts, party, finish_reason, sampling"
    };
}
/// Whose a model call `m` is, `'agent'` or `'user'`: its `party`, or, for a call stored before
/// the column was (migration 0007), the role of the message it produced. A run's figures read it
/// from `model_calls` alone; joining every call's message took minutes over a million rollouts.
macro_rules! call_party {
    () => {
        "COALESCE(m.party, (SELECT CASE msg.role WHEN 'user' THEN 'user' ELSE 'agent' END FROM messages msg \
         WHERE msg.session_id = m.session_id AND msg.seq = m.seq))"
    };
}
pub(crate) use {call_figure_columns, call_party, message_columns, tool_call_columns};

/// A session's message rows (of [`message_columns!`], by seq) as its messages; a gap in the
/// seqs is an error, as a transcript with one cannot be continued.
pub(crate) fn messages(
    store: &dyn Unreadable,
    rows: &[impl StoredRow],
    session: SessionId,
) -> Result<Vec<Message>, StoreError> {
    let mut messages = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let seq: i64 = Columns::new(store, row, "messages", Of::Session(session)).get("seq")?;
        if seq != i as i64 {
            return Err(StoreError::Database(format!("session {session} has a gap in its messages at {i}")));
        }
        let c = Columns::new(store, row, "messages", Of::SessionAt(session, seq));
        messages.push(Message {
            role: c.required("role", Role::parse)?,
            content: c.get("content")?,
            parts: c.json("parts")?.unwrap_or_default(),
            tool_calls: c.json("tool_calls")?.unwrap_or_default(),
            tool_call_id: c.get("tool_call_id")?,
            reasoning: c.json("reasoning")?,
            tokens: c.json("tokens")?,
        });
    }
    Ok(messages)
}

/// Puts back the text and call id of the tool results whose rows left them to their tool
/// call's row (`turn_rows::told_by`): a tool message with neither, and a call of its seq.
pub(crate) fn retell_tool_results(messages: &mut [Message], tool_calls: &[ToolCallRecord]) {
    for call in tool_calls {
        if let Some(m) = messages.get_mut(call.seq as usize)
            && m.role == Role::Tool
            && m.content.is_none()
            && m.tool_call_id.is_none()
        {
            m.content = Some(call.output.clone());
            m.tool_call_id = Some(call.call_id.clone());
        }
    }
}

/// A row of [`tool_call_columns!`] as a [`ToolCallRecord`].
pub(crate) fn tool_call(
    store: &dyn Unreadable,
    row: &impl StoredRow,
    session: SessionId,
) -> Result<ToolCallRecord, StoreError> {
    let c = Columns::new(store, row, "tool_calls", Of::Session(session));
    Ok(ToolCallRecord {
        seq: c.number("seq")?,
        // A party this build does not know is the agent's, as calls stored before parties were.
        party: c.get::<String>("party").map(|p| Party::parse(&p).unwrap_or_default())?,
        call_id: c.get("call_id")?,
        name: c.get("name")?,
        arguments: c.get("arguments")?,
        output: c.get("output")?,
        is_error: c.get("is_error")?,
        write: c.get("is_write")?,
        malformed: c.get("malformed")?,
        truncated: c.get("truncated")?,
        duration: Duration::from_micros(c.number("duration_us")?),
    })
}

/// A row of [`call_figure_columns!`] as a model call's [`CallFigures`].
pub(crate) fn call_figures(
    store: &dyn Unreadable,
    row: &impl StoredRow,
    session: SessionId,
) -> Result<CallFigures, StoreError> {
    let c = Columns::new(store, row, "model_calls", Of::Session(session));
    Ok(CallFigures {
        seq: c.number("seq")?,
        usage: Usage { prompt_tokens: c.number("prompt_tokens")?, completion_tokens: c.number("completion_tokens")? },
        latency_ms: c.get("latency_ms")?,
        attempts: c.number("attempts")?,
        // Calls recorded before Parley kept their party have none.
        party: c.get::<Option<String>>("party")?.as_deref().and_then(Party::parse),
        finish_reason: c.get("finish_reason")?,
        sampling: c.json("sampling")?,
    })
}
