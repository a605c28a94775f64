//! The stub's configuration: how many tool calls to make, latency, fault fractions, seed.

use std::fmt;
use std::time::Duration;

/// How the stub answers. See the crate documentation for what each field does to an answer.
#[derive(Debug, Clone)]
pub struct StubConfig {
    /// Tool-call answers per user turn before the final text (default 2).
    pub tool_calls: u32,
    /// Time from a request's arrival to its answer, errors included (default 0).
    pub latency: Duration,
    /// How widely the latency varies, as a real model's does with the length of what it writes:
    /// each answer's latency is drawn evenly from `latency` less half of this to `latency` plus
    /// half, by the request's arrival order and the seed (default 0: every answer alike).
    pub latency_spread: Duration,
    /// Fractions of requests that get each fault (default: none).
    pub faults: Faults,
    /// Mixed into every fault draw, so different seeds fault on different requests (default 0).
    pub seed: u64,
    /// How long a `hang` fault sleeps before answering normally (default 3600 s).
    pub hang: Duration,
    /// The value of the `Retry-After` header (seconds) on rate-limit faults (default 1; 0 allowed).
    pub retry_after_secs: u64,
    /// The final text; `None` gives the default described in the crate documentation.
    pub final_text: Option<String>,
    /// Turns a simulated user takes before it stops (see the crate docs).
    pub user_turns: u32,
    /// Faults the simulated user makes on purpose, each in this share of the conversations
    /// (default: none).
    pub user_faults: Vec<(crate::UserFaultMode, f64)>,
    /// The size of a `huge` fault's body, in bytes (default 32 MiB).
    pub huge_bytes: usize,
    /// Whether answers carry reasoning, and in which Chat Completions field (default: none).
    pub reasoning: Option<StubReasoning>,
    /// Answers from a task file, for requests whose first user text is a row's (default: none).
    pub answers: Option<std::sync::Arc<crate::answers::AnswerKey>>,
    /// Whether a judge prompt (its last `GOLD:` and `CANDIDATE:` sections) is answered with a
    /// verdict: `[[A=B]]` when the candidate contains the gold text, else `[[A!=B]]`; and a
    /// judged review of a simulated user by [`crate::user_review`]'s two rules.
    pub judge: bool,
    /// Whether Chat Completions answers carry token ids and log-probs when a request asks for
    /// them, and how prompts are tokenized (default: never).
    pub token_ids: Option<crate::TokenMode>,
    /// Scripted sessions, by the seed their agent's requests carry (default: none).
    pub scripts: Option<std::sync::Arc<crate::Scripts>>,
    /// A reward-hack probe whose script answers every agent request (see [`crate::Probe`]); it
    /// reads the right answers and the format from [`StubConfig::answers`] (default: none).
    pub probe: Option<crate::Probe>,
}

/// The Chat Completions field a reasoning model's thoughts come in. On `/v1/responses` every
/// choice gives one `reasoning` output item with a summary and `encrypted_content`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StubReasoning {
    /// `message.reasoning_content`, as vLLM before 0.11, DeepSeek and SGLang write it.
    ReasoningContent,
    /// `message.reasoning`, as newer vLLM writes it.
    Reasoning,
    /// `reasoning_content` on even steps of a turn (0, 2, …), `reasoning` on odd ones.
    Rotate,
}

impl StubReasoning {
    /// The field for step `k` of a turn (the tool results so far).
    pub(crate) fn chat_field(self, k: u32) -> &'static str {
        match self {
            StubReasoning::ReasoningContent => "reasoning_content",
            StubReasoning::Reasoning => "reasoning",
            StubReasoning::Rotate if k.is_multiple_of(2) => "reasoning_content",
            StubReasoning::Rotate => "reasoning",
        }
    }
}

impl std::str::FromStr for StubReasoning {
    type Err = String;

    fn from_str(s: &str) -> Result<StubReasoning, String> {
        match s {
            "reasoning_content" | "reasoning-content" => Ok(StubReasoning::ReasoningContent),
            "reasoning" => Ok(StubReasoning::Reasoning),
            "rotate" => Ok(StubReasoning::Rotate),
            other => Err(format!("`{other}` is not a reasoning field: use reasoning_content, reasoning or rotate")),
        }
    }
}

impl Default for StubConfig {
    fn default() -> Self {
        Self {
            tool_calls: 2,
            latency: Duration::ZERO,
            latency_spread: Duration::ZERO,
            faults: Faults::default(),
            seed: 0,
            hang: Duration::from_secs(3600),
            retry_after_secs: 1,
            final_text: None,
            user_turns: 2,
            user_faults: Vec::new(),
            huge_bytes: 32 << 20,
            reasoning: None,
            answers: None,
            judge: false,
            scripts: None,
            token_ids: None,
            probe: None,
        }
    }
}

impl StubConfig {
    /// Checks the configuration before a port is bound: every fault fraction must lie in
    /// `[0, 1]` and together they must not exceed 1, otherwise later fault kinds would be
    /// silently starved by earlier ones.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, fraction) in self.faults.named() {
            if !(0.0..=1.0).contains(&fraction) {
                return Err(ConfigError::FractionOutOfRange { name, fraction });
            }
        }
        for &(mode, fraction) in &self.user_faults {
            if !(0.0..=1.0).contains(&fraction) {
                return Err(ConfigError::FractionOutOfRange { name: mode.as_str(), fraction });
            }
        }
        let total = self.faults.total();
        // A little slack so that, say, five fractions of 0.2 read from a command line pass.
        if total > 1.0 + 1e-9 {
            return Err(ConfigError::FractionsExceedOne { total });
        }
        Ok(())
    }
}

/// Fractions of requests, each in `[0, 1]`, that get each kind of fault. Kinds are drawn in
/// the order of the fields, from one uniform draw per request, so the fractions add up.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// Answer 429 with `Retry-After` and a `rate_limit_error`.
    pub rate_limit: f64,
    /// Answer 500 with a `server_error`.
    pub server_error: f64,
    /// Sleep [`StubConfig::hang`], then answer normally.
    pub hang: f64,
    /// Answer 200 with a truncated JSON body.
    pub malformed: f64,
    /// Give a tool call invalid arguments (only when the answer is a tool call).
    pub bad_arguments: f64,
    /// Send 200 and its headers, then drop the connection before any of the body.
    pub reset: f64,
    /// Answer 200 with a valid completion whose text is [`StubConfig::huge_bytes`] long.
    pub huge: f64,
}

impl Faults {
    /// The fractions with their names, in the order faults are drawn.
    pub(crate) fn named(&self) -> [(&'static str, f64); 7] {
        [
            ("rate_limit", self.rate_limit),
            ("server_error", self.server_error),
            ("hang", self.hang),
            ("malformed", self.malformed),
            ("bad_arguments", self.bad_arguments),
            ("reset", self.reset),
            ("huge", self.huge),
        ]
    }

    fn total(&self) -> f64 {
        self.named().iter().map(|(_, fraction)| fraction).sum()
    }

    /// Whether any fault can happen; when none can, the stub skips fault bookkeeping entirely.
    pub(crate) fn any(&self) -> bool {
        self.named().iter().any(|(_, fraction)| *fraction > 0.0)
    }
}

/// Why a [`StubConfig`] was rejected.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigError {
    /// One fault fraction is not in `[0, 1]` (or is NaN).
    FractionOutOfRange { name: &'static str, fraction: f64 },
    /// The fault fractions add up to more than 1.
    FractionsExceedOne { total: f64 },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FractionOutOfRange { name, fraction } => {
                write!(f, "fault fraction `{name}` is {fraction}; it must be a number between 0 and 1")
            }
            Self::FractionsExceedOne { total } => {
                write!(f, "fault fractions add up to {total}; they must add up to at most 1")
            }
        }
    }
}

impl std::error::Error for ConfigError {}
