//! Who drives each session: runs created with their sessions claimed, claims of what nobody
//! holds, renewal and release, each one transaction. The clock is the database's
//! (`Dialect::NOW_MS`).
//!
//! Every write is written once for both stores. Claiming differs only in a lock: PostgreSQL
//! picks the rows `FOR UPDATE SKIP LOCKED` (`Dialect::SKIP_LOCKED`), so that machines claiming
//! at once pass over each other's rows, where SQLite's writer begins `BEGIN IMMEDIATE` and so
//! serialises claimers. Creating a run differs in how its rows go in, each store's in a function
//! of its own at the end of this file: PostgreSQL binds a run's tasks and sessions as arrays (one
//! statement of one shape for any number of rows), SQLite inserts chunks of `VALUES` under its
//! limit on bound parameters.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use parley_core::{
    Claim, Fence, Owner, Player, RunId, RunSpec, RunStatus, SessionSpec, SessionStatus, StoreError, Task,
};
use sqlx::{PgConnection, QueryBuilder, SqliteConnection};

use crate::dialect::{Dialect, both_stores, literal};
use crate::pg::pg_now_ms;
use crate::read::SessionRow;
use crate::row::{self, session_columns};
use crate::shared::{STORE_TOOL_LIST, StoredRow};
use crate::{PgStore, SqliteStore};

/// A session a claim took: its row as claimed, the fence its writes carry, and who plays it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedSession {
    pub row: SessionRow,
    pub fence: Fence,
    pub player: Player,
}

/// Now, in milliseconds since the Unix epoch, by the database's clock: every owner measures
/// leases with the same clock, whatever its own says. A macro, so that statements stay literals.
macro_rules! now_ms {
    () => {
        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    };
}
pub(crate) use now_ms;

/// How long `owner`'s claims hold, in milliseconds, as both stores write leases.
pub(crate) fn lease_ms(owner: &Owner) -> i64 {
    i64::try_from(owner.lease.as_millis()).unwrap_or(i64::MAX / 2)
}

/// The status of the sessions claims are about, as a literal of the statements.
fn pending() -> String {
    literal(SessionStatus::Pending.as_str())
}

/// A task as a row of `tasks`: its index, id and row (JSON, less the tool list it shares).
struct TaskRow {
    task: Arc<Task>,
    stored: StoredRow,
}

impl TaskRow {
    fn index(&self) -> i64 {
        self.task.index as i64
    }

    /// The id of the shared tool list the row leaves out, if it does.
    fn tools(&self) -> Option<i64> {
        self.stored.tools.as_ref().map(|t| t.id)
    }
}

both_stores! {
    /// Inserts tasks and sessions into `run`, or into a new run made from the spec, in one
    /// transaction; the sessions are claimed by `owner` (fence 1) or unclaimed.
    pub(crate) async fn insert_sessions(
        &self,
        run: Result<RunId, &RunSpec>,
        tasks: &[Arc<Task>],
        sessions: &[SessionSpec],
        owner: Option<&Owner>,
    ) -> Result<(RunId, Vec<Claim>), StoreError> {
        let stored = StoredRow::of_each(tasks.iter().map(|t| &t.row));
        let mut tasks: Vec<TaskRow> =
            tasks.iter().zip(stored).map(|(t, stored)| TaskRow { task: Arc::clone(t), stored }).collect();
        let run = run.map_err(RunSpec::clone);
        let sessions = sessions.to_vec();
        let owner = owner.map(|o| (o.id.clone(), lease_ms(o)));
        let fence = if owner.is_some() { Fence(1) } else { Fence::UNCLAIMED };
        let what = "creating a run's tasks and sessions (tables `runs`, `tasks`, `sessions`)";
        self.transact(what, move |conn| {
            Box::pin(async move {
                let run: RunId = match run {
                    Ok(run) => run,
                    Err(spec) => {
                        sqlx::query_scalar("INSERT INTO runs (environment, config) VALUES ($1, $2) RETURNING id")
                            .bind(spec.environment)
                            .bind(spec.config.to_string())
                            .fetch_one(&mut *conn)
                            .await?
                    }
                };
                Self::insert_tool_lists(&mut *conn, run, &mut tasks).await?;
                Self::insert_tasks(&mut *conn, run, &tasks).await?;
                let ids = Self::insert_new_sessions(&mut *conn, run, &sessions, owner).await?;
                Ok(Ok((run, ids.into_iter().map(|session| Claim { session, fence }).collect())))
            })
        })
        .await
    }

    /// Stores each tool list the rows leave out once for the run, beside its earlier batches'.
    /// Rows whose list's id the run already gives another list keep their list.
    async fn insert_tool_lists(
        conn: &mut <<Self as Dialect>::Db as sqlx::Database>::Connection,
        run: RunId,
        tasks: &mut [TaskRow],
    ) -> Result<(), sqlx::Error> {
        let mut owners: HashMap<i64, String> = HashMap::new();
        for t in tasks.iter_mut() {
            let Some(list) = &t.stored.tools else { continue };
            let owner = match owners.entry(list.id) {
                Entry::Occupied(owner) => owner.into_mut(),
                Entry::Vacant(slot) => {
                    let owner: String = sqlx::query_scalar(STORE_TOOL_LIST)
                        .bind(run)
                        .bind(list.id)
                        .bind(&list.text)
                        .fetch_one(&mut *conn)
                        .await?;
                    slot.insert(owner)
                }
            };
            if owner.as_str() != &*list.text {
                t.stored.keep_tools(&t.task.row);
            }
        }
        Ok(())
    }

    /// [`claim_page`](Self::claim_page)'s claims alone.
    pub(crate) async fn claim(&self, run: RunId, owner: &Owner, limit: usize) -> Result<Vec<Claim>, StoreError> {
        let page = self.claim_page(run, owner, limit).await?;
        Ok(page.iter().map(|c| Claim { session: c.row.id, fence: c.fence }).collect())
    }

    /// Claims at most `limit` of the run's pending sessions that nobody holds (or whose lease
    /// ended), lowest ids first, raising each one's fence; gives each one's row and who plays
    /// it, in id order, from the one statement that claims them. Nothing else is read: how many
    /// sessions others hold is [`owners`](Self::owners)'s to say, once a run, where counting them
    /// on each claim read every pending session of the run a page at a time.
    pub async fn claim_page(&self, run: RunId, owner: &Owner, limit: usize) -> Result<Vec<ClaimedSession>, StoreError> {
        let (id, lease) = (owner.id.clone(), lease_ms(owner));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let what = format!("claiming sessions of run {run} for {id} (table `sessions`)");
        let rows = self.transact(&what, move |conn| {
            Box::pin(async move {
                // The rows are picked in a CTE (run once: on PostgreSQL it locks them, passing
                // over rows another claimer or a writer holds); the update then raises each
                // one's fence.
                let mut pick = QueryBuilder::new("WITH picked AS (SELECT id FROM sessions WHERE run_id = ");
                pick.push_bind(run);
                pick.push(" AND status = ").push(pending()).push(" AND (owner IS NULL OR lease_until < ").push(Self::NOW_MS);
                pick.push(") ORDER BY id LIMIT ").push_bind(limit).push(Self::SKIP_LOCKED);
                pick.push(") UPDATE sessions SET owner = ").push_bind(&id);
                pick.push(", lease_until = ").push(Self::NOW_MS).push(" + ").push_bind(lease);
                pick.push(", fence = fence + 1 WHERE id IN (SELECT id FROM picked) RETURNING fence, player, ");
                pick.push(session_columns!());
                Ok(Ok(pick.build().fetch_all(&mut *conn).await?))
            })
        })
        .await?;
        let mut page = rows.iter().map(|r| row::claimed_session(self, r)).collect::<Result<Vec<_>, StoreError>>()?;
        // RETURNING gives no order.
        page.sort_unstable_by_key(|c| c.row.id);
        Ok(page)
    }

    /// The owners holding live leases on the run's unfinished sessions, with how many each holds.
    pub async fn owners(&self, run: RunId) -> Result<Vec<(String, u64)>, StoreError> {
        let mut query = QueryBuilder::new("SELECT owner, COUNT(*) FROM sessions WHERE run_id = ");
        query.push_bind(run);
        query.push(" AND status = ").push(pending()).push(" AND owner IS NOT NULL AND lease_until >= ");
        query.push(Self::NOW_MS).push(" GROUP BY owner ORDER BY owner");
        let rows: Vec<(String, i64)> = query
            .build_query_as()
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.read_error(e, &format!("the owners of run {run} (table `sessions`)")))?;
        Ok(rows.into_iter().map(|(owner, n)| (owner, n as u64)).collect())
    }

    /// Ends `owner`'s leases on the run's sessions now, for an owner known to be gone (a process
    /// of this host that no longer runs): its sessions can be claimed at once instead of when
    /// the leases run out. Its fences stay, so were it still alive its commits would be refused.
    pub async fn expire_owner(&self, run: RunId, owner: &str) -> Result<u64, StoreError> {
        let what = format!("expiring the leases of {owner} on run {run} (table `sessions`)");
        let owner = owner.to_owned();
        self.write(&what, move |conn| {
            Box::pin(async move {
                let mut query = QueryBuilder::new(
                    "UPDATE sessions SET lease_until = 0 WHERE id IN (SELECT id FROM sessions WHERE run_id = ",
                );
                query.push_bind(run).push(" AND owner = ").push_bind(owner);
                query.push(" AND status = ").push(pending()).push(" ORDER BY id").push(Self::LOCK_ROWS).push(")");
                Ok(query.build().execute(conn).await?.rows_affected())
            })
        })
        .await
    }

    /// Extends `owner`'s leases on its unfinished sessions from now.
    pub(crate) async fn renew(&self, owner: &Owner) -> Result<u64, StoreError> {
        let (id, lease) = (owner.id.clone(), lease_ms(owner));
        let what = format!("renewing the claims of {id} (table `sessions`)");
        self.write(&what, move |conn| {
            Box::pin(async move {
                let mut query = QueryBuilder::new("UPDATE sessions SET lease_until = ");
                query.push(Self::NOW_MS).push(" + ").push_bind(lease);
                query.push(" WHERE id IN (SELECT id FROM sessions WHERE owner = ").push_bind(id);
                query.push(" AND status = ").push(pending()).push(" ORDER BY id").push(Self::LOCK_ROWS).push(")");
                Ok(query.build().execute(conn).await?.rows_affected())
            })
        })
        .await
    }

    /// Gives one session up, unless another owner has claimed it since.
    pub(crate) async fn release_one(&self, claim: Claim) -> Result<(), StoreError> {
        let what = format!("releasing the claim on session {} (table `sessions`)", claim.session);
        self.write(&what, move |conn| {
            Box::pin(async move {
                sqlx::query("UPDATE sessions SET owner = NULL, lease_until = NULL WHERE id = $1 AND fence = $2")
                    .bind(claim.session)
                    .bind(claim.fence.0)
                    .execute(conn)
                    .await?;
                Ok(())
            })
        })
        .await
    }

    /// Gives up every session `owner` holds.
    pub(crate) async fn release(&self, owner: &Owner) -> Result<u64, StoreError> {
        let id = owner.id.clone();
        let what = format!("releasing the claims of {id} (table `sessions`)");
        self.write(&what, move |conn| {
            Box::pin(async move {
                let mut query = QueryBuilder::new(
                    "UPDATE sessions SET owner = NULL, lease_until = NULL WHERE id IN (SELECT id FROM sessions WHERE owner = ",
                );
                query.push_bind(id).push(" ORDER BY id").push(Self::LOCK_ROWS).push(")");
                Ok(query.build().execute(conn).await?.rows_affected())
            })
        })
        .await
    }

    /// Marks the run ended, now.
    pub(crate) async fn set_run_status(&self, run: RunId, status: RunStatus) -> Result<(), StoreError> {
        self.write(&format!("finishing run {run} (table `runs`)"), move |conn| {
            Box::pin(async move {
                let mut query = QueryBuilder::new("UPDATE runs SET status = ");
                query.push_bind(status.as_str()).push(", finished_at = ").push(Self::NOW_TEXT);
                query.push(" WHERE id = ").push_bind(run);
                query.build().execute(conn).await?;
                Ok(())
            })
        })
        .await
    }
}

// How a run's rows go in: the one difference between the stores in creating a run.

impl SqliteStore {
    /// The run's tasks, in chunks of `VALUES` under SQLite's limit on bound parameters.
    async fn insert_tasks(conn: &mut SqliteConnection, run: RunId, tasks: &[TaskRow]) -> Result<(), sqlx::Error> {
        for chunk in tasks.chunks(1000) {
            let mut insert = QueryBuilder::new("INSERT INTO tasks (run_id, task_index, task_id, row, tools) ");
            insert.push_values(chunk, |mut b, t| {
                b.push_bind(run)
                    .push_bind(t.index())
                    .push_bind(&t.task.id)
                    .push_bind(&t.stored.row)
                    .push_bind(t.tools());
            });
            insert.build().execute(&mut *conn).await?;
        }
        Ok(())
    }

    /// The run's sessions, in chunks of `VALUES`, claimed by `owner` (id and lease) if given;
    /// returns their ids, in the order of `sessions`. Ids are assigned here, inside the
    /// writer's transaction, so they are known without reading back.
    async fn insert_new_sessions(
        conn: &mut SqliteConnection,
        run: RunId,
        sessions: &[SessionSpec],
        owner: Option<(String, i64)>,
    ) -> Result<Vec<i64>, sqlx::Error> {
        let first: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) + 1 FROM sessions").fetch_one(&mut *conn).await?;
        let ids: Vec<i64> = (0..sessions.len() as i64).map(|i| first + i).collect();
        for (chunk, id_chunk) in sessions.chunks(1000).zip(ids.chunks(1000)) {
            let mut insert = QueryBuilder::new("INSERT INTO sessions (id, run_id, task_index, trial, seed, player) ");
            insert.push_values(chunk.iter().zip(id_chunk), |mut b, (s, id)| {
                // SQLite integers are signed: the seed's bits are kept, reinterpreted.
                b.push_bind(id)
                    .push_bind(run)
                    .push_bind(s.task_index as i64)
                    .push_bind(s.trial as i64)
                    .push_bind(s.seed as i64)
                    .push_bind(s.player.as_stored());
            });
            insert.build().execute(&mut *conn).await?;
        }
        if let Some((owner, lease)) = owner {
            sqlx::query(concat!(
                "UPDATE sessions SET owner = ?, lease_until = ",
                now_ms!(),
                " + ?, fence = 1 WHERE id >= ? AND id < ?"
            ))
            .bind(owner)
            .bind(lease)
            .bind(first)
            .bind(first + ids.len() as i64)
            .execute(&mut *conn)
            .await?;
        }
        Ok(ids)
    }
}

impl PgStore {
    /// The run's tasks, as arrays bound whole: one statement of one shape for any number.
    async fn insert_tasks(conn: &mut PgConnection, run: RunId, tasks: &[TaskRow]) -> Result<(), sqlx::Error> {
        let indexes: Vec<i64> = tasks.iter().map(TaskRow::index).collect();
        let ids: Vec<&str> = tasks.iter().map(|t| t.task.id.as_str()).collect();
        let rows: Vec<&str> = tasks.iter().map(|t| t.stored.row.as_str()).collect();
        let tools: Vec<Option<i64>> = tasks.iter().map(TaskRow::tools).collect();
        sqlx::query(
            "INSERT INTO tasks (run_id, task_index, task_id, row, tools)
             SELECT $1, * FROM UNNEST($2::bigint[], $3::text[], $4::text[], $5::bigint[])",
        )
        .bind(run)
        .bind(&indexes)
        .bind(&ids)
        .bind(&rows)
        .bind(&tools)
        .execute(conn)
        .await?;
        Ok(())
    }

    /// The run's sessions, as arrays bound whole, claimed by `owner` (id and lease) if given;
    /// returns their ids, in the order of `sessions`. Ids come from the column's sequence
    /// before the insert, so they are known without relying on the order RETURNING gives.
    async fn insert_new_sessions(
        conn: &mut PgConnection,
        run: RunId,
        sessions: &[SessionSpec],
        owner: Option<(String, i64)>,
    ) -> Result<Vec<i64>, sqlx::Error> {
        let mut ids: Vec<i64> =
            sqlx::query_scalar("SELECT nextval(pg_get_serial_sequence('sessions', 'id')) FROM generate_series(1, $1)")
                .bind(sessions.len() as i64)
                .fetch_all(&mut *conn)
                .await?;
        ids.sort_unstable();
        let fence = if owner.is_some() { Fence(1) } else { Fence::UNCLAIMED };
        let (owner, lease) = owner.map_or((None, 0), |(id, lease)| (Some(id), lease));
        sqlx::query(concat!(
            "INSERT INTO sessions (id, run_id, task_index, trial, seed, owner, lease_until, fence, player)
             SELECT v.id, $2, v.task_index, v.trial, v.seed, $6::text,
                    CASE WHEN $6::text IS NULL THEN NULL ELSE ",
            pg_now_ms!(),
            " + $7 END, $8, v.player
             FROM UNNEST($1::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $9::text[])
                  AS v (id, task_index, trial, seed, player)"
        ))
        .bind(&ids)
        .bind(run)
        .bind(sessions.iter().map(|s| s.task_index as i64).collect::<Vec<_>>())
        .bind(sessions.iter().map(|s| i64::from(s.trial)).collect::<Vec<_>>())
        // Integers are signed: the seed's bits are kept, reinterpreted, as on SQLite.
        .bind(sessions.iter().map(|s| s.seed as i64).collect::<Vec<_>>())
        .bind(owner)
        .bind(lease)
        .bind(fence.0)
        .bind(sessions.iter().map(|s| s.player.as_stored()).collect::<Vec<_>>())
        .execute(conn)
        .await?;
        Ok(ids)
    }
}
