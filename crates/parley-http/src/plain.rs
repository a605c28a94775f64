//! Parley's own HTTP/1.1 client for `http://` endpoints: the model server of a run or a trainer
//! (vLLM, SGLang, the stub) and the resources servers beside it, which answer every call with
//! one whole JSON body.
//!
//! The calling task drives its connection itself: it takes an idle connection of the endpoint
//! (or opens one), writes the request in one call, reads the answer's head and body into one
//! buffer and puts the connection back before the call returns. A pooled client of the usual
//! kind runs each connection as a task of its own, handed every request and every answer
//! through channels: two more wake-ups per call than the socket's own, and a connection given
//! back a moment after its call ends, so that a call starting meanwhile opens another. Here the
//! only wake-up is the socket's, and an endpoint's calls in flight bound its connections.
//!
//! What it reads: a status line and headers (`httparse`), then a body framed by
//! `Transfer-Encoding: chunked`, by `Content-Length`, or by the connection's close; `1xx`
//! answers before the final one are skipped. A body past the call's limit fails the attempt as [`TooLarge`] as soon as its length is known or its bytes pass the limit, and is
//! never buffered whole. A connection is kept for the next call only when the answer allows it
//! (HTTP/1.1, no `Connection: close`, a framed body, nothing after it).
//!
//! A connection idle for a while may have been closed by the server (servers close idle
//! connections after seconds: uvicorn after 5). One idle for longer than [`CHECK_AFTER`] is
//! checked before it is used (a read that must find nothing), and one whose request could not
//! be written is given up for a new connection at once: a write the server never read is a
//! request it never got. A reused connection that closes after the request was written is a
//! transport error, retried as the call allows.

use std::io;
use std::mem::MaybeUninit;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes};
use http::header::{CONNECTION, CONTENT_LENGTH, HeaderMap, HeaderName, HeaderValue, TRANSFER_ENCODING};
use http::{Method, Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::BoxError;

use crate::body::TooLarge;
use crate::client::Request;

/// How long an idle connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// A connection idle for longer is checked for a close from the server before it is reused.
const CHECK_AFTER: Duration = Duration::from_millis(100);
/// The most headers an answer may have.
const MAX_HEADERS: usize = 100;
/// The most bytes an answer's head (status line and headers) may take.
const MAX_HEAD: usize = 64 << 10;
/// The buffer an answer is first read into; a body that declares a larger length gets its size.
const FIRST_READ: usize = 8 << 10;

/// Why a call on a plain connection failed.
#[derive(Debug, thiserror::Error)]
pub enum PlainError {
    /// No connection could be opened: the request never left.
    #[error("could not connect to {address}: {source}")]
    Connect { address: String, source: io::Error },
    /// The URL has no host to connect to.
    #[error("`{0}` has no host")]
    NoHost(String),
    /// The connection failed after the request may have been sent.
    #[error("connection error: {0}")]
    Io(#[from] io::Error),
    /// The server closed the connection before the whole answer came.
    #[error("connection error: the server closed the connection before its whole answer ({0})")]
    Closed(&'static str),
    /// The answer is not HTTP/1.1 as this client reads it.
    #[error("protocol error: the server's answer is not valid HTTP/1.1: {0}")]
    Malformed(String),
    /// The answer's body is larger than the call takes.
    #[error(transparent)]
    TooLarge(TooLarge),
}

impl PlainError {
    /// Whether the request certainly never reached the server.
    pub fn is_unsent(&self) -> bool {
        matches!(self, PlainError::Connect { .. } | PlainError::NoHost(_))
    }
}

/// The idle connections of one endpoint, and how many of them it keeps.
#[derive(Debug)]
pub struct Plain {
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
}

#[derive(Debug)]
struct Idle {
    /// Where it is connected to (`host:port`).
    address: String,
    stream: TcpStream,
    since: Instant,
}

impl Plain {
    /// A client keeping at most `max_idle` connections open between calls.
    pub fn new(max_idle: usize) -> Plain {
        Plain { idle: Mutex::new(Vec::new()), max_idle: max_idle.max(1) }
    }

    /// Sends `request` and reads its answer whole, a body of `limit` bytes at most, on an idle
    /// connection to its host when there is a live one, or on a new one.
    pub async fn send(&self, request: Request, limit: usize) -> Result<Response<Bytes>, BoxError> {
        self.exchange(&request, limit).await.map_err(|error| match error {
            // What the stack's callers look for, as the body layer raises it.
            PlainError::TooLarge(too_large) => Box::new(too_large) as BoxError,
            error => Box::new(error),
        })
    }

    async fn exchange(&self, request: &Request, limit: usize) -> Result<Response<Bytes>, PlainError> {
        // The host and port only: a URL's user and password (`http://user:secret@host`) are
        // neither sent nor quoted.
        let address = match request.uri.authority() {
            Some(authority) => format!("{}:{}", authority.host(), authority.port_u16().unwrap_or(80)),
            None => return Err(PlainError::NoHost(request.uri.path().to_owned())),
        };
        let head = head(request);
        let head_only = request.method == Method::HEAD;
        loop {
            let (mut stream, reused) = match self.take(&address) {
                Some(stream) => (stream, true),
                None => (connect(&address).await?, false),
            };
            if let Err(error) = write_all(&mut stream, &head, &request.body).await {
                // A reused connection the server had closed: it never read the request.
                if reused && is_closed(&error) {
                    continue;
                }
                return Err(PlainError::Io(error));
            }
            let (response, keep) = read_answer(&mut stream, limit, head_only).await?;
            if keep {
                self.put(address, stream);
            }
            return Ok(response);
        }
    }

    /// The most recently used idle connection to `address` that is still open, if any.
    fn take(&self, address: &str) -> Option<TcpStream> {
        let now = Instant::now();
        loop {
            let idle = {
                let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                // The newest first; the list stays oldest first (see `put`).
                let at = idle.iter().rposition(|i| i.address == address)?;
                idle.remove(at)
            };
            let waited = now.saturating_duration_since(idle.since);
            if waited > IDLE_TIMEOUT {
                continue;
            }
            if waited > CHECK_AFTER && !is_quiet(&idle.stream) {
                continue;
            }
            return Some(idle.stream);
        }
    }

    /// Keeps `stream` for the next call, dropping the connections idle past the timeout, and the
    /// longest idle one when the pool is full.
    fn put(&self, address: String, stream: TcpStream) {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.first().is_some_and(|oldest| now.saturating_duration_since(oldest.since) > IDLE_TIMEOUT) {
            idle.retain(|i| now.saturating_duration_since(i.since) <= IDLE_TIMEOUT);
        }
        if idle.len() >= self.max_idle {
            idle.remove(0);
        }
        idle.push(Idle { address, stream, since: now });
    }
}

async fn connect(address: &str) -> Result<TcpStream, PlainError> {
    let failed = |source| PlainError::Connect { address: address.to_owned(), source };
    let stream = TcpStream::connect(address).await.map_err(failed)?;
    stream.set_nodelay(true).map_err(failed)?;
    Ok(stream)
}

/// Whether an idle connection has nothing to read and is not closed, as a connection the server
/// still keeps open has.
fn is_quiet(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

fn is_closed(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
    )
}

/// The request's head: its request line and headers, written with its body in one call.
fn head(request: &Request) -> Vec<u8> {
    let Request { method, uri, headers, body } = request;
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    // As the URL names it, less any user and password.
    let host = uri.authority().map_or("", |a| a.as_str().rsplit('@').next().unwrap_or_default());
    let mut message = Vec::with_capacity(128 + path.len() + headers.len() * 48);
    for piece in [method.as_str(), " ", path, " HTTP/1.1\r\nhost: ", host, "\r\n"] {
        message.extend_from_slice(piece.as_bytes());
    }
    for (name, value) in headers.iter() {
        if name == CONTENT_LENGTH || name == http::header::HOST || name == TRANSFER_ENCODING {
            continue;
        }
        message.extend_from_slice(name.as_str().as_bytes());
        message.extend_from_slice(b": ");
        message.extend_from_slice(value.as_bytes());
        message.extend_from_slice(b"\r\n");
    }
    if !body.is_empty() || method == Method::POST || method == Method::PUT {
        message.extend_from_slice(b"content-length: ");
        message.extend_from_slice(body.len().to_string().as_bytes());
        message.extend_from_slice(b"\r\n");
    }
    message.extend_from_slice(b"\r\n");
    message
}

/// Writes `head` then `body`, both in one call when the socket takes them: the body, some
/// kilobytes of a transcript, is not copied behind the head first.
async fn write_all(stream: &mut TcpStream, mut head: &[u8], mut body: &[u8]) -> io::Result<()> {
    while !head.is_empty() {
        let written = stream.write_vectored(&[io::IoSlice::new(head), io::IoSlice::new(body)]).await?;
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let of_head = written.min(head.len());
        head = &head[of_head..];
        body = &body[written - of_head..];
    }
    stream.write_all(body).await
}

/// How an answer's body ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
    Length(usize),
    Chunked,
    Close,
}

/// Reads one answer whole from `stream`: the answer, and whether the connection may carry the
/// next call.
async fn read_answer(
    stream: &mut TcpStream,
    limit: usize,
    head_only: bool,
) -> Result<(Response<Bytes>, bool), PlainError> {
    let mut buffer = Vec::with_capacity(FIRST_READ);
    loop {
        let Head { length: head, mut response, framing, mut keep } = loop {
            if let Some(parsed) = parse_head(&buffer)? {
                break parsed;
            }
            if buffer.len() > MAX_HEAD {
                return Err(PlainError::Malformed(format!("a head longer than {MAX_HEAD} bytes")));
            }
            if fill(stream, &mut buffer).await? == 0 {
                return Err(PlainError::Closed(if buffer.is_empty() { "nothing came" } else { "mid-head" }));
            }
        };
        let status = response.status();
        if status.is_informational() {
            // An interim answer (`100 Continue`, `103 Early Hints`): the final one follows.
            buffer.drain(..head);
            continue;
        }
        let framing = if head_only || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
            Framing::Length(0)
        } else {
            framing
        };
        let body = match framing {
            Framing::Length(length) => {
                if length > limit {
                    return Err(PlainError::TooLarge(TooLarge { limit }));
                }
                let end = head + length;
                buffer.reserve(end.saturating_sub(buffer.len()));
                while buffer.len() < end {
                    if fill(stream, &mut buffer).await? == 0 {
                        return Err(PlainError::Closed("mid-body"));
                    }
                }
                keep &= buffer.len() == end;
                buffer.truncate(end);
                buffer.drain(..head);
                buffer
            }
            Framing::Chunked => {
                let (body, end) = read_chunked(stream, buffer, head, limit).await?;
                keep &= end;
                body
            }
            Framing::Close => {
                keep = false;
                buffer.drain(..head);
                loop {
                    if buffer.len() > limit {
                        return Err(PlainError::TooLarge(TooLarge { limit }));
                    }
                    if fill(stream, &mut buffer).await? == 0 {
                        break buffer;
                    }
                }
            }
        };
        *response.body_mut() = Bytes::from(body);
        return Ok((response, keep));
    }
}

/// Reads into `buffer`'s spare room (growing it when full); the bytes read, 0 at the end.
async fn fill(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> io::Result<usize> {
    if buffer.capacity() - buffer.len() < 1024 {
        buffer.reserve(buffer.capacity().max(FIRST_READ));
    }
    stream.read_buf(buffer).await
}

/// An answer's head as [`parse_head`] reads it.
struct Head {
    /// Its length in bytes.
    length: usize,
    /// The answer, without its body.
    response: Response<Bytes>,
    framing: Framing,
    /// Whether the head lets the connection be kept.
    keep: bool,
}

/// The answer's head, when `buffer` holds all of it.
fn parse_head(buffer: &[u8]) -> Result<Option<Head>, PlainError> {
    // Left uninitialized: the parser writes each header it reads (a 3 KiB array, every call).
    let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut []);
    let config = httparse::ParserConfig::default();
    let head = match config.parse_response_with_uninit_headers(&mut parsed, buffer, &mut headers) {
        Ok(httparse::Status::Complete(head)) => head,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(PlainError::Malformed(e.to_string())),
    };
    let code = parsed.code.unwrap_or_default();
    let status = StatusCode::from_u16(code).map_err(|_| PlainError::Malformed(format!("status {code}")))?;
    let mut map = HeaderMap::with_capacity(parsed.headers.len());
    let (mut length, mut chunked, mut close) = (None, false, parsed.version != Some(1));
    for header in parsed.headers.iter() {
        let name = HeaderName::from_bytes(header.name.as_bytes())
            .map_err(|_| PlainError::Malformed(format!("the header name {:?}", header.name)))?;
        let value =
            HeaderValue::from_bytes(header.value).map_err(|_| PlainError::Malformed(format!("the value of {name}")))?;
        if name == CONTENT_LENGTH {
            let declared = value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or_else(|| PlainError::Malformed(format!("content-length {value:?}")))?;
            if length.is_some_and(|seen| seen != declared) {
                return Err(PlainError::Malformed("two different content-lengths".into()));
            }
            length = Some(declared);
        } else if name == TRANSFER_ENCODING {
            let last = value.as_bytes().rsplit(|b| *b == b',').next().unwrap_or_default();
            chunked = last.trim_ascii().eq_ignore_ascii_case(b"chunked");
        } else if name == CONNECTION {
            let tokens = value.as_bytes().split(|b| *b == b',').map(<[u8]>::trim_ascii);
            for token in tokens {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && parsed.version == Some(0) {
                    close = false;
                }
            }
        }
        map.append(name, value);
    }
    // A chunked body's own framing wins over any length beside it (RFC 9112, 6.3).
    let framing = match (chunked, length) {
        (true, _) => Framing::Chunked,
        (false, Some(length)) => Framing::Length(length),
        (false, None) => Framing::Close,
    };
    let mut response = Response::new(Bytes::new());
    *response.status_mut() = status;
    *response.headers_mut() = map;
    Ok(Some(Head { length: head, response, framing, keep: !close }))
}

/// Reads a chunked body whose first bytes are `buffer[start..]`: the body, and whether it ended
/// exactly where the buffer does (nothing after it, so the connection may be kept).
async fn read_chunked(
    stream: &mut TcpStream,
    mut buffer: Vec<u8>,
    start: usize,
    limit: usize,
) -> Result<(Vec<u8>, bool), PlainError> {
    let mut body = Vec::new();
    let mut at = start;
    loop {
        match httparse::parse_chunk_size(&buffer[at..]) {
            Ok(httparse::Status::Complete((line, 0))) => {
                // The last chunk; then trailers (not read), ended by an empty line.
                let rest = at + line;
                loop {
                    if buffer[rest..].starts_with(b"\r\n") {
                        return Ok((body, buffer.len() == rest + 2));
                    }
                    if let Some(end) = buffer[rest..].windows(4).position(|w| w == b"\r\n\r\n") {
                        return Ok((body, buffer.len() == rest + end + 4));
                    }
                    if buffer.len() - rest > MAX_HEAD {
                        return Err(PlainError::Malformed(format!("trailers longer than {MAX_HEAD} bytes")));
                    }
                    if fill(stream, &mut buffer).await? == 0 {
                        return Err(PlainError::Closed("in the trailers"));
                    }
                }
            }
            Ok(httparse::Status::Complete((line, size))) => {
                let size = usize::try_from(size).unwrap_or(usize::MAX);
                if body.len().saturating_add(size) > limit {
                    return Err(PlainError::TooLarge(TooLarge { limit }));
                }
                let data = at + line;
                let end = data + size + 2;
                while buffer.len() < end {
                    if fill(stream, &mut buffer).await? == 0 {
                        return Err(PlainError::Closed("mid-chunk"));
                    }
                }
                if &buffer[end - 2..end] != b"\r\n" {
                    return Err(PlainError::Malformed("a chunk not ended by CRLF".into()));
                }
                body.put_slice(&buffer[data..end - 2]);
                // The chunks read are copied out: keep the buffer to what is still unread.
                buffer.drain(..end);
                at = 0;
            }
            Ok(httparse::Status::Partial) => {
                if buffer.len() - at > MAX_HEAD {
                    return Err(PlainError::Malformed("a chunk size line too long".into()));
                }
                if fill(stream, &mut buffer).await? == 0 {
                    return Err(PlainError::Closed("mid-chunk"));
                }
            }
            Err(_) => return Err(PlainError::Malformed("a chunk size that is not hex".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::net::TcpListener;

    use super::*;

    /// What a scripted server does after each answer.
    #[derive(Clone, Copy, PartialEq)]
    enum Then {
        KeepOpen,
        Close,
    }

    /// A server that answers the `n`th request on any connection with `answers[n]` (the last
    /// one again past the end), then keeps the connection or closes it; it counts connections.
    async fn scripted(answers: Vec<&'static [u8]>, then: Then) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let connections = Arc::new(AtomicUsize::new(0));
        let (counted, served) = (connections.clone(), Arc::new(AtomicUsize::new(0)));
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                counted.fetch_add(1, Ordering::SeqCst);
                let (answers, served) = (answers.clone(), served.clone());
                tokio::spawn(async move {
                    let mut buffer = Vec::new();
                    while crate::testing::read_request(&mut socket, &mut buffer).await.is_some() {
                        let n = served.fetch_add(1, Ordering::SeqCst);
                        let answer = answers[n.min(answers.len() - 1)];
                        if socket.write_all(answer).await.is_err() || then == Then::Close {
                            return;
                        }
                    }
                });
            }
        });
        (base, connections)
    }

    fn post(base: &str) -> Request {
        let uri = format!("{base}/v1/call").parse().unwrap();
        Request::post(uri, crate::json_headers(HeaderMap::new()), Bytes::from_static(b"{\"q\":1}"))
    }

    async fn call(plain: &Plain, base: &str) -> Result<Response<Bytes>, PlainError> {
        plain.exchange(&post(base), 1 << 20).await
    }

    #[tokio::test]
    async fn a_chunked_answer_is_read_whole_and_its_connection_kept() {
        let chunked: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
            5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nx-trailer: t\r\n\r\n";
        let (base, connections) = scripted(vec![chunked], Then::KeepOpen).await;
        let plain = Plain::new(4);
        for _ in 0..3 {
            let answer = call(&plain, &base).await.unwrap();
            assert_eq!((answer.status(), &answer.body()[..]), (StatusCode::OK, &b"hello world"[..]));
        }
        assert_eq!(connections.load(Ordering::SeqCst), 1, "one connection carries every call");
    }

    #[tokio::test]
    async fn interim_answers_are_skipped_and_a_length_frames_the_body() {
        let answer: &[u8] =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\nx-id: 7\r\n\r\n{}";
        let (base, connections) = scripted(vec![answer], Then::KeepOpen).await;
        let plain = Plain::new(4);
        for _ in 0..2 {
            let answer = call(&plain, &base).await.unwrap();
            assert_eq!((answer.status().as_u16(), &answer.body()[..]), (201, &b"{}"[..]));
            assert_eq!(answer.headers()["x-id"], "7");
        }
        assert_eq!(connections.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_body_framed_by_the_close_is_read_to_the_end_and_the_connection_not_kept() {
        let (base, connections) = scripted(vec![b"HTTP/1.1 200 OK\r\n\r\nall of it"], Then::Close).await;
        let plain = Plain::new(4);
        for _ in 0..2 {
            assert_eq!(&call(&plain, &base).await.unwrap().body()[..], b"all of it");
        }
        assert_eq!(connections.load(Ordering::SeqCst), 2, "a connection that ended the body is not reused");
    }

    #[tokio::test]
    async fn a_connection_the_answer_closes_is_not_kept() {
        let answer: &[u8] = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}";
        let (base, connections) = scripted(vec![answer], Then::Close).await;
        let plain = Plain::new(4);
        for _ in 0..3 {
            assert_eq!(&call(&plain, &base).await.unwrap().body()[..], b"{}");
        }
        assert_eq!(connections.load(Ordering::SeqCst), 3);
    }

    /// A server that closes a kept-alive connection while it is idle (as uvicorn does after 5 s):
    /// the next call finds it closed and opens another, without failing.
    #[tokio::test]
    async fn an_idle_connection_the_server_closed_is_not_used() {
        let answer: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        let (base, connections) = scripted(vec![answer], Then::Close).await;
        let plain = Plain::new(4);
        for _ in 0..3 {
            assert_eq!(&call(&plain, &base).await.unwrap().body()[..], b"{}");
            tokio::time::sleep(CHECK_AFTER * 2).await;
        }
        assert_eq!(connections.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_body_over_the_limit_fails_however_it_is_framed() {
        let long = vec![b'x'; 4096];
        let length: &[u8] =
            Box::leak([&b"HTTP/1.1 200 OK\r\ncontent-length: 4096\r\n\r\n"[..], &long].concat().into_boxed_slice());
        let chunked: &[u8] = Box::leak(
            [&b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1000\r\n"[..], &long, b"\r\n0\r\n\r\n"]
                .concat()
                .into_boxed_slice(),
        );
        let closed: &[u8] = Box::leak([&b"HTTP/1.1 200 OK\r\n\r\n"[..], &long].concat().into_boxed_slice());
        for (answer, then) in [(length, Then::KeepOpen), (chunked, Then::KeepOpen), (closed, Then::Close)] {
            let (base, _) = scripted(vec![answer], then).await;
            let plain = Plain::new(4);
            let error = plain.exchange(&post(&base), 1000).await.unwrap_err();
            assert!(matches!(error, PlainError::TooLarge(TooLarge { limit: 1000 })), "{error}");
            let error = plain.send(post(&base), 1000).await.unwrap_err();
            assert!(error.is::<TooLarge>(), "the stack's callers see the body layer's error: {error}");
            assert_eq!(plain.exchange(&post(&base), 4096).await.unwrap().body().len(), 4096);
        }
    }

    /// Whatever a server sends back, the call ends in an answer or an error, never a panic.
    #[tokio::test]
    async fn a_server_that_lies_gets_an_error() {
        let lies: [&[u8]; 7] = [
            b"SMTP ready\r\n\r\n",
            b"HTTP/1.1 999999 Huh\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: -4\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabcd\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
        ];
        for lie in lies {
            let (base, _) = scripted(vec![lie], Then::Close).await;
            let error = call(&Plain::new(1), &base).await.unwrap_err();
            assert!(!error.is_unsent(), "{error}");
        }
    }

    /// A refused connection is an unsent request, and its error names the host and port, never
    /// a password in the URL.
    #[tokio::test]
    async fn a_refused_connection_is_unsent() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let error = call(&Plain::new(1), &format!("http://user:hunter2@{address}")).await.unwrap_err();
        assert!(error.is_unsent() && matches!(error, PlainError::Connect { .. }), "{error}");
        let said = error.to_string();
        assert!(said.contains(&address.to_string()) && !said.contains("hunter2"), "{said}");
    }

    /// The request on the wire: the URL's path and host, the caller's headers, the body's
    /// length and the body.
    #[tokio::test]
    async fn a_request_is_written_as_http_1_1() {
        let request = post("http://user:secret@10.0.0.7:8000");
        assert_eq!(
            String::from_utf8(wire(&head(&request), &request.body).await).unwrap(),
            "POST /v1/call HTTP/1.1\r\nhost: 10.0.0.7:8000\r\ncontent-type: application/json\r\n\
             content-length: 7\r\n\r\n{\"q\":1}"
        );
    }

    /// A body larger than the socket takes in one call arrives whole, after the head.
    #[tokio::test]
    async fn a_large_body_arrives_whole_behind_its_head() {
        let head = b"POST / HTTP/1.1\r\ncontent-length: 8388608\r\n\r\n".to_vec();
        let body: Vec<u8> = (0..8 << 20).map(|i: u32| (i % 251) as u8).collect();
        let arrived = wire(&head, &body).await;
        assert_eq!(arrived.len(), head.len() + body.len());
        assert!(arrived.starts_with(&head) && arrived.ends_with(&body));
    }

    /// What [`write_all`] puts on a connection, as its other end reads it.
    async fn wire(head: &[u8], body: &[u8]) -> Vec<u8> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut stream = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        let read = tokio::spawn(async move {
            let mut arrived = Vec::new();
            server.read_to_end(&mut arrived).await.unwrap();
            arrived
        });
        write_all(&mut stream, head, body).await.unwrap();
        drop(stream);
        read.await.unwrap()
    }
}
