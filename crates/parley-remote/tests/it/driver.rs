//! A minimal session loop over the seams, standing in for the engine (which these tests must
//! not depend on): agent turns, tool calls, and, with a user, user turns and user tool calls.

use parley_core::{
    Agent, AgentView, EnvError, Environment, Message, Party, Reward, Task, Termination, ToolOutput, UserSimulator,
    UserView, agent_view, user_view,
};
use serde_json::Value;

#[derive(Debug)]
pub struct Outcome {
    pub transcript: Vec<Message>,
    pub termination: Termination,
    pub reward: Result<Reward, EnvError>,
}

pub async fn run(
    agent: &dyn Agent,
    environment: &dyn Environment,
    user: Option<&dyn UserSimulator>,
    task: &Task,
    max_steps: u32,
) -> Result<Outcome, EnvError> {
    let mut session = environment.open(task).await?;
    let mut messages = task.messages.clone();
    let mut steps = 0;
    let termination = 'session: loop {
        if steps == max_steps {
            break Termination::MaxSteps;
        }
        steps += 1;
        let visible = agent_view(&messages);
        let view = AgentView { task, messages: &visible, tools: session.tools(), seed: 7, session: 0 };
        let turn = agent.act(view).await.map_err(|e| EnvError::new(format!("the agent failed: {e}")))?;
        let message = turn.message;
        messages.push(message.clone());
        if !message.tool_calls.is_empty() {
            for call in &message.tool_calls {
                let output = call_tool(session.as_mut(), Party::Agent, &call.name, &call.arguments).await?;
                messages.push(Message::tool_result(call.id.clone(), output.content));
            }
            continue;
        }
        let Some(user) = user else { break Termination::AgentStop };
        loop {
            let visible = user_view(&messages);
            let view = UserView { task, trial: 0, messages: &visible, tools: session.user_tools(), seed: 7 };
            let turn = user.respond(view).await.map_err(|e| EnvError::new(format!("the user failed: {e}")))?;
            messages.push(turn.message.clone());
            if turn.stop.is_some() {
                break 'session Termination::UserStop;
            }
            if turn.message.tool_calls.is_empty() {
                break;
            }
            for call in &turn.message.tool_calls {
                let output = call_tool(session.as_mut(), Party::User, &call.name, &call.arguments).await?;
                messages.push(Message::tool_result(call.id.clone(), output.content));
            }
        }
    };
    let reward = session.score(&messages, termination).await;
    session.close().await;
    Ok(Outcome { transcript: messages, termination, reward })
}

async fn call_tool(
    session: &mut dyn parley_core::EnvSession,
    party: Party,
    name: &str,
    arguments: &str,
) -> Result<ToolOutput, EnvError> {
    match serde_json::from_str::<Value>(arguments) {
        Ok(arguments) => session.call(party, name, &arguments).await,
        Err(e) => Ok(ToolOutput::error(format!("arguments are not JSON: {e}"))),
    }
}
