//! Settings: `parley.toml` merged under the command-line flags, then resolved into the
//! runtime's typed [`RunSettings`] and validated completely before any work starts. A bad value
//! is a [`UsageError`](crate::error::UsageError) naming it.
//!
//! Every option is declared once, in [`RunOptions`](crate::cli::RunOptions): clap parses it
//! from the flags and serde from the file, and [`Combine`] merges the two field by field.

use std::path::{Path, PathBuf};

use parley_core::Sampling;
use parley_runtime::settings::{Need, RemoteSettings, RewardSettings, Tau2Settings, UserSettings, defaults};
use parley_runtime::{EnvKind, RunSettings};
use serde::Deserialize;

use crate::cli::{PolicyOptions, RewardOptions, RunOptions};
use crate::error::usage;

/// Merges two layers of settings: `self` (the stronger, the flags) over `other` (the file).
pub trait Combine {
    fn combine(self, other: Self) -> Self;
}

impl<T> Combine for Option<T> {
    /// The first value given.
    fn combine(self, other: Option<T>) -> Option<T> {
        self.or(other)
    }
}

impl<T> Combine for Vec<T> {
    /// A list given on the command line replaces the file's.
    fn combine(self, other: Vec<T>) -> Vec<T> {
        if self.is_empty() { other } else { self }
    }
}

/// Reads a setting written as one value or a list of them (`config = "a.yaml"` or
/// `config = ["a.yaml", "b.yaml"]`).
pub fn one_or_many<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany<T> {
        One(T),
        Many(Vec<T>),
    }
    Ok(match OneOrMany::deserialize(deserializer)? {
        OneOrMany::One(one) => vec![one],
        OneOrMany::Many(many) => many,
    })
}

/// Declares the options struct once and derives its [`Combine`] from the same field list, so a
/// new option cannot be forgotten by the merge.
macro_rules! options {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$field_meta:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$field_meta])* pub $field: $ty, )*
        }

        impl $crate::settings::Combine for $name {
            fn combine(self, other: $name) -> $name {
                $name { $( $field: $crate::settings::Combine::combine(self.$field, other.$field), )* }
            }
        }
    };
}
pub(crate) use options;

/// `parley.toml`: one `[run]` table of [`RunOptions`], the reward's components as `[[reward]]`
/// tables, and the environments `parley serve` hosts beside its default as `[[environment]]`
/// tables; unknown keys are refused by name.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    run: RunOptions,
    #[serde(default)]
    reward: Vec<parley_rewards::RewardSpec>,
    #[serde(default)]
    environment: Vec<EnvironmentTable>,
}

/// An `[[environment]]` table: its `name`, `[run]` keys of its own, `queue` (the requests that
/// may wait for it) and `[[environment.reward]]` tables.
#[derive(Debug, Deserialize)]
#[serde(try_from = "toml::Table")]
struct EnvironmentTable {
    name: String,
    queue: Option<usize>,
    run: RunOptions,
    reward: Vec<parley_rewards::RewardSpec>,
}

impl TryFrom<toml::Table> for EnvironmentTable {
    type Error = String;

    fn try_from(mut table: toml::Table) -> Result<EnvironmentTable, String> {
        let name = match table.remove("name") {
            Some(toml::Value::String(name)) => name,
            Some(other) => return Err(format!("[[environment]]: `name` is text, not {other}")),
            None => return Err("an [[environment]] table needs a `name`".into()),
        };
        let at = |e: toml::de::Error| format!("[[environment]] `{name}`: {}", e.message());
        let queue = table.remove("queue").map(|q| q.try_into::<usize>()).transpose().map_err(at)?;
        let reward = table.remove("reward").map(|r| r.try_into()).transpose().map_err(at)?.unwrap_or_default();
        let run = toml::Value::Table(table).try_into::<RunOptions>().map_err(at)?;
        Ok(EnvironmentTable { name, queue, run, reward })
    }
}

/// One environment a service hosts: its name and settings, and the admission bounds its
/// settings gave it (`None`: a share of the whole service's).
#[derive(Debug)]
pub struct Hosted {
    pub name: String,
    pub settings: RunSettings,
    pub concurrency: Option<usize>,
    pub queue: Option<usize>,
}

impl RunOptions {
    /// The settings these flags ask for, over the settings file (`--settings`, or
    /// `./parley.toml` when it exists), with defaults for what neither gives; checked.
    pub fn resolve(self) -> anyhow::Result<RunSettings> {
        self.resolve_for(Need::Tasks)
    }

    /// As [`RunOptions::resolve`], for a front end whose tasks come later (a service).
    pub fn resolve_for(self, need: Need) -> anyhow::Result<RunSettings> {
        let file = load_file(self.settings.as_deref())?;
        self.combine(file.run).settled(file.reward, need)
    }

    /// The environments a service hosts: the default first (these flags over the file's
    /// `[run]`, named [`parley_serve::DEFAULT`]), then each of the file's `[[environment]]`
    /// tables and each of `named` (`--environment NAME=FILE`), its own keys over the default's
    /// and its own `[[reward]]` tables, when it has any, in place of the default's. Every one is
    /// resolved and checked before any is started.
    pub fn resolve_hosted(self, named: &[(String, PathBuf)], need: Need) -> anyhow::Result<Vec<Hosted>> {
        let file = load_file(self.settings.as_deref())?;
        let base = self.combine(file.run);
        let mut tables = file.environment;
        for (name, path) in named {
            let own = load_file(Some(path))?;
            if !own.environment.is_empty() {
                return Err(usage(format!(
                    "--environment {name}={}: an environment's file has no [[environment]] tables of its own",
                    path.display()
                )));
            }
            tables.push(EnvironmentTable { name: name.clone(), queue: None, run: own.run, reward: own.reward });
        }
        let default = base.clone().settled(file.reward.clone(), need)?;
        let mut hosted =
            vec![Hosted { name: parley_serve::DEFAULT.into(), settings: default, concurrency: None, queue: None }];
        for mut table in tables {
            let name = table.name;
            let named_well = name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
            if name.is_empty() || !named_well {
                return Err(usage(format!(
                    "environment `{name}`: a name is letters, digits, `_`, `-`, `.` and `:` (it labels metrics)"
                )));
            }
            if hosted.iter().any(|h| h.name == name) {
                return Err(usage(format!(
                    "environment `{name}` is named twice (`{}` is the default's name)",
                    parley_serve::DEFAULT
                )));
            }
            let concurrency = table.run.concurrency;
            // Its own components, when it has any, replace the default's (the flags' or the file's).
            table.run.rewards.reward = table.reward;
            let settings = table
                .run
                .combine(base.clone())
                .settled(file.reward.clone(), need)
                .map_err(|e| usage(format!("environment `{name}`: {e}")))?;
            // The store is one, opened once: what it is and how it records are the service's.
            for (key, differs) in [
                ("db", settings.db != hosted[0].settings.db),
                ("raw_calls", settings.raw_calls != hosted[0].settings.raw_calls),
            ] {
                if differs {
                    return Err(usage(format!(
                        "environment `{name}`: `{key}` is the service's, one store for every environment; set it in \
                         [run] or with its flag"
                    )));
                }
            }
            hosted.push(Hosted { name, settings, concurrency, queue: table.queue });
        }
        Ok(hosted)
    }

    /// These options resolved, with `file_reward` the settings file's `[[reward]]` tables.
    fn settled(self, file_reward: Vec<parley_rewards::RewardSpec>, need: Need) -> anyhow::Result<RunSettings> {
        let o = self;
        // `[[reward]]` sits beside `[run]`, so it is merged here: flags replace the file's list.
        let reward = o.rewards.over(file_reward);
        let concurrency = o.concurrency.unwrap_or(defaults::CONCURRENCY);
        let mut settings = RunSettings {
            env: o.env.unwrap_or(EnvKind::MultiStep),
            front: parley_runtime::Front::default(),
            agent: o.agent.unwrap_or_default(),
            tau2: Tau2Settings {
                split: o.split,
                data_dir: o.data_dir,
                judge_base_url: o.judge_base_url,
                judge_model: o.judge_model,
                judge_api_key_env: o.judge_api_key_env,
            },
            remote: RemoteSettings {
                gym_config: o.config.first().cloned(),
                gym_config_more: o.config.iter().skip(1).cloned().collect(),
                server: o.server,
                server_name: o.server_name,
                gym_venv: o.gym_venv,
                gymnasium: o.gymnasium.unwrap_or(false),
                mcp_stdio: o.mcp_stdio,
                mcp_http: o.mcp_http,
                mcp_per_session: o.mcp_per_session.unwrap_or(false),
                answer_match: o.answer_match,
            },
            tasks: o.tasks,
            num_tasks: o.num_tasks,
            base_url: None,
            ranks: Vec::new(),
            model: defaults::MODEL.into(),
            api_key_env: None,
            concurrency,
            endpoint_concurrency: o
                .endpoint_concurrency
                .unwrap_or_else(|| crate::open_files::endpoint_default(concurrency)),
            trials: o.trials.unwrap_or(defaults::TRIALS),
            db: o.db.unwrap_or_else(|| defaults::DB.into()),
            out: o.out,
            max_steps: o.max_steps.unwrap_or(parley_core::Limits::default().max_steps),
            max_errors: o.max_errors.unwrap_or(parley_core::Limits::default().max_errors),
            session_timeout_secs: o.session_timeout.unwrap_or(defaults::SESSION_TIMEOUT_SECS),
            call_timeout_secs: o.call_timeout.unwrap_or(defaults::CALL_TIMEOUT_SECS),
            max_retries: o.max_retries.unwrap_or(defaults::MAX_RETRIES),
            system_prompt: o.system_prompt,
            sampling: Sampling::default(),
            raw_calls: o.raw_calls.unwrap_or(true),
            tool_mode: o.tool_mode.unwrap_or_default(),
            reasoning: o.reasoning.unwrap_or_default(),
            token_ids: o.token_ids.unwrap_or(false),
            greeting: o.greeting,
            user: UserSettings {
                kind: o.user.unwrap_or_default(),
                url: o.user_url,
                base_url: o.user_base_url,
                model: o.user_model,
                api_key_env: o.user_api_key_env,
                sampling: Sampling {
                    temperature: o.user_temperature,
                    top_p: None,
                    max_tokens: o.user_max_tokens,
                    seed: o.user_seed,
                },
                guidelines: o.user_guidelines,
                prompt: o.user_prompt,
                persona: o.user_persona,
                replay_run: o.user_replay_run,
                review: o.user_review.unwrap_or_default(),
            },
            max_turns: o.max_turns.unwrap_or_else(defaults::max_turns),
            stop_grace: o.stop_grace.unwrap_or_else(defaults::stop_grace),
            max_tool_output: o.max_tool_output.unwrap_or_else(defaults::max_tool_output),
            max_response_bytes: o.max_response_bytes.unwrap_or_else(defaults::max_response_bytes),
            shutdown_grace_secs: o.shutdown_grace.unwrap_or_else(defaults::shutdown_grace),
            bad_rows: o.bad_rows.unwrap_or_default(),
            reward,
            sampler: o.sampler.unwrap_or_default(),
            budget: o.budget,
        };
        o.policy.over(&mut settings);
        settings.check_for(need)?;
        Ok(settings)
    }
}

impl RewardOptions {
    /// The reward these options name, over the components of a settings file's `[[reward]]`
    /// tables: components given here replace the file's.
    pub fn over(self, file_components: Vec<parley_rewards::RewardSpec>) -> RewardSettings {
        let components = if self.reward.is_empty() { file_components } else { self.reward };
        RewardSettings { components, min: self.reward_min, max: self.reward_max }
    }

    /// The reward `parley rescore` tries: these options over the settings file given, or `None`
    /// when neither names one (the run's own reward is used). Only a file named with
    /// `--settings` is read: a rescore never picks up `./parley.toml` by itself.
    pub fn for_rescore(self, settings: Option<&Path>) -> anyhow::Result<Option<RewardSettings>> {
        let given = !self.reward.is_empty() || self.reward_min.is_some() || self.reward_max.is_some();
        let Some(path) = settings else {
            return Ok(given.then(|| self.over(Vec::new())));
        };
        let file = load_file(Some(path))?;
        let reward = self.combine(file.run.rewards).over(file.reward);
        if reward.components.is_empty() {
            return Err(usage(format!(
                "--settings {}: no [[reward]] table, and no --reward given: name the reward to try",
                path.display()
            )));
        }
        Ok(Some(reward))
    }
}

impl PolicyOptions {
    /// Puts the policy these options name over `settings`' own: what is given replaces, the
    /// rest stays. A run's settings are its defaults under this; a fork's, its run's.
    pub fn over(self, settings: &mut RunSettings) {
        if let Some((first, ranks)) = self.base_url.split_first() {
            settings.base_url = Some(first.clone());
            settings.ranks = ranks.to_vec();
        }
        if let Some(model) = self.model {
            settings.model = model;
        }
        settings.api_key_env = self.api_key_env.or(settings.api_key_env.take());
        let sampling = &mut settings.sampling;
        sampling.temperature = self.temperature.or(sampling.temperature);
        sampling.top_p = self.top_p.or(sampling.top_p);
        sampling.max_tokens = self.max_tokens.or(sampling.max_tokens);
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

    fn resolve_file(text: &str) -> anyhow::Result<RunSettings> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("parley.toml");
        std::fs::write(&path, text).unwrap();
        RunOptions { settings: Some(path), ..RunOptions::default() }.resolve()
    }

    #[test]
    fn a_remote_users_url_is_read_from_the_file() {
        let s = resolve_file("[run]\nuser = \"remote\"\nuser_url = \"http://u:9\"\n").unwrap();
        assert_eq!(
            (s.user.kind, s.user.url.as_deref()),
            (parley_runtime::settings::UserKind::Remote, Some("http://u:9"))
        );
    }

    #[test]
    fn flags_override_the_file_and_unknown_keys_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("parley.toml");
        std::fs::write(&path, "[run]\nconcurrency = 8\ntrials = 3\nmcp_http = [\"http://a\"]\n").unwrap();
        let args = RunOptions { settings: Some(path.clone()), concurrency: Some(2), ..RunOptions::default() };
        let s = args.resolve().unwrap();
        assert_eq!((s.concurrency, s.trials), (2, 3));
        assert_eq!(s.remote.mcp_http, ["http://a"]);

        std::fs::write(&path, "[run]\nconcurency = 8\n").unwrap();
        let err = RunOptions { settings: Some(path), ..RunOptions::default() }.resolve().unwrap_err();
        assert!(err.to_string().contains("concurency"), "{err}");
    }

    /// Every key `parley.toml` has taken is still read, each into its setting.
    #[test]
    fn every_file_key_is_read() {
        let s = resolve_file(
            "[run]\nenv = \"multi-step\"\nagent = \"tool-calling\"\nnum_tasks = 7\nbase_url = \"http://h:1/v1\"\n\
             model = \"m\"\nconcurrency = 9\nendpoint_concurrency = 3\ntrials = 2\ndb = \"d.db\"\nout = \"o.jsonl\"\n\
             max_steps = 4\nmax_errors = 6\nsession_timeout = 12.5\ncall_timeout = 3.5\nmax_retries = 1\n\
             system_prompt = \"sp\"\ntemperature = 0.5\ntop_p = 0.9\nmax_tokens = 99\nraw_calls = false\n\
             tool_mode = \"json\"\ngreeting = \"hi\"\nuser = \"scripted\"\nuser_model = \"um\"\nuser_temperature = 0.1\n\
             user_max_tokens = 5\nuser_seed = 11\nuser_persona = \"p\"\nmax_turns = 3\nstop_grace = 0\n\
             max_tool_output = 100\nmax_response_bytes = 1000\nshutdown_grace = 2\nbad_rows = \"skip\"\n\
             answer_match = \"equals\"\nmcp_per_session = true\ngymnasium = true\nreasoning = \"keep\"\n\
             token_ids = true\nuser_review = \"judge\"\n",
        )
        .unwrap();
        assert_eq!(s.num_tasks, Some(7));
        assert_eq!((s.concurrency, s.endpoint_concurrency, s.trials, s.max_steps, s.max_errors), (9, 3, 2, 4, 6));
        assert_eq!((s.session_timeout_secs, s.call_timeout_secs, s.shutdown_grace_secs), (12.5, 3.5, 2.0));
        assert!(!s.raw_calls && s.remote.mcp_per_session && s.remote.gymnasium);
        assert_eq!(s.tool_mode, parley_runtime::settings::ToolMode::Json);
        assert_eq!(s.reasoning, parley_runtime::settings::ReasoningMode::Keep);
        assert_eq!(s.endpoint("http://h:1/v1".into(), None).reasoning, parley_core::ReasoningReplay::Keep);
        assert!(
            s.policy_endpoint("http://h:1/v1".into()).token_ids && !s.endpoint("http://h:1/v1".into(), None).token_ids
        );
        assert_eq!(s.user.kind, parley_runtime::settings::UserKind::Scripted);
        assert_eq!(s.user.review, parley_runtime::settings::UserReview::Judge);
        assert_eq!(s.bad_rows, parley_runtime::settings::BadRows::Skip);
        assert_eq!(s.remote.answer_match, Some(parley_runtime::settings::AnswerMatch::Equals));
        assert_eq!((s.user.sampling.seed, s.max_turns, s.stop_grace), (Some(11), 3, 0));
        assert_eq!((s.max_tool_output, s.max_response_bytes), (100, 1000));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

        /// Any text as a settings file: resolved, or refused as a usage error that names the file.
        #[test]
        fn any_settings_text_parses_or_is_refused(text in ".{0,300}") {
            if let Err(e) = resolve_file(&text) {
                proptest::prop_assert!(e.downcast_ref::<crate::error::UsageError>().is_some(), "{text}: {e}");
                proptest::prop_assert!(e.to_string().contains("parley.toml"), "{text}: {e}");
            }
        }

        /// Known keys with values of any type: resolved, or refused as a usage error.
        #[test]
        fn any_values_of_known_keys_resolve_or_are_usage_errors(
            entries in proptest::collection::vec(
                (
                    proptest::sample::select(vec![
                        "concurrency", "trials", "max_steps", "session_timeout", "call_timeout", "temperature",
                        "top_p", "env", "user", "tool_mode", "bad_rows", "max_tool_output", "shutdown_grace",
                        "base_url", "stop_grace", "num_tasks", "reasoning",
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
            if let Err(e) = resolve_file(&text) {
                proptest::prop_assert!(e.downcast_ref::<crate::error::UsageError>().is_some(), "{text}: {e}");
            }
        }
    }

    #[test]
    fn reward_components_come_from_the_file_or_replace_it_from_flags() {
        let text = "[run]\nreward_min = 0\n\n[[reward]]\nscorer = \"math\"\nweight = 0.9\n\n\
                    [[reward]]\nscorer = \"steps\"\nweight = -0.1\ncap = 1\noptions = { budget = 8 }\n";
        let s = resolve_file(text).unwrap();
        let names: Vec<String> = s.reward.components.iter().map(|c| c.name()).collect();
        assert_eq!(names, ["math", "steps"]);
        assert_eq!((s.reward.components[1].options.budget, s.reward.min), (Some(8.0), Some(0.0)));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("parley.toml");
        std::fs::write(&path, text).unwrap();
        let flags = RunOptions {
            settings: Some(path),
            rewards: RewardOptions { reward: vec!["exact:contains=true".parse().unwrap()], ..RewardOptions::default() },
            ..RunOptions::default()
        };
        let s = flags.resolve().unwrap();
        assert_eq!(s.reward.components.len(), 1);
        assert_eq!(s.reward.components[0].options.contains, Some(true));
        let err = resolve_file("[[reward]]\nscorer = \"steps\"\n").unwrap_err();
        assert!(err.to_string().contains("budget"), "{err}");
        let err = resolve_file("[[reward]]\nscorer = \"math\"\nwieght = 2\n").unwrap_err();
        assert!(err.to_string().contains("wieght"), "{err}");
        let err = resolve_file("[run]\nenv = \"custom\"\ntasks = \"Cargo.toml\"\n").unwrap_err();
        assert!(err.to_string().contains("--reward"), "{err}");
    }

    /// `[[environment]]` tables and `--environment NAME=FILE`: each environment's own keys over
    /// the default's, its own reward in place of the default's, and bad tables named.
    #[test]
    fn hosted_environments_take_their_own_keys_over_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("parley.toml");
        std::fs::write(
            &path,
            "[run]\nconcurrency = 8\nmax_steps = 4\n\n[[reward]]\nscorer = \"exact\"\n\n\
             [[environment]]\nname = \"math\"\nenv = \"custom\"\nconcurrency = 2\nqueue = 0\n\n\
             [[environment.reward]]\nscorer = \"math\"\nweight = 0.8\n\n\
             [[environment]]\nname = \"airline\"\nenv = \"tau2:airline\"\n",
        )
        .unwrap();
        let more = dir.path().join("steps.toml");
        std::fs::write(&more, "[run]\nmax_steps = 9\n").unwrap();
        let policy = PolicyOptions { model: Some("m".into()), ..PolicyOptions::default() };
        let flags = RunOptions { settings: Some(path.clone()), policy, ..RunOptions::default() };
        let hosted = flags.resolve_hosted(&[("steps".into(), more.clone())], Need::Nothing).unwrap();
        let names: Vec<&str> = hosted.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["default", "math", "airline", "steps"]);
        let [default, math, airline, steps] = &hosted[..] else { unreachable!() };
        assert_eq!((default.concurrency, default.queue, default.settings.concurrency), (None, None, 8));
        assert_eq!((math.concurrency, math.queue, math.settings.env), (Some(2), Some(0), EnvKind::Custom));
        assert_eq!(math.settings.reward.components[0].name(), "math", "its own reward");
        assert_eq!(airline.settings.reward.components[0].name(), "exact", "the default's reward");
        assert_eq!((airline.settings.max_steps, steps.settings.max_steps), (4, 9));
        assert!(hosted.iter().all(|h| h.settings.model == "m"), "the flags reach every environment");

        for (table, named) in [
            ("[[environment]]\nenv = \"custom\"\n", "needs a `name`"),
            ("[[environment]]\nname = \"a b\"\n", "a name is"),
            ("[[environment]]\nname = \"default\"\n", "named twice"),
            ("[[environment]]\nname = \"x\"\nmax_stpes = 2\n", "max_stpes"),
            ("[[environment]]\nname = \"x\"\ndb = \"other.db\"\n", "one store"),
            ("[[environment]]\nname = \"x\"\nraw_calls = false\n", "`raw_calls` is the service's"),
        ] {
            std::fs::write(&path, table).unwrap();
            let flags = RunOptions { settings: Some(path.clone()), ..RunOptions::default() };
            let err = flags.resolve_hosted(&[], Need::Nothing).unwrap_err();
            assert!(err.downcast_ref::<crate::error::UsageError>().is_some(), "{table}: {err}");
            assert!(err.to_string().contains(named), "{table}: {err}");
        }
    }

    #[test]
    fn bad_values_are_usage_errors() {
        let err = RunOptions { concurrency: Some(0), ..RunOptions::default() }.resolve().unwrap_err();
        assert!(err.downcast_ref::<crate::error::UsageError>().is_some());
        assert!(err.to_string().contains("--concurrency"));
        let err = resolve_file("[run]\nenv = \"chess\"\n").unwrap_err();
        assert!(err.to_string().contains("chess"));
        let err = resolve_file("[run]\nsession_timeout = 1e20\n").unwrap_err();
        assert!(err.to_string().contains("--session-timeout"), "{err}");
    }

    /// Every `[default: X]` the help of `parley run` names is what a run given nothing gets: the
    /// defaults live in `defaults::` and the resolution, and the help must not drift from them.
    #[test]
    fn the_defaults_the_help_names_are_the_defaults_a_run_gets() {
        use clap::CommandFactory;
        let mut cli = crate::cli::Cli::command();
        let run = cli.find_subcommand_mut("run").expect("parley run");
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("parley.toml");
        std::fs::write(&empty, "").unwrap();
        let resolved =
            RunOptions { settings: Some(empty), ..RunOptions::default() }.resolve_for(Need::Nothing).unwrap();
        let resolved = serde_json::to_value(resolved).unwrap();
        let mut compared = Vec::new();
        for arg in run.get_arguments() {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            let Some(named) = help.split("[default: ").nth(1).and_then(|rest| rest.split(']').next()) else { continue };
            let id = arg.get_id().as_str();
            let Some(actual) = [id.to_owned(), format!("{id}_secs")].iter().find_map(|key| resolved.get(key)) else {
                continue;
            };
            let named = named.split([':', ';']).next().unwrap().trim();
            let agrees = match actual {
                // A rule rather than a value (`the concurrency`) is not compared.
                serde_json::Value::Number(n) => match named.parse::<f64>() {
                    Ok(named) => Some(named) == n.as_f64(),
                    Err(_) => continue,
                },
                serde_json::Value::String(text) => named == text,
                _ => continue,
            };
            assert!(agrees, "--{id}: the help says [default: {named}], a run gets {actual}");
            compared.push(id.to_owned());
        }
        // The settings whose defaults are numbers or names, each found and compared.
        for id in [
            "concurrency",
            "trials",
            "max_steps",
            "max_errors",
            "session_timeout",
            "call_timeout",
            "max_retries",
            "max_response_bytes",
            "max_tool_output",
            "shutdown_grace",
            "max_turns",
            "stop_grace",
            "model",
            "db",
        ] {
            assert!(compared.iter().any(|c| c == id), "--{id}'s default was not compared: {compared:?}");
        }
    }

    #[test]
    fn a_rescore_tries_the_reward_of_its_flags_or_its_settings_file_or_keeps_the_runs() {
        assert!(RewardOptions::default().for_rescore(None).unwrap().is_none(), "nothing named: the run's own");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("try.toml");
        std::fs::write(&path, "[run]\nreward_min = 0\n\n[[reward]]\nscorer = \"math\"\nweight = 0.9\n").unwrap();
        let tried = RewardOptions::default().for_rescore(Some(&path)).unwrap().unwrap();
        assert_eq!((tried.components.len(), tried.components[0].weight, tried.min), (1, 0.9, Some(0.0)));
        let flags = RewardOptions { reward: vec!["exact".parse().unwrap()], ..RewardOptions::default() };
        let tried = flags.for_rescore(Some(&path)).unwrap().unwrap();
        assert_eq!(
            (tried.components[0].name(), tried.min),
            ("exact".to_owned(), Some(0.0)),
            "flags replace the file's"
        );
        std::fs::write(&path, "[run]\nconcurrency = 2\n").unwrap();
        let err = RewardOptions::default().for_rescore(Some(&path)).unwrap_err();
        assert!(err.to_string().contains("no [[reward]] table"), "{err}");
    }
}
