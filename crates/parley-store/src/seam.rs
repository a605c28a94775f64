//! The [`SessionStore`] seam, written once for both stores: each of its calls is the store's
//! own method for the job (creating sessions, claims, the run's end) or its writer handle (turns
//! and sessions' ends), which have the same names and signatures on both.

use std::sync::Arc;

use async_trait::async_trait;
use parley_core::{
    Claim, Owner, RunId, RunSpec, RunStatus, SessionId, SessionOutcome, SessionSpec, SessionStore, StoreError, Task,
    TurnRecord,
};

use crate::{PgStore, SqliteStore};

macro_rules! session_store {
    ($($store:ty),*) => {$(
        #[async_trait]
        impl SessionStore for $store {
            async fn create_run(
                &self,
                spec: &RunSpec,
                tasks: &[Arc<Task>],
                sessions: &[SessionSpec],
            ) -> Result<(RunId, Vec<SessionId>), StoreError> {
                let (run, claims) = self.insert_sessions(Err(spec), tasks, sessions, None).await?;
                Ok((run, claims.into_iter().map(|c| c.session).collect()))
            }

            async fn create_claimed_run(
                &self,
                spec: &RunSpec,
                tasks: &[Arc<Task>],
                sessions: &[SessionSpec],
                owner: &Owner,
            ) -> Result<(RunId, Vec<Claim>), StoreError> {
                self.insert_sessions(Err(spec), tasks, sessions, Some(owner)).await
            }

            async fn claim_sessions(&self, run: RunId, owner: &Owner, limit: usize) -> Result<Vec<Claim>, StoreError> {
                self.claim(run, owner, limit).await
            }

            async fn renew_claims(&self, owner: &Owner) -> Result<u64, StoreError> {
                self.renew(owner).await
            }

            async fn release_claims(&self, owner: &Owner) -> Result<u64, StoreError> {
                self.release(owner).await
            }

            async fn release_claim(&self, claim: Claim) -> Result<(), StoreError> {
                self.release_one(claim).await
            }

            async fn commit_turn(&self, claim: Claim, turn: TurnRecord) -> Result<(), StoreError> {
                self.writer.write(claim, turn, None).await
            }

            async fn finish_session(
                &self,
                claim: Claim,
                last_turn: TurnRecord,
                outcome: &SessionOutcome,
            ) -> Result<(), StoreError> {
                self.writer.write(claim, last_turn, Some(outcome.clone())).await
            }

            async fn finish_run(&self, run: RunId, status: RunStatus) -> Result<(), StoreError> {
                self.set_run_status(run, status).await
            }
        }
    )*};
}

session_store!(SqliteStore, PgStore);
