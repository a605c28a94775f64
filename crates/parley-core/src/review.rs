//! A review of a simulated user's turns: the simulator's own faults, which a trainer should
//! not punish the policy for. Cheap (rules over the transcript, no model call), so it runs on
//! every session of an LLM user. Each finding names the user's message and the rule it broke.
//!
//! The rules: the turn is **empty** or **repeats** the user's previous turn (six words or more); the user
//! **speaks as the agent** (offers help, claims to have done the agent's action, calls tools it
//! was not given); it **leaks its instructions** (ten words of its system prompt verbatim, "as
//! an AI", a role label, a prompt tag); it **ends early** (stops, transfers or goes out of scope
//! before the agent could have served the scenario); it **talks after its stop** marker.
//!
//! Two more rules need a reader, and are asked of an LLM judge when a run wants them
//! ([`judge`]): the user left its scenario (**off scenario**), or asserted what its scenario
//! does not give it (**unknown info**).

pub mod judge;

use serde::{Deserialize, Serialize};

use crate::message::{Message, Role};
use crate::user::UserStop;

/// A rule of the review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    Empty,
    Repeats,
    SpeaksAsAgent,
    LeaksInstructions,
    EndsEarly,
    TalksAfterStop,
    /// Judged: the user departed from its scenario.
    OffScenario,
    /// Judged: the user stated what its scenario does not give it.
    UnknownInfo,
}

impl Rule {
    pub const ALL: [Rule; 8] = [
        Rule::Empty,
        Rule::Repeats,
        Rule::SpeaksAsAgent,
        Rule::LeaksInstructions,
        Rule::EndsEarly,
        Rule::TalksAfterStop,
        Rule::OffScenario,
        Rule::UnknownInfo,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Empty => "empty",
            Rule::Repeats => "repeats",
            Rule::SpeaksAsAgent => "speaks_as_agent",
            Rule::LeaksInstructions => "leaks_instructions",
            Rule::EndsEarly => "ends_early",
            Rule::TalksAfterStop => "talks_after_stop",
            Rule::OffScenario => "off_scenario",
            Rule::UnknownInfo => "unknown_info",
        }
    }

    pub fn parse(text: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One fault of the simulated user: its message (by position in the transcript), the rule, and
/// what in the message broke it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserFault {
    pub seq: u32,
    pub rule: Rule,
    pub detail: String,
}

/// What the user was told and given, for the rules that compare against it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Brief<'a> {
    /// The user's system prompt (its guidelines and scenario).
    pub system_prompt: &'a str,
    /// Whether the user was given tools of its own (dual control).
    pub has_tools: bool,
}

/// Words a message repeated word for word must have to be a fault.
const REPEATED_WORDS: usize = 6;

/// Words of the system prompt that, met in this order in a user message, are a quotation.
const QUOTED_WORDS: usize = 10;

/// Reviews the user's messages of `transcript`.
pub fn review(transcript: &[Message], brief: Brief<'_>) -> Vec<UserFault> {
    let quotable = shingles(brief.system_prompt);
    let mut faults = Vec::new();
    let mut previous: Option<String> = None;
    let mut agent_spoke = false;
    let mut user_spoke = false;
    for (seq, message) in transcript.iter().enumerate() {
        let seq = seq as u32;
        let mut fault = |rule: Rule, detail: String| faults.push(UserFault { seq, rule, detail });
        match message.role {
            Role::Assistant if user_spoke => agent_spoke = true,
            Role::User => {}
            _ => continue,
        }
        if message.role != Role::User {
            continue;
        }
        let text = message.content_str();
        let stop = UserStop::find(text);
        let said = UserStop::ALL.iter().fold(text.to_owned(), |t, s| t.replace(s.marker(), " "));
        let said = said.trim();
        if !message.tool_calls.is_empty() && !brief.has_tools {
            let names: Vec<&str> = message.tool_calls.iter().map(|c| c.name.as_str()).collect();
            fault(Rule::SpeaksAsAgent, format!("called {} without tools of its own", names.join(", ")));
        }
        if said.is_empty() && stop.is_none() && message.tool_calls.is_empty() {
            fault(Rule::Empty, "an empty message".into());
        }
        let normal = normalise(said);
        // A short acknowledgement ("yes, please go ahead") may come twice from any person.
        let substantive = normal.split(' ').count() >= REPEATED_WORDS;
        if substantive && previous.as_deref() == Some(normal.as_str()) {
            fault(Rule::Repeats, excerpt(said));
        }
        if let Some(phrase) = AGENT_PHRASES.iter().find(|p| normal.contains(*p)) {
            fault(Rule::SpeaksAsAgent, format!("\"{phrase}\""));
        }
        if let Some(leak) = leak(said, &normal, &quotable) {
            fault(Rule::LeaksInstructions, leak);
        }
        if let Some(stop) = stop {
            if !agent_spoke {
                fault(Rule::EndsEarly, format!("{} before the agent answered", stop.marker()));
            }
            let after = text.rsplit(stop.marker()).next().unwrap_or_default();
            let after = UserStop::ALL.iter().fold(after.to_owned(), |t, s| t.replace(s.marker(), ""));
            if after.chars().any(char::is_alphanumeric) {
                fault(Rule::TalksAfterStop, excerpt(after.trim()));
            }
        }
        if !normal.is_empty() {
            previous = Some(normal);
        }
        user_spoke = true;
    }
    faults
}

/// What an agent says and a customer does not: offers of help, and actions only the agent
/// can take, claimed as done. Matched in lower case with whitespace collapsed.
const AGENT_PHRASES: &[&str] = &[
    "how can i help you",
    "how may i help you",
    "how can i assist you",
    "how may i assist you",
    "is there anything else i can help",
    "is there anything else i can do for you",
    // What a small model playing the user drifts into: the assistant it was trained to be.
    "i'm here to help",
    "i am here to help",
    "i'm a chatbot",
    "i am a chatbot",
    "designed to assist",
    "i'm an ai assistant",
    "i am an ai assistant",
    "i have cancelled your",
    "i've cancelled your",
    "i have canceled your",
    "i've canceled your",
    "i have updated your",
    "i've updated your",
    "i have processed your",
    "i've processed your",
    "i have issued a refund",
    "i've issued a refund",
    "i have booked your",
    "i've booked your",
    "your reservation has been cancelled by me",
];

/// Markers of a prompt leaking into the conversation.
const LEAK_MARKERS: &[&str] = &["as an ai", "language model", "<scenario>", "</scenario>", "<persona>", "</persona>"];

fn leak(said: &str, normal: &str, quotable: &std::collections::HashSet<String>) -> Option<String> {
    if let Some(marker) = LEAK_MARKERS.iter().find(|m| normal.contains(*m)) {
        return Some(format!("\"{marker}\""));
    }
    let labelled = said.lines().find_map(|line| {
        let head = line.trim_start().split(':').next()?.trim().to_lowercase();
        (line.contains(':') && ["user", "assistant", "customer", "agent", "system"].contains(&head.as_str()))
            .then(|| format!("a role label: \"{}:\"", line.trim_start().split(':').next().unwrap_or_default()))
    });
    if labelled.is_some() {
        return labelled;
    }
    let words: Vec<&str> = normal.split(' ').collect();
    words
        .windows(QUOTED_WORDS)
        .map(|w| w.join(" "))
        .find(|w| quotable.contains(w))
        .map(|w| format!("quotes its prompt: \"{w}\""))
}

/// Every run of [`QUOTED_WORDS`] words of `text`, normalised.
fn shingles(text: &str) -> std::collections::HashSet<String> {
    let normal = normalise(text);
    let words: Vec<&str> = normal.split(' ').filter(|w| !w.is_empty()).collect();
    words.windows(QUOTED_WORDS).map(|w| w.join(" ")).collect()
}

/// Lower case, punctuation at word ends dropped, whitespace collapsed.
fn normalise(text: &str) -> String {
    text.split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'' && c != '<' && c != '>' && c != '/'))
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

fn excerpt(text: &str) -> String {
    let cut: String = text.chars().take(80).collect();
    if cut.len() < text.len() { format!("\"{cut}…\"") } else { format!("\"{cut}\"") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;

    fn rules(transcript: &[Message], brief: Brief<'_>) -> Vec<(u32, Rule)> {
        review(transcript, brief).into_iter().map(|f| (f.seq, f.rule)).collect()
    }

    const PROMPT: &str = "You play a customer. <scenario> You want to cancel reservation ABC123 because your \
        plans changed and you would like a full refund to the original card </scenario>";

    fn brief() -> Brief<'static> {
        Brief { system_prompt: PROMPT, has_tools: false }
    }

    #[test]
    fn a_clean_conversation_has_no_fault() {
        let t = [
            Message::assistant("Hello! How can I help you today?"),
            Message::user("Hi, I'd like to cancel my reservation ABC123."),
            Message::assistant("Done. Anything else?"),
            Message::user("Yes, please go ahead."),
            Message::assistant("Shall I also refund it?"),
            Message::user("Yes, please go ahead."),
            Message::user("No, thanks. ###STOP###"),
        ];
        assert_eq!(rules(&t, brief()), [], "a short acknowledgement twice is no fault");
    }

    #[test]
    fn each_rule_names_its_message() {
        let t = [
            Message::user("###STOP###"),
            Message::assistant("Hello, how can I help?"),
            Message::user("Please cancel my flight to Boston tomorrow."),
            Message::user("please   cancel my flight to boston tomorrow"),
            Message::user(""),
            Message::user("How can I help you with your booking?"),
            Message::user("As an AI, I cannot say."),
            Message::user("User: cancel it"),
            Message::user("I want to cancel reservation ABC123 because your plans changed and you would like a refund"),
            Message::user("Thanks ###STOP### Also, one more thing"),
        ];
        assert_eq!(
            rules(&t, brief()),
            [
                (0, Rule::EndsEarly),
                (3, Rule::Repeats),
                (4, Rule::Empty),
                (5, Rule::SpeaksAsAgent),
                (6, Rule::LeaksInstructions),
                (7, Rule::LeaksInstructions),
                (8, Rule::LeaksInstructions),
                (9, Rule::TalksAfterStop),
            ]
        );
    }

    #[test]
    fn tool_calls_are_the_agents_unless_the_user_has_tools() {
        let mut call = Message::user("");
        call.tool_calls.push(ToolCall { id: "c1".into(), name: "cancel_reservation".into(), arguments: "{}".into() });
        let t = [Message::assistant("Hello."), call];
        assert_eq!(rules(&t, brief()), [(1, Rule::SpeaksAsAgent)]);
        assert_eq!(rules(&t, Brief { has_tools: true, ..brief() }), []);
    }

    #[test]
    fn a_user_that_drifts_into_the_assistant_speaks_as_the_agent() {
        // SmolLM2-135M's first turn as tau2 mock's user, word for word.
        let said = "I'm here to help with any project or task you're working on. I'm a chatbot designed to \
                    assist with any kind of project or task.";
        let t = [Message::assistant("Hi! How can I help you today?"), Message::user(said)];
        assert_eq!(rules(&t, brief()), [(1, Rule::SpeaksAsAgent)]);
        let customer = [Message::assistant("Hi!"), Message::user("I'm here to change my flight, please.")];
        assert_eq!(rules(&customer, brief()), []);
    }
}
