//! Any environment with a composite reward in place of (or around) its own scorer: the tools
//! and state stay the environment's; the score is the composite's, which may weigh the
//! environment's own reward as its `environment` component.

use std::sync::Arc;

use async_trait::async_trait;
use parley_core::{EnvError, EnvSession, Environment, Message, Party, Reward, Task, Termination, ToolList, ToolOutput};
use serde_json::Value;

use crate::{Composite, Context};

/// An environment scored by a [`Composite`].
pub struct RewardedEnvironment {
    inner: Arc<dyn Environment>,
    composite: Arc<Composite>,
}

impl RewardedEnvironment {
    pub fn new(inner: Arc<dyn Environment>, composite: Arc<Composite>) -> RewardedEnvironment {
        RewardedEnvironment { inner, composite }
    }
}

#[async_trait]
impl Environment for RewardedEnvironment {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn check(&self, task: &Task) -> Result<(), String> {
        self.composite.check(task)?;
        // The environment's own verifier reads the row only when its reward is weighed.
        if self.composite.needs_environment() {
            self.inner.check(task)?;
        }
        Ok(())
    }

    async fn open(&self, task: &Task) -> Result<Box<dyn EnvSession>, EnvError> {
        let inner = self.inner.open(task).await?;
        Ok(Box::new(RewardedSession { inner, composite: self.composite.clone(), task: task.clone() }))
    }

    /// As its environment: the rewards weigh a transcript's text, or await a judge.
    fn computes(&self) -> bool {
        self.inner.computes()
    }
}

struct RewardedSession {
    inner: Box<dyn EnvSession>,
    composite: Arc<Composite>,
    task: Task,
}

#[async_trait]
impl EnvSession for RewardedSession {
    fn tools(&self) -> &ToolList {
        self.inner.tools()
    }

    fn user_tools(&self) -> &ToolList {
        self.inner.user_tools()
    }

    async fn call(&mut self, party: Party, name: &str, arguments: &Value) -> Result<ToolOutput, EnvError> {
        self.inner.call(party, name, arguments).await
    }

    async fn score(&mut self, transcript: &[Message], termination: Termination) -> Result<Reward, EnvError> {
        let own = if self.composite.needs_environment() {
            Some(self.inner.score(transcript, termination).await?)
        } else {
            None
        };
        let cx = Context { task: &self.task, transcript, termination, env_reward: own.as_ref() };
        self.composite.score(&cx).await.map_err(|e| EnvError::new(format!("scoring task `{}`: {e}", self.task.id)))
    }

    async fn close(&mut self) {
        self.inner.close().await;
    }
}

/// An environment of tasks alone: no tools of its own, nothing to verify. A run of it is scored
/// by its composite reward, for single-step tasks (a question, an answer) and multi-turn ones
/// with a simulated user.
#[derive(Debug, Clone, Copy, Default)]
pub struct TasksOnly;

struct TasksOnlySession;

#[async_trait]
impl Environment for TasksOnly {
    fn name(&self) -> &str {
        "custom"
    }

    async fn open(&self, _task: &Task) -> Result<Box<dyn EnvSession>, EnvError> {
        Ok(Box::new(TasksOnlySession))
    }
}

#[async_trait]
impl EnvSession for TasksOnlySession {
    fn tools(&self) -> &ToolList {
        ToolList::none()
    }

    async fn call(&mut self, _party: Party, name: &str, _arguments: &Value) -> Result<ToolOutput, EnvError> {
        // The engine refuses calls of tools the session does not offer before they get here;
        // an answer rather than an error keeps a stray one from failing the session.
        Ok(ToolOutput::error(format!("no tool `{name}` in this environment")))
    }

    async fn score(&mut self, _transcript: &[Message], _termination: Termination) -> Result<Reward, EnvError> {
        Err(EnvError::new("the environment has no verifier of its own; give the run a [[reward]]"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Endpoints, RewardSpec};
    use serde_json::json;

    /// An environment whose own verifier gives 0.5 with a field of its own.
    struct Verified;

    struct VerifiedSession;

    #[async_trait]
    impl Environment for Verified {
        fn name(&self) -> &str {
            "verified"
        }

        async fn open(&self, _task: &Task) -> Result<Box<dyn EnvSession>, EnvError> {
            Ok(Box::new(VerifiedSession))
        }
    }

    #[async_trait]
    impl EnvSession for VerifiedSession {
        fn tools(&self) -> &ToolList {
            ToolList::none()
        }

        async fn call(&mut self, _: Party, _: &str, _: &Value) -> Result<ToolOutput, EnvError> {
            Ok(ToolOutput::ok("ok"))
        }

        async fn score(&mut self, _: &[Message], _: Termination) -> Result<Reward, EnvError> {
            Ok(Reward::new(0.5).with("accuracy", 0.5))
        }
    }

    fn composite(specs: &[&str]) -> Arc<Composite> {
        let specs: Vec<RewardSpec> = specs.iter().map(|s| s.parse().unwrap()).collect();
        Arc::new(Composite::build(&specs, None, None, &Endpoints::default()).unwrap())
    }

    #[tokio::test]
    async fn the_environments_own_reward_is_a_component_and_its_fields_stay() {
        let owned = crate::test_support::cx(&json!({"expected_answer": "4"}), "4");
        let env = RewardedEnvironment::new(Arc::new(Verified), composite(&["environment:weight=2", "exact"]));
        let mut session = env.open(&owned.task).await.unwrap();
        let reward = session.score(&owned.transcript, Termination::AgentStop).await.unwrap();
        assert_eq!(reward.value, 2.0);
        assert_eq!(reward.breakdown["reward_components"], json!({"environment": 1.0, "exact": 1.0}));
        assert_eq!(reward.breakdown["accuracy"], json!(0.5), "the verifier's fields are kept");
    }

    #[tokio::test]
    async fn a_component_that_cannot_score_fails_the_score_and_tasks_only_has_no_verifier() {
        let owned = crate::test_support::cx(&json!({}), "4");
        let env = RewardedEnvironment::new(Arc::new(TasksOnly), composite(&["math"]));
        let mut session = env.open(&owned.task).await.unwrap();
        let err = session.score(&owned.transcript, Termination::AgentStop).await.unwrap_err();
        assert!(err.message.contains("expected_answer"), "{err}");
        let env = RewardedEnvironment::new(Arc::new(TasksOnly), composite(&["environment"]));
        let mut session = env.open(&owned.task).await.unwrap();
        assert!(session.score(&owned.transcript, Termination::AgentStop).await.is_err());
        assert!(session.tools().is_empty());
    }
}
