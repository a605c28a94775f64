//! The agent system prompts exactly as tau2's `llm_agent.py` builds them: the fixed instruction
//! and the domain policy inside `<instructions>` and `<policy>`, and for solo mode the solo
//! instruction (stop tool `done`) with the task's ticket. Also the domain policies, assembled
//! from the data files as each domain's `get_environment` does. It never reads task data.

use crate::data::Data;
use crate::error::Tau2Error;

const AGENT_INSTRUCTION: &str =
    "You are a customer service agent that helps the user according to the <policy> provided below.
In each turn you can either:
- Send a message to the user.
- Make a tool call.
You cannot do both at the same time.

Try to be helpful and always follow the policy. Always make sure you generate valid JSON only.";

const AGENT_SOLO_INSTRUCTION: &str = "You are a customer service agent that helps the user according to the <policy> provided below.
You will be provided with a ticket that contains the user's request.
You will need to plan and call the appropriate tools to solve the ticket.

You cannot communicate with the user, only make tool calls.
Stop when you consider that you have solved the ticket.
To do so, send a message containing a single tool call to the `done` tool. Do not include any other tool calls in this last message.

Always follow the policy. Always make sure you generate valid JSON only.";

/// The solo agent's stop tool.
pub const STOP_TOOL: &str = "done";

/// The first message of every tau2 conversation without a recorded history.
pub const GREETING: &str = "Hi! How can I help you today?";

pub fn system_prompt(policy: &str) -> String {
    format!("<instructions>\n{AGENT_INSTRUCTION}\n</instructions>\n<policy>\n{policy}\n</policy>")
}

pub fn solo_system_prompt(policy: &str, ticket: &str) -> String {
    format!(
        "<instructions>\n{AGENT_SOLO_INSTRUCTION}\n</instructions>\n<policy>\n{policy}\n</policy>\n<ticket>\n{ticket}\n</ticket>"
    )
}

/// The domain policy (`env.get_policy()`), `None` where tau2 has no variant for that mode.
pub fn policy(data: &Data, domain: &str, solo: bool) -> Result<Option<String>, Tau2Error> {
    let read = |file: &str| data.read(&format!("{domain}/{file}")).map(String::from);
    Ok(match (domain, solo) {
        ("telecom", _) => {
            let main = read(if solo { "main_policy_solo.md" } else { "main_policy.md" })?;
            // tau2's "manual" policy type; its solo variant reuses the same manual.
            let tech = read("tech_support_manual.md")?;
            Some(format!(
                "<main_policy>\n{main}\n</main_policy>\n<tech_support_policy>\n{tech}\n</tech_support_policy>"
            ))
        }
        ("mock", true) => Some(read("policy_solo.md")?),
        (_, true) => None,
        (_, false) => Some(read("policy.md")?),
    })
}
