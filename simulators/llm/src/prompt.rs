//! The simulated user's system prompt: templates with `{guidelines}`, `{persona}` and
//! `{scenario}` slots, and the scenario read from a task row.

use serde_json::Value;

/// The built-in guidelines: how a simulated customer behaves and when it ends the conversation.
pub const GUIDELINES: &str = "\
You play a customer who contacts a customer service agent. Stay in character for the whole \
conversation and follow the scenario below.

- Write one message at a time, the way a person would in a chat: short and natural.
- Say only what the scenario gives you. What it does not give you is unknown to you: say you \
do not know rather than inventing it.
- Share information when the agent asks for it, not all at once up front. Put the scenario's \
instructions in your own words; do not recite them.
- Keep going until what you came for is done. When the agent has done it, or you have agreed \
that nothing more can be done, end with the single token ###STOP###.
- If the agent transfers you to another agent or a human, answer with ###TRANSFER###.
- If the conversation needs something the scenario does not cover, answer with ###OUT-OF-SCOPE###.";

/// Added to the guidelines when the user has tools of its own (dual control).
pub const TOOL_GUIDELINES: &str = "\
You can act on your own device or account with the tools you are given. When the agent asks \
you to do something, use a tool to do it, one action per turn, and report what you saw. Never \
invent a tool's result. Do not write a message and call a tool in the same turn.";

/// The system prompt template and its parts. Each is replaceable from the command line or
/// `parley.toml`.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// The whole system prompt, with `{guidelines}`, `{persona}` and `{scenario}` slots.
    pub template: String,
    pub guidelines: String,
    pub tool_guidelines: String,
    /// Used when the task row gives no persona.
    pub persona: Option<String>,
}

pub const TEMPLATE: &str = "{guidelines}\n\n{persona}<scenario>\n{scenario}\n</scenario>";

impl Default for Prompt {
    fn default() -> Prompt {
        Prompt {
            template: TEMPLATE.into(),
            guidelines: GUIDELINES.into(),
            tool_guidelines: TOOL_GUIDELINES.into(),
            persona: None,
        }
    }
}

impl Prompt {
    pub fn render(&self, row: &Value, with_tools: bool) -> String {
        let guidelines = if with_tools {
            format!("{}\n\n{}", self.guidelines, self.tool_guidelines)
        } else {
            self.guidelines.clone()
        };
        let persona = persona_of(row).or(self.persona.clone()).map(|p| format!("<persona>\n{p}\n</persona>\n\n"));
        self.template
            .replace("{guidelines}", &guidelines)
            .replace("{persona}", persona.as_deref().unwrap_or(""))
            .replace("{scenario}", &scenario_of(row))
    }
}

fn persona_of(row: &Value) -> Option<String> {
    row.pointer("/user_scenario/persona").and_then(Value::as_str).filter(|p| !p.is_empty()).map(str::to_owned)
}

/// The scenario of a task row: tau2's `user_scenario.instructions` (structured or free text),
/// or a row's `user_scenario` / `user_instructions` string.
pub fn scenario_of(row: &Value) -> String {
    let instructions = row.pointer("/user_scenario/instructions");
    match instructions {
        Some(Value::Object(parts)) => {
            let mut out = Vec::new();
            for (key, title) in [
                ("domain", "Domain"),
                ("reason_for_call", "Reason for call"),
                ("known_info", "Known info"),
                ("unknown_info", "Unknown info"),
                ("task_instructions", "Task instructions"),
            ] {
                if let Some(text) = parts.get(key).and_then(Value::as_str).filter(|t| !t.is_empty()) {
                    out.push(format!("{title}:\n{text}"));
                }
            }
            out.join("\n\n")
        }
        Some(Value::String(text)) => text.clone(),
        _ => ["user_scenario", "user_instructions"]
            .iter()
            .find_map(|k| row.get(*k).and_then(Value::as_str))
            .map(str::to_owned)
            .unwrap_or_else(|| {
                "You have a question for the agent. Ask it, listen, and end when it is answered.".into()
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tau2_scenario_becomes_sections() {
        let row = json!({"user_scenario": {"persona": "Brief and polite.", "instructions": {
            "domain": "airline", "reason_for_call": "Cancel reservation ABC123.",
            "known_info": "Your user id is mia_li_3668.", "unknown_info": "", "task_instructions": "Do not accept a voucher."}}});
        let prompt = Prompt::default().render(&row, false);
        assert!(prompt.starts_with("You play a customer"));
        assert!(prompt.contains("<persona>\nBrief and polite.\n</persona>"));
        assert!(prompt.contains("Reason for call:\nCancel reservation ABC123."));
        assert!(prompt.contains("Known info:\nYour user id is mia_li_3668."));
        assert!(!prompt.contains("Unknown info"), "empty parts are left out");
        assert!(!prompt.contains("own device"), "no tool guidelines without tools");
        assert!(Prompt::default().render(&row, true).contains("own device"));
    }

    #[test]
    fn templates_are_replaceable() {
        let prompt = Prompt {
            template: "G={guidelines}|S={scenario}".into(),
            guidelines: "be brief".into(),
            ..Prompt::default()
        };
        assert_eq!(
            prompt.render(&json!({"user_instructions": "ask about rain"}), false),
            "G=be brief|S=ask about rain"
        );
    }
}
