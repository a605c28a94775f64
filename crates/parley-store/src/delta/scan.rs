//! The layout of a request body that is one JSON document, read by its structure alone: where
//! its top-level fields' values begin and end, and whether text added to a list stays inside
//! it. Every body is a [`parley_core::RawJson`], whose text is one JSON document, so a scan of
//! its brackets and strings finds what a parse would, without checking again what the body's
//! maker checked, and without a tree.

use std::collections::BTreeMap;

/// The top-level fields of `body`, by key, each with its value's text; a key written twice
/// keeps its last value, as a parse into a map does. `None` when `body` is no object, or has a
/// key written with escapes (which the delta's reader would have to unescape).
pub(super) fn fields(body: &str) -> Option<BTreeMap<&str, &str>> {
    let b = body.as_bytes();
    let mut i = skip_space(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_space(b, i + 1);
    let mut fields = BTreeMap::new();
    if b.get(i) == Some(&b'}') {
        return (skip_space(b, i + 1) == b.len()).then_some(fields);
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(b, i)?;
        let key = body.get(i + 1..key_end - 1)?;
        if key.contains('\\') {
            return None;
        }
        i = skip_space(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = skip_space(b, i + 1);
        let end = value_end(b, start)?;
        fields.insert(key, body.get(start..end)?);
        i = skip_space(b, end);
        match b.get(i)? {
            b',' => i = skip_space(b, i + 1),
            b'}' => return (skip_space(b, i + 1) == b.len()).then_some(fields),
            _ => return None,
        }
    }
}

/// Whether `added`, text that follows a list's items where the list was closed before, is
/// more items of the list: it closes nothing it did not open, and ends outside any string, so
/// that the `]` after it still closes the list. With the whole body one JSON document, the
/// list's items are then its earlier items and these.
pub(super) fn stays_in_list(added: &str) -> bool {
    close(added.as_bytes(), 0) == Err(Some(0))
}

/// Where the list or object open before `b[from]` closes: `Ok` with the index just past its
/// closing bracket, or `Err` at the end of `b` with the brackets inside it still open (`None`
/// when `b` ends inside a string).
fn close(b: &[u8], from: usize) -> Result<usize, Option<usize>> {
    let mut depth = 0usize;
    let mut i = from;
    while let Some(&byte) = b.get(i) {
        match byte {
            b'"' => {
                i = string_end(b, i).ok_or(None)?;
                continue;
            }
            b'[' | b'{' => depth += 1,
            b']' | b'}' => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return Ok(i + 1),
            },
            _ => {}
        }
        i += 1;
    }
    Err(Some(depth))
}

/// The index just past the string that opens at `b[at]` (a `"`).
fn string_end(b: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        i += memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        match b[i] {
            b'"' => return Some(i + 1),
            // An escape: the byte after the backslash is never the string's end.
            _ => i += 2,
        }
    }
}

/// The index just past the value that begins at `b[at]`.
fn value_end(b: &[u8], at: usize) -> Option<usize> {
    match *b.get(at)? {
        b'"' => string_end(b, at),
        b'[' | b'{' => close(b, at + 1).ok(),
        // A number, `true`, `false` or `null`: up to what follows a value.
        _ => {
            let len = b[at..].iter().position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'));
            Some(at + len.unwrap_or(b.len() - at))
        }
    }
}

fn skip_space(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;
    use serde_json::value::RawValue;

    /// Any JSON value, strings with escapes, quotes, brackets and non-ASCII text among them.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            "[a-z\"\\\\\\[\\]{}:, \n\té\u{2028}]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[a-z\"{}é]{0,4}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A document's text as serde_json writes it, compact or pretty.
    fn text(value: &Value, pretty: bool) -> String {
        if pretty { serde_json::to_string_pretty(value).unwrap() } else { serde_json::to_string(value).unwrap() }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The fields found by structure are the ones a parse into a map of borrowed texts
        /// finds, or neither finds any.
        #[test]
        fn fields_are_the_parses(value in json_value(), pretty in any::<bool>()) {
            let body = text(&value, pretty);
            let parsed = serde_json::from_str::<BTreeMap<&str, &RawValue>>(&body)
                .ok()
                .map(|m| m.into_iter().map(|(k, v)| (k, v.get())).collect::<BTreeMap<_, _>>());
            prop_assert_eq!(fields(&body), parsed);
        }

        /// Text added to a list stays in it exactly when the list's items and it read as a list.
        #[test]
        fn added_text_stays_in_the_list_when_the_items_parse(
            items in prop::collection::vec(json_value(), 0..4),
            after in json_value(),
            cut in 0usize..200,
        ) {
            // A body with a list, and text cut from it at any character after the list opens:
            // what follows the cut up to the list's end, or past it.
            let body = serde_json::to_string(&serde_json::json!({"a": items, "b": after})).unwrap();
            let open = body.find('[').unwrap() + 1;
            let close = body.len() - serde_json::to_string(&after).unwrap().len() - ",\"b\":".len() - 1;
            let mut at = (open + cut).min(close);
            while !body.is_char_boundary(at) {
                at -= 1;
            }
            let head = &body[open..at];
            // Cut where a whole item ends (the only cuts the encoder makes) or anywhere.
            for end in [close, (close + cut % 7).min(body.len())] {
                let added = &body[at..end];
                let whole = format!("[{head}{added}]");
                let reads = serde_json::from_str::<Value>(&whole).is_ok()
                    && serde_json::from_str::<Value>(&format!("[{head}]")).is_ok();
                if serde_json::from_str::<Value>(&format!("[{head}]")).is_ok() {
                    prop_assert_eq!(stays_in_list(added), reads, "{} then {}", head, added);
                }
            }
        }
    }

    #[test]
    fn what_is_not_an_object_of_plain_keys_has_no_fields() {
        assert_eq!(fields("[1, 2]"), None);
        assert_eq!(fields("null"), None);
        assert_eq!(fields(r#"{"a\"b": 1}"#), None);
        assert_eq!(fields(r#"{"a": 1} x"#), None);
        assert_eq!(fields(" { } "), Some(BTreeMap::new()));
        let found = fields(r#"{ "m" : [ "]" , {"}": 1} ] , "n":true,"m":2.5e3 }"#).unwrap();
        assert_eq!(found.into_iter().collect::<Vec<_>>(), [("m", "2.5e3"), ("n", "true")]);
    }

    #[test]
    fn added_text_that_closes_the_list_leaves_it() {
        assert!(stays_in_list(r#",{"role":"user","content":"b ] } \" ["}"#));
        assert!(stays_in_list(""));
        assert!(!stays_in_list(r#",{"content":"b"}],"x":[1"#));
        assert!(!stays_in_list(r#",{"content":"b"#));
        assert!(!stays_in_list(r#",["#));
    }
}
