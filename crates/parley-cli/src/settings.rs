//! Settings: `parley.toml` merged under the command-line flags, validated completely before any
//! work starts. A bad value is a [`UsageError`](crate::error::UsageError) naming it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use parley_core::{Limits, Sampling};
use serde::{Deserialize, Serialize};

use crate::cli::RunArgs;
use crate::error::usage;

/// The `[run]` table of `parley.toml`; every key mirrors a flag of `parley run`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRun {
    env: Option<String>,
    agent: Option<String>,
    split: Option<String>,
    data_dir: Option<PathBuf>,
    judge_base_url: Option<String>,
    judge_model: Option<String>,
    judge_api_key_env: Option<String>,
    config: Option<PathBuf>,
    server: Option<String>,
    server_name: Option<String>,
    gym_venv: Option<PathBuf>,
    gymnasium: Option<bool>,
    mcp_stdio: Option<Vec<String>>,
    mcp_http: Option<Vec<String>>,
    mcp_per_session: Option<bool>,
    answer_match: Option<String>,
    tasks: Option<PathBuf>,
    num_tasks: Option<usize>,
    base_url: Option<String>,
    model: Option<String>,
    api_key_env: Option<String>,
    concurrency: Option<usize>,
    endpoint_concurrency: Option<usize>,
    trials: Option<u32>,
    db: Option<PathBuf>,
    out: Option<PathBuf>,
    max_steps: Option<u32>,
    max_errors: Option<u32>,
    session_timeout: Option<f64>,
    call_timeout: Option<f64>,
    max_retries: Option<u32>,
    system_prompt: Option<String>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    max_tokens: Option<u32>,
    raw_calls: Option<bool>,
    tool_mode: Option<String>,
    greeting: Option<String>,
    user: Option<String>,
    user_base_url: Option<String>,
    user_model: Option<String>,
    user_api_key_env: Option<String>,
    user_temperature: Option<f64>,
    user_max_tokens: Option<u32>,
    user_seed: Option<u64>,
    user_guidelines: Option<PathBuf>,
    user_prompt: Option<PathBuf>,
    user_persona: Option<String>,
    user_replay_run: Option<i64>,
    max_turns: Option<u32>,
    stop_grace: Option<u32>,
    max_tool_output: Option<usize>,
    max_response_bytes: Option<usize>,
    shutdown_grace: Option<f64>,
    bad_rows: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    run: FileRun,
}

/// Everything `parley run` needs, resolved and checked. Serialized into the run's record, so it
/// must never hold a secret: the API key is named (`api_key_env`), never read here.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSettings {
    pub env: String,
    #[serde(default)]
    pub agent: AgentKind,
    #[serde(default)]
    pub tau2: Tau2Settings,
    #[serde(default)]
    pub remote: RemoteSettings,
    pub tasks: Option<PathBuf>,
    pub num_tasks: usize,
    /// `None`: start the stub in-process.
    pub base_url: Option<String>,
    pub model: String,
    pub api_key_env: Option<String>,
    pub concurrency: usize,
    pub endpoint_concurrency: usize,
    pub trials: u32,
    pub db: PathBuf,
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
    #[serde(default = "default_turns")]
    pub max_turns: u32,
    #[serde(default = "default_grace")]
    pub stop_grace: u32,
    #[serde(default = "default_tool_output")]
    pub max_tool_output: usize,
    #[serde(default = "default_response_bytes")]
    pub max_response_bytes: usize,
    #[serde(default = "default_shutdown_grace")]
    pub shutdown_grace_secs: f64,
    #[serde(default)]
    pub bad_rows: BadRows,
}

/// What a task file's unreadable rows do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BadRows {
    /// The run refuses to start, naming every bad line.
    #[default]
    Fail,
    /// The bad lines are reported and left out; the other rows run.
    Skip,
}

fn default_tool_output() -> usize {
    Limits::default().max_tool_output
}

fn default_response_bytes() -> usize {
    16 << 20
}

fn default_shutdown_grace() -> f64 {
    30.0
}

fn default_turns() -> u32 {
    Limits::default().max_turns
}

fn default_grace() -> u32 {
    Limits::default().stop_grace
}

/// Which agent plays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentKind {
    #[default]
    ToolCalling,
    Oracle,
}

/// tau2's data, split and judge.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Tau2Settings {
    pub split: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub judge_base_url: Option<String>,
    pub judge_model: Option<String>,
    pub judge_api_key_env: Option<String>,
}

/// Where a remote environment's servers are.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RemoteSettings {
    pub gym_config: Option<PathBuf>,
    pub server: Option<String>,
    pub server_name: Option<String>,
    pub gym_venv: Option<PathBuf>,
    pub gymnasium: bool,
    pub mcp_stdio: Vec<String>,
    pub mcp_http: Vec<String>,
    pub mcp_per_session: bool,
    pub answer_match: Option<String>,
}

/// How the agent calls tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolMode {
    #[default]
    Native,
    Json,
}

/// Who plays the user.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UserKind {
    #[default]
    None,
    Llm,
    Scripted,
    Replay,
    Human,
}

/// The simulated user's settings; the model settings matter for `llm` only.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UserSettings {
    pub kind: UserKind,
    /// `None`: the agent's endpoint.
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub sampling: Sampling,
    pub guidelines: Option<PathBuf>,
    pub prompt: Option<PathBuf>,
    pub persona: Option<String>,
    pub replay_run: Option<i64>,
}

pub const ENVIRONMENTS: &[&str] =
    &["multi-step", "tau2:mock", "tau2:airline", "tau2:retail", "tau2:telecom", "nemo-gym", "mcp"];

impl RunSettings {
    pub fn resolve(args: RunArgs) -> anyhow::Result<RunSettings> {
        let file = load_file(args.settings.as_deref())?;
        let f = file.run;
        let env = args.env.or(f.env).unwrap_or_else(|| "multi-step".into());
        if !ENVIRONMENTS.contains(&env.as_str()) {
            return Err(usage(format!(
                "unknown environment `{env}` for --env; choose one of: {}",
                ENVIRONMENTS.join(", ")
            )));
        }
        let concurrency = args.concurrency.or(f.concurrency).unwrap_or(64);
        let remote = RemoteSettings {
            gym_config: args.config.or(f.config),
            server: args.server.or(f.server),
            server_name: args.server_name.or(f.server_name),
            gym_venv: args.gym_venv.or(f.gym_venv),
            gymnasium: args.gymnasium || f.gymnasium.unwrap_or(false),
            mcp_stdio: if args.mcp_stdio.is_empty() { f.mcp_stdio.unwrap_or_default() } else { args.mcp_stdio },
            mcp_http: if args.mcp_http.is_empty() { f.mcp_http.unwrap_or_default() } else { args.mcp_http },
            mcp_per_session: args.mcp_per_session || f.mcp_per_session.unwrap_or(false),
            answer_match: args.answer_match.or(f.answer_match),
        };
        let agent = match args.agent.or(f.agent).as_deref() {
            None | Some("tool-calling") => AgentKind::ToolCalling,
            Some("oracle") => AgentKind::Oracle,
            Some(other) => return Err(usage(format!("--agent `{other}`: choose tool-calling or oracle"))),
        };
        let tau2 = Tau2Settings {
            split: args.split.or(f.split),
            data_dir: args.data_dir.or(f.data_dir),
            judge_base_url: args.judge_base_url.or(f.judge_base_url),
            judge_model: args.judge_model.or(f.judge_model),
            judge_api_key_env: args.judge_api_key_env.or(f.judge_api_key_env),
        };
        let settings = RunSettings {
            env,
            agent,
            tau2,
            remote,
            tasks: args.tasks.or(f.tasks),
            num_tasks: args.num_tasks.or(f.num_tasks).unwrap_or(100),
            base_url: args.base_url.or(f.base_url),
            model: args.model.or(f.model).unwrap_or_else(|| "parley-stub".into()),
            api_key_env: args.api_key_env.or(f.api_key_env),
            concurrency,
            endpoint_concurrency: args.endpoint_concurrency.or(f.endpoint_concurrency).unwrap_or(concurrency),
            trials: args.trials.or(f.trials).unwrap_or(1),
            db: args.db.or(f.db).unwrap_or_else(|| "parley.db".into()),
            out: args.out.or(f.out),
            max_steps: args.max_steps.or(f.max_steps).unwrap_or(Limits::default().max_steps),
            max_errors: args.max_errors.or(f.max_errors).unwrap_or(Limits::default().max_errors),
            session_timeout_secs: args.session_timeout.or(f.session_timeout).unwrap_or(600.0),
            call_timeout_secs: args.call_timeout.or(f.call_timeout).unwrap_or(120.0),
            max_retries: args.max_retries.or(f.max_retries).unwrap_or(3),
            system_prompt: args.system_prompt.or(f.system_prompt),
            sampling: Sampling {
                temperature: args.temperature.or(f.temperature),
                top_p: args.top_p.or(f.top_p),
                max_tokens: args.max_tokens.or(f.max_tokens),
                seed: None,
            },
            raw_calls: !args.no_raw_calls && f.raw_calls.unwrap_or(true),
            tool_mode: match args.tool_mode.or(f.tool_mode).as_deref() {
                None | Some("native") => ToolMode::Native,
                Some("json") => ToolMode::Json,
                Some(other) => return Err(usage(format!("--tool-mode `{other}`: choose native or json"))),
            },
            greeting: args.greeting.or(f.greeting),
            user: UserSettings {
                kind: match args.user.or(f.user).as_deref() {
                    None | Some("none") => UserKind::None,
                    Some("llm") => UserKind::Llm,
                    Some("scripted") => UserKind::Scripted,
                    Some("replay") => UserKind::Replay,
                    Some("human") => UserKind::Human,
                    Some(other) => {
                        return Err(usage(format!("--user `{other}`: choose none, llm, scripted, replay or human")));
                    }
                },
                base_url: args.user_base_url.or(f.user_base_url),
                model: args.user_model.or(f.user_model),
                api_key_env: args.user_api_key_env.or(f.user_api_key_env),
                sampling: Sampling {
                    temperature: args.user_temperature.or(f.user_temperature),
                    top_p: None,
                    max_tokens: args.user_max_tokens.or(f.user_max_tokens),
                    seed: args.user_seed.or(f.user_seed),
                },
                guidelines: args.user_guidelines.or(f.user_guidelines),
                prompt: args.user_prompt.or(f.user_prompt),
                persona: args.user_persona.or(f.user_persona),
                replay_run: args.user_replay_run.or(f.user_replay_run),
            },
            max_turns: args.max_turns.or(f.max_turns).unwrap_or(Limits::default().max_turns),
            stop_grace: args.stop_grace.or(f.stop_grace).unwrap_or(Limits::default().stop_grace),
            max_tool_output: args.max_tool_output.or(f.max_tool_output).unwrap_or_else(default_tool_output),
            max_response_bytes: args.max_response_bytes.or(f.max_response_bytes).unwrap_or_else(default_response_bytes),
            shutdown_grace_secs: args.shutdown_grace.or(f.shutdown_grace).unwrap_or_else(default_shutdown_grace),
            bad_rows: match args.bad_rows.or(f.bad_rows).as_deref() {
                None | Some("fail") => BadRows::Fail,
                Some("skip") => BadRows::Skip,
                Some(other) => return Err(usage(format!("--bad-rows `{other}`: choose fail or skip"))),
            },
        };
        settings.check()?;
        Ok(settings)
    }

    fn check(&self) -> anyhow::Result<()> {
        let positive = [
            ("--concurrency", self.concurrency as f64),
            ("--endpoint-concurrency", self.endpoint_concurrency as f64),
            ("--trials", f64::from(self.trials)),
            ("--max-steps", f64::from(self.max_steps)),
            ("--num-tasks", self.num_tasks as f64),
            ("--session-timeout", self.session_timeout_secs),
            ("--call-timeout", self.call_timeout_secs),
            ("--max-tool-output", self.max_tool_output as f64),
            ("--max-response-bytes", self.max_response_bytes as f64),
        ];
        for (flag, value) in positive {
            if !(value > 0.0 && value.is_finite()) {
                return Err(usage(format!("{flag} must be greater than 0, not {value}")));
            }
        }
        if !(self.shutdown_grace_secs >= 0.0 && self.shutdown_grace_secs.is_finite()) {
            return Err(usage(format!("--shutdown-grace must be 0 or more seconds, not {}", self.shutdown_grace_secs)));
        }
        if let Some(t) = self.sampling.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            return Err(usage(format!("--temperature must be between 0 and 2, not {t}")));
        }
        if let Some(p) = self.sampling.top_p.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(usage(format!("--top-p must be between 0 and 1, not {p}")));
        }
        if let Some(url) = &self.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(usage(format!("--base-url `{url}` is not a URL; use http://host:port/v1")));
        }
        if let Some(var) = &self.api_key_env
            && std::env::var_os(var).is_none()
        {
            return Err(usage(format!("--api-key-env names `{var}`, which is not set; export {var}=... first")));
        }
        let remote = &self.remote;
        match self.env.as_str() {
            "nemo-gym" => {
                if remote.gym_config.is_some() == remote.server.is_some() {
                    return Err(usage("--env nemo-gym needs either --config CONFIG.yaml or --server URL"));
                }
                if let Some(config) = &remote.gym_config
                    && !config.is_file()
                {
                    return Err(usage(format!("--config {}: no such file", config.display())));
                }
                if let Some(url) = &remote.server
                    && !(url.starts_with("http://") || url.starts_with("https://"))
                {
                    return Err(usage(format!("--server `{url}` is not a URL; use http://host:port")));
                }
                if let Some(venv) = &remote.gym_venv
                    && !venv.join("bin/python").is_file()
                {
                    return Err(usage(format!("--gym-venv {}: no bin/python there", venv.display())));
                }
            }
            "mcp" if remote.mcp_stdio.is_empty() && remote.mcp_http.is_empty() => {
                return Err(usage("--env mcp needs at least one --mcp-stdio COMMAND or --mcp-http URL"));
            }
            _ => {}
        }
        if let Some(how) = &remote.answer_match
            && !["contains", "equals"].contains(&how.as_str())
        {
            return Err(usage(format!("--answer-match `{how}`: choose contains or equals")));
        }
        if self.agent == AgentKind::Oracle && !self.env.starts_with("tau2:") {
            return Err(usage("--agent oracle plays tau2 tasks' gold actions; use it with --env tau2:<domain>"));
        }
        if let Some(split) = &self.tau2.split
            && !["test", "train", "base", "small"].contains(&split.as_str())
        {
            return Err(usage(format!("--split `{split}`: choose test, train or base")));
        }
        if self.env.starts_with("tau2:") {
            environment_tau2::data_dir(self.tau2.data_dir.as_deref()).map_err(|e| usage(e.to_string()))?;
        }
        if self.env != "multi-step" && !self.env.starts_with("tau2:") && self.tasks.is_none() {
            return Err(usage(format!("--env {} needs --tasks ROWS.jsonl", self.env)));
        }
        let user = &self.user;
        if let Some(url) = &user.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(usage(format!("--user-base-url `{url}` is not a URL; use http://host:port/v1")));
        }
        if let Some(var) = &user.api_key_env
            && std::env::var_os(var).is_none()
        {
            return Err(usage(format!("--user-api-key-env names `{var}`, which is not set; export {var}=... first")));
        }
        for (flag, path) in [("--user-guidelines", &user.guidelines), ("--user-prompt", &user.prompt)] {
            if let Some(path) = path
                && !path.is_file()
            {
                return Err(usage(format!("{flag} {}: no such file", path.display())));
            }
        }
        if user.kind == UserKind::Replay && user.replay_run.is_none() {
            return Err(usage("--user replay needs --user-replay-run RUN, the run whose user turns to say again"));
        }
        if let Some(t) = user.sampling.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            return Err(usage(format!("--user-temperature must be between 0 and 2, not {t}")));
        }
        if self.max_turns == 0 {
            return Err(usage("--max-turns must be greater than 0, not 0"));
        }
        if let Some(tasks) = &self.tasks
            && !tasks.is_file()
        {
            return Err(usage(format!("--tasks {}: no such file", tasks.display())));
        }
        Ok(())
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_steps: self.max_steps,
            max_errors: self.max_errors,
            timeout: Duration::from_secs_f64(self.session_timeout_secs),
            max_turns: self.max_turns,
            stop_grace: self.stop_grace,
            max_tool_output: self.max_tool_output,
        }
    }
}

fn load_file(explicit: Option<&Path>) -> anyhow::Result<File> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None if Path::new("parley.toml").is_file() => PathBuf::from("parley.toml"),
        None => return Ok(File::default()),
    };
    let text = std::fs::read_to_string(&path).map_err(|e| usage(format!("--settings {}: {e}", path.display())))?;
    parse_file(&text).map_err(|e| usage(format!("{}: {e}", path.display())))
}

/// Parses the text of a settings file: TOML with one `[run]` table of known keys.
fn parse_file(text: &str) -> Result<File, toml::de::Error> {
    toml::from_str(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy;

    #[test]
    fn flags_override_the_file_and_unknown_keys_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("parley.toml");
        std::fs::write(&path, "[run]\nconcurrency = 8\ntrials = 3\n").unwrap();
        let args = RunArgs { settings: Some(path.clone()), concurrency: Some(2), ..RunArgs::default() };
        let s = RunSettings::resolve(args).unwrap();
        assert_eq!((s.concurrency, s.trials), (2, 3));

        std::fs::write(&path, "[run]\nconcurency = 8\n").unwrap();
        let err = RunSettings::resolve(RunArgs { settings: Some(path), ..RunArgs::default() }).unwrap_err();
        assert!(err.to_string().contains("concurency"), "{err}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

        /// Any text as a settings file: parsed, or refused with the reason; never a panic.
        #[test]
        fn any_settings_text_parses_or_is_refused(text in ".{0,300}") {
            let _ = parse_file(&text);
        }

        /// Known keys with values of any type: resolved, or refused as a usage error.
        #[test]
        fn any_values_of_known_keys_resolve_or_are_usage_errors(
            entries in proptest::collection::vec(
                (
                    proptest::sample::select(vec![
                        "concurrency", "trials", "max_steps", "session_timeout", "call_timeout", "temperature",
                        "top_p", "env", "user", "tool_mode", "bad_rows", "max_tool_output", "shutdown_grace",
                        "base_url", "stop_grace", "num_tasks",
                    ]),
                    proptest::prop_oneof![
                        proptest::prelude::any::<i64>().prop_map(|n| n.to_string()),
                        proptest::prelude::any::<f64>().prop_map(|f| format!("{f:?}")),
                        "[a-z:/.0-9]{0,12}".prop_map(|s| format!("{s:?}")),
                        proptest::prelude::any::<bool>().prop_map(|b| b.to_string()),
                    ],
                ),
                0..6,
            )
        ) {
            let mut text = String::from("[run]\n");
            let mut seen = std::collections::HashSet::new();
            for (key, value) in entries.into_iter().filter(|(k, _)| seen.insert(*k)) {
                text.push_str(&format!("{key} = {value}\n"));
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("parley.toml");
            std::fs::write(&path, &text).unwrap();
            if let Err(e) = RunSettings::resolve(RunArgs { settings: Some(path), ..RunArgs::default() }) {
                proptest::prop_assert!(e.downcast_ref::<crate::error::UsageError>().is_some(), "{text}: {e}");
            }
        }
    }

    #[test]
    fn bad_values_are_usage_errors() {
        let err = RunSettings::resolve(RunArgs { concurrency: Some(0), ..RunArgs::default() }).unwrap_err();
        assert!(err.downcast_ref::<crate::error::UsageError>().is_some());
        assert!(err.to_string().contains("--concurrency"));
        let err = RunSettings::resolve(RunArgs { env: Some("chess".into()), ..RunArgs::default() }).unwrap_err();
        assert!(err.to_string().contains("chess"));
    }
}
