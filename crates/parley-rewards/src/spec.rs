//! A reward component as `parley.toml` declares it (`[[reward]]`: scorer, weight, cap, options)
//! or the command line writes it (`--reward math`, `--reward steps:weight=-0.1,budget=8`), and
//! how it is built into a scorer.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use parley_core::ModelClient;
use parley_http::client::Limits;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::choice::{Choice, GradingMode};
use crate::composite::Component;
use crate::judge::Judge;
use crate::math::MathAnswer;
use crate::reward_model::RewardModel;
use crate::shaped::{Budget, Counted, EnvironmentReward, Format};
use crate::text::{ExactMatch, compile};
use crate::{ScoreError, Scorer};

/// Which scorer a component uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScorerKind {
    /// The final answer equals (or, with `contains`, contains) the row's expected answer; with
    /// `pattern`, the answer is the pattern's last match.
    Exact,
    /// Multiple choice, by NeMo Gym `mcqa`'s grading modes.
    Choice,
    /// Math answer equivalence.
    Math,
    /// An LLM judge with the swap check.
    Judge,
    /// A reward model behind vLLM's pooling API.
    RewardModel,
    /// Agent turns used, as a fraction of `budget`.
    Steps,
    /// Agent output tokens used (estimated), as a fraction of `budget`.
    Tokens,
    /// 1 when the final answer matches `pattern`.
    Format,
    /// The environment's own verifier reward.
    Environment,
}

impl ScorerKind {
    pub const ALL: [ScorerKind; 9] = [
        ScorerKind::Exact,
        ScorerKind::Choice,
        ScorerKind::Math,
        ScorerKind::Judge,
        ScorerKind::RewardModel,
        ScorerKind::Steps,
        ScorerKind::Tokens,
        ScorerKind::Format,
        ScorerKind::Environment,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ScorerKind::Exact => "exact",
            ScorerKind::Choice => "choice",
            ScorerKind::Math => "math",
            ScorerKind::Judge => "judge",
            ScorerKind::RewardModel => "reward-model",
            ScorerKind::Steps => "steps",
            ScorerKind::Tokens => "tokens",
            ScorerKind::Format => "format",
            ScorerKind::Environment => "environment",
        }
    }
}

impl fmt::Display for ScorerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The options of a scorer; each scorer reads the ones it names and refuses none, so one table
/// serves all of them. Unknown keys are refused when the file is read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScorerOptions {
    /// The row field with the expected answer [default: expected_answer].
    pub field: Option<String>,
    /// exact, judge, format: the regex that extracts the answer (or, for format, must match).
    pub pattern: Option<String>,
    /// exact: the answer may contain the expected text.
    pub contains: Option<bool>,
    /// exact: case matters.
    pub case_sensitive: Option<bool>,
    /// choice: overrides the row's `grading_mode`.
    pub grading_mode: Option<GradingMode>,
    /// math: a reply without `\boxed{}` scores 0, as NeMo Gym's `math_with_judge` grades.
    pub require_boxed: Option<bool>,
    /// judge: the prompt template ({question}, {expected_answer}, {generated_answer}).
    pub prompt: Option<String>,
    /// judge: a system message.
    pub system: Option<String>,
    /// judge: the verdict labels [default: [[A=B]] and [[A!=B]]].
    pub equal_label: Option<String>,
    pub not_equal_label: Option<String>,
    /// judge: ask again with the answers swapped [default: true].
    pub swap: Option<bool>,
    /// judge: the reward when the swapped verdict disagrees [default: 0].
    pub reward_if_swap_fails: Option<f64>,
    /// judge, reward-model: the model name [default: the run's judge model].
    pub model: Option<String>,
    /// reward-model: the server, whose `/pooling` is called (`http://host:port`).
    pub base_url: Option<String>,
    /// reward-model: the environment variable that holds the server's API key, sent as a bearer
    /// token; the key itself is never stored.
    pub api_key_env: Option<String>,
    /// steps, tokens: the budget.
    pub budget: Option<f64>,
}

/// One component of a composite reward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewardSpec {
    pub scorer: ScorerKind,
    /// The name in `reward_components` [default: the scorer's name].
    pub name: Option<String>,
    /// The weight of the component [default: 1].
    #[serde(default = "one")]
    pub weight: f64,
    /// The most the scorer's value counts for, before weighting (and `-cap` the least).
    pub cap: Option<f64>,
    /// Whether this component says if the session succeeded: with any such component, a session
    /// succeeds when each of them scores 1 (shaping terms then do not hide success).
    #[serde(default)]
    pub success: bool,
    #[serde(default)]
    pub options: ScorerOptions,
}

fn one() -> f64 {
    1.0
}

impl RewardSpec {
    pub fn new(scorer: ScorerKind) -> RewardSpec {
        RewardSpec { scorer, name: None, weight: 1.0, cap: None, success: false, options: ScorerOptions::default() }
    }

    /// The component's name in `reward_components`.
    pub fn name(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.scorer.as_str().to_owned())
    }

    /// Checks the values that need no endpoint: weights and caps are finite, budgets positive,
    /// patterns compile.
    pub fn check(&self) -> Result<(), ScoreError> {
        let name = self.name();
        if !self.weight.is_finite() {
            return Err(ScoreError::Invalid(format!("reward `{name}`: weight must be a finite number")));
        }
        if self.cap.is_some_and(|c| !c.is_finite() || c < 0.0) {
            return Err(ScoreError::Invalid(format!("reward `{name}`: cap must be a number of at least 0")));
        }
        if let Some(pattern) = &self.options.pattern {
            compile(pattern).map_err(|e| ScoreError::Invalid(format!("reward `{name}`: {e}")))?;
        }
        match self.scorer {
            ScorerKind::Steps | ScorerKind::Tokens => match self.options.budget {
                Some(b) if b.is_finite() && b > 0.0 => {}
                _ => {
                    return Err(ScoreError::Invalid(format!(
                        "reward `{name}`: the {} scorer needs a budget greater than 0 (budget=N)",
                        self.scorer
                    )));
                }
            },
            ScorerKind::Format if self.options.pattern.is_none() => {
                return Err(ScoreError::Invalid(format!("reward `{name}`: the format scorer needs a pattern")));
            }
            _ => {}
        }
        Ok(())
    }

    /// Builds the component; `endpoints` holds what the judge and the reward model talk to.
    pub fn build(&self, endpoints: &Endpoints) -> Result<Component, ScoreError> {
        self.check()?;
        let o = &self.options;
        let field = o.field.clone().unwrap_or_else(|| "expected_answer".into());
        let pattern = o.pattern.as_deref().map(compile).transpose()?;
        let scorer: Arc<dyn Scorer> = match self.scorer {
            ScorerKind::Exact => Arc::new(ExactMatch {
                field,
                contains: o.contains.unwrap_or(false),
                case_sensitive: o.case_sensitive.unwrap_or(false),
                extract: pattern,
            }),
            ScorerKind::Choice => Arc::new(Choice { mode: o.grading_mode }),
            ScorerKind::Math => Arc::new(MathAnswer { field, require_boxed: o.require_boxed.unwrap_or(false) }),
            ScorerKind::Judge => {
                let client = endpoints.judge.clone().ok_or_else(|| {
                    ScoreError::Invalid(format!(
                        "reward `{}`: the judge scorer needs an endpoint (--judge-base-url, or the agent's)",
                        self.name()
                    ))
                })?;
                let model = o.model.clone().unwrap_or_else(|| endpoints.judge_model.clone());
                let mut judge = Judge::new(client, &model);
                judge.field = field;
                judge.extract = pattern;
                judge.swap = o.swap.unwrap_or(true);
                judge.reward_if_swap_fails = o.reward_if_swap_fails.unwrap_or(0.0);
                judge.system = o.system.clone();
                if let Some(prompt) = &o.prompt {
                    judge.prompt = prompt.clone();
                }
                if let Some(label) = &o.equal_label {
                    judge.equal_label = label.clone();
                }
                if let Some(label) = &o.not_equal_label {
                    judge.not_equal_label = label.clone();
                }
                Arc::new(judge)
            }
            ScorerKind::RewardModel => {
                let name = self.name();
                let base = o.base_url.as_deref().ok_or_else(|| {
                    ScoreError::Invalid(format!("reward `{name}`: the reward-model scorer needs base_url"))
                })?;
                let key = match &o.api_key_env {
                    Some(var) => Some(std::env::var(var).map_err(|_| {
                        ScoreError::Invalid(format!(
                            "reward `{name}`: the API key variable `{var}` is not set; export it, or leave \
                             api_key_env out for a reward model without a key"
                        ))
                    })?),
                    None => None,
                };
                let model = o.model.clone().unwrap_or_else(|| endpoints.judge_model.clone());
                Arc::new(RewardModel::new(base, &model, &endpoints.limits, key.as_deref())?)
            }
            ScorerKind::Steps | ScorerKind::Tokens => Arc::new(Budget {
                counted: if self.scorer == ScorerKind::Steps { Counted::Steps } else { Counted::Tokens },
                budget: o.budget.unwrap_or(1.0),
            }),
            ScorerKind::Format => Arc::new(Format {
                pattern: pattern.ok_or_else(|| ScoreError::Invalid("the format scorer needs a pattern".into()))?,
            }),
            ScorerKind::Environment => Arc::new(EnvironmentReward),
        };
        Ok(Component {
            name: self.name(),
            weight: self.weight,
            cap: self.cap,
            success: self.success,
            scorer,
            kind: self.scorer,
        })
    }
}

/// What components that call out need: the judge's client and model, and the limits of a
/// reward model's calls (the run's timeout, retries and body bound).
#[derive(Clone, Default)]
pub struct Endpoints {
    pub judge: Option<Arc<dyn ModelClient>>,
    pub judge_model: String,
    pub limits: Limits,
}

impl fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoints").field("judge_model", &self.judge_model).finish_non_exhaustive()
    }
}

/// `SCORER[:key=value,...]`: `weight`, `cap`, `name` and `success` belong to the component, every other key
/// to the scorer's options. A value is read as JSON when it is JSON (`true`, `8`, `-0.1`) and
/// as text otherwise.
impl FromStr for RewardSpec {
    type Err = ScoreError;

    fn from_str(text: &str) -> Result<RewardSpec, ScoreError> {
        let (scorer, rest) = text.split_once(':').unwrap_or((text, ""));
        let mut table = Map::new();
        table.insert("scorer".into(), Value::String(scorer.trim().to_owned()));
        let mut options = Map::new();
        for pair in rest.split(',').filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| ScoreError::Invalid(format!("--reward {text}: `{pair}` is not KEY=VALUE")))?;
            let value = serde_json::from_str(value.trim()).unwrap_or_else(|_| Value::String(value.trim().to_owned()));
            let key = key.trim().replace('-', "_");
            match key.as_str() {
                "weight" | "cap" | "name" | "success" => table.insert(key, value),
                _ => options.insert(key, value),
            };
        }
        table.insert("options".into(), Value::Object(options));
        let spec: RewardSpec = serde_json::from_value(Value::Object(table)).map_err(|e| {
            let names: Vec<&str> = ScorerKind::ALL.iter().map(|k| k.as_str()).collect();
            ScoreError::Invalid(format!("--reward {text}: {e} (scorers: {})", names.join(", ")))
        })?;
        spec.check()?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_form_reads_components_and_options() {
        let spec: RewardSpec = "steps:weight=-0.1,budget=8,cap=1,name=efficiency".parse().unwrap();
        assert_eq!(
            (spec.scorer, spec.weight, spec.cap, spec.name()),
            (ScorerKind::Steps, -0.1, Some(1.0), "efficiency".into())
        );
        assert_eq!(spec.options.budget, Some(8.0));
        let spec: RewardSpec = "choice:grading-mode=lenient_boxed".parse().unwrap();
        assert_eq!(spec.options.grading_mode, Some(GradingMode::LenientBoxed));
        assert_eq!("math".parse::<RewardSpec>().unwrap(), RewardSpec::new(ScorerKind::Math));
    }

    #[test]
    fn bad_components_are_refused_by_name() {
        for (text, says) in [
            ("chess", "scorers:"),
            ("steps", "budget"),
            ("steps:budget=0", "budget"),
            ("math:colour=red", "colour"),
            ("format", "pattern"),
            ("exact:pattern=(", "does not compile"),
            ("math:weight", "KEY=VALUE"),
        ] {
            let err = text.parse::<RewardSpec>().unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
        let judge = RewardSpec::new(ScorerKind::Judge);
        assert!(judge.build(&Endpoints::default()).unwrap_err().to_string().contains("endpoint"));
        let keyed: RewardSpec =
            "reward-model:base_url=http://127.0.0.1:9,api_key_env=PARLEY_NO_SUCH_REWARD_KEY".parse().unwrap();
        let error = keyed.build(&Endpoints::default()).unwrap_err().to_string();
        assert!(error.contains("`PARLEY_NO_SUCH_REWARD_KEY` is not set"), "{error}");
        let unkeyed: RewardSpec = "reward-model:base_url=http://127.0.0.1:9".parse().unwrap();
        assert!(unkeyed.build(&Endpoints::default()).is_ok());
    }
}
