//! The tool catalogue of a domain, read from `derived/tools.openai.json` in the data folder:
//! every tool's exact OpenAI schema, which toolkit owns it (agent or user), its tau2 class
//! name (for Python-style error messages) and whether it mutates state (what replay re-runs
//! and what `ToolOutput.write` reports). It never embeds the data.

use parley_core::ToolSpec;
use serde_json::Value;

use crate::data::Data;
use crate::error::Tau2Error;
use crate::toolkit::Requestor;

#[derive(Debug, Clone)]
pub struct ToolInfo {
    pub spec: ToolSpec,
    /// tau2's toolkit class, e.g. `AirlineTools`.
    pub toolkit: String,
    /// read, write, think or generic.
    pub tool_type: String,
    pub mutates: bool,
    pub params: Vec<String>,
    pub required: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub agent: Vec<ToolInfo>,
    pub user: Vec<ToolInfo>,
}

impl Catalog {
    pub fn load(data: &Data, domain: &str) -> Result<Catalog, Tau2Error> {
        const FILE: &str = "derived/tools.openai.json";
        let all: Value = data.read_json(FILE)?;
        let bad = |message: String| data.parse_error(FILE, message);
        let entries = all
            .get(domain)
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("no tool list for domain `{domain}`")))?;
        let mut catalog = Catalog::default();
        for entry in entries {
            let schema = entry.get("openai_schema").ok_or_else(|| bad("a tool without openai_schema".into()))?;
            let spec = ToolSpec::from_openai_json(schema).ok_or_else(|| bad("a tool schema without a name".into()))?;
            let requestor = entry
                .get("requestor")
                .and_then(Value::as_str)
                .and_then(Requestor::parse)
                .ok_or_else(|| bad(format!("tool `{}` has no valid requestor", spec.name)))?;
            let params = spec
                .parameters
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
            let required = spec
                .parameters
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).map(String::from).collect())
                .unwrap_or_default();
            let tool_type = entry.get("tool_type").and_then(Value::as_str).unwrap_or("read").to_owned();
            let info = ToolInfo {
                toolkit: entry.get("toolkit").and_then(Value::as_str).unwrap_or_default().to_owned(),
                mutates: entry.get("mutates_state").and_then(Value::as_bool).unwrap_or(tool_type == "write"),
                tool_type,
                params,
                required,
                spec,
            };
            match requestor {
                Requestor::Assistant => catalog.agent.push(info),
                Requestor::User => catalog.user.push(info),
            }
        }
        Ok(catalog)
    }

    pub fn toolkit(&self, requestor: Requestor) -> &[ToolInfo] {
        match requestor {
            Requestor::Assistant => &self.agent,
            Requestor::User => &self.user,
        }
    }

    pub fn find(&self, requestor: Requestor, name: &str) -> Option<&ToolInfo> {
        self.toolkit(requestor).iter().find(|t| t.spec.name == name)
    }

    /// tau2's `Environment._has_tool`: either toolkit.
    pub fn has_tool(&self, name: &str) -> bool {
        self.find(Requestor::Assistant, name).is_some() || self.find(Requestor::User, name).is_some()
    }

    /// tau2's `is_mutating_tool`: the first toolkit that has it; unknown tools count as mutating.
    pub fn is_mutating(&self, name: &str) -> bool {
        self.find(Requestor::Assistant, name).or_else(|| self.find(Requestor::User, name)).is_none_or(|t| t.mutates)
    }

    pub fn has_user_toolkit(&self) -> bool {
        !self.user.is_empty()
    }

    /// The class name of a toolkit, for `AttributeError` messages.
    pub fn class(&self, requestor: Requestor) -> &str {
        self.toolkit(requestor).first().map(|t| t.toolkit.as_str()).unwrap_or("NoneType")
    }

    pub fn specs(&self, requestor: Requestor) -> Vec<ToolSpec> {
        self.toolkit(requestor).iter().map(|t| t.spec.clone()).collect()
    }
}
