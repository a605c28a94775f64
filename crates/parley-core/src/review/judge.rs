//! The judged review of a simulated user (`--user-review judge`): what rules cannot see, asked of
//! an LLM judge. Whether the user kept to its scenario (`off_scenario`), and whether it asserted
//! what its scenario does not give it (`unknown_info`, tau2's name for what the user must not
//! know). One call per session, at temperature 0, so the store's verdict cache answers a rescore
//! that asks the same again.
//!
//! The judge sees the user's instructions and the conversation as the user saw it, each message
//! numbered by its place in the transcript, and ends its answer with one line per rule naming the
//! first user message that breaks it, or `none`. A line it leaves out, or a number that is not a
//! user message, finds nothing.

use super::{Rule, UserFault};
use crate::Sampling;
use crate::message::{Message, Role, ToolList};
use crate::model::{ChatRequest, ModelClient, ModelFailure};

/// The judge's prompt. `{instructions}` and `{conversation}` are filled in.
pub const PROMPT: &str = "You review a simulated customer who talks to a support agent. The customer was \
given the INSTRUCTIONS below and must act on them alone.\n\n\
Answer two questions about the customer's messages (not the agent's):\n\
1. off_scenario: did the customer depart from its instructions: ask for something they do not want, drop \
or change its goal, or accept what they tell it to refuse?\n\
2. unknown_info: did the customer state a fact its instructions do not give it (an identifier, a date, an \
amount, a name, a detail of its booking or account) instead of saying that it does not know?\n\n\
Give one line of reasons for each, then end with exactly these two lines, each naming the number of the \
first customer message that breaks the rule, or none:\n\
off_scenario: NUMBER or none\n\
unknown_info: NUMBER or none\n\n\
INSTRUCTIONS:\n{instructions}\n\n\
CONVERSATION:\n{conversation}";

/// The rules the judge decides.
pub const RULES: [Rule; 2] = [Rule::OffScenario, Rule::UnknownInfo];

/// Asks `judge` about the user's turns of `transcript`, given the `instructions` the user had.
pub async fn review(
    judge: &dyn ModelClient,
    model: &str,
    transcript: &[Message],
    instructions: &str,
) -> Result<Vec<UserFault>, ModelFailure> {
    let messages = [Message::user(prompt(transcript, instructions))];
    let sampling = Sampling { temperature: Some(0.0), ..Sampling::default() };
    let request = ChatRequest {
        model,
        messages: &messages,
        tools: ToolList::none(),
        sampling: &sampling,
        response_format: None,
        session: None,
        ready: None,
    };
    let reply = judge.chat(request).await?;
    Ok(findings(reply.message.content_str(), transcript))
}

/// The judge's prompt for this conversation: the messages either side can see, numbered by
/// their place in the transcript (tool results and the agent's tool calls are the agent's
/// business, and the user never saw them).
pub fn prompt(transcript: &[Message], instructions: &str) -> String {
    let mut conversation = String::new();
    for (seq, message) in transcript.iter().enumerate() {
        let who = match message.role {
            Role::User => "customer",
            Role::Assistant => "agent",
            _ => continue,
        };
        let mut said = message.content_str().trim().to_owned();
        if message.role == Role::User {
            for call in &message.tool_calls {
                said.push_str(&format!("\n(calls {}({}))", call.name, call.arguments));
            }
        }
        if said.is_empty() {
            continue;
        }
        conversation.push_str(&format!("[{seq}] {who}: {said}\n"));
    }
    PROMPT.replace("{instructions}", instructions.trim()).replace("{conversation}", conversation.trim_end())
}

/// The faults the judge's `answer` names: for each rule, its last verdict line, when it names
/// a user message of `transcript`. The judge's reasons for the rule, when it gave a line of
/// them, are the finding's detail.
pub fn findings(answer: &str, transcript: &[Message]) -> Vec<UserFault> {
    let mut faults = Vec::new();
    for rule in RULES {
        let key = rule.as_str();
        let verdict = answer.lines().rev().find_map(|line| verdict_of(line, key));
        let Some(seq) = verdict.flatten() else { continue };
        if transcript.get(seq as usize).is_none_or(|m| m.role != Role::User) {
            continue;
        }
        let reason = answer
            .lines()
            .map(|l| l.trim().trim_start_matches(|c: char| c.is_ascii_digit() || c == '.' || c == ' '))
            .find(|l| l.to_lowercase().starts_with(key) && verdict_of(l, key).is_none())
            .map(|l| l[key.len()..].trim_start_matches([':', ' ']).trim());
        let detail = match reason.filter(|r| !r.is_empty()) {
            Some(reason) => format!("judged: {}", super::excerpt(reason)),
            None => "judged".to_owned(),
        };
        faults.push(UserFault { seq, rule, detail });
    }
    faults
}

/// A verdict line of `key`: `Some(Some(n))` for `key: n`, `Some(None)` for `key: none`, and
/// `None` for a line that is not a verdict.
fn verdict_of(line: &str, key: &str) -> Option<Option<u32>> {
    let line = line.trim().trim_matches(['*', '`', '-', ' ']);
    let (head, rest) = line.split_once(':')?;
    if !head.trim().eq_ignore_ascii_case(key) {
        return None;
    }
    let rest = rest.trim().trim_matches(['*', '`', '.', ' ']);
    if rest.eq_ignore_ascii_case("none") {
        return Some(None);
    }
    let number = rest.trim_start_matches(|c: char| !c.is_ascii_digit());
    let digits: String = number.chars().take_while(char::is_ascii_digit).collect();
    // A line of reasons ("off_scenario: the customer asked...") is not a verdict.
    let bare = rest.len() <= 12 && !digits.is_empty();
    bare.then(|| digits.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transcript() -> Vec<Message> {
        vec![
            Message::assistant("Hello! How can I help you today?"),
            Message::user("I want to cancel reservation ABC123."),
            Message::assistant("Sure. What is your user id?"),
            Message::user("It is mia_li_3668. Also, book me a hotel in Paris."),
        ]
    }

    #[test]
    fn the_prompt_numbers_what_each_side_said() {
        let prompt = prompt(&transcript(), "  You want to cancel ABC123.\n");
        assert!(prompt.contains("INSTRUCTIONS:\nYou want to cancel ABC123.\n\nCONVERSATION:\n[0] agent: Hello!"));
        assert!(prompt.ends_with("[3] customer: It is mia_li_3668. Also, book me a hotel in Paris."), "{prompt}");
    }

    #[test]
    fn the_last_verdict_line_of_each_rule_names_its_message() {
        let answer = "off_scenario: the customer asks for a hotel, which it was not told to.\n\
                      unknown_info: it gives a user id its instructions do not hold.\n\
                      off_scenario: 3\n**unknown_info: 3**";
        let found = findings(answer, &transcript());
        assert_eq!(
            found.iter().map(|f| (f.seq, f.rule)).collect::<Vec<_>>(),
            [(3, Rule::OffScenario), (3, Rule::UnknownInfo)]
        );
        assert!(found[0].detail.contains("asks for a hotel"), "{found:?}");
    }

    #[test]
    fn none_a_missing_line_or_a_number_that_is_not_the_users_find_nothing() {
        assert_eq!(findings("off_scenario: none\nunknown_info: none", &transcript()), []);
        assert_eq!(findings("I cannot tell.", &transcript()), []);
        assert_eq!(findings("off_scenario: 2\nunknown_info: 40", &transcript()), []);
        assert_eq!(findings("off_scenario: [3]\nunknown_info: message 1", &transcript()).len(), 2);
    }
}
