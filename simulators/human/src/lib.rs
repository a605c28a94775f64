//! A person plays the user: each turn shows what the agent said since the user last spoke, and
//! reads one line. It works on a terminal and through a pipe (one line per turn); end of input,
//! or a line with `###STOP###`, `###TRANSFER###` or `###OUT-OF-SCOPE###`, ends the conversation.
//!
//! Invariant: one person, one conversation at a time: turns of concurrent sessions are taken in
//! order behind a lock, each shown with its session's task so nobody answers the wrong one.

use async_trait::async_trait;
use parley_core::{Message, Role, UserFailure, UserSimulator, UserStop, UserTurn, UserView};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

type Input = Box<dyn AsyncBufRead + Send + Unpin>;
type Output = Box<dyn AsyncWrite + Send + Unpin>;

pub struct Human {
    io: Mutex<(Input, Output)>,
}

impl std::fmt::Debug for Human {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Human").finish_non_exhaustive()
    }
}

impl Human {
    /// Reads turns from stdin and shows the conversation on stderr (stdout stays for data).
    pub fn stdio() -> Human {
        Human::new(BufReader::new(tokio::io::stdin()), tokio::io::stderr())
    }

    pub fn new(
        input: impl AsyncBufRead + Send + Unpin + 'static,
        output: impl AsyncWrite + Send + Unpin + 'static,
    ) -> Human {
        Human { io: Mutex::new((Box::new(input), Box::new(output))) }
    }
}

/// The agent's messages since the user last spoke.
fn unseen(messages: &[Message]) -> &[Message] {
    let from = messages.iter().rposition(|m| m.role == Role::User).map_or(0, |i| i + 1);
    &messages[from..]
}

#[async_trait]
impl UserSimulator for Human {
    async fn respond(&self, view: UserView<'_>) -> Result<UserTurn, UserFailure> {
        let failed = |e: std::io::Error| UserFailure::User { message: format!("the terminal: {e}"), call: None };
        let mut io = self.io.lock().await;
        let (input, output) = &mut *io;
        let mut shown = format!("\n[task {} · trial {}]\n", view.task.id, view.trial);
        for m in unseen(view.messages).iter().filter(|m| m.role == Role::Assistant) {
            shown.push_str(&format!("agent> {}\n", m.content_str()));
        }
        shown.push_str("you> ");
        output.write_all(shown.as_bytes()).await.map_err(failed)?;
        output.flush().await.map_err(failed)?;
        let mut line = String::new();
        let read = input.read_line(&mut line).await.map_err(failed)?;
        if read == 0 {
            // End of input: the person has nothing more to say.
            output.write_all(b"(end of input)\n").await.map_err(failed)?;
            return Ok(UserTurn {
                message: Message::user(UserStop::Stop.marker()),
                stop: Some(UserStop::Stop),
                call: None,
            });
        }
        let text = line.trim_end_matches(['\n', '\r']).to_owned();
        let stop = UserStop::find(&text);
        Ok(UserTurn { message: Message::user(text), stop, call: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_core::{Task, ToolList};

    #[tokio::test]
    async fn reads_one_line_per_turn_from_a_pipe() {
        let (mut writer, reader) = tokio::io::duplex(1024);
        let (shown_writer, mut shown_reader) = tokio::io::duplex(4096);
        writer.write_all(b"I want a refund\nthanks ###STOP###\n").await.unwrap();
        drop(writer);
        let human = Human::new(BufReader::new(reader), shown_writer);
        let task =
            Task { index: 0, id: "r1".into(), messages: vec![], tools: Default::default(), row: Default::default() };
        let conversation = vec![Message::assistant("Hi! How can I help you today?")];
        let view = UserView { task: &task, trial: 0, messages: &conversation, tools: ToolList::none(), seed: 0 };
        let first = human.respond(view).await.unwrap();
        assert_eq!(first.message, Message::user("I want a refund"));
        assert_eq!(first.stop, None);
        let second = human.respond(view).await.unwrap();
        assert_eq!(second.stop, Some(UserStop::Stop));
        let third = human.respond(view).await.unwrap();
        assert_eq!(third.stop, Some(UserStop::Stop), "end of input stops");
        drop(human);
        let mut shown = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut shown_reader, &mut shown).await.unwrap();
        assert!(shown.contains("agent> Hi! How can I help you today?"));
        assert!(shown.contains("[task r1 · trial 0]"));
    }
}
