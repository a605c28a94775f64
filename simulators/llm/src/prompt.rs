//! The simulated user's system prompt: templates with `{guidelines}`, `{persona}` and
//! `{scenario}` slots, and the scenario read from a task row, in Parley's words or tau2's
//! ([`tau2`]).

pub mod tau2;

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

/// Added to the built-in guidelines when the user has tools of its own (dual control).
pub const TOOL_GUIDELINES: &str = "\
You can act on your own device or account with the tools you are given. When the agent asks \
you to do something, use a tool to do it, one action per turn, and report what you saw. Never \
invent a tool's result. Do not write a message and call a tool in the same turn.";

pub const TEMPLATE: &str = "{guidelines}\n\n{persona}<scenario>\n{scenario}\n</scenario>";

/// How a task row's scenario is written into the prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ScenarioFormat {
    /// Parley's: titled sections (`Reason for call:` ...) in `{scenario}`, the persona in a
    /// `<persona>` block of its own in `{persona}`.
    #[default]
    Sections,
    /// tau2's `str(task.user_scenario)` in `{scenario}`, the persona inside it (`Persona:`, then
    /// `Instructions:`); `{persona}` is empty.
    Tau2,
}

/// The system prompt template and its parts. Each is replaceable from the command line or
/// `parley.toml`.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// The whole system prompt, with `{guidelines}`, `{persona}` and `{scenario}` slots.
    pub template: String,
    /// The guidelines of a user without tools.
    pub guidelines: String,
    /// The guidelines of a user with tools of its own (dual control), in place of `guidelines`.
    pub tool_guidelines: String,
    /// Used when the task row gives no persona.
    pub persona: Option<String>,
    pub scenario: ScenarioFormat,
}

impl Default for Prompt {
    /// Parley's own prompt: the built-in guidelines, with [`TOOL_GUIDELINES`] after them when
    /// the user has tools.
    fn default() -> Prompt {
        Prompt {
            template: TEMPLATE.into(),
            guidelines: GUIDELINES.into(),
            tool_guidelines: format!("{GUIDELINES}\n\n{TOOL_GUIDELINES}"),
            persona: None,
            scenario: ScenarioFormat::Sections,
        }
    }
}

impl Prompt {
    /// tau2's user prompt (`UserSimulator.system_prompt`) around tau2's guidelines, as read
    /// from its data: `simulation_guidelines.md` and, for a user with tools,
    /// `simulation_guidelines_tools.md`.
    pub fn tau2(guidelines: String, tool_guidelines: String) -> Prompt {
        Prompt {
            template: tau2::TEMPLATE.into(),
            guidelines,
            tool_guidelines,
            persona: None,
            scenario: ScenarioFormat::Tau2,
        }
    }

    /// The same prompt with `guidelines` for a user with tools and without.
    pub fn with_guidelines(self, guidelines: String) -> Prompt {
        Prompt { tool_guidelines: guidelines.clone(), guidelines, ..self }
    }

    pub fn render(&self, row: &Value, with_tools: bool) -> String {
        let guidelines = if with_tools { &self.tool_guidelines } else { &self.guidelines };
        let (persona, scenario) = match self.scenario {
            ScenarioFormat::Sections => {
                let persona = persona_of(row).or(self.persona.clone());
                (persona.map(|p| format!("<persona>\n{p}\n</persona>\n\n")).unwrap_or_default(), scenario_of(row))
            }
            ScenarioFormat::Tau2 => {
                (String::new(), tau2::scenario(row, self.persona.as_deref()).unwrap_or_else(|| scenario_of(row)))
            }
        };
        fill(&self.template, &[("{guidelines}", guidelines), ("{persona}", &persona), ("{scenario}", &scenario)])
    }
}

/// The template with each slot replaced by its text, in one pass: what a slot's text holds
/// (a `{scenario}` in the guidelines, say) is never read as a slot.
fn fill(template: &str, slots: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + slots.iter().map(|(_, text)| text.len()).sum::<usize>());
    let mut rest = template;
    loop {
        let next = slots.iter().filter_map(|&(slot, text)| rest.find(slot).map(|at| (at, slot, text))).min();
        let Some((at, slot, text)) = next else { break };
        out.push_str(&rest[..at]);
        out.push_str(text);
        rest = &rest[at + slot.len()..];
    }
    out.push_str(rest);
    out
}

/// The row's own persona (`user_scenario.persona`), when it gives one.
pub fn persona_of(row: &Value) -> Option<String> {
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
    fn tau2s_prompt_puts_the_persona_in_the_scenario_and_takes_the_tool_guidelines_whole() {
        let prompt = Prompt::tau2("G".into(), "TG".into());
        let row = json!({"user_scenario": {"persona": "Brief.", "instructions": "Ask about {persona}."}});
        assert_eq!(
            prompt.render(&row, false),
            "G\n\n<scenario>\nPersona:\n\tBrief.\nInstructions:\n\tAsk about {persona}.\n</scenario>"
        );
        assert!(prompt.render(&row, true).starts_with("TG\n\n<scenario>"));
        let own = prompt.with_guidelines("mine".into());
        assert!(own.render(&row, true).starts_with("mine\n\n") && own.render(&row, false).starts_with("mine\n\n"));
    }

    #[test]
    fn slots_are_filled_once_and_their_texts_left_as_they_are() {
        let slots = [("{guidelines}", "say {scenario}"), ("{persona}", ""), ("{scenario}", "S {guidelines}")];
        assert_eq!(fill("{scenario}|{guidelines}|{persona}{x}", &slots), "S {guidelines}|say {scenario}|{x}");
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
