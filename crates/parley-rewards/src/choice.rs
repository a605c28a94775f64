//! Multiple-choice grading: the chosen letter is pulled out of the reply by one of NeMo Gym
//! `mcqa`'s grading modes and compared with the row's `expected_answer`.
//!
//! The row carries `options` (a list of one-key objects, `{"A": "text"}`), `expected_answer`
//! (the letter), and optionally `grading_mode` and `template_metadata.output_regex` (patterns
//! tried first, the last match of each) or `template_metadata.answer_prefix`. Like `mcqa`, the
//! reply graded is every assistant text of the session concatenated (its `output_text`).

use std::collections::BTreeSet;
use std::sync::LazyLock;

use async_trait::async_trait;
use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use unicode_normalization::UnicodeNormalization;

use crate::{Context, Score, ScoreError, Scorer};

/// How the letter is found, named as `mcqa` names its modes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GradingMode {
    /// The letter alone (or a letter label) inside the last `\boxed{}`.
    #[default]
    StrictSingleLetterBoxed,
    /// As strict, else exactly one option's text inside the last `\boxed{}`.
    LenientBoxed,
    /// `Answer: X`, a letter or an option's exact text.
    LenientAnswerColon,
    /// The last `Answer:` line (Markdown emphasis allowed) or the row's `answer_prefix`.
    LenientAnswerColonMd,
}

impl GradingMode {
    fn parse(name: &str) -> Option<GradingMode> {
        serde_json::from_value(Value::String(name.to_owned())).ok()
    }
}

/// Grades a multiple-choice reply.
#[derive(Debug, Clone, Default)]
pub struct Choice {
    /// Overrides the row's `grading_mode` when set (as `mcqa`'s server config does).
    pub mode: Option<GradingMode>,
}

fn regex(pattern: &str) -> Regex {
    // The patterns are constants of this file and compile; a test checks each.
    RegexBuilder::new(pattern).build().expect("a constant pattern compiles")
}

static BOXED_LETTER_ONLY: LazyLock<Regex> = LazyLock::new(|| regex(r"^[^A-Za-z]*([A-Z])[^A-Za-z]*$"));
static BOXED_LETTER_LABEL: LazyLock<Regex> = LazyLock::new(|| regex(r"^\s*([A-Z])\s*[:).\-]"));
static ANSWER_COLON: LazyLock<Regex> = LazyLock::new(|| regex(r"(?i)answer\s*:\s*(.+)"));
static ANSWER_COLON_PAYLOAD: LazyLock<Regex> =
    LazyLock::new(|| regex(r"(?im)[*_]{0,2}Answer[*_]{0,2}\s*:[*_\s]{0,2}(.+)"));
static TEXT_WRAP: LazyLock<Regex> = LazyLock::new(|| regex(r"(?s)^\\text\{\s*(.*?)\s*\}$"));
static STANDALONE_LETTER: LazyLock<Regex> = LazyLock::new(|| regex(r"\b[A-Z]\b"));
static LIST_SEPARATOR: LazyLock<Regex> = LazyLock::new(|| regex(r"(?i)^(?:\s*[/|&,;]\s*|\s+(?:or|and)\s+|\s+)$"));

/// Everything inside the last `\boxed{...}`, braces counted; `None` without a closed one.
pub fn boxed_inner(text: &str) -> Option<&str> {
    command_inner(text, "\\boxed{")
}

/// Everything inside the last `command` (a LaTeX command with its opening brace, such as
/// `\fbox{`) up to its matching brace; `None` without a closed one.
pub fn command_inner<'a>(text: &'a str, command: &str) -> Option<&'a str> {
    let start = text.rfind(command)? + command.len();
    let mut depth = 1usize;
    for (i, ch) in text[start..].char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[start..start + i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// Removes successive whole-string `\text{...}` wrappers.
fn strip_text_wrappers(mut s: &str) -> &str {
    while let Some(inner) = TEXT_WRAP.captures(s).and_then(|c| c.get(1)) {
        s = inner.as_str();
    }
    s
}

/// Lowercased, whitespace collapsed.
fn norm(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

/// NFKC, with Arabic, Bengali and full-width letters read as the Latin letters A to D.
fn normalize_extracted(text: &str) -> String {
    let mut s: String = text.nfkc().collect();
    for (from, to) in [
        ("أ", " A"),
        ("ب", " B"),
        ("ج", " C"),
        ("د", " D"),
        ("অ", " A"),
        ("ব", " B"),
        ("ড", " C"),
        ("ঢ", " D"),
        ("Ａ", " A"),
        ("Ｂ", " B"),
        ("Ｃ", " C"),
        ("Ｄ", " D"),
    ] {
        s = s.replace(from, to);
    }
    s.trim().to_owned()
}

/// The option letters of a row: one-character alphabetic keys with a value.
fn allowed_letters(options: &[(String, Option<String>)]) -> BTreeSet<String> {
    options
        .iter()
        .filter(|(k, v)| v.is_some() && k.chars().count() == 1 && k.chars().all(char::is_alphabetic))
        .map(|(k, _)| k.to_uppercase())
        .collect()
}

fn strict_boxed(text: &str, allowed: &BTreeSet<String>) -> Option<String> {
    let inner = boxed_inner(text)?;
    let inner = strip_text_wrappers(inner.trim());
    let letter = BOXED_LETTER_ONLY
        .captures(inner)
        .or_else(|| BOXED_LETTER_LABEL.captures(inner))
        .and_then(|c| c.get(1))
        .map(|m| m.as_str().to_uppercase())?;
    allowed.contains(&letter).then_some(letter)
}

fn option_text_in_boxed(
    text: &str,
    options: &[(String, Option<String>)],
    allowed: &BTreeSet<String>,
) -> Option<String> {
    let inner = boxed_inner(text)?.trim();
    let candidates = [norm(inner), norm(strip_text_wrappers(inner))];
    let mut matched = BTreeSet::new();
    for candidate in &candidates {
        for (k, v) in options {
            let Some(v) = v else { continue };
            if k.chars().count() == 1 && allowed.contains(&k.to_uppercase()) {
                let option = norm(v);
                if !option.is_empty() && candidate.contains(&option) {
                    matched.insert(k.to_uppercase());
                }
            }
        }
    }
    if matched.len() == 1 { matched.pop_first() } else { None }
}

fn is_ascii_letter_at(chars: &[char], i: usize) -> bool {
    chars.get(i).is_some_and(char::is_ascii_alphabetic)
}

/// Whether the text lists two distinct allowed letters one after another ("A or B", "A, C").
fn ambiguous_choice_list(text: &str, allowed: &BTreeSet<String>) -> bool {
    let chars: Vec<char> = text.chars().collect();
    let mut letters: Vec<(String, usize)> = Vec::new();
    for (i, c) in chars.iter().enumerate() {
        let standalone = c.is_ascii_alphabetic()
            && !(i > 0 && is_ascii_letter_at(&chars, i - 1))
            && !is_ascii_letter_at(&chars, i + 1);
        if standalone && allowed.contains(&c.to_ascii_uppercase().to_string()) {
            letters.push((c.to_ascii_uppercase().to_string(), i));
        }
    }
    letters.windows(2).any(|pair| {
        let between: String = chars[pair[0].1 + 1..pair[1].1].iter().collect();
        pair[0].0 != pair[1].0 && LIST_SEPARATOR.is_match(&between)
    })
}

/// One letter out of an answer payload such as `B`, `B) because`, or `the answer is B`.
fn choice_letter(text: &str, allowed: &BTreeSet<String>) -> Option<String> {
    let normalized = normalize_extracted(text);
    let candidate = normalized.trim_matches(|c: char| "*_` \t\n\r.,;:".contains(c));
    if ambiguous_choice_list(candidate, allowed) {
        return None;
    }
    let chars: Vec<char> = candidate.chars().collect();
    // One character, or a leading letter not followed by a letter or digit ("B because").
    let leading = chars.len() == 1
        || (chars.first().is_some_and(char::is_ascii_alphabetic)
            && !chars.get(1).is_some_and(|c| c.is_ascii_alphanumeric()));
    let letter = if leading {
        Some(chars[0].to_string())
    } else {
        STANDALONE_LETTER.find_iter(candidate).last().map(|m| m.as_str().to_owned())
    }?;
    let up = letter.to_uppercase();
    allowed.contains(&up).then_some(up)
}

/// The payloads after `Answer:` (or the row's prefix), in text order.
fn answer_payloads(text: &str, prefix: Option<&str>) -> Vec<String> {
    let text: String = text.nfkc().collect();
    let mut found: Vec<(usize, String)> = ANSWER_COLON_PAYLOAD
        .captures_iter(&text)
        .filter_map(|c| Some((c.get(0)?.start(), c.get(1)?.as_str().to_owned())))
        .collect();
    if let Some(prefix) = prefix.filter(|p| !p.is_empty()) {
        let prefix: String = prefix.nfkc().collect();
        if let Ok(pattern) =
            RegexBuilder::new(&format!(r"{}\s*", regex::escape(&prefix))).case_insensitive(true).build()
        {
            for m in pattern.find_iter(&text) {
                let end = text[m.end()..].find('\n').map_or(text.len(), |i| m.end() + i);
                found.push((m.start(), text[m.end()..end].to_owned()));
            }
        }
    }
    found.sort_by_key(|(start, _)| *start);
    found.into_iter().map(|(_, payload)| payload).collect()
}

/// `template_metadata.output_regex`: the last match of the first pattern that yields a letter
/// (or an option's exact text). A pattern that does not compile yields nothing, as in `mcqa`.
fn custom_regex(
    text: &str,
    pattern: &str,
    allowed: &BTreeSet<String>,
    options: &[(String, Option<String>)],
) -> Option<String> {
    let re = RegexBuilder::new(pattern).case_insensitive(true).build().ok()?;
    let caps = re.captures_iter(text).last()?;
    let captured = caps.get(1).or_else(|| caps.get(0))?.as_str();
    let captured = normalize_extracted(captured.trim()).to_uppercase();
    let mut chars = captured.chars();
    if let (Some(c), None) = (chars.next(), chars.next())
        && c.is_alphabetic()
    {
        // The regex is trusted even when the letter is not among the options, as in `mcqa`.
        return Some(captured);
    }
    let wanted = norm(&captured);
    options
        .iter()
        .find(|(k, v)| v.as_deref().is_some_and(|v| norm(v) == wanted) && allowed.contains(&k.to_uppercase()))
        .map(|(k, _)| k.to_uppercase())
}

/// The row's options as (key, text) pairs, in order; anything else in the list is skipped.
fn row_options(row: &Value) -> Vec<(String, Option<String>)> {
    let Some(items) = row.get("options").and_then(Value::as_array) else { return Vec::new() };
    items
        .iter()
        .filter_map(Value::as_object)
        .flat_map(|entry| entry.iter().map(|(k, v)| (k.clone(), v.as_str().map(str::to_owned))))
        .collect()
}

impl Choice {
    /// The letter a reply chose, by the given mode and row; `None` when none can be read.
    pub fn extract(&self, text: &str, row: &Value) -> Option<String> {
        let options = row_options(row);
        let allowed = allowed_letters(&options);
        let metadata = row.get("template_metadata");
        let mode = self
            .mode
            .or_else(|| row.get("grading_mode").and_then(Value::as_str).and_then(GradingMode::parse))
            .unwrap_or_default();
        let mut pred = None;
        match metadata.and_then(|m| m.get("output_regex")) {
            Some(Value::String(p)) => pred = custom_regex(text, p, &allowed, &options),
            Some(Value::Array(ps)) => {
                pred = ps.iter().filter_map(Value::as_str).find_map(|p| custom_regex(text, p, &allowed, &options));
            }
            _ => {}
        }
        if pred.is_some() {
            return pred;
        }
        match mode {
            GradingMode::StrictSingleLetterBoxed => strict_boxed(text, &allowed),
            GradingMode::LenientBoxed => {
                strict_boxed(text, &allowed).or_else(|| option_text_in_boxed(text, &options, &allowed))
            }
            GradingMode::LenientAnswerColon => {
                let candidate = ANSWER_COLON.captures(text)?.get(1)?.as_str();
                let candidate = strip_text_wrappers(candidate).trim();
                let mut chars = candidate.chars();
                if let (Some(c), None) = (chars.next(), chars.next())
                    && c.is_alphabetic()
                    && allowed.contains(&c.to_uppercase().to_string())
                {
                    return Some(c.to_uppercase().to_string());
                }
                let wanted = norm(candidate);
                options
                    .iter()
                    .find(|(k, v)| {
                        allowed.contains(&k.to_uppercase()) && v.as_deref().is_some_and(|v| norm(v) == wanted)
                    })
                    .map(|(k, _)| k.to_uppercase())
            }
            GradingMode::LenientAnswerColonMd => {
                let prefix = metadata.and_then(|m| m.get("answer_prefix")).and_then(Value::as_str);
                let payloads = answer_payloads(text, prefix);
                let found = payloads.iter().rev().find_map(|p| choice_letter(p, &allowed));
                match found {
                    None if prefix.is_some_and(|p| !p.is_empty()) => strict_boxed(text, &allowed),
                    found => found,
                }
            }
        }
    }
}

#[async_trait]
impl Scorer for Choice {
    async fn score(&self, cx: &Context<'_>) -> Result<Score, ScoreError> {
        let gold = cx.row_text("expected_answer").unwrap_or_default().trim().to_uppercase();
        let text = cx.output_text();
        let text = text.trim();
        let pred = if text.is_empty() { None } else { self.extract(text, cx.task.row.fields()) };
        let correct = pred.as_ref().is_some_and(|p| !gold.is_empty() && *p == gold);
        Ok(Score::hit(correct).with("expected_answer", gold).with("extracted_answer", pred))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::cx;
    use serde_json::json;

    fn row(mode: &str) -> Value {
        json!({"options": [{"A": "Paris"}, {"B": "Lyon"}, {"C": "Nice"}, {"D": "Lille"}],
               "expected_answer": "B", "grading_mode": mode})
    }

    fn pick(mode: &str, text: &str) -> Option<String> {
        Choice::default().extract(text, &row(mode))
    }

    /// Each pattern compiles, takes the text it is for (capturing what it should), and leaves
    /// alone a text it is not for.
    #[test]
    fn every_pattern_takes_what_it_is_for_and_nothing_else() {
        let capture = |re: &Regex, text: &str| re.captures(text).and_then(|c| c.get(1)).map(|m| m.as_str().to_owned());
        for (re, text, captured) in [
            (&*BOXED_LETTER_ONLY, " (B) ", "B"),
            (&*BOXED_LETTER_LABEL, "C: Nice", "C"),
            (&*BOXED_LETTER_LABEL, " D) Lille", "D"),
            (&*ANSWER_COLON, "so the ANSWER : A", "A"),
            (&*ANSWER_COLON_PAYLOAD, "**Answer**: B\nwhy", "B"),
            (&*TEXT_WRAP, "\\text{ Lyon }", "Lyon"),
        ] {
            assert_eq!(capture(re, text).as_deref(), Some(captured), "{re} on {text:?}");
        }
        for (re, text) in [
            (&*BOXED_LETTER_ONLY, "AB"),
            (&*BOXED_LETTER_LABEL, "Nice"),
            (&*ANSWER_COLON, "an answer without a colon"),
            (&*ANSWER_COLON_PAYLOAD, "no payload here"),
            (&*TEXT_WRAP, "\\textbf{Lyon}"),
            (&*STANDALONE_LETTER, "ABC and xyz"),
            (&*LIST_SEPARATOR, "B"),
        ] {
            assert!(!re.is_match(text), "{re} on {text:?}");
        }
        assert_eq!(STANDALONE_LETTER.find_iter("A or C").map(|m| m.as_str()).collect::<Vec<_>>(), ["A", "C"]);
        for separator in [" / ", ",", " or ", " AND ", "  "] {
            assert!(LIST_SEPARATOR.is_match(separator), "{separator:?}");
        }
    }

    #[test]
    fn strict_boxed_reads_the_last_box() {
        let strict = "strict_single_letter_boxed";
        assert_eq!(pick(strict, r"\boxed{A} then \boxed{B}"), Some("B".into()));
        assert_eq!(pick(strict, r"\boxed{\text{C}}"), Some("C".into()));
        assert_eq!(pick(strict, r"\boxed{D: Lille}"), Some("D".into()));
        assert_eq!(pick(strict, r"\boxed{E}"), None, "E is not an option");
        assert_eq!(pick(strict, r"\boxed{Lyon}"), None);
        assert_eq!(pick(strict, "B"), None, "no box");
        assert_eq!(pick(strict, r"\boxed{B"), None, "unclosed");
    }

    #[test]
    fn lenient_modes() {
        assert_eq!(pick("lenient_boxed", r"\boxed{lyon}"), Some("B".into()));
        assert_eq!(pick("lenient_boxed", r"\boxed{Paris or Lyon}"), None, "two options match");
        assert_eq!(pick("lenient_answer_colon", "Answer: b"), Some("B".into()));
        assert_eq!(pick("lenient_answer_colon", "answer: Nice"), Some("C".into()));
        let md = "lenient_answer_colon_md";
        assert_eq!(pick(md, "**Answer:** B because"), Some("B".into()));
        assert_eq!(pick(md, "Answer: A or B"), None, "a list is ambiguous");
        assert_eq!(pick(md, "Answer: A\nthinking...\nAnswer: (D)"), Some("D".into()));
        assert_eq!(pick(md, "Answer: Ｃ"), Some("C".into()), "full-width letters read as Latin");
    }

    #[test]
    fn template_regex_comes_first() {
        let mut r = row("strict_single_letter_boxed");
        r["template_metadata"] = json!({"output_regex": r"Final choice:\s*([A-Z])"});
        assert_eq!(Choice::default().extract("Final choice: C and Final choice: B", &r), Some("B".into()));
        r["template_metadata"] = json!({"output_regex": "("});
        assert_eq!(Choice::default().extract(r"\boxed{A}", &r), Some("A".into()), "a bad regex falls through");
    }

    #[tokio::test]
    async fn scores_right_wrong_and_malformed() {
        let r = row("strict_single_letter_boxed");
        let s = Choice::default().score(&cx(&r, r"The answer is \boxed{B}").as_cx()).await.unwrap();
        assert_eq!((s.value, &s.details["extracted_answer"]), (1.0, &json!("B")));
        let s = Choice::default().score(&cx(&r, r"\boxed{A}").as_cx()).await.unwrap();
        assert_eq!(s.value, 0.0);
        let s = Choice::default().score(&cx(&r, "I cannot say").as_cx()).await.unwrap();
        assert_eq!((s.value, &s.details["extracted_answer"]), (0.0, &Value::Null));
    }
}
