//! Answers from a task file: the stub answers a request whose first user text is a row's with a
//! field of that row (its `expected_answer`, or the right option letter), so that runs against
//! it score correct answers; a stated fraction of rows gets a wrong answer and another a
//! malformed one, chosen by a hash of the prompt, so that every scorer sees all three. With a
//! [`Learner`], the stub is instead a simulated learner: each row is answered right with a chance
//! that starts at the row's own difficulty and rises each time the row is practised.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::hash::{Fnv, unit};

/// What a row's prompt is answered with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RowAnswer {
    pub(crate) right: String,
    wrong: String,
    /// The option letters of a multiple-choice row, in their order (empty for other rows).
    pub(crate) letters: Vec<String>,
    /// The row's `difficulty` field: a [`Learner`]'s first chance of answering it right.
    difficulty: Option<f64>,
}

/// The answers of a task file.
#[derive(Debug, Clone, Default)]
pub struct AnswerKey {
    rows: HashMap<String, RowAnswer>,
    /// The answer's text; `{answer}` is replaced by the answer.
    pub format: String,
    /// Fraction of rows answered wrongly.
    pub wrong: f64,
    /// Fraction of rows answered without an answer the scorers can read.
    pub malformed: f64,
    /// A simulated learner answering instead of the fractions above.
    pub learner: Option<Arc<Learner>>,
}

/// A simulated learner (`parley stub --learner RATE`): a row's first answer is right with a
/// chance equal to its difficulty (the row's `difficulty` field in [0, 1], else drawn once per
/// row from a hash of its prompt, uniform in [0, 1)), and each time the row is practised the chance c rises by `rate`·4c(1−c): fastest at
/// c = 0.5, hardly at all near 0 or 1, as a policy-gradient trainer learns nothing from a task
/// whose rollouts all score alike. Right or wrong is drawn from a hash of the prompt, the seed
/// and the practice count, so a run against it is reproducible. It counts how many answers were given while the row's chance lay
/// in the learnable band [0.1, 0.9], and reports the mean chance over every row
/// (`/stub/stats`'s `learner`): what a curriculum is for.
#[derive(Debug, Default)]
pub struct Learner {
    pub rate: f64,
    state: Mutex<Practice>,
}

#[derive(Debug, Default)]
struct Practice {
    times: HashMap<String, u32>,
    answered: u64,
    in_band: u64,
}

impl Learner {
    pub fn new(rate: f64) -> Learner {
        Learner { rate, state: Mutex::default() }
    }

    /// The chance that a row is answered right after it has been practised `times` times, from
    /// its first chance `difficulty` (a hash of the prompt when the row gives none).
    pub fn chance(&self, prompt: &str, difficulty: Option<f64>, times: u32) -> f64 {
        let mut chance =
            difficulty.unwrap_or_else(|| unit(Fnv::new().bytes(b"difficulty").bytes(prompt.as_bytes()).finish()));
        for _ in 0..times {
            chance = (chance + self.rate * 4.0 * chance * (1.0 - chance)).min(1.0);
        }
        chance
    }

    /// Whether this ask of `prompt` is answered right; counts the practice.
    fn answers_right(&self, prompt: &str, difficulty: Option<f64>, seed: u64) -> bool {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let times = state.times.get(prompt).copied().unwrap_or(0);
        let chance = self.chance(prompt, difficulty, times);
        state.times.insert(prompt.to_owned(), times + 1);
        state.answered += 1;
        state.in_band += u64::from((0.1..=0.9).contains(&chance));
        unit(Fnv::new().bytes(prompt.as_bytes()).u64(seed).u64(u64::from(times)).finish()) < chance
    }

    /// What `/stub/stats` says of the learner: answers given, how many of them in the band,
    /// and the mean chance over the key's rows now.
    fn stats<'a>(&self, rows: impl Iterator<Item = (&'a String, &'a RowAnswer)>) -> serde_json::Value {
        let state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let chances: Vec<f64> = rows
            .map(|(prompt, row)| self.chance(prompt, row.difficulty, state.times.get(prompt).copied().unwrap_or(0)))
            .collect();
        let mean = chances.iter().sum::<f64>() / chances.len().max(1) as f64;
        serde_json::json!({"rate": self.rate, "answered": state.answered, "in_band": state.in_band,
                           "rows": chances.len(), "mean_chance": mean})
    }
}

/// What a malformed answer says: no letter, no box, no number.
pub const MALFORMED: &str = "I would rather not say.";

impl AnswerKey {
    /// Reads NeMo Gym rows (JSON lines); `field` names the answer. Rows without a first user
    /// text or without the field are skipped; a line that is not JSON is an error naming it.
    pub fn from_jsonl(text: &str, field: &str) -> Result<AnswerKey, String> {
        let mut key = AnswerKey::from_rows([], field);
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let row: Value = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
            key.add(&row, field);
        }
        Ok(key)
    }

    /// The answers of rows already read, by the same rules as [`AnswerKey::from_jsonl`].
    pub fn from_rows<'a>(rows: impl IntoIterator<Item = &'a Value>, field: &str) -> AnswerKey {
        let mut key =
            AnswerKey { rows: HashMap::new(), format: "{answer}".into(), wrong: 0.0, malformed: 0.0, learner: None };
        for row in rows {
            key.add(row, field);
        }
        key
    }

    /// Keeps a row's answer; a row without a first user text or without the field is skipped.
    fn add(&mut self, row: &Value, field: &str) {
        let (Some(prompt), Some(right)) = (first_user(row), right_answer(row, field)) else { return };
        let wrong = wrong_answer(row, &right);
        let difficulty = row.get("difficulty").and_then(Value::as_f64).filter(|d| (0.0..=1.0).contains(d));
        self.rows.insert(prompt, RowAnswer { right, wrong, letters: letters(row), difficulty });
    }

    /// The right answer the key holds for a row (looked up by its first user text, as a request
    /// is), when it holds one.
    pub fn right_of(&self, row: &Value) -> Option<&str> {
        Some(self.rows.get(&first_user(row)?)?.right.as_str())
    }

    /// The row whose first user text is `prompt`.
    pub(crate) fn row(&self, prompt: &str) -> Option<&RowAnswer> {
        self.rows.get(prompt)
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// What `/stub/stats` says of the learner, when the key has one.
    pub fn learner_stats(&self) -> Option<serde_json::Value> {
        Some(self.learner.as_ref()?.stats(self.rows.iter()))
    }

    /// The answer to a request whose first user text is `prompt`, when a row has it.
    pub(crate) fn answer(&self, prompt: &str, seed: u64) -> Option<String> {
        let row = self.rows.get(prompt)?;
        if let Some(learner) = &self.learner {
            let answer = if learner.answers_right(prompt, row.difficulty, seed) { &row.right } else { &row.wrong };
            return Some(self.format.replace("{answer}", answer));
        }
        let draw = unit(Fnv::new().bytes(prompt.as_bytes()).u64(seed).finish());
        if draw < self.malformed {
            return Some(MALFORMED.to_owned());
        }
        let answer = if draw < self.malformed + self.wrong { &row.wrong } else { &row.right };
        Some(self.format.replace("{answer}", answer))
    }
}

/// A judge's verdict on a prompt with `GOLD:` and `CANDIDATE:` sections (the last of each, since
/// prompts may hold examples): `[[A=B]]` when the candidate, lowercased and with whitespace
/// collapsed, contains the gold text so normalized; `None` for any other prompt. Containment is
/// not symmetric, so a swapped second question can disagree with the first.
pub fn verdict(prompt: &str) -> Option<&'static str> {
    let gold_at = prompt.rfind("GOLD:\n")?;
    let rest = &prompt[gold_at + "GOLD:\n".len()..];
    let split = rest.find("\n\nCANDIDATE:\n")?;
    let norm = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
    let gold = norm(&rest[..split]);
    let candidate = norm(&rest[split + "\n\nCANDIDATE:\n".len()..]);
    Some(if !gold.is_empty() && candidate.contains(&gold) { "Same content. [[A=B]]" } else { "They differ. [[A!=B]]" })
}

/// What the stub says as a judge ([`crate::StubConfig::judge`]): a [`verdict`] on an answer, or
/// a [`user_review`] of a simulated user; `None` for a prompt that is neither.
pub fn judgement(prompt: &str) -> Option<String> {
    verdict(prompt).map(str::to_owned).or_else(|| user_review(prompt))
}

/// A judged review of a simulated user, for a prompt with `INSTRUCTIONS:` and `CONVERSATION:`
/// sections whose lines read `[N] customer: ...`. A test double's rules, not a reader's: the
/// first customer message that says `instead` is off its scenario, and the first that gives an
/// identifier (a word of five characters or more mixing letters and digits) its instructions do
/// not hold asserts unknown information. It ends with one verdict line per rule, as asked.
pub fn user_review(prompt: &str) -> Option<String> {
    let at = prompt.rfind("INSTRUCTIONS:\n")?;
    let rest = &prompt[at + "INSTRUCTIONS:\n".len()..];
    let split = rest.find("\n\nCONVERSATION:\n")?;
    let instructions = rest[..split].to_lowercase();
    let said = rest[split + "\n\nCONVERSATION:\n".len()..].lines().filter_map(|line| {
        let (number, text) = line.strip_prefix('[')?.split_once("] customer: ")?;
        Some((number.parse::<u32>().ok()?, text.to_lowercase()))
    });
    let (mut off, mut unknown) = (None, None);
    for (number, text) in said {
        if off.is_none() && text.split(|c: char| !c.is_alphanumeric()).any(|w| w == "instead") {
            off = Some(number);
        }
        let invented = text.split(|c: char| !c.is_alphanumeric() && c != '_').any(|w| {
            let mixed = w.chars().any(|c| c.is_ascii_digit()) && w.chars().any(|c| c.is_alphabetic());
            w.len() >= 5 && mixed && !instructions.contains(w)
        });
        if unknown.is_none() && invented {
            unknown = Some(number);
        }
    }
    let line = |found: Option<u32>| found.map_or_else(|| "none".to_owned(), |n| n.to_string());
    Some(format!(
        "off_scenario: {}\nunknown_info: {}\noff_scenario: {}\nunknown_info: {}",
        if off.is_some() { "the customer changes the subject." } else { "the customer keeps to its task." },
        if unknown.is_some() { "the customer gives an identifier it was not given." } else { "nothing invented." },
        line(off),
        line(unknown),
    ))
}

/// A row's answer in `field` as text (a number as written), when it has one.
fn right_answer(row: &Value, field: &str) -> Option<String> {
    let answer = row.get(field).filter(|v| !v.is_null())?;
    Some(answer.as_str().map_or_else(|| answer.to_string(), str::to_owned))
}

/// The option letters of a multiple-choice row (`options`: one-key objects), in their order.
fn letters(row: &Value) -> Vec<String> {
    let options = row.get("options").and_then(Value::as_array).into_iter().flatten();
    options.filter_map(Value::as_object).flat_map(|o| o.keys().cloned()).collect()
}

/// The text of a row's first user message, as a request carries it.
fn first_user(row: &Value) -> Option<String> {
    let input = row.get("responses_create_params")?.get("input")?;
    match input {
        Value::String(text) => Some(text.clone()),
        Value::Array(items) => items.iter().find(|i| i.get("role").and_then(Value::as_str) == Some("user")).map(|i| {
            match i.get("content") {
                Some(Value::String(text)) => text.clone(),
                Some(Value::Array(parts)) => {
                    parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect()
                }
                _ => String::new(),
            }
        }),
        _ => None,
    }
}

/// A wrong answer of the same kind: another option letter, another number, or other words.
fn wrong_answer(row: &Value, right: &str) -> String {
    if let Some(options) = row.get("options").and_then(Value::as_array) {
        let other = options
            .iter()
            .filter_map(Value::as_object)
            .flat_map(|o| o.keys())
            .find(|k| !k.eq_ignore_ascii_case(right.trim()));
        if let Some(other) = other {
            return other.clone();
        }
    }
    if let Ok(n) = right.trim().parse::<i64>() {
        return (n.saturating_add(1)).to_string();
    }
    if let Ok(x) = right.trim().parse::<f64>() {
        return (x + 1.0).to_string();
    }
    format!("not {right}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_read_the_last_gold_and_candidate() {
        let prompt = "GOLD:\nx\n\nCANDIDATE:\nx\n\nNow:\nGOLD:\n42\n\nCANDIDATE:\nIt is 42.";
        assert!(verdict(prompt).unwrap().ends_with("[[A=B]]"));
        assert!(verdict("GOLD:\nIt is 42.\n\nCANDIDATE:\n42").unwrap().ends_with("[[A!=B]]"));
        assert_eq!(verdict("hello"), None);
    }

    #[test]
    fn a_user_review_names_the_first_message_of_each_fault() {
        let prompt = "Review.\n\nINSTRUCTIONS:\nYour user id is mia_li_3668.\n\nCONVERSATION:\n\
                      [0] agent: Hello!\n[1] customer: I am mia_li_3668.\n[2] agent: Ok.\n\
                      [3] customer: My booking is ZX9Q7W.\n[5] customer: Book a hotel instead.";
        let review = judgement(prompt).unwrap();
        assert!(review.ends_with("off_scenario: 5\nunknown_info: 3"), "{review}");
        let clean = "INSTRUCTIONS:\nCancel.\n\nCONVERSATION:\n[1] customer: Yes, please go ahead.";
        assert!(judgement(clean).unwrap().ends_with("off_scenario: none\nunknown_info: none"));
        assert_eq!(judgement("hello"), None);
    }

    #[test]
    fn a_learner_answers_a_row_right_more_often_the_more_it_practises_it() {
        let rows = (0..200).map(|i| format!(r#"{{"responses_create_params": {{"input": [{{"role": "user", "content": "Q{i}"}}]}}, "expected_answer": "{i}"}}"#));
        let mut key = AnswerKey::from_jsonl(&rows.collect::<Vec<_>>().join("\n"), "expected_answer").unwrap();
        key.learner = Some(Arc::new(Learner::new(0.1)));
        let right = |key: &AnswerKey, round: u64| {
            (0..200).filter(|i| key.answer(&format!("Q{i}"), round).as_deref() == Some(i.to_string().as_str())).count()
        };
        let first = right(&key, 0);
        for round in 1..10 {
            right(&key, round);
        }
        let tenth = right(&key, 10);
        assert!((70..130).contains(&first), "the first answers are right at the rows' difficulty: {first}");
        assert!(tenth > first + 30, "practice raises the chances: {first} then {tenth}");
        let stats = key.learner_stats().unwrap();
        assert_eq!(
            (stats["answered"].clone(), stats["rows"].clone()),
            (serde_json::json!(2200), serde_json::json!(200))
        );
        let learner = key.learner.as_ref().unwrap();
        assert_eq!(learner.chance("Q0", None, 0), learner.chance("Q0", None, 0), "a row's difficulty is its own");
        assert!(learner.chance("Q1", None, 10) > learner.chance("Q1", None, 1), "each practice raises it");
        assert_eq!(learner.chance("Q1", Some(0.25), 0), 0.25, "or the row's own field");
        assert!((learner.chance("Q1", Some(0.5), 1) - 0.6).abs() < 1e-12, "+rate·4c(1-c)");
        assert!(stats["mean_chance"].as_f64().unwrap() > 0.6, "{stats}");
    }

    #[test]
    fn answers_right_wrong_and_malformed_by_row() {
        let text = r#"{"responses_create_params": {"input": "Q1"}, "expected_answer": "B", "options": [{"A": "x"}, {"B": "y"}]}
{"responses_create_params": {"input": [{"role": "user", "content": "Q2"}]}, "expected_answer": 41}
{"responses_create_params": {"input": "Q3"}}
"#;
        let mut key = AnswerKey::from_jsonl(text, "expected_answer").unwrap();
        assert_eq!(key.len(), 2, "the row without the field is skipped");
        key.format = "\\boxed{{answer}}".into();
        assert_eq!(key.answer("Q1", 0).as_deref(), Some("\\boxed{B}"));
        assert_eq!(key.answer("Q3", 0), None);
        key.wrong = 1.0;
        assert_eq!(key.answer("Q1", 0).as_deref(), Some("\\boxed{A}"));
        assert_eq!(key.answer("Q2", 0).as_deref(), Some("\\boxed{42}"));
        key.malformed = 1.0;
        assert_eq!(key.answer("Q2", 0).as_deref(), Some(MALFORMED));
        assert!(AnswerKey::from_jsonl("{", "x").unwrap_err().contains("line 1"));
    }
}
