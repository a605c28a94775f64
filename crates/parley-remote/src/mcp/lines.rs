//! The stdout of a stdio MCP server, read one line (one JSON-RPC message) at a time with a size
//! limit. rmcp drops an oversized line and waits on, so the call it answered would wait out its
//! whole timeout and look like a hung server. Here a line over the limit is replaced, as soon as
//! it ends, by a JSON-RPC error answer to the same request id ([`TOO_LARGE`]), so the call fails
//! at once as too large; when the id cannot be found, the stream ends instead, which fails every
//! call in flight on the connection at once, and the connection records why.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// The JSON-RPC error code of the answer that replaces an oversized line (in the range JSON-RPC
/// leaves to implementations).
pub(crate) const TOO_LARGE: i32 = -32099;

/// Bytes of an oversized line's start and end kept to find its request id.
const KEPT: usize = 4096;

pub(crate) struct LineLimit<R> {
    inner: R,
    limit: usize,
    /// The line being read, passed on once it ends.
    line: Vec<u8>,
    /// Whether the line being read passed the limit and is being skipped.
    skipping: bool,
    /// The first and the last bytes of the line being skipped.
    head: Vec<u8>,
    tail: Vec<u8>,
    /// Bytes ready for the reader, from `sent` on.
    ready: Vec<u8>,
    sent: usize,
    /// Set when an oversized line without a findable id ended the stream.
    overflowed: Arc<AtomicBool>,
    ended: bool,
}

impl<R> LineLimit<R> {
    pub(crate) fn new(inner: R, limit: usize, overflowed: Arc<AtomicBool>) -> LineLimit<R> {
        LineLimit {
            inner,
            limit,
            line: Vec::new(),
            skipping: false,
            head: Vec::new(),
            tail: Vec::new(),
            ready: Vec::new(),
            sent: 0,
            overflowed,
            ended: false,
        }
    }

    /// Takes in bytes read from the server.
    fn take(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && !self.ended {
            let end = bytes.iter().position(|&b| b == b'\n');
            let (part, rest) = match end {
                Some(at) => (&bytes[..at], &bytes[at + 1..]),
                None => (bytes, &[][..]),
            };
            if self.skipping {
                self.tail.extend_from_slice(part);
                let over = self.tail.len().saturating_sub(KEPT);
                self.tail.drain(..over);
            } else if self.line.len() + part.len() > self.limit {
                let mut head = std::mem::take(&mut self.line);
                let mut tail = head[head.len().saturating_sub(KEPT)..].to_vec();
                tail.extend_from_slice(part);
                let over = tail.len().saturating_sub(KEPT);
                tail.drain(..over);
                head.extend_from_slice(&part[..KEPT.min(part.len())]);
                head.truncate(KEPT);
                (self.head, self.tail, self.skipping) = (head, tail, true);
            } else {
                self.line.extend_from_slice(part);
            }
            if end.is_some() {
                self.end_line();
            }
            bytes = rest;
        }
    }

    fn end_line(&mut self) {
        if !self.skipping {
            self.ready.append(&mut self.line);
            self.ready.push(b'\n');
            return;
        }
        self.skipping = false;
        let (head, tail) = (std::mem::take(&mut self.head), std::mem::take(&mut self.tail));
        match request_id(&head, &tail) {
            Some(id) => {
                let message = format!(
                    "the answer is larger than the limit of {} bytes; raise --max-response-bytes to accept it",
                    self.limit
                );
                let answer =
                    serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": TOO_LARGE, "message": message}});
                self.ready.extend_from_slice(answer.to_string().as_bytes());
                self.ready.push(b'\n');
            }
            None => {
                self.overflowed.store(true, Ordering::SeqCst);
                self.ended = true;
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineLimit<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.sent < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.sent);
                buf.put_slice(&this.ready[this.sent..this.sent + n]);
                this.sent += n;
                if this.sent == this.ready.len() {
                    this.ready.clear();
                    this.sent = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.ended {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 64 << 10];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if read.filled().is_empty() => {
                    // End of the stream: what is left of a line is passed on as it is, and rmcp
                    // treats it as the incomplete message it is.
                    this.ended = true;
                    if !this.skipping {
                        this.ready.append(&mut this.line);
                    }
                }
                Poll::Ready(Ok(())) => {
                    let filled = read.filled().to_vec();
                    this.take(&filled);
                }
            }
        }
    }
}

/// The `id` of the JSON-RPC answer whose first and last bytes are `head` and `tail`. An answer's
/// top-level keys are `jsonrpc`, `id` and `result` (or `error`), in any order: an `id` ahead of
/// the result is near the start, one after it is near the end. An `id` inside the result is never
/// taken: in the head only one before `"result"` or `"error"` counts, in the tail only the last.
fn request_id(head: &[u8], tail: &[u8]) -> Option<serde_json::Value> {
    let body_at = [find(head, b"\"result\""), find(head, b"\"error\"")].into_iter().flatten().min();
    if let Some(at) = find(head, b"\"id\"")
        && body_at.is_none_or(|body| at < body)
        && let Some(id) = value_after(&head[at + 4..])
    {
        return Some(id);
    }
    let at = tail.windows(4).rposition(|w| w == b"\"id\"")?;
    value_after(&tail[at + 4..])
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The number or string after `: ` in `rest`.
fn value_after(rest: &[u8]) -> Option<serde_json::Value> {
    // The kept bytes may end inside a character.
    let text = String::from_utf8_lossy(rest);
    let text = text.trim_start().strip_prefix(':')?.trim_start();
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<serde_json::Value>();
    match values.next() {
        // A number is followed by `,` or `}`, which the stream stops at; a string ends itself.
        Some(Ok(id @ (serde_json::Value::Number(_) | serde_json::Value::String(_)))) => Some(id),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    async fn read_all(input: &[u8], limit: usize) -> (String, bool) {
        let overflowed = Arc::new(AtomicBool::new(false));
        let mut reader = LineLimit::new(input, limit, overflowed.clone());
        let mut out = String::new();
        reader.read_to_string(&mut out).await.unwrap();
        (out, overflowed.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn small_lines_pass_and_an_oversized_one_becomes_an_error_for_its_id() {
        let big = "x".repeat(100_000);
        let input = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{}}}}\n\
             {{\"jsonrpc\": \"2.0\", \"id\": 7, \"result\": {{\"id\": 99, \"text\": \"{big}\"}}}}\n\
             {{\"result\":{{\"text\":\"{big}\",\"id\":99}},\"jsonrpc\":\"2.0\",\"id\":\"req-8\"}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{{}}}}\n"
        );
        let (out, overflowed) = read_all(input.as_bytes(), 1000).await;
        let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert_eq!(lines[0]["id"], 1);
        assert_eq!((lines[1]["id"].clone(), lines[1]["error"]["code"].clone()), (7.into(), TOO_LARGE.into()));
        assert_eq!(lines[2]["id"], "req-8");
        assert_eq!(lines[3]["id"], 2);
        assert!(!overflowed);
    }

    #[tokio::test]
    async fn an_oversized_line_without_an_id_ends_the_stream() {
        let input = format!("{{\"method\":\"log\",\"params\":\"{}\"}}\n{{\"id\":3}}\n", "y".repeat(5000));
        let (out, overflowed) = read_all(input.as_bytes(), 1000).await;
        assert_eq!(out, "");
        assert!(overflowed);
    }
}
