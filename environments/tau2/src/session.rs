//! The Parley seams over a tau2 domain: [`Tau2Environment`] opens a session per task by
//! building a fresh world and applying the task's initial state (patches, set-up calls, the
//! recorded history); the session answers agent and user tool calls with tau2's exact outputs
//! and scores with tau2's evaluator. It never holds state beyond its one world.

use std::sync::Arc;

use async_trait::async_trait;
use parley_core::{EnvError, EnvSession, Environment, Message, Party, Reward, Task, Termination, ToolList, ToolOutput};
use serde_json::{Value, json};

use crate::domain::Shared;
use crate::prompt::STOP_TOOL;
use crate::score::{ScoreContext, score};
use crate::spec::TaskSpec;
use crate::toolkit::{Requestor, to_content};
use crate::world::World;

pub struct Tau2Environment {
    pub(crate) shared: Arc<Shared>,
}

#[async_trait]
impl Environment for Tau2Environment {
    fn name(&self) -> &str {
        &self.shared.name
    }

    async fn open(&self, task: &Task) -> Result<Box<dyn EnvSession>, EnvError> {
        Ok(Box::new(self.open_session(task)?))
    }

    /// A session's databases are built when it opens, and replayed and hashed when it is scored.
    fn computes(&self) -> bool {
        true
    }
}

impl Tau2Environment {
    /// [`Environment::open`] with the concrete session type (for its hashes).
    pub fn open_session(&self, task: &Task) -> Result<Tau2Session, EnvError> {
        let spec = match self.shared.specs.get(&task.id) {
            Some(spec) => spec.clone(),
            None => Arc::new(TaskSpec::parse(task.row.fields(), None).map_err(EnvError::new)?),
        };
        let mut world = World::new(self.shared.base.clone_box(), self.shared.catalog.clone(), self.shared.solo);
        world.set_state(&spec, &spec.history).map_err(|e| EnvError::new(format!("task {}: {e}", spec.id)))?;
        let user_tools = self.shared.user_tools.clone();
        let tools = match task.tools.is_empty() {
            true => self.shared.agent_tools.clone(),
            false => task.tools.clone(),
        };
        Ok(Tau2Session { world, tools, user_tools, spec, shared: self.shared.clone() })
    }
}

pub struct Tau2Session {
    world: World,
    tools: ToolList,
    user_tools: ToolList,
    spec: Arc<TaskSpec>,
    shared: Arc<Shared>,
}

impl Tau2Session {
    /// tau2's `get_db_hash` and `get_user_db_hash`: sha256 of each database's
    /// `json.dumps(model_dump(), sort_keys=True, default=str)` (`None` without a user database).
    pub fn db_hashes(&self) -> (Option<String>, Option<String>) {
        let known = self.shared.base_texts();
        (self.world.hash_with(Requestor::Assistant, known), self.world.hash_with(Requestor::User, known))
    }

    /// The canonical text behind [`Tau2Session::db_hashes`], for diffing two states.
    pub fn db_canonical(&self, user: bool) -> Option<String> {
        self.world.canonical(if user { Requestor::User } else { Requestor::Assistant })
    }
}

#[async_trait]
impl EnvSession for Tau2Session {
    fn tools(&self) -> &ToolList {
        &self.tools
    }

    fn user_tools(&self) -> &ToolList {
        &self.user_tools
    }

    /// tau2 has no schema check: its tools answer unknown names and bad arguments themselves
    /// (`Tool 'x' not found.`, Python's `TypeError`, pydantic's errors), and those answers are
    /// what its transcripts and its replay hold.
    fn answers_malformed_calls(&self) -> bool {
        true
    }

    async fn call(&mut self, party: Party, name: &str, arguments: &Value) -> Result<ToolOutput, EnvError> {
        let requestor = match party {
            Party::Agent => Requestor::Assistant,
            Party::User => Requestor::User,
        };
        if self.shared.solo && requestor == Requestor::Assistant && name == STOP_TOOL {
            // tau2's solo agent turns `done` into its stop message; it never reaches the world.
            return Ok(ToolOutput::ok("###STOP###"));
        }
        let result = self.world.get_response(requestor, name, arguments);
        let (content, is_error) = to_content(&result);
        Ok(ToolOutput { content, is_error, write: self.world.writes(requestor, name) })
    }

    async fn score(&mut self, transcript: &[Message], termination: Termination) -> Result<Reward, EnvError> {
        let ctx = ScoreContext {
            base: self.shared.base.as_ref(),
            catalog: &self.shared.catalog,
            spec: &self.spec,
            solo: self.shared.solo,
            judge: self.shared.judge.as_ref(),
        };
        let (db, user_db) = self.db_hashes();
        // The session's final databases as tau2's `get_db_hash` / `get_user_db_hash` give them, so
        // that a stored score says which state it judged.
        Ok(score(&ctx, transcript, termination).await?.with("db_hashes", json!({"db": db, "user_db": user_db})))
    }
}
