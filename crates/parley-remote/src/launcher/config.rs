//! Reading NeMo Gym configs: the YAML files merged in order, the server instances they name,
//! and the config dict each started server reads from `NEMO_GYM_CONFIG_DICT`.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::error::RemoteError;

/// The four kinds of NeMo Gym server a config instance can be.
pub const SERVER_TYPES: [&str; 4] =
    ["responses_api_models", "resources_servers", "responses_api_agents", "environment_servers"];

/// One server instance of a config: `<name>: {<server_type>: {<implementation>: {...}}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    pub name: String,
    pub server_type: String,
    pub implementation: String,
}

/// Reads and deep-merges the YAML files, later files over earlier ones (Hydra's order).
/// Relative paths are looked up in the current directory first, then under `gym_root`.
pub fn load(paths: &[PathBuf], gym_root: &Path) -> Result<Value, RemoteError> {
    let mut merged = Value::Object(Map::new());
    for path in paths {
        let found = [path.to_path_buf(), gym_root.join(path)].into_iter().find(|p| p.is_file()).ok_or_else(|| {
            RemoteError::Config(format!(
                "config `{}` not found (looked in the current directory and under {})",
                path.display(),
                gym_root.display()
            ))
        })?;
        let text = std::fs::read_to_string(&found)
            .map_err(|e| RemoteError::Config(format!("reading `{}`: {e}", found.display())))?;
        let value: Value = serde_yaml_ng::from_str(&text)
            .map_err(|e| RemoteError::Config(format!("`{}` is not valid YAML: {e}", found.display())))?;
        if !value.is_object() && !value.is_null() {
            return Err(RemoteError::Config(format!("`{}` is not a mapping of server instances", found.display())));
        }
        merge(&mut merged, value);
    }
    Ok(merged)
}

/// Merges `overrides` over a loaded config.
pub fn load_value(config: &mut Value, overrides: Value) {
    merge(config, overrides);
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (k, v) in from {
                match into.get_mut(&k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        into.insert(k, v);
                    }
                }
            }
        }
        (into, from) if !from.is_null() => *into = from,
        _ => {}
    }
}

/// The server instances of a merged config, in the config's order.
pub fn instances(config: &Value) -> Vec<Instance> {
    let Some(top) = config.as_object() else { return Vec::new() };
    top.iter()
        .filter_map(|(name, value)| {
            let kinds = value.as_object()?;
            let (server_type, implementations) = kinds.iter().find(|(k, _)| SERVER_TYPES.contains(&k.as_str()))?;
            let implementation = implementations.as_object()?.keys().next()?.clone();
            Some(Instance { name: name.clone(), server_type: server_type.clone(), implementation })
        })
        .collect()
}

/// The agent instances of a merged config bound to the resources server `name` (by their
/// `resources_server: {name: ...}`), in the config's order: the names rows call it by in
/// `agent_ref.name`.
pub fn agents_of(config: &Value, name: &str) -> Vec<String> {
    instances(config)
        .into_iter()
        .filter(|i| i.server_type == "responses_api_agents")
        .filter(|i| {
            let bound = &config[&i.name][&i.server_type][&i.implementation]["resources_server"]["name"];
            bound.as_str() == Some(name)
        })
        .map(|i| i.name)
        .collect()
}

/// Sets `host` and `port` of an instance, as NeMo Gym's parent process does before spawning.
pub fn place(config: &mut Value, instance: &Instance, host: &str, port: u16) {
    if let Some(fields) = config
        .get_mut(&instance.name)
        .and_then(|v| v.get_mut(&instance.server_type))
        .and_then(|v| v.get_mut(&instance.implementation))
        .and_then(Value::as_object_mut)
    {
        fields.insert("host".into(), json!(host));
        fields.insert("port".into(), json!(port));
    }
}

/// The port an instance asks for, if its config pins one.
pub fn pinned_port(config: &Value, instance: &Instance) -> Option<u16> {
    let port = config.get(&instance.name)?.get(&instance.server_type)?.get(&instance.implementation)?.get("port")?;
    port.as_u64().and_then(|p| u16::try_from(p).ok())
}

/// The global keys a server reads from its config dict, filled as `gym env start` fills them.
pub fn fill_globals(config: &mut Value, host: &str, head_port: u16) {
    let Some(top) = config.as_object_mut() else { return };
    let head = top.entry("head_server").or_insert_with(|| json!({}));
    if let Some(head) = head.as_object_mut() {
        head.entry("host").or_insert_with(|| json!(host));
        head.entry("port").or_insert_with(|| json!(head_port));
    }
    top.entry("dry_run").or_insert(json!(false));
    top.entry("skip_venv_if_present").or_insert(json!(true));
    top.entry("default_host").or_insert_with(|| json!(host));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_and_places_instances() {
        let yaml = "a_server:\n  resources_servers:\n    example_multi_step: {entrypoint: app.py}\n\
                    an_agent:\n  responses_api_agents:\n    simple_agent: {entrypoint: app.py}\npolicy_model_name: x\n";
        let mut config: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let found = instances(&config);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].implementation, "example_multi_step");
        assert_eq!(found[1].server_type, "responses_api_agents");
        place(&mut config, &found[0], "127.0.0.1", 4242);
        assert_eq!(pinned_port(&config, &found[0]), Some(4242));
        fill_globals(&mut config, "127.0.0.1", 1);
        assert_eq!(config["head_server"]["port"], 1);
    }

    #[test]
    fn a_resources_servers_agents_are_those_bound_to_it() {
        let yaml = "a_server:\n  resources_servers:\n    example_multi_step: {entrypoint: app.py}\n\
                    b_server:\n  resources_servers:\n    example_single_tool_call: {entrypoint: app.py}\n\
                    a_agent:\n  responses_api_agents:\n    simple_agent:\n      resources_server: {type: resources_servers, name: a_server}\n\
                    b_agent:\n  responses_api_agents:\n    simple_agent:\n      resources_server: {type: resources_servers, name: b_server}\n";
        let config: Value = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(agents_of(&config, "a_server"), ["a_agent"]);
        assert_eq!(agents_of(&config, "b_server"), ["b_agent"]);
        assert!(agents_of(&config, "c_server").is_empty());
    }

    #[test]
    fn later_files_win() {
        let mut a = json!({"x": {"y": 1, "z": 2}});
        merge(&mut a, json!({"x": {"y": 3}}));
        assert_eq!(a, json!({"x": {"y": 3, "z": 2}}));
    }
}
