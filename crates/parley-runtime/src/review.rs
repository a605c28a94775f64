//! The judged review of a simulated user (`--user-review judge`): any user, reviewed by its own
//! rules and then by the judge ([`parley_core::review::judge`]), whose one call per session goes
//! through the store's verdict cache, so a rescore asks nothing again.

use std::sync::Arc;

use async_trait::async_trait;
use parley_core::review::{UserFault, judge};
use parley_core::{Message, ModelClient, Task, ToolSpec, UserFailure, UserSimulator, UserTurn, UserView};

/// A user whose review the judge completes.
pub struct Judged {
    inner: Arc<dyn UserSimulator>,
    judge: Arc<dyn ModelClient>,
    model: String,
}

impl Judged {
    pub fn new(inner: Arc<dyn UserSimulator>, judge: Arc<dyn ModelClient>, model: String) -> Judged {
        Judged { inner, judge, model }
    }
}

#[async_trait]
impl UserSimulator for Judged {
    async fn respond(&self, view: UserView<'_>) -> Result<UserTurn, UserFailure> {
        self.inner.respond(view).await
    }

    fn stopped_too_early(&self, messages: &[Message], writes: &[u32]) -> bool {
        self.inner.stopped_too_early(messages, writes)
    }

    fn instructions(&self, task: &Task, tools: &[ToolSpec]) -> Option<String> {
        self.inner.instructions(task, tools)
    }

    /// The rules' faults, then the judge's, in the order of the messages they name. A judge
    /// that fails leaves its rules unanswered for this session (and says so in the log): the
    /// session's own result stands.
    async fn review(&self, task: &Task, transcript: &[Message], tools: &[ToolSpec]) -> Vec<UserFault> {
        let mut faults = self.inner.review(task, transcript, tools).await;
        let Some(told) = self.inner.instructions(task, tools) else { return faults };
        match judge::review(&*self.judge, &self.model, transcript, &told).await {
            Ok(judged) => faults.extend(judged),
            Err(e) => tracing::warn!(task = task.index, error = %e.message, "the judged user review failed"),
        }
        faults.sort_by_key(|f| f.seq);
        faults
    }
}
