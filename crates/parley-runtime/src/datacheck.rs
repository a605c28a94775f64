//! Task files checked and split, streaming (a million rows in bounded memory: a row is read,
//! judged and let go; what is kept is a 64-bit fingerprint per row).
//!
//! A row's fingerprints: *exact*, of the row as parsed (the same JSON whatever its spacing or
//! key order), and *normalised*, of what the policy is asked (the row's messages' text, its
//! whitespace collapsed and lower-cased), so that two rows asking the same thing in other words
//! of spacing or case are found too. A split keeps every row with the same normalised
//! fingerprint (or `--by` value) in one part, so no row of one part repeats in another.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use parley_core::Task;
use serde_json::Value;

use crate::error::{UsageError, usage};
use crate::tasks::{Rows, parse};

/// What is wrong with one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Not JSON, or not a task row.
    Unreadable(String),
    /// A row the environment or the reward cannot run or score.
    Unrunnable(String),
    /// The same row as an earlier line.
    Duplicate { of: usize },
    /// The same question as an earlier line, once whitespace and case are set aside.
    NearDuplicate { of: usize },
    /// The same question as a row of another file (train/test leakage).
    Leaked { file: PathBuf, line: usize },
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::Unreadable(why) => write!(f, "unreadable: {why}"),
            Finding::Unrunnable(why) => write!(f, "cannot run: {why}"),
            Finding::Duplicate { of } => write!(f, "duplicate of line {of}"),
            Finding::NearDuplicate { of } => write!(f, "the same question as line {of} (whitespace and case aside)"),
            Finding::Leaked { file, line } => write!(f, "also in {}:{line}", file.display()),
        }
    }
}

impl Finding {
    /// The finding's kind, as counts and `--json` name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Finding::Unreadable(_) => "unreadable",
            Finding::Unrunnable(_) => "unrunnable",
            Finding::Duplicate { .. } => "duplicate",
            Finding::NearDuplicate { .. } => "near_duplicate",
            Finding::Leaked { .. } => "leaked",
        }
    }
}

/// What a check found, beyond the findings it reported as it went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checked {
    pub rows: usize,
    /// Rows with no finding.
    pub good: usize,
    /// Findings by kind.
    pub findings: BTreeMap<&'static str, usize>,
    /// How many rows hold each top-level field.
    pub fields: BTreeMap<String, usize>,
}

/// Checks task file `path`: every row that does not parse, that `runnable` refuses (what the
/// environment and the reward need), that repeats an earlier row, or that appears in one of
/// `against` (leakage), is reported to `found` with its line, as it is read.
pub fn check(
    path: &Path,
    multi_step: bool,
    runnable: &dyn Fn(&Task) -> Result<(), String>,
    against: &[PathBuf],
    mut found: impl FnMut(usize, &Finding),
) -> Result<Checked, UsageError> {
    let mut elsewhere: HashMap<u64, (usize, usize)> = HashMap::new();
    for (i, other) in against.iter().enumerate() {
        for (line, row) in Rows::open(other).map_err(|e| usage(format!("--against: {e}")))? {
            if let Ok(row) = row {
                elsewhere.entry(normalised(&row)).or_insert((i, line));
            }
        }
    }
    let mut exact: HashMap<u64, usize> = HashMap::new();
    let mut near: HashMap<u64, usize> = HashMap::new();
    let mut checked = Checked::default();
    for (line, row) in Rows::open(path)? {
        checked.rows += 1;
        let mut findings = Vec::new();
        match row {
            Err(why) => findings.push(Finding::Unreadable(why)),
            Ok(row) => {
                if let Some(fields) = row.as_object() {
                    for key in fields.keys() {
                        *checked.fields.entry(key.clone()).or_default() += 1;
                    }
                }
                let (exact_key, near_key) = (fingerprint(&row), normalised(&row));
                match parse(checked.rows - 1, row, multi_step) {
                    Err(why) => findings.push(Finding::Unreadable(why)),
                    Ok(task) => {
                        if let Err(why) = runnable(&task) {
                            findings.push(Finding::Unrunnable(why));
                        }
                    }
                }
                if let Some(&of) = exact.get(&exact_key) {
                    findings.push(Finding::Duplicate { of });
                } else if let Some(&of) = near.get(&near_key) {
                    findings.push(Finding::NearDuplicate { of });
                }
                exact.entry(exact_key).or_insert(line);
                near.entry(near_key).or_insert(line);
                if let Some(&(file, at)) = elsewhere.get(&near_key) {
                    findings.push(Finding::Leaked { file: against[file].clone(), line: at });
                }
            }
        }
        if findings.is_empty() {
            checked.good += 1;
        }
        for finding in &findings {
            *checked.findings.entry(finding.kind()).or_default() += 1;
            found(line, finding);
        }
    }
    Ok(checked)
}

/// The three parts of a split, by share of the rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shares {
    pub train: f64,
    pub validation: f64,
    pub test: f64,
}

impl Shares {
    fn checked(self) -> Result<Shares, UsageError> {
        let all = [self.train, self.validation, self.test];
        if all.iter().any(|s| !(0.0..=1.0).contains(s)) || ((all.iter().sum::<f64>()) - 1.0).abs() > 1e-6 {
            return Err(usage(format!(
                "--train {} --validation {} --test {}: each share is between 0 and 1, and they add up to 1",
                self.train, self.validation, self.test
            )));
        }
        Ok(self)
    }
}

/// How many rows went to each part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Split {
    pub train: usize,
    pub validation: usize,
    pub test: usize,
    /// Rows that could not be read, left out (and named by a check).
    pub unreadable: usize,
}

/// Writes the rows of `path` into `outs` (train, validation, test), each row to the part its
/// key's seeded hash falls in: the key is the row's `by` field when given, else its normalised
/// question, so rows sharing it share a part. Rows are copied as they were written.
pub fn split(path: &Path, shares: Shares, seed: u64, by: Option<&str>, outs: [&Path; 3]) -> Result<Split, UsageError> {
    let shares = shares.checked()?;
    let create = |p: &Path| {
        std::fs::File::create(p)
            .map(std::io::BufWriter::new)
            .map_err(|e| usage(format!("cannot write {}: {e}", p.display())))
    };
    let mut files = [create(outs[0])?, create(outs[1])?, create(outs[2])?];
    let mut split = Split::default();
    for (line, row) in Rows::open(path)? {
        let Ok(row) = row else {
            split.unreadable += 1;
            continue;
        };
        let key = match by {
            Some(field) => {
                let value = row.get(field).ok_or_else(|| {
                    usage(format!("{}:{line}: --by {field}: the row has no `{field}` field", path.display()))
                })?;
                fingerprint(value)
            }
            None => normalised(&row),
        };
        let mut hasher = std::hash::DefaultHasher::new();
        (seed, key).hash(&mut hasher);
        let place = hasher.finish() as f64 / u64::MAX as f64;
        let part = if place < shares.train {
            0
        } else if place < shares.train + shares.validation {
            1
        } else {
            2
        };
        *[&mut split.train, &mut split.validation, &mut split.test][part] += 1;
        let written = serde_json::to_writer(&mut files[part], &row).map_err(std::io::Error::from);
        written.and_then(|()| files[part].write_all(b"\n")).map_err(|e| usage(format!("writing: {e}")))?;
    }
    for (file, out) in files.iter_mut().zip(outs) {
        file.flush().map_err(|e| usage(format!("writing {}: {e}", out.display())))?;
    }
    Ok(split)
}

/// A value's fingerprint: the same JSON, whatever its spacing or key order.
fn fingerprint(value: &Value) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    // serde_json's maps keep their keys sorted, so equal values serialise alike.
    value.to_string().hash(&mut hasher);
    hasher.finish()
}

/// What the policy is asked: the row's messages' text, whitespace collapsed and lower-cased.
fn normalised(row: &Value) -> u64 {
    let params = &row["responses_create_params"];
    let mut text = String::new();
    if let Some(instructions) = params["instructions"].as_str() {
        text.push_str(instructions);
    }
    match &params["input"] {
        Value::String(input) => text.push_str(input),
        Value::Array(messages) => {
            for message in messages {
                text.push('\n');
                match &message["content"] {
                    Value::String(content) => text.push_str(content),
                    other => text.push_str(&other.to_string()),
                }
            }
        }
        // Not a NeMo Gym row: the whole row is its question.
        _ => text.push_str(&row.to_string()),
    }
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
    let mut hasher = std::hash::DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

/// The fields counted, for a check's report: only those some row lacks are worth a look.
pub fn uneven_fields(checked: &Checked) -> Vec<(&str, usize)> {
    let readable = checked.fields.values().copied().max().unwrap_or(0);
    checked.fields.iter().filter(|(_, n)| **n < readable).map(|(k, n)| (k.as_str(), *n)).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn file(dir: &Path, name: &str, rows: &[&str]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, rows.join("\n") + "\n").unwrap();
        path
    }

    fn row(question: &str, answer: &str) -> String {
        serde_json::json!({"responses_create_params": {"input": [{"role": "user", "content": question}]},
                           "expected_answer": answer})
        .to_string()
    }

    #[test]
    fn a_check_names_each_bad_duplicate_and_leaked_row() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (row("What is 2+2?", "4"), row("what  is 2+2?", "4"), row("Name a colour.", "red"));
        let no_answer = serde_json::json!({"responses_create_params": {"input": "Why?"}}).to_string();
        let rows = [a.as_str(), &a, &b, "{not json", &c, &no_answer];
        let path = file(dir.path(), "train.jsonl", &rows);
        let test = file(dir.path(), "test.jsonl", &[&row("NAME A COLOUR.", "blue")]);
        let needs_answer = |t: &Task| match t.row.get("expected_answer") {
            Some(_) => Ok(()),
            None => Err("no `expected_answer`".to_owned()),
        };
        let mut found = Vec::new();
        let checked =
            check(&path, false, &needs_answer, std::slice::from_ref(&test), |line, f| found.push((line, f.clone())))
                .unwrap();
        assert_eq!(
            found,
            [
                (2, Finding::Duplicate { of: 1 }),
                (3, Finding::NearDuplicate { of: 1 }),
                (4, Finding::Unreadable(found[2].1.to_string().trim_start_matches("unreadable: ").to_owned())),
                (5, Finding::Leaked { file: test, line: 1 }),
                (6, Finding::Unrunnable("no `expected_answer`".into())),
            ]
        );
        assert_eq!((checked.rows, checked.good), (6, 1));
        assert_eq!(checked.fields["expected_answer"], 4);
        assert_eq!(uneven_fields(&checked), [("expected_answer", 4)]);
    }

    #[test]
    fn a_split_keeps_duplicates_together_and_follows_its_shares_and_seed() {
        let dir = tempfile::tempdir().unwrap();
        let rows: Vec<String> = (0..3000).map(|i| row(&format!("Question {}?", i % 1000), "x")).collect();
        let refs: Vec<&str> = rows.iter().map(String::as_str).collect();
        let path = file(dir.path(), "all.jsonl", &refs);
        let outs = ["train", "validation", "test"].map(|p| dir.path().join(format!("{p}.jsonl")));
        let shares = Shares { train: 0.8, validation: 0.1, test: 0.1 };
        let counts = split(&path, shares, 7, None, outs.each_ref().map(PathBuf::as_path)).unwrap();
        assert_eq!(counts.train + counts.validation + counts.test, 3000);
        assert!((counts.train as f64 / 3000.0 - 0.8).abs() < 0.05, "{counts:?}");
        let parts: Vec<HashSet<String>> =
            outs.iter().map(|p| std::fs::read_to_string(p).unwrap().lines().map(str::to_owned).collect()).collect();
        for (i, a) in parts.iter().enumerate() {
            for b in &parts[i + 1..] {
                assert!(a.is_disjoint(b), "no question is in two parts");
            }
        }
        let again = split(&path, shares, 8, None, outs.each_ref().map(PathBuf::as_path)).unwrap();
        assert_ne!(again, counts, "another seed, another split");
        let wrong = Shares { train: 0.8, validation: 0.3, test: 0.1 };
        assert!(split(&path, wrong, 7, None, outs.each_ref().map(PathBuf::as_path)).is_err());
    }
}
