//! Who drives each session, on PostgreSQL: runs created with their sessions claimed, claims of
//! what nobody holds, renewal and release, each one transaction on the pool.
//!
//! Creating a run and claiming, the two that differ from SQLite's (the rest of `claims` is
//! shared): machines claiming at once pass over each other's rows (`FOR UPDATE SKIP LOCKED`),
//! and a run's tasks and sessions are bound as arrays, one statement of one shape for any
//! number of rows.

use std::sync::Arc;

use parley_core::{Claim, Claimed, Fence, Owner, RunId, RunSpec, SessionSpec, StoreError, Task};

use super::{PgStore, pg_now_ms};
use crate::claims::lease_ms;

impl PgStore {
    /// Inserts tasks and sessions into `run`, or into a new run made from the spec, in one
    /// transaction; the sessions are claimed by `owner` (fence 1) or unclaimed.
    pub(crate) async fn insert_sessions(
        &self,
        run: Result<RunId, &RunSpec>,
        tasks: &[Arc<Task>],
        sessions: &[SessionSpec],
        owner: Option<&Owner>,
    ) -> Result<(RunId, Vec<Claim>), StoreError> {
        let error = self.error("creating a run's tasks and sessions (tables `runs`, `tasks`, `sessions`)");
        let mut tx = self.pool.begin().await.map_err(&error)?;
        let run: RunId = match run {
            Ok(run) => run,
            Err(spec) => sqlx::query_scalar("INSERT INTO runs (environment, config) VALUES ($1, $2) RETURNING id")
                .bind(&spec.environment)
                .bind(spec.config.to_string())
                .fetch_one(&mut *tx)
                .await
                .map_err(&error)?,
        };
        // Arrays bound whole: one statement of one shape for any number of rows.
        let indexes: Vec<i64> = tasks.iter().map(|t| t.index as i64).collect();
        let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
        let rows: Vec<String> = tasks.iter().map(|t| t.row.to_string()).collect();
        sqlx::query(
            "INSERT INTO tasks (run_id, task_index, task_id, row)
             SELECT $1, * FROM UNNEST($2::bigint[], $3::text[], $4::text[])",
        )
        .bind(run)
        .bind(&indexes)
        .bind(&ids)
        .bind(&rows)
        .execute(&mut *tx)
        .await
        .map_err(&error)?;
        // Ids come from the column's sequence before the insert, so they are known in the order
        // of `sessions` without relying on the order RETURNING gives.
        let mut ids: Vec<i64> =
            sqlx::query_scalar("SELECT nextval(pg_get_serial_sequence('sessions', 'id')) FROM generate_series(1, $1)")
                .bind(sessions.len() as i64)
                .fetch_all(&mut *tx)
                .await
                .map_err(&error)?;
        ids.sort_unstable();
        let (owner, lease) = match owner {
            Some(o) => (Some(o.id.as_str()), lease_ms(o)),
            None => (None, 0),
        };
        let fence = if owner.is_some() { Fence(1) } else { Fence::UNCLAIMED };
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
        .execute(&mut *tx)
        .await
        .map_err(&error)?;
        tx.commit().await.map_err(&error)?;
        Ok((run, ids.into_iter().map(|session| Claim { session, fence }).collect()))
    }

    pub(crate) async fn claim(&self, run: RunId, owner: &Owner, limit: usize) -> Result<Claimed, StoreError> {
        let error = self.error(&format!("claiming sessions of run {run} for {} (table `sessions`)", owner.id));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut tx = self.pool.begin().await.map_err(&error)?;
        // The rows are picked and locked in a CTE (always run once, since it locks), passing over
        // rows another claimer or a writer holds; the update then raises each one's fence.
        let mut claimed: Vec<(i64, i64)> = sqlx::query_as(concat!(
            "WITH picked AS (
                 SELECT id FROM sessions
                 WHERE run_id = $3 AND status = 'pending' AND (owner IS NULL OR lease_until < ",
            pg_now_ms!(),
            ")
                 ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED)
             UPDATE sessions s SET owner = $1, lease_until = ",
            pg_now_ms!(),
            " + $2, fence = s.fence + 1
             FROM picked WHERE s.id = picked.id
             RETURNING s.id, s.fence"
        ))
        .bind(&owner.id)
        .bind(lease_ms(owner))
        .bind(run)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await
        .map_err(&error)?;
        let held_elsewhere: i64 = sqlx::query_scalar(concat!(
            "SELECT COUNT(*) FROM sessions WHERE run_id = $1 AND status = 'pending'
             AND owner IS NOT NULL AND owner <> $2 AND lease_until >= ",
            pg_now_ms!()
        ))
        .bind(run)
        .bind(&owner.id)
        .fetch_one(&mut *tx)
        .await
        .map_err(&error)?;
        tx.commit().await.map_err(&error)?;
        // RETURNING gives no order.
        claimed.sort_unstable();
        let claims = claimed.into_iter().map(|(session, fence)| Claim { session, fence: Fence(fence) });
        Ok(Claimed { claims: claims.collect(), held_elsewhere: held_elsewhere as u64 })
    }
}
