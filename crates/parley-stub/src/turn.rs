//! The format-neutral view of one model request and the stub's decision about it: a tool call
//! or a final text. The chat and responses modules translate to and from their wire formats.

use std::borrow::Cow;

use serde_json::Value;

use crate::config::StubConfig;
use crate::fault::BadArguments;
use crate::hash::Fnv;
use crate::server::CallIds;
use crate::synth::synthesize;

/// The final text when there is neither a configured text nor a tool result to echo.
pub(crate) const GREETING: &str = "Hello from parley-stub.";

/// What the stub needs to know about a request, whichever API it came through.
#[derive(Debug)]
pub(crate) struct Turn<'a> {
    pub(crate) model: &'a str,
    /// The conversation key's hash (see [`crate::conversation_key`]).
    pub(crate) conversation: u64,
    /// The hash of the system text alone: the same at every turn of a simulated user, whose
    /// first `user` message (the agent's latest words, when the agent did not open) may change.
    pub(crate) instructions: u64,
    /// Messages (chat) or input items (responses) in the request.
    pub(crate) messages: usize,
    /// Tool results after the last user message: how many tool calls this turn has made.
    pub(crate) tool_results: u32,
    /// The text of each of those tool results, in order.
    pub(crate) tool_outputs: Vec<Cow<'a, str>>,
    /// Function tools, in request order; other tool kinds are left out.
    pub(crate) tools: Vec<Tool<'a>>,
    /// `tool_choice` was `"none"`.
    pub(crate) tools_disabled: bool,
    /// The JSON schema of a structured-output request.
    pub(crate) json_schema: Option<&'a Value>,
    /// Characters of every message's text, for the usage estimate.
    pub(crate) prompt_chars: usize,
    /// For a simulated user's request (its system text names `###STOP###`): how many turns the
    /// user has had, i.e. the request's `assistant` messages.
    pub(crate) user_turns: Option<usize>,
    /// The text of the first user message, which an answer key looks answers up by.
    pub(crate) first_user: Option<Cow<'a, str>>,
    /// The request's `seed`, which a script looks its session up by.
    pub(crate) seed: Option<u64>,
    /// Tool results in the whole request: the calls this conversation's agent has made.
    pub(crate) calls_made: usize,
}

/// What a simulated user says while it goes on, and when it is done.
pub(crate) const USER_GOES_ON: &str = "Yes, please go ahead.";
pub(crate) const USER_STOPS: &str = "Thank you, that is all. ###STOP###";

/// Whether a system text is a user simulator's instructions.
pub(crate) fn simulates_user(system: Option<&str>) -> bool {
    system.is_some_and(|s| s.contains("###STOP###"))
}

/// A function tool offered by the request.
#[derive(Debug)]
pub(crate) struct Tool<'a> {
    pub(crate) name: &'a str,
    pub(crate) parameters: Option<&'a Value>,
}

/// The stub's answer to a turn.
#[derive(Debug)]
pub(crate) enum Answer<'a> {
    ToolCall {
        /// Hash of (conversation, tool results so far); the wire ids are built from it.
        id: u64,
        name: &'a str,
        arguments: String,
    },
    Text(String),
}

/// A reasoning model's thought before `answer`, at step `k` of its turn.
pub(crate) fn thought(answer: &Answer<'_>, k: u32) -> String {
    match answer {
        Answer::ToolCall { name, .. } => format!("Step {k}: the task needs {name}, so I call it."),
        Answer::Text(_) => format!("Step {k}: I have what I need, so I answer."),
    }
}

impl Answer<'_> {
    /// Characters of the generated output, for the usage estimate.
    pub(crate) fn output_chars(&self) -> usize {
        match self {
            Self::ToolCall { arguments, .. } => arguments.chars().count(),
            Self::Text(text) => text.chars().count(),
        }
    }
}

impl<'a> Turn<'a> {
    /// Decides the answer. `bad_arguments` replaces a tool call's arguments (the fault);
    /// it is ignored when the answer is a text.
    pub(crate) fn answer(
        &self,
        config: &StubConfig,
        bad_arguments: Option<BadArguments>,
        call_ids: CallIds,
    ) -> Answer<'a> {
        let k = self.tool_results;
        let tools = if self.tools_disabled { 0 } else { self.tools.len() };
        if let Some(probe) = config.probe.filter(|_| self.user_turns.is_none() && !self.judged(config)) {
            return match probe.step(&self.seen(config, tools)) {
                crate::probe::Step::Call if tools > 0 => self.call(bad_arguments, call_ids),
                crate::probe::Step::Call => Answer::Text(String::new()),
                crate::probe::Step::Say(text) => Answer::Text(text),
            };
        }
        if let Some(answer) = self.scripted(config, call_ids) {
            return answer;
        }
        if tools > 0 && k < config.tool_calls {
            return self.call(bad_arguments, call_ids);
        }
        let text = if let Some(schema) = self.json_schema {
            synthesize(schema).to_string()
        } else if let Some(turns) = self.user_turns {
            let stops_at = config.user_turns as usize;
            let faulty = crate::user_faults::drawn(&config.user_faults, config.seed, self.instructions);
            match faulty.and_then(|mode| mode.says(turns, stops_at)) {
                Some(text) => text,
                None if turns < stops_at => USER_GOES_ON,
                None => USER_STOPS,
            }
            .to_owned()
        } else if let Some(judgement) =
            self.first_user.as_deref().filter(|_| config.judge).and_then(crate::answers::judgement)
        {
            judgement
        } else if let Some(text) =
            config.answers.as_ref().and_then(|key| key.answer(self.first_user.as_deref()?, config.seed))
        {
            text
        } else if let Some(text) = &config.final_text {
            text.clone()
        } else if let Some(result) = self.tool_outputs.last() {
            format!("Result: {result}")
        } else {
            GREETING.to_owned()
        };
        Answer::Text(text)
    }
}

impl<'a> Turn<'a> {
    /// A call of tool number *k* mod the number of tools, *k* the tool results so far.
    fn call(&self, bad_arguments: Option<BadArguments>, call_ids: CallIds) -> Answer<'a> {
        let k = self.tool_results;
        // `k` fits in usize on every platform Rust supports with std.
        let tool = &self.tools[k as usize % self.tools.len()];
        let arguments = match (bad_arguments, tool.parameters) {
            (Some(bad), _) => bad.text().to_owned(),
            (None, Some(parameters)) => synthesize(parameters).to_string(),
            // A function without parameters takes an empty object.
            (None, None) => "{}".to_owned(),
        };
        Answer::ToolCall { id: self.call_id(call_ids, k.into()), name: tool.name, arguments }
    }

    /// An agent's answer from its session's script: the next call it has not made, else the
    /// closing text; `None` for a session with no script, or a call the request offers no tool for.
    fn scripted(&self, config: &StubConfig, call_ids: CallIds) -> Option<Answer<'a>> {
        let script = config.scripts.as_ref()?.get(self.seed?).filter(|_| self.user_turns.is_none())?;
        let Some((name, arguments)) = script.calls.get(self.calls_made) else {
            return Some(Answer::Text(script.closing.clone()));
        };
        let tool = self.tools.iter().find(|t| t.name == name)?;
        let id = self.call_id(call_ids, self.calls_made as u64);
        Some(Answer::ToolCall { id, name: tool.name, arguments: arguments.clone() })
    }

    /// The id of the conversation's call number `n`: a hash of the two, or 0 for every call when
    /// the stub repeats its ids on purpose.
    fn call_id(&self, call_ids: CallIds, n: u64) -> u64 {
        match call_ids {
            CallIds::PerTurn => Fnv::new().u64(self.conversation).u64(n).finish(),
            CallIds::Repeated => 0,
        }
    }

    /// Whether the request is a judge prompt the stub answers with a verdict.
    fn judged(&self, config: &StubConfig) -> bool {
        config.judge && self.first_user.as_deref().and_then(crate::answers::judgement).is_some()
    }

    /// What a probe's script reads of this request: the question, the row the answer key holds
    /// for it, the tools offered and the turn's tool results.
    fn seen<'s>(&'s self, config: &'s StubConfig, tools: usize) -> crate::probe::Seen<'s> {
        let question = self.first_user.as_deref().unwrap_or("");
        let key = config.answers.as_deref();
        let row = key.and_then(|key| key.row(question));
        crate::probe::Seen {
            question,
            right: row.map(|r| r.right.as_str()),
            letters: row.map_or(&[], |r| r.letters.as_slice()),
            format: key.map_or("{answer}", |key| key.format.as_str()),
            tools,
            tool_outputs: self.tool_outputs.iter().map(|o| o.as_ref()).collect(),
        }
    }
}

/// The text of a message's `content`: a string as is, the `text` fields of an array of parts
/// joined together, nothing otherwise (`null`, images).
pub(crate) fn text_of(content: Option<&Value>) -> Cow<'_, str> {
    match content {
        Some(Value::String(text)) => Cow::Borrowed(text),
        Some(Value::Array(parts)) => {
            let mut texts = parts.iter().filter_map(|part| part.get("text").and_then(Value::as_str));
            match (texts.next(), texts.next()) {
                (None, _) => Cow::Borrowed(""),
                // The usual single-part message needs no allocation.
                (Some(only), None) => Cow::Borrowed(only),
                (Some(first), Some(second)) => {
                    let mut joined = format!("{first}{second}");
                    texts.for_each(|text| joined.push_str(text));
                    Cow::Owned(joined)
                }
            }
        }
        _ => Cow::Borrowed(""),
    }
}

/// The usage estimate: a quarter of the characters, at least 1.
pub(crate) fn tokens(chars: usize) -> usize {
    (chars / 4).max(1)
}
