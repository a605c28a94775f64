//! tau2's `NLAssertionsEvaluator`: one judge call with tau2's exact system and user prompts
//! (the conversation as `role: content` lines, the assertions as a Python list), temperature 0,
//! and tau2's parsing of `{"results": [{"expectedOutcome", "reasoning", "metExpectation"}]}`.
//! The reward is 1 when every returned result is met. Without a judge, assertions in the basis
//! fail with a diagnostic; they are never silently passed.

use parley_core::{ChatRequest, EnvError, Message, Role, Sampling, ToolList};
use serde_json::{Value, json};

use super::{Component, Judge, single};
use crate::pyjson::str_repr;
use crate::spec::Criteria;
use crate::world::tau2_messages;

const SYSTEM_PROMPT: &str = "
        TASK
        - You will be given a list of expected outcomes and a conversation that was collected during a test case run.
        - The conversation is between an agent and a customer.
        - Your job is to evaluate whether the agent satisfies each of the expected outcomes.
        - Grade each expected outcome individually.

        FORMAT
        - Your response should be a JSON object with the following fields:
        - `reasoning`: a short explanation for your classification
        - `metExpectation`: `true` if the agent satisfies the expected outcomes, `false` otherwise
        - `expectedOutcome`: repeat the expectation from the input that you are grading
        
        Example response structure:
        {
            \"results\": [
                {
                    \"expectedOutcome\": \"<one of the expected outcomes from the input>\",
                    \"reasoning\": \"<reasoning trace>\",
                    \"metExpectation\": <false or true>,
                }
            ]
        }
        ";

/// The judge's two messages for a transcript and its assertions, as tau2 builds them from the
/// trajectory it holds (see [`tau2_messages`]).
pub fn judge_messages(transcript: &[Message], assertions: &[String]) -> [Message; 2] {
    let trajectory: Vec<String> = tau2_messages(transcript)
        .into_iter()
        .filter(|m| m.role != Role::System)
        .map(|m| format!("{}: {}", m.role.as_str(), m.content.as_deref().unwrap_or("None")))
        .collect();
    let listed: Vec<String> = assertions.iter().map(|a| str_repr(a)).collect();
    let user = format!(
        "\n        conversation:\n        {}\n        \n        expectedOutcomes:\n        [{}]\n        ",
        trajectory.join("\n"),
        listed.join(", ")
    );
    [Message::system(SYSTEM_PROMPT), Message::user(user)]
}

/// `Ok(Err(..))` is a graded failure (tau2 scores the whole trajectory 0); `Err` is the judge's
/// endpoint failing, which is infrastructure and leaves the session to be rescored.
pub async fn evaluate(
    judge: Option<&Judge>,
    criteria: &Criteria,
    transcript: &[Message],
) -> Result<Result<Component, String>, EnvError> {
    let assertions = criteria.nl_assertions.as_deref().unwrap_or_default();
    if assertions.is_empty() {
        return Ok(Ok(Component {
            reward: 1.0,
            checks: json!([]),
            breakdown: single("NL_ASSERTION", 1.0),
            info: json!({"note": "No nl_assertions to evaluate"}),
        }));
    }
    let Some(judge) = judge else {
        return Ok(Ok(Component {
            reward: 0.0,
            checks: Value::Null,
            breakdown: single("NL_ASSERTION", 0.0),
            info: json!({
                "error": "NL_ASSERTION is in the reward basis but no judge is configured; \
                          set DomainOptions.judge (an OpenAI-compatible endpoint) to grade these assertions",
                "unjudged": assertions,
            }),
        }));
    };
    let messages = judge_messages(transcript, assertions);
    let sampling = Sampling { temperature: Some(0.0), ..Sampling::default() };
    let request = ChatRequest {
        model: &judge.model,
        messages: &messages,
        tools: ToolList::none(),
        sampling: &sampling,
        response_format: None,
        session: None,
        ready: None,
    };
    let reply = judge.client.chat(request).await.map_err(|e| EnvError::new(format!("NL assertion judge: {e}")))?;
    let content = reply.message.content_str();
    let parsed: Value = match serde_json::from_str(content) {
        Ok(v) => v,
        Err(e) => return Ok(Err(format!("the NL assertion judge did not answer with JSON ({e}): {content}"))),
    };
    let mut checks = Vec::new();
    let mut all = true;
    for result in parsed.get("results").and_then(Value::as_array).into_iter().flatten() {
        let (Some(outcome), Some(met), Some(reasoning)) =
            (result.get("expectedOutcome"), result.get("metExpectation"), result.get("reasoning"))
        else {
            return Ok(Err(format!("the NL assertion judge returned an incomplete result: {result}")));
        };
        let met = match met {
            Value::Bool(b) => *b,
            Value::String(s) if s.eq_ignore_ascii_case("true") => true,
            Value::String(s) if s.eq_ignore_ascii_case("false") => false,
            other => return Ok(Err(format!("the NL assertion judge returned metExpectation={other}"))),
        };
        all &= met;
        checks.push(json!({"nl_assertion": outcome, "met": met, "justification": reasoning}));
    }
    let reward = if all { 1.0 } else { 0.0 };
    Ok(Ok(Component {
        reward,
        checks: Value::Array(checks),
        breakdown: single("NL_ASSERTION", reward),
        info: json!({"judge": {"requested_model": judge.model, "endpoint": judge.client.endpoint(), "raw_response": reply.call.response}}),
    }))
}
