//! What error messages and log lines quote of a remote answer: a bounded prefix of its body, and
//! its error chain with known keys redacted.

/// Bytes of a body an error or a log line quotes at most.
const QUOTED: usize = 300;

/// The first few hundred bytes of `body`, cut at a character boundary, and the body's size when
/// it was cut: a 15 MB answer makes a line of a few hundred bytes, not of 15 MB.
pub fn excerpt(body: &str) -> String {
    if body.len() <= QUOTED {
        return body.to_owned();
    }
    let mut end = QUOTED;
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &body[..end], body.len())
}

/// [`excerpt`] of a body held as bytes, decoding only the prefix it quotes.
pub fn excerpt_bytes(body: &[u8]) -> String {
    if body.len() <= QUOTED {
        return String::from_utf8_lossy(body).into_owned();
    }
    // The prefix may end inside a character; a replacement character there is cut off below.
    let prefix = String::from_utf8_lossy(&body[..QUOTED + 4]);
    let mut end = QUOTED.min(prefix.len());
    while !prefix.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &prefix[..end], body.len())
}

/// An error and its causes in one line ("error sending request: connection refused"), with every
/// known key redacted: how a transport failure is told, in an error or a log line.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    crate::secrets::redact(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_body_is_cut_at_a_char_boundary_and_its_size_given() {
        let body = "é".repeat(1_000_000);
        let quoted = excerpt(&body);
        assert!(quoted.len() < 400, "{} bytes", quoted.len());
        assert!(quoted.ends_with("… (2000000 bytes in all)"), "{quoted}");
        assert_eq!(excerpt("short"), "short");
        assert_eq!(excerpt_bytes(body.as_bytes()), quoted);
    }
}
