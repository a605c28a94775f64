//! The environment a run asks for, built from its settings: the built-in multi-step domain, NeMo
//! Gym resources servers (started from a config, or already running), or MCP servers. What was
//! started for it is stopped by [`Environments::shutdown`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parley_core::{Environment, UserSimulator};
use parley_remote::{
    ExactMatch, GymnasiumEnvironment, GymnasiumUser, LaunchOptions, MatchMode, McpEnvironment, McpServerSpec,
    NemoGymEnvironment, NemoGymServers, ServerOptions,
};

use crate::error::usage;
use crate::settings::RunSettings;

/// The environment of a run, and whatever runs behind it.
pub struct Environments {
    pub environment: Arc<dyn Environment>,
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
            ..ServerOptions::default()
        };
        let mut out = Environments {
            environment: Arc::new(environment_multi_step::MultiStep),
            user: None,
            servers: None,
            mcp: None,
        };
        match settings.env.as_str() {
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
