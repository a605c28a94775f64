//! The one HTTP/1.1 client of the end-to-end tests: a request on a connection of its own
//! (`Connection: close`), its answer read whole. Blocking sockets, so that plain and async tests
//! alike can call it (also from threads of their own) and see exactly what the server sent.
//! Only `hostile.rs` writes requests byte by byte, on purpose: malformed heads, slow bodies and
//! upgrades that no client would send.

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::Value;

/// An answer: its status (0 when the head has none), its head (the status line and the headers,
/// names in lower case, values as sent) and its body (de-chunked).
pub type Answer = (u16, String, String);

/// `method path` on the server at `address` (`host:port`) with `body` and `headers`; a request
/// with a body says it is JSON unless `headers` name its `Content-Type`. Panics when the
/// connection fails.
pub fn request(address: &str, method: &str, path: &str, body: &str, headers: &[(&str, &str)]) -> Answer {
    try_request(address, method, path, body, headers).unwrap_or_else(|e| panic!("{method} {address}{path}: {e}"))
}

/// The same, with the error when the connection fails or is cut before an answer comes (a
/// server killed with the request in flight).
pub fn try_request(
    address: &str,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Answer> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || !matches!(method, "GET" | "HEAD") {
        if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("content-type")) {
            head.push_str("Content-Type: application/json\r\n");
        }
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    let mut stream = TcpStream::connect(address)?;
    let sent = stream.write_all(format!("{head}\r\n{body}").as_bytes());
    // A server may answer before it has read the whole body (413 for one too large) and close
    // the connection, so that the rest cannot be sent: its answer is read all the same.
    let mut response = Vec::new();
    let read = stream.read_to_end(&mut response);
    match (sent, read) {
        _ if response.starts_with(b"HTTP/") => Ok(answer(&response)),
        (Err(e), _) | (_, Err(e)) => Err(e),
        _ => Ok(answer(&response)),
    }
}

/// `GET path`.
pub fn get(address: &str, path: &str) -> Answer {
    request(address, "GET", path, "", &[])
}

/// `POST path` with a JSON `body`.
pub fn post(address: &str, path: &str, body: &str) -> Answer {
    request(address, "POST", path, body, &[])
}

/// `POST path` with a JSON `body`, and the answer's JSON body, whatever its status.
pub fn post_json(address: &str, path: &str, body: &str) -> Value {
    let (_, head, body) = post(address, path, body);
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{head}\n{body}: {e}"))
}

/// Splits a whole response into its status, head and body.
fn answer(response: &[u8]) -> Answer {
    let split = response.windows(4).position(|w| w == b"\r\n\r\n");
    let (head, body) = match split {
        Some(at) => (&response[..at], &response[at + 4..]),
        None => (response, &[][..]),
    };
    let head: Vec<String> = String::from_utf8_lossy(head)
        .lines()
        .enumerate()
        .map(|(i, line)| match line.split_once(':') {
            Some((name, value)) if i > 0 => format!("{}:{value}", name.to_ascii_lowercase()),
            _ => line.to_owned(),
        })
        .collect();
    let head = head.join("\r\n");
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = if head.contains("\r\ntransfer-encoding: chunked") { unchunk(body) } else { body.to_vec() };
    (status, head, String::from_utf8_lossy(&body).into_owned())
}

/// A chunked body's bytes, without the chunk sizes.
fn unchunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    while let Some(end) = body.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&body[..end]).ok().and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
        let rest = &body[end + 2..];
        match size {
            Some(size) if size > 0 && size <= rest.len() => {
                out.extend_from_slice(&rest[..size]);
                body = rest.get(size + 2..).unwrap_or_default();
            }
            _ => break,
        }
    }
    out
}
