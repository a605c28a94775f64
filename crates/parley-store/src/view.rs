//! Reads for the web viewer, one for both stores: every run's counts in one query, pages of
//! sessions filtered and keyed by id (so a page costs the same at the start of a million
//! sessions as at their end), and one session with its place among forks and trials. Never writes.

use parley_core::{FailureClass, RunId, SessionId, SessionStatus, StoreError, Termination};
use sqlx::QueryBuilder;

use crate::dialect::both_stores;
use crate::read::SessionRow;
use crate::row::{self, session_columns};

/// One run's counts, as the list of runs shows them.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCounts {
    pub run: RunId,
    pub sessions: i64,
    pub finished: i64,
    /// Finished sessions that failed for a reason outside the agent.
    pub failed: i64,
    /// The mean reward of the finished sessions that did not fail, and how many there are.
    pub mean_reward: Option<f64>,
    pub scored: i64,
}

/// Which sessions of a run a page holds. Every field narrows; `None` leaves it open.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionFilter {
    pub status: Option<SessionStatus>,
    pub termination: Option<Termination>,
    pub failure: Option<FailureClass>,
    pub reward_min: Option<f64>,
    pub reward_max: Option<f64>,
    pub task: Option<i64>,
    pub trial: Option<i64>,
}

/// Where a page of sessions starts: keyset paging by session id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageAt {
    First,
    /// The sessions with ids above this one.
    After(i64),
    /// The sessions with ids below this one (the page before).
    Before(i64),
}

/// One session with what relates it to others.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionInfo {
    pub row: SessionRow,
    pub run: RunId,
    /// The session this one was forked from, and how many of its messages it shares.
    pub forked_from: Option<SessionId>,
    pub fork_at: Option<i64>,
    pub finished_at: Option<String>,
}

both_stores! {
    /// Every run's session counts and mean reward, in one pass over the sessions.
    pub async fn run_counts(&self) -> Result<Vec<RunCounts>, StoreError> {
        let rows: Vec<(RunId, i64, i64, i64, Option<f64>, i64)> = sqlx::query_as(
            "SELECT run_id, COUNT(*),
                    COUNT(*) FILTER (WHERE status = 'finished'),
                    COUNT(*) FILTER (WHERE status = 'finished' AND failure IS NOT NULL),
                    AVG(reward) FILTER (WHERE status = 'finished' AND failure IS NULL),
                    COUNT(*) FILTER (WHERE status = 'finished' AND failure IS NULL AND reward IS NOT NULL)
             FROM sessions GROUP BY run_id ORDER BY run_id",
        )
        .fetch_all(self.pool())
        .await
        .map_err(|e| self.read_error(e, "the sessions of every run (table `sessions`)"))?;
        Ok(rows
            .into_iter()
            .map(|(run, sessions, finished, failed, mean_reward, scored)| RunCounts {
                run,
                sessions,
                finished,
                failed,
                mean_reward,
                scored,
            })
            .collect())
    }

    /// At most `limit` sessions of a run that pass `filter`, in id order, from `at`.
    pub async fn sessions_filtered(
        &self,
        run: RunId,
        filter: &SessionFilter,
        at: PageAt,
        limit: usize,
    ) -> Result<Vec<SessionRow>, StoreError> {
        let rows = filtered_page(run, filter, at, limit)
            .build()
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.read_error(e, &format!("a page of the sessions of run {run} (table `sessions`)")))?;
        in_id_order(at, rows.iter().map(|r| row::session_row(self, r)).collect())
    }

    /// How many sessions of a run pass `filter`.
    pub async fn sessions_matching(&self, run: RunId, filter: &SessionFilter) -> Result<u64, StoreError> {
        let mut query = QueryBuilder::new("SELECT COUNT(*) FROM sessions WHERE run_id = ");
        query.push_bind(run);
        push_filter(&mut query, filter);
        let count: i64 = query
            .build_query_scalar()
            .fetch_one(self.pool())
            .await
            .map_err(|e| self.read_error(e, &format!("the sessions of run {run} (table `sessions`)")))?;
        Ok(count as u64)
    }

    /// One session with its run and fork origin; [`StoreError::NotFound`] when there is none.
    pub async fn session_info(&self, session: SessionId) -> Result<SessionInfo, StoreError> {
        let row = sqlx::query(concat!(
            "SELECT ",
            session_columns!(),
            ", run_id, forked_from, fork_at, finished_at FROM sessions WHERE id = $1"
        ))
        .bind(session)
        .fetch_optional(self.pool())
        .await
        .map_err(|e| self.read_error(e, &format!("session {session} (table `sessions`)")))?
        .ok_or_else(|| StoreError::NotFound(format!("session {session}")))?;
        row::session_info(self, &row)
    }

    /// The other sessions of the same task in the same run (its other trials) and the sessions
    /// forked from this one, as (id, trial, whether it is a fork of this one) in id order.
    pub async fn related_sessions(&self, session: SessionId) -> Result<Vec<(SessionId, i64, bool)>, StoreError> {
        // Two arms rather than one join on an OR, so that the trials are found through the
        // (run_id, task_index, trial) index.
        sqlx::query_as(
            "SELECT id, trial, forked_from IS NOT DISTINCT FROM $1 FROM sessions
             WHERE run_id = (SELECT run_id FROM sessions WHERE id = $1)
               AND task_index = (SELECT task_index FROM sessions WHERE id = $1) AND id <> $1
             UNION
             SELECT id, trial, true FROM sessions WHERE forked_from = $1
             ORDER BY 1 LIMIT 100",
        )
        .bind(session)
        .fetch_all(self.pool())
        .await
        .map_err(|e| self.read_error(e, &format!("the sessions related to session {session} (table `sessions`)")))
    }

    /// The id a run's task was stored under.
    pub async fn task_id(&self, run: RunId, task_index: i64) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar("SELECT task_id FROM tasks WHERE run_id = $1 AND task_index = $2")
            .bind(run)
            .bind(task_index)
            .fetch_optional(self.pool())
            .await
            .map_err(|e| self.read_error(e, &format!("task {task_index} of run {run} (table `tasks`)")))
    }
}

/// The statement of a filtered keyset page of a run's sessions. A page before `at` is the
/// nearest `limit` ids below, read backwards: [`in_id_order`] turns it round.
fn filtered_page<DB>(run: RunId, filter: &SessionFilter, at: PageAt, limit: usize) -> QueryBuilder<DB>
where
    DB: sqlx::Database,
    for<'t> &'static str: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> f64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> i64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    let mut query = QueryBuilder::new(concat!("SELECT ", session_columns!(), " FROM sessions WHERE run_id = "));
    query.push_bind(run);
    push_filter(&mut query, filter);
    match at {
        PageAt::First => query.push(" ORDER BY id"),
        PageAt::After(id) => query.push(" AND id > ").push_bind(id).push(" ORDER BY id"),
        PageAt::Before(id) => query.push(" AND id < ").push_bind(id).push(" ORDER BY id DESC"),
    };
    query.push(" LIMIT ").push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
    query
}

/// A page read by [`filtered_page`], in id order.
fn in_id_order(at: PageAt, page: Result<Vec<SessionRow>, StoreError>) -> Result<Vec<SessionRow>, StoreError> {
    let mut page = page?;
    if matches!(at, PageAt::Before(_)) {
        page.reverse();
    }
    Ok(page)
}

/// The filter's conditions, every value bound, never spliced into the statement.
fn push_filter<DB>(query: &mut QueryBuilder<DB>, filter: &SessionFilter)
where
    DB: sqlx::Database,
    for<'t> &'static str: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> f64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> i64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    if let Some(status) = filter.status {
        query.push(" AND status = ").push_bind(status.as_str());
    }
    if let Some(termination) = filter.termination {
        query.push(" AND termination = ").push_bind(termination.as_str());
    }
    if let Some(failure) = filter.failure {
        query.push(" AND failure = ").push_bind(failure.as_str());
    }
    if let Some(min) = filter.reward_min {
        query.push(" AND reward >= ").push_bind(min);
    }
    if let Some(max) = filter.reward_max {
        query.push(" AND reward <= ").push_bind(max);
    }
    if let Some(task) = filter.task {
        query.push(" AND task_index = ").push_bind(task);
    }
    if let Some(trial) = filter.trial {
        query.push(" AND trial = ").push_bind(trial);
    }
}
