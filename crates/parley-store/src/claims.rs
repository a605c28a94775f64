//! Who drives each session: runs created with their sessions claimed, claims of what nobody
//! holds, renewal and release, each one transaction. The clock is the database's
//! (`Dialect::NOW_MS`).
//!
//! Renewal, release, an owner's expiry, the owners and a run's end are written once for both
//! stores. Creating a run and claiming stay apart, here for SQLite and in `pg/claims.rs`:
//! PostgreSQL claims in a CTE `FOR UPDATE SKIP LOCKED`, so that machines claiming at once pass
//! over each other's rows, and binds a run's tasks and sessions as arrays; on SQLite the
//! writer's `BEGIN IMMEDIATE` serialises claimers, and rows go in as chunks of `VALUES`.

use std::sync::Arc;

use parley_core::{Claim, Claimed, Fence, Owner, RunId, RunSpec, RunStatus, SessionSpec, StoreError, Task};
use sqlx::{Connection, QueryBuilder};

use crate::SqliteStore;
use crate::dialect::{Dialect, both_stores};

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

impl SqliteStore {
    /// Inserts tasks and sessions into `run`, or into a new run made from the spec, in one
    /// transaction; the sessions are claimed by `owner` (fence 1) or unclaimed.
    pub(crate) async fn insert_sessions(
        &self,
        run: Result<RunId, &RunSpec>,
        tasks: &[Arc<Task>],
        sessions: &[SessionSpec],
        owner: Option<&Owner>,
    ) -> Result<(RunId, Vec<Claim>), StoreError> {
        let tasks: Vec<(i64, String, String)> =
            tasks.iter().map(|t| (t.index as i64, t.id.clone(), t.row.to_string())).collect();
        let run = run.map_err(RunSpec::clone);
        let sessions = sessions.to_vec();
        let owner = owner.map(|o| (o.id.clone(), lease_ms(o)));
        let error = self.write_error();
        self.writer
            .exec(move |conn| {
                Box::pin(async move {
                    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(&error)?;
                    let run: RunId = match run {
                        Ok(run) => run,
                        Err(spec) => {
                            sqlx::query_scalar("INSERT INTO runs (environment, config) VALUES (?, ?) RETURNING id")
                                .bind(spec.environment)
                                .bind(spec.config.to_string())
                                .fetch_one(&mut *tx)
                                .await
                                .map_err(&error)?
                        }
                    };
                    for chunk in tasks.chunks(1000) {
                        let mut insert = QueryBuilder::new("INSERT INTO tasks (run_id, task_index, task_id, row) ");
                        insert.push_values(chunk, |mut b, (index, id, row)| {
                            b.push_bind(run).push_bind(*index).push_bind(id).push_bind(row);
                        });
                        insert.build().execute(&mut *tx).await.map_err(&error)?;
                    }
                    // Ids are assigned here, inside the transaction, so they are known without
                    // reading back.
                    let first: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) + 1 FROM sessions")
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(&error)?;
                    let ids: Vec<i64> = (0..sessions.len() as i64).map(|i| first + i).collect();
                    for (chunk, id_chunk) in sessions.chunks(1000).zip(ids.chunks(1000)) {
                        let mut insert =
                            QueryBuilder::new("INSERT INTO sessions (id, run_id, task_index, trial, seed, player) ");
                        insert.push_values(chunk.iter().zip(id_chunk), |mut b, (s, id)| {
                            // SQLite integers are signed: the seed's bits are kept, reinterpreted.
                            b.push_bind(id)
                                .push_bind(run)
                                .push_bind(s.task_index as i64)
                                .push_bind(s.trial as i64)
                                .push_bind(s.seed as i64)
                                .push_bind(s.player.as_stored());
                        });
                        insert.build().execute(&mut *tx).await.map_err(&error)?;
                    }
                    let fence = match owner {
                        None => Fence::UNCLAIMED,
                        Some((owner, lease)) => {
                            sqlx::query(concat!(
                                "UPDATE sessions SET owner = ?, lease_until = ",
                                now_ms!(),
                                " + ?, fence = 1 WHERE id >= ? AND id < ?"
                            ))
                            .bind(owner)
                            .bind(lease)
                            .bind(first)
                            .bind(first + ids.len() as i64)
                            .execute(&mut *tx)
                            .await
                            .map_err(&error)?;
                            Fence(1)
                        }
                    };
                    tx.commit().await.map_err(&error)?;
                    Ok((run, ids.into_iter().map(|session| Claim { session, fence }).collect()))
                })
            })
            .await
    }

    pub(crate) async fn claim(&self, run: RunId, owner: &Owner, limit: usize) -> Result<Claimed, StoreError> {
        let (id, lease) = (owner.id.clone(), lease_ms(owner));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let error = self.write_error();
        self.writer
            .exec(move |conn| {
                Box::pin(async move {
                    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(&error)?;
                    // PostgreSQL: `... ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED)`.
                    let mut claimed: Vec<(i64, i64)> = sqlx::query_as(concat!(
                        "UPDATE sessions SET owner = ?1, lease_until = ",
                        now_ms!(),
                        " + ?2, fence = fence + 1
                         WHERE id IN (SELECT id FROM sessions
                                      WHERE run_id = ?3 AND status = 'pending'
                                        AND (owner IS NULL OR lease_until < ",
                        now_ms!(),
                        ")
                                      ORDER BY id LIMIT ?4)
                         RETURNING id, fence"
                    ))
                    .bind(&id)
                    .bind(lease)
                    .bind(run)
                    .bind(limit)
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(&error)?;
                    let held_elsewhere: i64 = sqlx::query_scalar(concat!(
                        "SELECT COUNT(*) FROM sessions WHERE run_id = ? AND status = 'pending'
                         AND owner IS NOT NULL AND owner <> ? AND lease_until >= ",
                        now_ms!(),
                        ""
                    ))
                    .bind(run)
                    .bind(&id)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(&error)?;
                    tx.commit().await.map_err(&error)?;
                    // RETURNING gives no order.
                    claimed.sort_unstable();
                    let claims = claimed.into_iter().map(|(session, fence)| Claim { session, fence: Fence(fence) });
                    Ok(Claimed { claims: claims.collect(), held_elsewhere: held_elsewhere as u64 })
                })
            })
            .await
    }
}

both_stores! {
    /// The owners holding live leases on the run's unfinished sessions, with how many each holds.
    pub async fn owners(&self, run: RunId) -> Result<Vec<(String, u64)>, StoreError> {
        let mut query = QueryBuilder::new("SELECT owner, COUNT(*) FROM sessions WHERE run_id = ");
        query.push_bind(run);
        query.push(" AND status = 'pending' AND owner IS NOT NULL AND lease_until >= ");
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
                query.push(" AND status = 'pending' ORDER BY id").push(Self::LOCK_ROWS).push(")");
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
                query.push(" AND status = 'pending' ORDER BY id").push(Self::LOCK_ROWS).push(")");
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
