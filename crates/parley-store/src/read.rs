//! Reads for summaries, inspection and export, one for both stores: a run's sessions (whole,
//! by pages, by id), counts, its model calls' tokens and latencies, the newest score and the
//! training metrics' session shapes. Only a checked page differs: a SQLite file can be damaged
//! one page at a time, and is read past the damage.

use std::collections::HashSet;

use parley_core::review::UserFault;
use parley_core::{FailureClass, Reward, RunId, SessionId, SessionStatus, StoreError, Termination, Unusable};
use sqlx::QueryBuilder;
use sqlx::sqlite::SqliteRow;

use crate::dialect::{Dialect, both_stores};
use crate::row::{self, Columns, Of, StoredRow, Unreadable, call_party, session_columns};
use crate::{PgStore, SqliteStore};

/// One session of a page read past damage: its row, or why it cannot be read.
#[derive(Debug)]
pub struct SessionRead {
    pub id: i64,
    pub row: Result<SessionRow, StoreError>,
}

/// One session as stored, without its transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    pub id: i64,
    pub task_index: i64,
    pub trial: i64,
    pub seed: i64,
    pub status: SessionStatus,
    pub termination: Option<Termination>,
    pub reward: Option<f64>,
    pub error: Option<String>,
    /// The failure class of a session that failed for a reason outside the agent.
    pub failure: Option<FailureClass>,
    /// Model-call attempts beyond the first.
    pub retries: i64,
    pub duration_ms: Option<f64>,
    /// Why the agent's token ids are not one contiguous sequence, when they are not.
    pub token_contiguity: Option<String>,
    /// The simulated user's own faults (see [`parley_core::review`]).
    pub user_faults: Vec<parley_core::review::UserFault>,
}

/// Token and call totals of one party's model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tokens {
    pub model_calls: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
}

impl std::ops::AddAssign for Tokens {
    fn add_assign(&mut self, other: Tokens) {
        self.model_calls += other.model_calls;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
    }
}

/// Token and call totals of a run, the agent's apart from the simulated user's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TokenTotals {
    pub agent: Tokens,
    pub user: Tokens,
}

/// A run's model calls in figures, the agent's apart from the simulated user's: token totals,
/// and each call's latency (a call is the user's when it produced a user message).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallTotals {
    pub tokens: TokenTotals,
    pub latencies: Vec<f64>,
    pub user_latencies: Vec<f64>,
}

impl CallTotals {
    fn add(&mut self, user: bool, calls: i64, prompt_tokens: i64, completion_tokens: i64, latencies: Vec<f64>) {
        let (tokens, all) = match user {
            true => (&mut self.tokens.user, &mut self.user_latencies),
            false => (&mut self.tokens.agent, &mut self.latencies),
        };
        *tokens += Tokens { model_calls: calls, prompt_tokens, completion_tokens };
        all.extend(latencies);
    }

    /// These calls and `other`'s, as of one run.
    pub fn merge(&mut self, other: CallTotals) {
        self.tokens.agent += other.tokens.agent;
        self.tokens.user += other.tokens.user;
        // Taken whole into an empty list: a latency per model call is millions in a large run.
        for (all, own) in [(&mut self.latencies, other.latencies), (&mut self.user_latencies, other.user_latencies)] {
            match all.is_empty() {
                true => *all = own,
                false => all.extend(own),
            }
        }
    }

    /// The latencies sorted, for percentiles.
    pub fn sorted(mut self) -> CallTotals {
        self.latencies.sort_by(f64::total_cmp);
        self.user_latencies.sort_by(f64::total_cmp);
        self
    }
}

/// The columns of a session that [`RunOutcomes`] counts, as a macro so that statements stay
/// literals.
macro_rules! outcome_columns {
    () => {
        "id, task_index, status, termination, reward, failure, retries, duration_ms, user_faults"
    };
}

/// A run's sessions as its metrics see them: each finished session's outcome, failures by
/// class, and the sessions not finished.
#[derive(Debug, Default)]
pub struct RunOutcomes {
    pub outcomes: Vec<parley_scoring::Outcome>,
    /// Finished sessions that failed outside the agent, by failure class.
    pub failures: std::collections::BTreeMap<FailureClass, usize>,
    pub total: usize,
    pub unfinished: usize,
    /// Model-call retries over every session.
    pub retries: i64,
}

impl RunOutcomes {
    /// Counts one session in: a row of [`outcome_columns!`], the columns the metrics read.
    fn add(&mut self, store: &dyn Unreadable, row: &impl StoredRow) -> Result<(), StoreError> {
        let id = row::session_id(store, row)?;
        let c = Columns::new(store, row, "sessions", Of::Session(id));
        self.total += 1;
        self.retries += c.get::<i64>("retries")?;
        if c.required("status", SessionStatus::parse)? != SessionStatus::Finished {
            self.unfinished += 1;
            return Ok(());
        }
        if let Some(failure) = c.named("failure", FailureClass::parse)? {
            *self.failures.entry(failure).or_default() += 1;
        }
        let termination = c.named("termination", Termination::parse)?;
        let faults = c.named("user_faults", |text| serde_json::from_str::<Vec<UserFault>>(text).ok())?;
        self.outcomes.push(parley_scoring::Outcome {
            task: c.number("task_index")?,
            infrastructure: termination.is_none_or(Termination::is_infrastructure),
            termination: termination.map_or("", Termination::as_str),
            reward: c.get("reward")?,
            duration_ms: c.get::<Option<f64>>("duration_ms")?.unwrap_or(0.0),
            user_fault: faults.is_some_and(|f| !f.is_empty()),
        });
        Ok(())
    }

    /// Several runs' outcomes as one (a service's environments, say): each run's tasks are
    /// numbered after the previous run's, so that pass@k groups a task's trials within its own
    /// run. Also the offset each run's task numbers were given, in order.
    pub fn together(runs: impl IntoIterator<Item = RunOutcomes>) -> (RunOutcomes, Vec<usize>) {
        let (mut whole, mut offsets, mut offset) = (RunOutcomes::default(), Vec::new(), 0);
        for RunOutcomes { mut outcomes, failures, total, unfinished, retries } in runs {
            offsets.push(offset);
            let tasks = outcomes.iter().map(|o| o.task + 1).max().unwrap_or(0);
            outcomes.iter_mut().for_each(|o| o.task += offset);
            offset += tasks;
            // The first run's are taken, not copied: a million sessions' outcomes held twice
            // would be most of a large run's summary.
            match whole.outcomes.is_empty() {
                true => whole.outcomes = outcomes,
                false => whole.outcomes.extend(outcomes),
            }
            for (class, n) in failures {
                *whole.failures.entry(class).or_default() += n;
            }
            whole.total += total;
            whole.unfinished += unfinished;
            whole.retries += retries;
        }
        (whole, offsets)
    }
}

/// What the training metrics read of one finished session: its task, the agent's turns (its
/// assistant messages), its reward and its newest score's breakdown (JSON text), whose
/// `reward_components` hold a composite reward's parts.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionShape {
    pub id: i64,
    pub task_index: i64,
    pub termination: Option<Termination>,
    pub failure: Option<FailureClass>,
    pub reward: Option<f64>,
    pub steps: i64,
    pub breakdown: Option<String>,
    /// The simulated user failed its part (the review found faults in its turns).
    pub user_faulted: bool,
}

both_stores! {
    /// Every session of a run, in id order.
    pub async fn sessions(&self, run: RunId) -> Result<Vec<SessionRow>, StoreError> {
        let rows = sqlx::query(concat!("SELECT ", session_columns!(), " FROM sessions WHERE run_id = $1 ORDER BY id"))
            .bind(run)
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.read_error(e, &format!("the sessions of run {run} (table `sessions`)")))?;
        rows.iter().map(|r| row::session_row(self, r)).collect()
    }

    /// Sessions of a run with ids above `after`, in id order, at most `limit`.
    pub async fn sessions_page(&self, run: RunId, after: i64, limit: usize) -> Result<Vec<SessionRow>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            session_columns!(),
            " FROM sessions WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3"
        ))
        .bind(run)
        .bind(after)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(self.pool())
        .await
        .map_err(|e| {
            self.read_error(e, &format!("a page of the sessions of run {run} after {after} (table `sessions`)"))
        })?;
        rows.iter().map(|r| row::session_row(self, r)).collect()
    }

    /// The sessions with these ids, in id order (those that exist).
    pub async fn sessions_by_id(&self, ids: &[i64]) -> Result<Vec<SessionRow>, StoreError> {
        let mut query = QueryBuilder::new(concat!("SELECT ", session_columns!(), " FROM sessions WHERE id"));
        Self::push_in_ids(&mut query, ids);
        query.push(" ORDER BY id");
        let rows = query
            .build()
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.read_error(e, &format!("{} sessions by id (table `sessions`)", ids.len())))?;
        rows.iter().map(|r| row::session_row(self, r)).collect()
    }

    /// Those of these sessions with anything committed (a message, a tool call or a model
    /// call): the others have no transcript to read. One query for a page of claimed sessions,
    /// where reading each transcript would be three.
    pub async fn sessions_with_turns(&self, ids: &[i64]) -> Result<HashSet<SessionId>, StoreError> {
        let mut query = QueryBuilder::new("SELECT id FROM sessions WHERE id");
        Self::push_in_ids(&mut query, ids);
        query.push(
            " AND (EXISTS (SELECT 1 FROM messages WHERE session_id = sessions.id)
                OR EXISTS (SELECT 1 FROM tool_calls WHERE session_id = sessions.id)
                OR EXISTS (SELECT 1 FROM model_calls WHERE session_id = sessions.id))",
        );
        let ids: Vec<i64> = query
            .build_query_scalar()
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.read_error(e, &format!("which of {} sessions have turns (table `messages`)", ids.len())))?;
        Ok(ids.into_iter().collect())
    }

    /// How many sessions the run has, and how many of them are finished.
    pub async fn session_counts(&self, run: RunId) -> Result<(u64, u64), StoreError> {
        let (total, finished): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), COUNT(*) FILTER (WHERE status = 'finished') FROM sessions WHERE run_id = $1",
        )
        .bind(run)
        .fetch_one(self.pool())
        .await
        .map_err(|e| self.read_error(e, &format!("the sessions of run {run} (table `sessions`)")))?;
        Ok((total as u64, finished as u64))
    }

    /// The run's outcomes, read a page at a time: a run of a million sessions keeps only what
    /// the metrics need of each, and reads no other column (the report at every run's end reads
    /// every session of the run).
    pub async fn run_outcomes(&self, run: RunId) -> Result<RunOutcomes, StoreError> {
        let mut out = RunOutcomes::default();
        let mut after = 0;
        loop {
            let page = sqlx::query(concat!(
                "SELECT ",
                outcome_columns!(),
                " FROM sessions WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT 4096"
            ))
            .bind(run)
            .bind(after)
            .fetch_all(self.pool())
            .await
            .map_err(|e| {
                self.read_error(e, &format!("a page of the sessions of run {run} after {after} (table `sessions`)"))
            })?;
            let Some(last) = page.last() else { break };
            after = row::session_id(self, last)?;
            for session in &page {
                out.add(self, session)?;
            }
        }
        Ok(out)
    }

    /// A run's model calls in figures, read in one pass and summed by the database: a row per
    /// party with its calls, tokens and every call's latency in one text (see
    /// [`Dialect::LATENCIES`]). A row per call cost more in the hand-over of each row from the
    /// connection than in reading the table, for the report at the end of every run.
    pub async fn call_totals(&self, run: RunId) -> Result<CallTotals, StoreError> {
        let what = || format!("the model calls of run {run} (table `model_calls`)");
        let sql = format!(
            "SELECT {party} = 'user' AS user_party, COUNT(*), CAST(SUM(m.prompt_tokens) AS BIGINT), \
             CAST(SUM(m.completion_tokens) AS BIGINT), {latencies}
             FROM model_calls m
             JOIN sessions s ON s.id = m.session_id
             WHERE s.run_id = $1
             GROUP BY user_party",
            party = call_party!(),
            latencies = Self::LATENCIES,
        );
        // Only the dialect's constants go into the text.
        let rows = sqlx::query_as::<_, (bool, i64, i64, i64, Option<String>)>(sqlx::AssertSqlSafe(sql))
            .bind(run)
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.read_error(e, &what()))?;
        let mut totals = CallTotals::default();
        for (user, calls, prompt_tokens, completion_tokens, latencies) in rows {
            let latencies = latencies
                .as_deref()
                .unwrap_or_default()
                .split(',')
                .filter(|l| !l.is_empty())
                .map(|micros| micros.parse::<i64>().map(|micros| micros as f64 / 1e3))
                .collect::<Result<Vec<f64>, _>>()
                .map_err(|e| self.unreadable(&format!("column `latency_ms` of {}", what()), &e))?;
            totals.add(user, calls, prompt_tokens, completion_tokens, latencies);
        }
        Ok(totals)
    }

    /// The newest score of a session by its environment's scorer; a breakdown that is not JSON
    /// is an error naming the column.
    pub async fn latest_score(&self, session: SessionId) -> Result<Option<Reward>, StoreError> {
        let row: Option<(f64, String)> = sqlx::query_as(
            "SELECT value, breakdown FROM scores WHERE session_id = $1 AND scorer = 'environment'
             ORDER BY version DESC LIMIT 1",
        )
        .bind(session)
        .fetch_optional(self.pool())
        .await
        .map_err(|e| self.read_error(e, &format!("the score of session {session} (table `scores`)")))?;
        row.map(|(value, breakdown)| {
            let breakdown = serde_json::from_str(&breakdown).map_err(|e| {
                self.unreadable(&format!("column `breakdown` of table `scores` for session {session}"), &e)
            })?;
            Ok(Reward { value, breakdown })
        })
        .transpose()
    }

    /// Finished sessions of a run with ids above `after`, in id order, at most `limit`, as the
    /// training metrics read them. One statement per page: the counts and the newest score come
    /// from the tables' primary keys.
    pub async fn session_shapes(&self, run: RunId, after: i64, limit: usize) -> Result<Vec<SessionShape>, StoreError> {
        let rows = sqlx::query(
            "SELECT s.id, s.task_index, s.termination, s.failure, s.reward,
                    (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id AND m.role = 'assistant') AS steps,
                    (SELECT breakdown FROM scores c WHERE c.session_id = s.id AND c.scorer = 'environment'
                     ORDER BY c.version DESC LIMIT 1) AS breakdown,
                    CASE WHEN s.user_faults IS NULL THEN 0 ELSE 1 END AS user_faulted
             FROM sessions s WHERE s.run_id = $1 AND s.id > $2 AND s.status = 'finished' ORDER BY s.id LIMIT $3",
        )
        .bind(run)
        .bind(after)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(self.pool())
        .await
        .map_err(|e| self.read_error(e, &format!("the session shapes of run {run} after {after} (table `sessions`)")))?;
        rows.iter().map(|r| row::session_shape(self, r)).collect()
    }
}

// A checked page is where the stores differ: a SQLite file can be damaged one page at a time,
// and an export should still write every session it can read; PostgreSQL keeps its pages whole
// or reports the failure itself.
impl SqliteStore {
    /// Like [`sessions_page`](SqliteStore::sessions_page), but a session that cannot be read
    /// (damaged pages, text that is not UTF-8) is returned as its own error, naming the table,
    /// the session and the column, and the page goes on past it: an export writes everything
    /// readable. Fails as a whole only when not even the page's session ids can be read.
    pub async fn sessions_page_checked(
        &self,
        run: RunId,
        after: i64,
        limit: usize,
    ) -> Result<Vec<SessionRead>, StoreError> {
        let limit = limit as i64;
        let page = sqlx::query(concat!(
            "SELECT ",
            session_columns!(),
            " FROM sessions WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?"
        ))
        .bind(run)
        .bind(after)
        .bind(limit)
        .fetch_all(self.pool())
        .await;
        match page {
            Ok(rows) => Ok(rows.iter().map(|r| self.session_read(r)).collect()),
            Err(e) => {
                let what = format!("a page of the sessions of run {run} (table `sessions`)");
                match self.read_error(e, &what) {
                    StoreError::Unusable { problem: Unusable::Corrupt, .. } => {}
                    // Not damage (a lock, a vanished file): reading session by session would not help.
                    other => return Err(other),
                }
                // A damaged page of the table: read the ids alone (from the run's index), then
                // each session by itself, so one bad page costs only the sessions on it.
                let ids: Vec<i64> =
                    sqlx::query_scalar("SELECT id FROM sessions WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?")
                        .bind(run)
                        .bind(after)
                        .bind(limit)
                        .fetch_all(self.pool())
                        .await
                        .map_err(|e| self.read_error(e, &format!("the sessions of run {run}")))?;
                let mut reads = Vec::with_capacity(ids.len());
                for id in ids {
                    let row = sqlx::query(concat!("SELECT ", session_columns!(), " FROM sessions WHERE id = ?"))
                        .bind(id)
                        .fetch_one(self.pool())
                        .await;
                    reads.push(match row {
                        Ok(row) => self.session_read(&row),
                        Err(e) => SessionRead { id, row: Err(self.read_error(e, &format!("session {id}"))) },
                    });
                }
                Ok(reads)
            }
        }
    }

    /// SQLite's `PRAGMA quick_check`: every page of the file read and its structure checked,
    /// at a few hundred MB a second.
    pub async fn check_pages(&self) -> Result<(), StoreError> {
        let found: Vec<(String,)> = sqlx::query_as("PRAGMA quick_check(5)")
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.read_error(e, "the file's pages"))?;
        match found.as_slice() {
            [(ok,)] if ok == "ok" => Ok(()),
            _ => {
                let found: Vec<String> = found.into_iter().map(|(line,)| line).collect();
                Err(self.damaged("every page", &found.join("; ")))
            }
        }
    }

    fn session_read(&self, r: &SqliteRow) -> SessionRead {
        let id: i64 = r.value("id").unwrap_or_default();
        SessionRead { id, row: row::session_fields(self, r, id) }
    }
}

impl PgStore {
    /// [`sessions_page`](PgStore::sessions_page), each session as its own read: a page here is
    /// read or not, in the shape of the SQLite store's.
    pub async fn sessions_page_checked(
        &self,
        run: RunId,
        after: i64,
        limit: usize,
    ) -> Result<Vec<SessionRead>, StoreError> {
        let page = self.sessions_page(run, after, limit).await?;
        Ok(page.into_iter().map(|row| SessionRead { id: row.id, row: Ok(row) }).collect())
    }
}
