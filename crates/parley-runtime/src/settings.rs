//! A run's settings, resolved and typed: what every front end hands the runtime. They are stored
//! with the run (so `resume`, `rescore`, `replay` and `fork` need only its id), which is why they
//! never hold a secret: API keys are named by their variable, never read here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use parley_core::url::NotABase;
use parley_core::{Limits, Sampling};
use parley_llm::EndpointConfig;
use parley_store::DbLocation;
use serde::{Deserialize, Serialize};

use crate::environment::EnvKind;
use crate::error::{UsageError, usage};

/// Everything a run needs, resolved and checked.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSettings {
    pub env: EnvKind,
    #[serde(default)]
    pub agent: AgentKind,
    #[serde(default)]
    pub tau2: Tau2Settings,
    #[serde(default)]
    pub remote: RemoteSettings,
    pub tasks: Option<PathBuf>,
    /// At most this many tasks: generated for multi-step without `tasks`, else the first of the
    /// file or the tau2 split. `None`: all of them ([`defaults::NUM_TASKS`] generated).
    pub num_tasks: Option<usize>,
    /// `None`: start the stub in-process.
    pub base_url: Option<String>,
    /// More base URLs of the same policy (its data-parallel ranks): each session stays on one of
    /// `base_url` and these, chosen by hashing the session.
    #[serde(default)]
    pub ranks: Vec<String>,
    pub model: String,
    pub api_key_env: Option<String>,
    pub concurrency: usize,
    pub endpoint_concurrency: usize,
    pub trials: u32,
    /// The store: a SQLite file or a PostgreSQL URL, stored without the URL's password.
    pub db: DbLocation,
    pub out: Option<PathBuf>,
    pub max_steps: u32,
    pub max_errors: u32,
    pub session_timeout_secs: f64,
    pub call_timeout_secs: f64,
    pub max_retries: u32,
    pub system_prompt: Option<String>,
    pub sampling: Sampling,
    pub raw_calls: bool,
    #[serde(default)]
    pub tool_mode: ToolMode,
    #[serde(default)]
    pub greeting: Option<String>,
    #[serde(default)]
    pub user: UserSettings,
    #[serde(default = "defaults::max_turns")]
    pub max_turns: u32,
    #[serde(default = "defaults::stop_grace")]
    pub stop_grace: u32,
    #[serde(default = "defaults::max_tool_output")]
    pub max_tool_output: usize,
    #[serde(default = "defaults::max_response_bytes")]
    pub max_response_bytes: usize,
    #[serde(default = "defaults::shutdown_grace")]
    pub shutdown_grace_secs: f64,
    #[serde(default)]
    pub bad_rows: BadRows,
    /// Whether earlier turns' reasoning goes back to the model.
    #[serde(default)]
    pub reasoning: ReasoningMode,
    /// Whether the agent's calls ask the policy for token ids and log-probs and send each turn
    /// back with its own (a vLLM server that serves an RL trainer).
    #[serde(default)]
    pub token_ids: bool,
    /// The composite reward; with no components the environment's own scorer gives the reward.
    #[serde(default)]
    pub reward: RewardSettings,
    /// How the front end that recorded the run drives its sessions (a service's, for one it
    /// recorded): a resume drives them the same way.
    #[serde(default)]
    pub front: Front,
    /// How the run spends its sessions on its tasks: every task × trial, or `budget` sessions
    /// drawn from the tasks.
    #[serde(default)]
    pub sampler: crate::curriculum::Sampler,
    /// Sessions drawn from the tasks instead of every task × trial.
    #[serde(default)]
    pub budget: Option<u64>,
}

/// How a front end wants its sessions driven, beyond the run's settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Front {
    /// The agent takes each task row's sampling settings over the run's (a trainer sets them
    /// per request).
    pub sampling_from_row: bool,
    /// The policy's endpoints serve the agent alone: a simulated user and a judge get endpoints
    /// of their own or none, never the policy's (a trainer's policy server rejects their sampling
    /// settings, and their calls are not the policy's to train on).
    pub policy_for_agent_only: bool,
}

/// A composite reward: its components (`[[reward]]` in `parley.toml`, `--reward` on the command
/// line) and the clamp of their weighted sum.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RewardSettings {
    #[serde(default)]
    pub components: Vec<parley_rewards::RewardSpec>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// The values a setting takes when neither a flag nor the settings file gives it.
pub mod defaults {
    use parley_core::Limits;

    pub const MODEL: &str = "parley-stub";
    pub const DB: &str = "parley.db";
    pub const NUM_TASKS: usize = 100;
    pub const CONCURRENCY: usize = 64;
    pub const TRIALS: u32 = 1;
    pub const SESSION_TIMEOUT_SECS: f64 = 600.0;
    pub const CALL_TIMEOUT_SECS: f64 = 120.0;
    pub const MAX_RETRIES: u32 = 3;

    pub fn max_turns() -> u32 {
        Limits::default().max_turns
    }

    pub fn stop_grace() -> u32 {
        Limits::default().stop_grace
    }

    pub fn max_tool_output() -> usize {
        Limits::default().max_tool_output
    }

    pub fn max_response_bytes() -> usize {
        16 << 20
    }

    pub fn shutdown_grace() -> f64 {
        30.0
    }
}

/// Which agent plays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum AgentKind {
    /// A model with tools.
    #[default]
    ToolCalling,
    /// Plays each tau2 task's gold actions; no model.
    Oracle,
}

/// Which of a tau2 domain's tasks run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Every task of the domain.
    #[default]
    Base,
    Test,
    Train,
    /// Telecom's one split (its 20 tasks).
    Small,
}

impl Split {
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Base => "base",
            Split::Test => "test",
            Split::Train => "train",
            Split::Small => "small",
        }
    }
}

/// tau2's data, split and judge.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Tau2Settings {
    pub split: Option<Split>,
    pub data_dir: Option<PathBuf>,
    pub judge_base_url: Option<String>,
    pub judge_model: Option<String>,
    pub judge_api_key_env: Option<String>,
}

/// The judge a run's rewards and tau2's NL assertions ask: the judge flags, else the agent's
/// endpoint, key and model. The one place that rule is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judge {
    /// `None`: the run names no endpoint (it drives the in-process stub).
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
    pub model: String,
}

impl RunSettings {
    pub fn judge(&self) -> Judge {
        let t = &self.tau2;
        Judge {
            base_url: t.judge_base_url.clone().or_else(|| self.base_url.clone()),
            api_key_env: t.judge_api_key_env.clone().or_else(|| self.api_key_env.clone()),
            model: t.judge_model.clone().unwrap_or_else(|| self.model.clone()),
        }
    }
}

/// The variable `--data-dir` reads when the flag is not given.
pub const TAU2_DATA_VARIABLE: &str = "PARLEY_TAU2_DATA";

impl Tau2Settings {
    /// tau2's data: the folder named (checked to be one), else the copy built into Parley. A run
    /// recorded without a folder (by a Parley whose flag did not yet read the variable) finds it
    /// where its front end did, in [`TAU2_DATA_VARIABLE`].
    pub fn data(&self) -> Result<environment_tau2::Data, UsageError> {
        let recorded_without = || std::env::var_os(TAU2_DATA_VARIABLE).filter(|d| !d.is_empty()).map(PathBuf::from);
        let dir = self.data_dir.clone().or_else(recorded_without);
        environment_tau2::Data::new(dir.as_deref()).map_err(|e| usage(e.to_string()))
    }
}

/// How an MCP run's final answer is compared with the row's `expected_answer`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum AnswerMatch {
    /// The answer contains the expected text.
    #[default]
    Contains,
    /// The answer is the expected text.
    Equals,
}

/// Where a remote environment's servers are.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RemoteSettings {
    pub gym_config: Option<PathBuf>,
    /// Configs merged over `gym_config`, in order (`--config` given more than once).
    #[serde(default)]
    pub gym_config_more: Vec<PathBuf>,
    pub server: Option<String>,
    pub server_name: Option<String>,
    pub gym_venv: Option<PathBuf>,
    pub gymnasium: bool,
    pub mcp_stdio: Vec<String>,
    pub mcp_http: Vec<String>,
    pub mcp_per_session: bool,
    pub answer_match: Option<AnswerMatch>,
}

impl RemoteSettings {
    /// The NeMo Gym config to start, resolved as `gym` resolves it: a path that exists as given,
    /// else the same path inside the NeMo Gym package (`resources_servers/<name>/configs/<name>.yaml`
    /// in the venv's site-packages).
    pub fn gym_config_path(&self) -> Option<PathBuf> {
        self.gym_config.as_ref().map(|c| self.resolve_config(c))
    }

    /// Every config, resolved, in the order they are merged.
    pub fn gym_config_paths(&self) -> Vec<PathBuf> {
        self.gym_config.iter().chain(&self.gym_config_more).map(|c| self.resolve_config(c)).collect()
    }

    /// The NeMo Gym venv: `--gym-venv`, else `.venv-nemo-gym`.
    pub fn gym_venv_dir(&self) -> PathBuf {
        self.gym_venv.clone().unwrap_or_else(|| PathBuf::from(".venv-nemo-gym"))
    }

    fn resolve_config(&self, config: &Path) -> PathBuf {
        if config.exists() || config.is_absolute() {
            return config.to_path_buf();
        }
        let venv = self.gym_venv_dir();
        let packaged = std::fs::read_dir(venv.join("lib"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path().join("site-packages").join(config))
            .find(|p| p.is_file());
        packaged.unwrap_or_else(|| config.to_path_buf())
    }
}

/// How the agent calls tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum ToolMode {
    /// The endpoint's tool calling.
    #[default]
    Native,
    /// Tools chosen through a JSON-schema response format, for endpoints without tool calling.
    Json,
}

/// Who plays the user.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum UserKind {
    /// Nobody: the task's first message only.
    #[default]
    None,
    /// An LLM through an OpenAI-compatible endpoint.
    Llm,
    /// The row's `follow_ups`.
    Scripted,
    /// The user turns of a recorded run.
    Replay,
    /// You, on the terminal or through a pipe.
    Human,
    /// Any program behind Parley's user contract (`--user-url`; see `docs/remote-user.md`).
    Remote,
}

/// How a simulated user's turns are reviewed for its own faults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum UserReview {
    /// The rules alone: no model call.
    #[default]
    Rules,
    /// The rules, then the judge endpoint, once per session through the verdict cache: whether
    /// the user kept to its scenario and asserted only what it was given.
    Judge,
}

/// Whether the model's reasoning from earlier turns is sent back on later ones. It is stored
/// with every message either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum ReasoningMode {
    /// What vLLM and OpenAI expect: left out of Chat Completions requests; sent back to a
    /// Responses endpoint that gave it as `encrypted_content`.
    #[default]
    Auto,
    /// Always sent back (`reasoning_content`, or `reasoning` when the endpoint wrote that),
    /// for endpoints whose chat template reads it.
    Keep,
    /// Never sent back.
    Drop,
}

impl From<ReasoningMode> for parley_core::ReasoningReplay {
    fn from(mode: ReasoningMode) -> parley_core::ReasoningReplay {
        match mode {
            ReasoningMode::Auto => parley_core::ReasoningReplay::Auto,
            ReasoningMode::Keep => parley_core::ReasoningReplay::Keep,
            ReasoningMode::Drop => parley_core::ReasoningReplay::Drop,
        }
    }
}

/// What a task file's unreadable rows do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum BadRows {
    /// The run refuses to start, naming every bad line.
    #[default]
    Fail,
    /// The bad lines are reported and left out; the other rows run.
    Skip,
}

/// The simulated user's settings; the model settings matter for `llm` only.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UserSettings {
    pub kind: UserKind,
    /// A remote user's base URL (`remote` only): turns are posted to `{url}/turn`.
    #[serde(default)]
    pub url: Option<String>,
    /// `None`: the agent's endpoint.
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub sampling: Sampling,
    pub guidelines: Option<PathBuf>,
    pub prompt: Option<PathBuf>,
    pub persona: Option<String>,
    pub replay_run: Option<i64>,
    /// How the user's turns are reviewed (a run recorded before the judged review: by rule).
    #[serde(default)]
    pub review: UserReview,
}

/// What a front end needs of the settings beyond their values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The run's tasks, from a file or the environment.
    Tasks,
    /// No tasks up front: they arrive with requests.
    Nothing,
}

/// The longest time any setting may name: a year. Longer ones are surely mistakes, and every
/// duration must fit the clocks it is added to.
const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;
/// The most bytes a size setting may name (1 TiB).
const MAX_BYTES: usize = 1 << 40;
/// The most sessions or calls in flight at once.
const MAX_IN_FLIGHT: usize = 1 << 20;

impl RunSettings {
    /// Whether every model the run calls is served on this machine: the policy and its ranks at
    /// loopback addresses, and the user's and the judge's endpoints too when they have their own.
    /// Not a run that starts the stub in-process, which runs on Parley's own threads.
    pub fn models_on_loopback(&self) -> bool {
        let Some(policy) = &self.base_url else { return false };
        let others = self.ranks.iter().chain(&self.user.base_url).chain(&self.tau2.judge_base_url);
        std::iter::once(policy).chain(others).all(|url| parley_core::url::is_loopback(url))
    }

    /// Checks every value before any work starts; a bad one is a [`UsageError`] naming the
    /// setting, the value and what is allowed.
    pub fn check(&self) -> Result<(), UsageError> {
        self.check_for(Need::Tasks)
    }

    /// Checks the settings for a front end that may not need tasks up front (a service is
    /// sent its tasks one request at a time).
    pub fn check_for(&self, need: Need) -> Result<(), UsageError> {
        let counts = [
            ("--concurrency", self.concurrency, MAX_IN_FLIGHT),
            ("--endpoint-concurrency", self.endpoint_concurrency, MAX_IN_FLIGHT),
            ("--num-tasks", self.num_tasks.unwrap_or(1), usize::MAX),
            ("--max-tool-output", self.max_tool_output, MAX_BYTES),
            ("--max-response-bytes", self.max_response_bytes, MAX_BYTES),
        ];
        for (flag, value, most) in counts {
            if !(1..=most).contains(&value) {
                return Err(usage(format!("{flag} must be between 1 and {most}, not {value}")));
            }
        }
        for (flag, value) in
            [("--trials", self.trials), ("--max-steps", self.max_steps), ("--max-turns", self.max_turns)]
        {
            if value == 0 {
                return Err(usage(format!("{flag} must be greater than 0, not 0")));
            }
        }
        match (self.sampler, self.budget) {
            (_, Some(0)) => return Err(usage("--budget must be greater than 0, not 0")),
            (crate::curriculum::Sampler::Learnable, None) if need == Need::Tasks => {
                return Err(usage("--sampler learnable draws --budget N sessions from the tasks: name N"));
            }
            _ => {}
        }
        check_seconds("--session-timeout", self.session_timeout_secs, false)?;
        check_seconds("--call-timeout", self.call_timeout_secs, false)?;
        check_seconds("--shutdown-grace", self.shutdown_grace_secs, true)?;
        if let Some(t) = self.sampling.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            return Err(usage(format!("--temperature must be between 0 and 2, not {t}")));
        }
        if let Some(p) = self.sampling.top_p.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(usage(format!("--top-p must be between 0 and 1, not {p}")));
        }
        check_url("--base-url", self.base_url.as_deref(), "http://host:port/v1")?;
        for rank in &self.ranks {
            check_url("--base-url", Some(rank), "http://host:port/v1")?;
        }
        check_key_env("--api-key-env", self.api_key_env.as_deref())?;
        let remote = &self.remote;
        match self.env {
            EnvKind::Custom if remote.gym_config.is_some() && remote.server.is_some() => {
                return Err(usage("--env custom takes tools from --config or --server, not both"));
            }
            EnvKind::NemoGym => {
                if remote.gym_config.is_some() == remote.server.is_some() {
                    return Err(usage("--env nemo-gym needs either --config CONFIG.yaml or --server URL"));
                }
                for config in remote.gym_config_paths() {
                    check_file("--config", &config)?;
                }
                check_url("--server", remote.server.as_deref(), "http://host:port")?;
                if let Some(venv) = &remote.gym_venv
                    && !venv.join("bin/python").is_file()
                {
                    return Err(usage(format!("--gym-venv {}: no bin/python there", venv.display())));
                }
            }
            EnvKind::Mcp if remote.mcp_stdio.is_empty() && remote.mcp_http.is_empty() => {
                return Err(usage("--env mcp needs at least one --mcp-stdio COMMAND or --mcp-http URL"));
            }
            _ => {}
        }
        for component in &self.reward.components {
            component.check().map_err(|e| usage(e.to_string()))?;
        }
        let reward = &self.reward;
        for (flag, bound) in [("--reward-min", reward.min), ("--reward-max", reward.max)] {
            if let Some(b) = bound.filter(|b| !b.is_finite()) {
                return Err(usage(format!("{flag} must be a finite number, not {b}")));
            }
        }
        if let (Some(lo), Some(hi)) = (reward.min, reward.max)
            && lo > hi
        {
            return Err(usage(format!("--reward-min {lo} is above --reward-max {hi}")));
        }
        if self.env == EnvKind::Custom && reward.components.is_empty() {
            return Err(usage(
                "--env custom is scored by its reward components: give at least one --reward SCORER or [[reward]]",
            ));
        }
        if self.agent == AgentKind::Oracle && self.env.tau2().is_none() {
            return Err(usage("--agent oracle plays tau2 tasks' gold actions; use it with --env tau2:<domain>"));
        }
        if self.env.tau2().is_some() {
            if let Some(dir) = self.tau2.data_dir.as_deref().filter(|d| d.exists() && !d.is_dir()) {
                return Err(usage(format!(
                    "--data-dir {}: is a file, not a folder; name tau2's data/tau2/domains folder",
                    dir.display()
                )));
            }
            self.tau2.data()?;
            if let Some(tasks) = &self.tasks {
                return Err(usage(format!(
                    "--tasks {}: tau2 domains bring their own tasks; choose them with --split and --num-tasks",
                    tasks.display()
                )));
            }
        } else if self.tau2.split.is_some() {
            return Err(usage("--split chooses tau2 tasks; use it with --env tau2:<domain>"));
        }
        if need == Need::Tasks && !self.env.brings_tasks() && self.tasks.is_none() {
            return Err(usage(format!("--env {} needs --tasks ROWS.jsonl", self.env)));
        }
        let user = &self.user;
        check_url("--user-base-url", user.base_url.as_deref(), "http://host:port/v1")?;
        check_key_env("--user-api-key-env", user.api_key_env.as_deref())?;
        check_url("--judge-base-url", self.tau2.judge_base_url.as_deref(), "http://host:port/v1")?;
        check_key_env("--judge-api-key-env", self.tau2.judge_api_key_env.as_deref())?;
        for (flag, path) in [("--user-guidelines", &user.guidelines), ("--user-prompt", &user.prompt)] {
            if let Some(path) = path {
                check_file(flag, path)?;
            }
        }
        check_url("--user-url", user.url.as_deref(), "http://host:port")?;
        match (user.kind, &user.url) {
            (UserKind::Remote, None) => {
                return Err(usage("--user remote needs --user-url URL, where a user answers Parley's user contract"));
            }
            (UserKind::Remote, Some(_)) | (_, None) => {}
            (_, Some(url)) => {
                return Err(usage(format!("--user-url {url} names a remote user: pass --user remote with it")));
            }
        }
        if user.kind == UserKind::Replay && user.replay_run.is_none() {
            return Err(usage("--user replay needs --user-replay-run RUN, the run whose user turns to say again"));
        }
        if let Some(t) = user.sampling.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            return Err(usage(format!("--user-temperature must be between 0 and 2, not {t}")));
        }
        if let Some(tasks) = &self.tasks {
            check_file("--tasks", tasks)?;
        }
        check_db(&self.db)?;
        Ok(())
    }

    /// A session's limits.
    pub fn limits(&self) -> Limits {
        Limits {
            max_steps: self.max_steps,
            max_errors: self.max_errors,
            timeout: seconds(self.session_timeout_secs),
            max_turns: self.max_turns,
            stop_grace: self.stop_grace,
            max_tool_output: self.max_tool_output,
        }
    }

    /// How long sessions in flight may take to finish their turn after a stop signal.
    pub fn shutdown_grace(&self) -> Duration {
        seconds(self.shutdown_grace_secs)
    }

    /// An endpoint of this run (the agent's, the user's or the judge's): every model endpoint
    /// shares the run's timeout, retries, concurrency and body bound.
    pub fn endpoint(&self, base_url: String, api_key_env: Option<String>) -> EndpointConfig {
        EndpointConfig {
            base_url,
            api_key_env,
            timeout: seconds(self.call_timeout_secs),
            max_retries: self.max_retries,
            max_concurrency: self.endpoint_concurrency,
            max_response_bytes: self.max_response_bytes,
            reasoning: self.reasoning.into(),
            token_ids: false,
        }
    }

    /// The policy's endpoint at `base_url` (one rank): the agent's calls, the only ones that
    /// capture token ids when the run asks for them.
    pub fn policy_endpoint(&self, base_url: String) -> EndpointConfig {
        EndpointConfig { token_ids: self.token_ids, ..self.endpoint(base_url, self.api_key_env.clone()) }
    }

    /// The rollouts file: `--out`, or `rollouts-<run>.jsonl`.
    pub fn out_path(&self, run: i64) -> PathBuf {
        self.out.clone().unwrap_or_else(|| PathBuf::from(format!("rollouts-{run}.jsonl")))
    }
}

/// `out.jsonl` → `out_failures.jsonl`, as NeMo Gym names its sidecar.
pub fn failures_path(out: &Path) -> PathBuf {
    let stem = out.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "rollouts".into());
    out.with_file_name(format!("{stem}_failures.jsonl"))
}

/// Checks, before any work, that an output file can be created where it is named: its folder
/// exists and it is not a folder itself.
pub fn check_output(flag: &str, path: &Path) -> Result<(), UsageError> {
    if path.is_dir() {
        return Err(usage(format!("{flag} {}: is a directory; name a file in it", path.display())));
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(usage(format!(
            "{flag} {}: the folder {} does not exist; create it first",
            path.display(),
            parent.display()
        )));
    }
    Ok(())
}

/// A duration already checked by [`RunSettings::check`]; a value that was not (a stored run
/// from an older Parley) saturates rather than panics.
fn seconds(value: f64) -> Duration {
    Duration::try_from_secs_f64(value.clamp(0.0, MAX_SECONDS)).unwrap_or(Duration::ZERO)
}

fn check_seconds(flag: &str, value: f64, zero_allowed: bool) -> Result<(), UsageError> {
    let low_ok = if zero_allowed { value >= 0.0 } else { value > 0.0 };
    if low_ok && value <= MAX_SECONDS {
        return Ok(());
    }
    let low = if zero_allowed { "from 0" } else { "more than 0" };
    Err(usage(format!("{flag} must be {low} up to {MAX_SECONDS} seconds (a year), not {value}")))
}

fn check_url(flag: &str, url: Option<&str>, example: &str) -> Result<(), UsageError> {
    let Some(url) = url else { return Ok(()) };
    match parley_core::url::base(url) {
        Ok(_) => Ok(()),
        Err(NotABase::NotHttp) => Err(usage(format!("{flag} `{url}` is not a URL; use {example}"))),
        Err(NotABase::Credentials(without)) => Err(usage(parley_core::url::credentials_refused(flag, &without))),
    }
}

fn check_key_env(flag: &str, var: Option<&str>) -> Result<(), UsageError> {
    match var {
        Some(var) if std::env::var_os(var).is_none() => {
            Err(usage(format!("{flag} names `{var}`, which is not set; export {var}=... first")))
        }
        _ => Ok(()),
    }
}

/// An input file: it must exist and be a regular file with something in it to read.
pub fn check_file(flag: &str, path: &Path) -> Result<(), UsageError> {
    match std::fs::metadata(path) {
        Err(_) => Err(usage(format!("{flag} {}: no such file", path.display()))),
        Ok(m) if m.is_dir() => Err(usage(format!("{flag} {}: is a directory; name a file", path.display()))),
        Ok(m) if !m.is_file() => {
            Err(usage(format!("{flag} {}: not a regular file (a device or a pipe); name a file", path.display())))
        }
        Ok(_) => Ok(()),
    }
}

/// The database: a file, or a place one can be created, or a PostgreSQL URL (checked when it
/// is connected to).
pub fn check_db(db: &DbLocation) -> Result<(), UsageError> {
    if let Some(path) = db.file()
        && path.is_dir()
    {
        return Err(usage(format!("--db {}: is a directory; name a database file (e.g. parley.db)", path.display())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RunSettings {
        serde_json::from_value(serde_json::json!({
            "env": "multi-step", "tasks": null, "num_tasks": 10, "base_url": null, "model": "m",
            "api_key_env": null, "concurrency": 4, "endpoint_concurrency": 4, "trials": 1, "db": "x.db",
            "out": null, "max_steps": 5, "max_errors": 5, "session_timeout_secs": 10.0,
            "call_timeout_secs": 10.0, "max_retries": 1, "system_prompt": null,
            "sampling": {}, "raw_calls": true
        }))
        .unwrap()
    }

    #[test]
    fn a_remote_user_needs_its_url_and_a_url_needs_a_remote_user() {
        let check = |kind: UserKind, url: Option<&str>| {
            let mut s = settings();
            s.user.kind = kind;
            s.user.url = url.map(str::to_owned);
            s.check_for(Need::Nothing).map_err(|e| e.to_string())
        };
        assert!(check(UserKind::Remote, None).unwrap_err().starts_with("--user remote needs --user-url URL"));
        assert!(check(UserKind::Remote, Some("localhost:9")).unwrap_err().starts_with("--user-url `localhost:9`"));
        assert!(check(UserKind::Llm, Some("http://u:9")).unwrap_err().contains("pass --user remote with it"));
        assert_eq!(check(UserKind::Remote, Some("http://u:9")), Ok(()));
    }

    #[test]
    fn models_are_on_loopback_only_when_every_endpoint_is() {
        let mut s = settings();
        assert!(!s.models_on_loopback(), "the in-process stub runs on Parley's own threads");
        s.base_url = Some("http://127.0.0.1:8000/v1".into());
        assert!(s.models_on_loopback());
        s.ranks = vec!["http://localhost:8001/v1".into()];
        assert!(s.models_on_loopback());
        s.user.base_url = Some("http://10.0.0.7:8000/v1".into());
        assert!(!s.models_on_loopback());
        s.user.base_url = None;
        s.tau2.judge_base_url = Some("https://judge.example/v1".into());
        assert!(!s.models_on_loopback());
        s.tau2.judge_base_url = None;
        s.ranks.push("http://10.0.0.8:8000/v1".into());
        assert!(!s.models_on_loopback());
    }

    #[test]
    fn a_url_with_a_user_and_password_is_refused_by_flag_without_showing_them() {
        let secret = "http://me:hunter2@10.0.0.7:8000/v1";
        type Set = fn(&mut RunSettings, String);
        let sets: [(Set, &str); 4] = [
            (|s, url| s.base_url = Some(url), "--base-url"),
            (|s, url| s.ranks = vec![url], "--base-url"),
            (|s, url| s.user.base_url = Some(url), "--user-base-url"),
            (|s, url| s.tau2.judge_base_url = Some(url), "--judge-base-url"),
        ];
        for (set, flag) in sets {
            let mut s = settings();
            set(&mut s, secret.to_owned());
            let err = s.check_for(Need::Nothing).unwrap_err().to_string();
            assert!(err.starts_with(&format!("{flag} `http://10.0.0.7:8000/v1`")), "{err}");
            assert!(!err.contains("hunter2") && !err.contains("me:"), "{err}");
        }
        let mut s = settings();
        s.base_url = Some(secret.replace("me:hunter2@", ""));
        assert_eq!(s.check_for(Need::Nothing).map_err(|e| e.to_string()), Ok(()));
    }

    #[test]
    fn huge_durations_are_refused_by_name_not_panicked_on() {
        for (set, flag) in [
            (
                Box::new(|s: &mut RunSettings| s.session_timeout_secs = 1e20) as Box<dyn Fn(&mut RunSettings)>,
                "--session-timeout",
            ),
            (Box::new(|s: &mut RunSettings| s.call_timeout_secs = f64::INFINITY), "--call-timeout"),
            (Box::new(|s: &mut RunSettings| s.shutdown_grace_secs = 1e300), "--shutdown-grace"),
            (Box::new(|s: &mut RunSettings| s.session_timeout_secs = f64::NAN), "--session-timeout"),
        ] {
            let mut s = settings();
            set(&mut s);
            let err = s.check().unwrap_err();
            assert!(err.to_string().starts_with(flag), "{err}");
            // Unchecked values (a run stored by an older Parley) saturate instead.
            let _ = s.limits();
            let _ = s.shutdown_grace();
            let _ = s.endpoint("http://x".into(), None);
        }
    }

    /// Settings as a run stores them, every field set to something other than its default:
    /// what `resume`, `rescore`, `replay` and `fork` read back, so each name and form is kept.
    fn stored() -> serde_json::Value {
        use serde_json::json;
        let tau2 = json!({"split": "test", "data_dir": "data/tau2", "judge_base_url": "http://judge:1/v1",
                          "judge_model": "judge-m", "judge_api_key_env": "JUDGE_KEY"});
        let remote = json!({"gym_config": "a.yaml", "gym_config_more": ["b.yaml"], "server": "srv",
                            "server_name": "srv_name", "gym_venv": ".venv-gym", "gymnasium": true,
                            "mcp_stdio": ["npx server"], "mcp_http": ["http://mcp:2/mcp"], "mcp_per_session": true,
                            "answer_match": "equals"});
        let user = json!({"kind": "llm", "url": "http://remote-user:6", "base_url": "http://user:5/v1", "model": "user-m", "api_key_env": "USER_KEY",
                          "sampling": {"temperature": 0.1, "top_p": null, "max_tokens": null, "seed": 8},
                          "guidelines": "guidelines.md", "prompt": "prompt.md", "persona": "terse", "replay_run": 4,
                          "review": "judge"});
        let component = json!({"scorer": "steps", "name": "efficiency", "weight": -0.1, "cap": 1.0, "success": false,
                               "options": stored_options()});
        let mut stored = json!({
            "env": "tau2:airline", "agent": "oracle", "tau2": tau2, "remote": remote, "tasks": "tasks.jsonl",
            "num_tasks": 7, "base_url": "http://policy:3/v1", "ranks": ["http://policy:4/v1"], "model": "policy-m",
            "api_key_env": "POLICY_KEY", "concurrency": 5, "endpoint_concurrency": 6, "trials": 2, "db": "runs/parley.db",
            "out": "out.jsonl", "max_steps": 9, "max_errors": 4, "session_timeout_secs": 11.5,
            "call_timeout_secs": 12.5, "max_retries": 2, "system_prompt": "be brief",
        });
        let more = json!({
            "sampling": {"temperature": 0.5, "top_p": 0.9, "max_tokens": 64, "seed": 3}, "raw_calls": false,
            "tool_mode": "json", "greeting": "hello", "user": user, "max_turns": 13, "stop_grace": 2,
            "max_tool_output": 1000, "max_response_bytes": 2000, "shutdown_grace_secs": 3.5, "bad_rows": "skip",
            "reasoning": "keep", "token_ids": true,
            "reward": {"components": [component], "min": -1.0, "max": 2.0},
            "front": {"sampling_from_row": true, "policy_for_agent_only": true},
            "sampler": "learnable", "budget": 40,
        });
        stored.as_object_mut().unwrap().extend(more.as_object().unwrap().clone());
        stored
    }

    /// A scorer's options as stored: every option named.
    fn stored_options() -> serde_json::Value {
        serde_json::json!({"field": null, "pattern": null, "contains": null, "case_sensitive": null,
                           "grading_mode": null, "require_boxed": null, "prompt": null, "system": null,
                           "equal_label": null, "not_equal_label": null, "swap": null,
                           "reward_if_swap_fails": null, "model": null, "base_url": null, "api_key_env": null, "budget": 8.0})
    }

    #[test]
    fn stored_settings_keep_their_shape() {
        let stored = stored();
        let read: RunSettings = serde_json::from_value(stored.clone()).unwrap();
        // Every field is read and written back under its own name, in its own form.
        assert_eq!(serde_json::to_value(&read).unwrap(), stored);
        // And none of them holds its default: a field dropped on the way would show as one.
        let defaults = serde_json::to_value(settings()).unwrap();
        let (stored, defaults) = (stored.as_object().unwrap(), defaults.as_object().unwrap());
        let keys = |map: &serde_json::Map<String, serde_json::Value>| {
            map.keys().cloned().collect::<std::collections::BTreeSet<_>>()
        };
        assert_eq!(keys(stored), keys(defaults), "a run stores every setting, defaults included");
        for (key, value) in stored {
            assert_ne!(Some(value), defaults.get(key), "`{key}` is set to its default here, so it tests nothing");
        }
    }

    #[test]
    fn settings_stored_by_an_older_parley_read_with_defaults() {
        // `settings()` is a run stored before the later fields existed.
        let s = settings();
        assert_eq!(
            (s.env, s.agent, s.tool_mode, s.bad_rows),
            (EnvKind::MultiStep, AgentKind::ToolCalling, ToolMode::Native, BadRows::Fail)
        );
        assert_eq!(
            (s.max_turns, s.stop_grace, s.max_tool_output),
            (defaults::max_turns(), defaults::stop_grace(), defaults::max_tool_output())
        );
        assert_eq!(
            (s.max_response_bytes, s.shutdown_grace_secs),
            (defaults::max_response_bytes(), defaults::shutdown_grace())
        );
        assert!(s.reward.components.is_empty() && !s.token_ids && s.front == Front::default());
    }

    #[test]
    fn outputs_in_missing_folders_or_naming_folders_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_output("--out", &dir.path().join("a.jsonl")).is_ok());
        let err = check_output("--out", dir.path()).unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
        let err = check_output("--out", &dir.path().join("missing/a.jsonl")).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
    }

    #[test]
    fn failures_sit_beside_the_rollouts() {
        assert_eq!(failures_path(Path::new("a/out.jsonl")), Path::new("a/out_failures.jsonl"));
    }
}
