//! The keys Parley holds, so that none is ever stored, exported or logged.
//!
//! An endpoint may echo what it was sent, `Authorization` header included, in an answer or an
//! error. Every client registers the value of each key it is given ([`register`]), and the body
//! reader of this crate replaces every registered value with [`REDACTED`] in each body it reads,
//! before anything else sees the body; errors and log lines built from bodies inherit that. It
//! is a process-wide registry because one endpoint can echo another's key (a judge that quotes
//! its prompt, a server that logs headers), and because a key is a fact of the process, not of
//! one client. Only values are held, never variable names; keys shorter than [`MIN_LEN`] bytes
//! are not redacted, since replacing a few common bytes everywhere would corrupt every body.

use std::borrow::Cow;
use std::sync::{PoisonError, RwLock};

/// What a key's value is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Keys shorter than this are not redacted (see the module's docs).
pub const MIN_LEN: usize = 8;

static KEYS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Remembers `key` so that every body read afterwards has it redacted.
pub fn register(key: &str) {
    if key.len() < MIN_LEN {
        return;
    }
    let mut keys = KEYS.write().unwrap_or_else(PoisonError::into_inner);
    // A key as it appears inside a JSON string, where `"` and `\` are escaped: an endpoint that
    // echoes it in a JSON body writes that form.
    let escaped = key.replace('\\', "\\\\").replace('"', "\\\"");
    for form in [key.to_owned(), escaped] {
        if !keys.contains(&form) {
            keys.push(form);
        }
    }
}

/// `text` with every registered key replaced by [`REDACTED`].
pub fn redact(text: &str) -> Cow<'_, str> {
    let keys = KEYS.read().unwrap_or_else(PoisonError::into_inner);
    let mut out = Cow::Borrowed(text);
    for key in keys.iter() {
        if out.contains(key.as_str()) {
            out = Cow::Owned(out.replace(key.as_str(), REDACTED));
        }
    }
    out
}

/// `body` with every registered key replaced; bytes that are not UTF-8 are searched as bytes.
pub fn redact_bytes(body: Vec<u8>) -> Vec<u8> {
    let keys = KEYS.read().unwrap_or_else(PoisonError::into_inner);
    if keys.is_empty() {
        return body;
    }
    let mut body = body;
    for key in keys.iter() {
        let key = key.as_bytes();
        if find(&body, key, 0).is_none() {
            continue;
        }
        let mut out = Vec::with_capacity(body.len());
        let mut from = 0;
        while let Some(at) = find(&body, key, from) {
            out.extend_from_slice(&body[from..at]);
            out.extend_from_slice(REDACTED.as_bytes());
            from = at + key.len();
        }
        out.extend_from_slice(&body[from..]);
        body = out;
    }
    body
}

/// Where `needle` next occurs in `haystack` at or after `from`. Candidates are found by the
/// needle's first byte, so a body of many megabytes is scanned about once.
fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let (&first, _) = needle.split_first()?;
    let mut at = from;
    loop {
        at += haystack.get(at..)?.iter().position(|&b| b == first)?;
        if haystack[at..].starts_with(needle) {
            return Some(at);
        }
        at += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_keys_are_redacted_from_text_and_bytes() {
        register("sk-test-0123456789");
        register("short");
        let body = r#"{"echo":"Bearer sk-test-0123456789","again":"sk-test-0123456789"}"#;
        let redacted = redact(body);
        assert!(!redacted.contains("sk-test-0123456789"), "{redacted}");
        assert!(redacted.contains("Bearer [redacted]"), "{redacted}");
        let bytes = redact_bytes(body.as_bytes().to_vec());
        assert_eq!(String::from_utf8(bytes).unwrap(), redacted);
        assert_eq!(redact("short and sweet"), "short and sweet");
    }
}
