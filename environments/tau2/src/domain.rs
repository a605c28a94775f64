//! A loaded domain: its tasks (as Parley tasks), splits, system prompt, tool catalogue and
//! initial world, and the [`Environment`] that opens sessions on it. Loading reads everything
//! from the [`Data`] and validates every task up front; nothing is read afterwards.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use parley_core::{Environment, Message, ModelClient, Task, ToolList, ToolSpec};
use serde_json::Value;

use crate::catalog::Catalog;
use crate::data::Data;
use crate::domains::load_state;
use crate::error::Tau2Error;
use crate::prompt;
use crate::pyjson::Py;
use crate::score::Judge;
use crate::session::Tau2Environment;
use crate::spec::TaskSpec;
use crate::toolkit::{DomainState, Requestor};
use crate::view::Known;

/// The domains this crate implements.
pub const DOMAINS: [&str; 4] = ["mock", "airline", "retail", "telecom"];

/// The judge model tau2 uses for NL assertions (`DEFAULT_LLM_NL_ASSERTIONS`).
pub const DEFAULT_JUDGE_MODEL: &str = "gpt-4.1-2025-04-14";

/// How to load a domain.
#[derive(Clone, Default)]
pub struct DomainOptions {
    /// tau2's solo mode: the agent works a ticket alone, may call the user's tools, and stops
    /// with the `done` tool. Only mock and telecom have solo policies.
    pub solo: bool,
    /// The NL-assertion judge: any OpenAI-compatible endpoint.
    pub judge: Option<Arc<dyn ModelClient>>,
    /// The judge's model; [`DEFAULT_JUDGE_MODEL`] when `None`.
    pub judge_model: Option<String>,
}

impl std::fmt::Debug for DomainOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DomainOptions")
            .field("solo", &self.solo)
            .field("judge", &self.judge.as_ref().map(|j| j.endpoint().to_owned()))
            .field("judge_model", &self.judge_model)
            .finish()
    }
}

/// Sizes for a `parley envs` listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DomainCounts {
    pub tools: usize,
    pub user_tools: usize,
    pub tasks: usize,
}

/// What every session of a domain shares.
pub(crate) struct Shared {
    pub name: String,
    pub base: Box<dyn DomainState>,
    pub catalog: Arc<Catalog>,
    pub specs: HashMap<String, Arc<TaskSpec>>,
    pub solo: bool,
    pub judge: Option<Judge>,
    /// The agent's tools, for a task that offers none of its own, and the user's (none in solo
    /// mode): one list each for every session of the domain.
    pub agent_tools: ToolList,
    pub user_tools: ToolList,
    /// The canonical texts of the base's records, written on the first hash of a session's
    /// databases: every later hash writes only the records its session changed.
    pub base_texts: OnceLock<Known>,
}

impl Shared {
    pub fn base_texts(&self) -> &Known {
        self.base_texts.get_or_init(|| Known::of(self.base.as_ref()))
    }
}

pub struct Domain {
    pub name: String,
    pub tasks: Vec<Task>,
    /// Split name to task ids. Telecom ships only `tasks_small.json` here; its one split is
    /// `small` (all 20 tasks).
    pub splits: BTreeMap<String, Vec<String>>,
    policy: String,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain").field("name", &self.name).field("tasks", &self.tasks.len()).finish()
    }
}

/// Loads a domain (`mock`, `airline`, `retail` or `telecom`) from tau2's data.
pub fn load(data: &Data, name: &str, options: DomainOptions) -> Result<Domain, Tau2Error> {
    if !DOMAINS.contains(&name) {
        return Err(Tau2Error::UnknownDomain(name.to_owned()));
    }
    let policy = prompt::policy(data, name, options.solo)?.ok_or_else(|| {
        Tau2Error::Invalid(format!(
            "the {name} domain has no solo variant (tau2 ships solo policies for mock and telecom)"
        ))
    })?;
    let catalog = Arc::new(Catalog::load(data, name)?);
    let base = load_state(name, data)?;

    let task_file = format!("{name}/{}", if name == "telecom" { "tasks_small.json" } else { "tasks.json" });
    let text = data.read(&task_file)?;
    let rows: Vec<Value> = serde_json::from_str(&text).map_err(|e| data.parse_error(&task_file, e))?;
    let ordered: Vec<Py> = match Py::parse(&text) {
        Ok(Py::List(items)) => items,
        _ => Vec::new(),
    };
    let bad = |message: String| data.parse_error(&task_file, message);

    let mut agent_tools = catalog.specs(Requestor::Assistant);
    if options.solo {
        agent_tools.extend(catalog.specs(Requestor::User));
        agent_tools.push(ToolSpec {
            name: prompt::STOP_TOOL.into(),
            description: "Call this function when you are done with the task.".into(),
            parameters: serde_json::json!({"properties": {}, "title": "parameters", "type": "object"}),
            strict: false,
        });
    }
    // One list for every task of the domain.
    let agent_tools = ToolList::from(agent_tools);
    let mut tasks = Vec::new();
    let mut specs = HashMap::new();
    for (index, row) in rows.iter().enumerate() {
        let spec = TaskSpec::parse(row, ordered.get(index)).map_err(bad)?;
        if options.solo && !solo_valid(&spec) {
            continue;
        }
        let messages = if options.solo {
            let ticket = spec.ticket.clone().unwrap_or_default();
            let mut m = vec![Message::system(prompt::solo_system_prompt(&policy, &ticket))];
            m.extend(spec.history.iter().cloned());
            m
        } else if spec.history.is_empty() {
            vec![Message::assistant(prompt::GREETING)]
        } else {
            spec.history.clone()
        };
        tasks.push(Task { index, id: spec.id.clone(), messages, tools: agent_tools.clone(), row: row.clone().into() });
        specs.insert(spec.id.clone(), Arc::new(spec));
    }

    let mut splits = BTreeMap::new();
    if name == "telecom" {
        splits.insert("small".to_owned(), tasks.iter().map(|t| t.id.clone()).collect());
    } else {
        let all: BTreeMap<String, Vec<String>> = data.read_json(&format!("{name}/split_tasks.json"))?;
        for (split, ids) in all {
            splits.insert(split, ids.into_iter().filter(|id| specs.contains_key(id)).collect());
        }
    }

    let judge = options.judge.clone().map(|client| Judge {
        client,
        model: options.judge_model.clone().unwrap_or_else(|| DEFAULT_JUDGE_MODEL.to_owned()),
    });
    let shared = Shared {
        name: name.to_owned(),
        base,
        agent_tools: catalog.specs(Requestor::Assistant).into(),
        user_tools: match options.solo {
            true => ToolList::default(),
            false => catalog.specs(Requestor::User).into(),
        },
        catalog,
        specs,
        solo: options.solo,
        judge,
        base_texts: OnceLock::new(),
    };
    Ok(Domain {
        name: name.to_owned(),
        tasks,
        splits,
        policy: if options.solo { policy } else { prompt::system_prompt(&policy) },
        shared: Arc::new(shared),
    })
}

/// tau2's `LLMSoloAgent.check_valid_task`.
fn solo_valid(spec: &TaskSpec) -> bool {
    use parley_core::Role;
    if !spec.history.is_empty() {
        return spec
            .history
            .iter()
            .all(|m| m.role != Role::User && (m.role != Role::Assistant || !m.tool_calls.is_empty()));
    }
    spec.ticket.is_some() && spec.criteria.as_ref().and_then(|c| c.actions.as_ref()).is_some_and(|a| !a.is_empty())
}

impl Domain {
    /// The agent's system prompt as tau2's `LLMAgent` builds it: its instruction and the domain
    /// policy. In solo mode, the domain policy alone (each task's prompt, with its ticket, is
    /// the first of its messages).
    pub fn policy(&self) -> &str {
        &self.policy
    }

    pub fn environment(&self) -> Arc<dyn Environment> {
        Arc::new(self.tau2_environment())
    }

    /// The environment with its concrete type, whose sessions expose their database hashes.
    pub fn tau2_environment(&self) -> Tau2Environment {
        Tau2Environment { shared: self.shared.clone() }
    }

    pub fn counts(&self) -> DomainCounts {
        DomainCounts {
            tools: self.shared.catalog.agent.len(),
            user_tools: self.shared.catalog.user.len(),
            tasks: self.tasks.len(),
        }
    }

    /// The user's tools (dual control): mock and telecom have some.
    pub fn user_tools(&self) -> Vec<ToolSpec> {
        self.shared.catalog.specs(Requestor::User)
    }

    /// The tasks of one split, in file order.
    pub fn split(&self, split: &str) -> Option<Vec<&Task>> {
        let ids = self.splits.get(split)?;
        Some(self.tasks.iter().filter(|t| ids.contains(&t.id)).collect())
    }
}
