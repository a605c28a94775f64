//! Per-rollout policy URLs for `/run`: a trainer that captures tokens in a proxy of its own
//! (rLLM's model gateway, verifiers' interception server) hands each rollout the URL the agent
//! must call, in the row's `policy_base_url`. The field is taken out of the row before it is
//! recorded or echoed; the agent for that URL is the service's own agent pointed there, kept for
//! later rollouts to the same URL. The simulated user and the judge never use it.
//!
//! Any client can name any URL, so the service's API key goes only to URLs the operator trusts
//! with it (`--policy-url-allow PREFIX`); others are called without a key, and what they answer
//! is never quoted back to the client.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use parley_core::Agent;
use parley_core::url::NotABase;
use parley_runtime::{Runtime, UsageError, usage};
use serde_json::Value;

/// The row field that names the rollout's policy.
pub const FIELD: &str = "policy_base_url";
/// Agents kept, one per URL, the oldest let go first: a proxy that gives every session a URL of
/// its own must not grow the service without bound.
const KEPT: usize = 1024;

/// The agents made for policy URLs so far.
#[derive(Default)]
pub(crate) struct Policies {
    agents: Mutex<Kept>,
    /// URL prefixes trusted with the service's key.
    trusted: Vec<String>,
}

/// Agents by URL, and the URLs in the order they were first asked for.
#[derive(Default)]
struct Kept {
    agents: HashMap<String, Arc<dyn Agent>>,
    order: VecDeque<String>,
}

impl Policies {
    /// Policies whose URLs starting with one of `trusted` get the service's key.
    pub(crate) fn new(trusted: Vec<String>) -> Policies {
        Policies { agents: Mutex::default(), trusted }
    }

    /// Whether the service's key goes to `url`.
    pub(crate) fn trusted(&self, url: &str) -> bool {
        self.trusted.iter().any(|prefix| url.starts_with(prefix.as_str()))
    }

    /// The agent that talks to the policy at `url`.
    pub(crate) fn agent(&self, runtime: &Runtime, url: &str) -> Result<Arc<dyn Agent>, UsageError> {
        if let Ok(kept) = self.agents.lock()
            && let Some(agent) = kept.agents.get(url)
        {
            return Ok(Arc::clone(agent));
        }
        let agent = runtime.policy_agent(url, self.trusted(url))?;
        if let Ok(mut kept) = self.agents.lock() {
            let Kept { agents, order } = &mut *kept;
            if agents.insert(url.to_owned(), Arc::clone(&agent)).is_none() {
                order.push_back(url.to_owned());
            }
            while order.len() > KEPT {
                if let Some(oldest) = order.pop_front() {
                    agents.remove(&oldest);
                }
            }
        }
        Ok(agent)
    }
}

/// Takes the policy URL out of a row, when it names one.
pub(crate) fn take(row: &mut Value) -> Result<Option<String>, UsageError> {
    let Some(value) = row.as_object_mut().and_then(|m| m.remove(FIELD)) else { return Ok(None) };
    let url = match value {
        Value::Null => return Ok(None),
        Value::String(url) => url,
        other => return Err(not_a_url(&other)),
    };
    match parley_core::url::base(&url).map(|_| ()) {
        Ok(()) => Ok(Some(url)),
        Err(NotABase::NotHttp) => Err(not_a_url(&Value::String(url))),
        Err(NotABase::Credentials(without)) => {
            Err(usage(parley_core::url::credentials_refused(&format!("`{FIELD}`"), &without)))
        }
    }
}

/// What a row's policy field must be, and what it was instead.
fn not_a_url(value: &Value) -> UsageError {
    usage(format!(
        "`{FIELD}` is the base URL of the rollout's policy (http://... or https://..., ending before \
         /chat/completions), not {value}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_field_leaves_the_row() {
        let mut row = json!({"id": 1, FIELD: "http://127.0.0.1:9/sessions/a/v1"});
        assert_eq!(take(&mut row).unwrap().as_deref(), Some("http://127.0.0.1:9/sessions/a/v1"));
        assert_eq!(row, json!({"id": 1}));
        assert_eq!(take(&mut row).unwrap(), None);
        let err = take(&mut json!({FIELD: 7})).unwrap_err();
        assert!(err.to_string().contains(FIELD), "{err}");
        assert!(take(&mut json!({FIELD: "ftp://x"})).is_err());
        // A user part is refused, and the error names the URL without it.
        let err = take(&mut json!({FIELD: "http://u:hunter2@10.0.0.7:9/v1"})).unwrap_err().to_string();
        assert!(err.contains("`http://10.0.0.7:9/v1`") && !err.contains("hunter2"), "{err}");
    }
}
