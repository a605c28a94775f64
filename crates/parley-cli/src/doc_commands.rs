//! Every `parley` command the documentation shows is one the command line accepts. The README's
//! and each guide's (`docs/*.md`) `sh` blocks are read; every command that runs `parley`
//! (`parley ...`, `./target/release/parley ...`, `cargo run --release -- ...`, or one of those
//! inside `$(...)`) is split into words as a shell splits them, and [`Cli`] parses it. A flag
//! renamed or removed fails this test with the document, the line and clap's own message, so the
//! guides cannot drift from the binary.
//!
//! The shell read here is a small one, enough for documentation: quotes, backslashes, `\` at the
//! end of a line, comments, `;`, `|`, `&&`, `&`, redirections (their targets dropped) and heredocs
//! (their bodies skipped). Commands of other programs (cargo, python, curl, gym) are not parsed. A
//! variable stands for the value the document gave it (`DB=postgres://...` earlier in the file),
//! `${NAME:-default}` for its default, and anything else (`$RUN`, `$(head -n 1 stub.log)`) for
//! `1`: a run or session id, a port, or a string where the flag takes any.

use std::collections::HashMap;
use std::iter::Peekable;
use std::path::{Path, PathBuf};
use std::str::Chars;

use clap::Parser;
use clap::error::ErrorKind;

use crate::cli::Cli;

/// A `parley` command of a document: the line it starts on and its words, `parley` first.
#[derive(Debug, PartialEq)]
struct Documented {
    line: usize,
    words: Vec<String>,
}

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The README and every guide, in that order.
fn documents() -> Vec<PathBuf> {
    let mut guides: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    guides.sort();
    std::iter::once(root().join("README.md")).chain(guides).collect()
}

/// Parses one command as the binary would, `--help` and `--version` counting as parsed.
fn parse(words: &[String]) -> Result<(), clap::Error> {
    match Cli::try_parse_from(words) {
        Err(e) if !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => Err(e),
        _ => Ok(()),
    }
}

#[test]
fn every_parley_command_in_the_documentation_parses() {
    let mut refused = Vec::new();
    let mut count = 0;
    for file in documents() {
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
        for command in commands(&text) {
            count += 1;
            if let Err(e) = parse(&command.words) {
                refused.push(format!("{name}:{}: `{}`\n{e}", command.line, command.words.join(" ")));
            }
        }
    }
    assert!(count >= 50, "the documentation's commands were found: {count}");
    assert!(refused.is_empty(), "documented commands that `parley` refuses:\n\n{}", refused.join("\n"));
}

#[test]
fn a_misspelled_flag_in_a_document_fails_with_its_line() {
    let found = commands("Run it:\n\n```sh\nparley run --env multi-step \\\n    --num-task 3\n```\n");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].line, 4);
    let error = parse(&found[0].words).unwrap_err().to_string();
    assert!(error.contains("unexpected argument '--num-task'"), "{error}");
}

#[test]
fn a_block_is_split_into_commands_as_a_shell_splits_it() {
    let doc = r#"Not a command: parley run --nothing

```sh
export KEY=...
DB=postgres://u@h:5432/d
RUN=$(parley run --db $DB --detach)   # records the run
parley worker --db "$DB" --run $RUN \
    --reward 'format:pattern=\\boxed' --reward format:pattern=\\boxed --port "${PORT:-8123}" > log 2>&1 &
cat > f.toml <<'TOML'
parley in-a-heredoc
TOML
curl -s x | parley show 1; echo "$(parley runs)" && cargo run --release -- metrics 2 --json
```

```text
parley output --not-parsed
```
"#;
    let words = |line: &str| line.split(' ').map(str::to_owned).collect::<Vec<_>>();
    let found = commands(doc);
    let expected = [
        (6, words("parley run --db postgres://u@h:5432/d --detach")),
        (7, {
            let mut worker = words("parley worker --db postgres://u@h:5432/d --run 1 --reward");
            worker.extend(
                [r"format:pattern=\\boxed", "--reward", r"format:pattern=\boxed", "--port", "8123"].map(String::from),
            );
            worker
        }),
        (12, words("parley runs")),
        (12, words("parley show 1")),
        (12, words("parley metrics 2 --json")),
    ];
    let found: Vec<(usize, Vec<String>)> = found.into_iter().map(|c| (c.line, c.words)).collect();
    assert_eq!(found, expected);
}

/// The `parley` commands of a Markdown text's `sh` blocks, in order.
fn commands(text: &str) -> Vec<Documented> {
    let mut shell = Shell::default();
    let mut found = Vec::new();
    let mut lines = text.lines().enumerate().map(|(at, line)| (at + 1, line));
    while let Some((_, line)) = lines.next() {
        if !matches!(line.trim(), "```sh" | "```bash" | "```shell") {
            continue;
        }
        let mut heredoc: Option<String> = None;
        let mut pending: Option<(usize, String)> = None;
        for (number, line) in lines.by_ref() {
            if line.trim() == "```" {
                break;
            }
            if let Some(end) = &heredoc {
                if line.trim() == end {
                    heredoc = None;
                }
                continue;
            }
            let (start, mut logical) = pending.take().unwrap_or((number, String::new()));
            if let Some(head) = line.trim_end().strip_suffix('\\') {
                logical.push_str(head);
                pending = Some((start, logical));
                continue;
            }
            logical.push_str(line);
            let (commands, end) = shell.run(&logical);
            heredoc = end;
            found.extend(commands.into_iter().map(|words| Documented { line: start, words }));
        }
    }
    found
}

/// The variables a document has set so far, for the commands after.
#[derive(Default)]
struct Shell {
    variables: HashMap<String, String>,
}

/// What a line splits into: its simple commands' words, the commands substituted in it (`$(...)`),
/// and the word that ends a heredoc it opens.
#[derive(Default)]
struct Split {
    commands: Vec<Vec<String>>,
    substituted: Vec<String>,
    heredoc: Option<String>,
}

impl Shell {
    /// The `parley` commands of one logical line (its substitutions' first), each as the words
    /// `Cli` parses, and the word that ends a heredoc the line opens. Assignments are kept for
    /// the lines after.
    fn run(&mut self, line: &str) -> (Vec<Vec<String>>, Option<String>) {
        let split = self.split(line);
        let mut found = Vec::new();
        for inner in &split.substituted {
            found.extend(self.run(inner).0);
        }
        for words in split.commands {
            let mut words = words.as_slice();
            while let Some((first, rest)) = words.split_first() {
                if let Some((name, value)) = assignment(first) {
                    self.variables.insert(name.to_owned(), value.to_owned());
                } else if !matches!(first.as_str(), "do" | "then" | "else" | "!" | "time" | "exec") {
                    break;
                }
                words = rest;
            }
            if words.first().is_some_and(|w| w == "export") {
                for (name, value) in words[1..].iter().filter_map(|w| assignment(w)) {
                    self.variables.insert(name.to_owned(), value.to_owned());
                }
                continue;
            }
            let args = match words {
                [program, rest @ ..]
                    if ["parley", "./target/release/parley", "target/release/parley"].contains(&program.as_str()) =>
                {
                    rest
                }
                [cargo, run, release, dashes, rest @ ..]
                    if [cargo, run, release, dashes] == ["cargo", "run", "--release", "--"] =>
                {
                    rest
                }
                _ => continue,
            };
            found.push(std::iter::once("parley".to_owned()).chain(args.iter().cloned()).collect());
        }
        (found, split.heredoc)
    }

    /// Splits a line into simple commands of words, quotes taken off and variables expanded.
    fn split(&self, line: &str) -> Split {
        let mut split = Split { commands: vec![Vec::new()], ..Split::default() };
        let mut word: Option<String> = None;
        // The next word is a redirection's target (or a heredoc's end), not an argument.
        let mut target: Option<bool> = None;
        let mut chars = line.chars().peekable();
        fn finish(word: &mut Option<String>, target: &mut Option<bool>, split: &mut Split) {
            let Some(done) = word.take() else { return };
            match target.take() {
                Some(true) => split.heredoc = Some(done),
                Some(false) => {}
                None => split.commands.last_mut().unwrap().push(done),
            }
        }
        while let Some(c) = chars.next() {
            match c {
                ' ' | '\t' => finish(&mut word, &mut target, &mut split),
                '#' if word.is_none() => break,
                '&' if chars.peek() == Some(&'>') => {
                    finish(&mut word, &mut target, &mut split);
                    chars.next();
                    target = Some(false);
                }
                ';' | '|' | '&' => {
                    finish(&mut word, &mut target, &mut split);
                    if chars.peek() == Some(&c) {
                        chars.next();
                    }
                    split.commands.push(Vec::new());
                }
                '>' | '<' => {
                    // `2>`: the digits name a descriptor, not a word.
                    if word.as_deref().is_some_and(|w| w.chars().all(|d| d.is_ascii_digit())) {
                        word = None;
                    }
                    finish(&mut word, &mut target, &mut split);
                    let heredoc = c == '<' && chars.peek() == Some(&'<');
                    if chars.peek() == Some(&c) {
                        chars.next();
                    }
                    if heredoc && chars.peek() == Some(&'-') {
                        chars.next();
                    }
                    if chars.peek() == Some(&'&') {
                        // `>&2`, `2>&1`: a descriptor, no word to drop.
                        chars.next();
                        while chars.peek().is_some_and(|d| d.is_ascii_digit() || *d == '-') {
                            chars.next();
                        }
                    } else {
                        target = Some(heredoc);
                    }
                }
                '\'' => {
                    let word = word.get_or_insert_default();
                    word.extend(chars.by_ref().take_while(|&q| q != '\''));
                }
                '"' => {
                    let word = word.get_or_insert_default();
                    while let Some(q) = chars.next() {
                        match q {
                            '"' => break,
                            '\\' if chars.peek().is_some_and(|n| "\"\\$`".contains(*n)) => {
                                word.push(chars.next().unwrap())
                            }
                            '$' => word.push_str(&self.expand(&mut chars, &mut split.substituted)),
                            q => word.push(q),
                        }
                    }
                }
                '\\' => word.get_or_insert_default().extend(chars.next()),
                '$' => {
                    let value = self.expand(&mut chars, &mut split.substituted);
                    word.get_or_insert_default().push_str(&value);
                }
                c => word.get_or_insert_default().push(c),
            }
        }
        finish(&mut word, &mut target, &mut split);
        split.commands.retain(|command| !command.is_empty());
        split
    }

    /// The value of the expansion after a `$`: a variable the document set, a default, or `1`.
    /// A command substituted is kept in `substituted`, to be read as a command of its own.
    fn expand(&self, chars: &mut Peekable<Chars>, substituted: &mut Vec<String>) -> String {
        let unknown = || "1".to_owned();
        match chars.peek().copied() {
            Some('(') => {
                chars.next();
                substituted.push(balanced(chars));
                unknown()
            }
            Some('{') => {
                chars.next();
                let inside: String = chars.by_ref().take_while(|&c| c != '}').collect();
                let (name, default) = inside.split_once(":-").map_or((inside.as_str(), None), |(n, d)| (n, Some(d)));
                self.variables.get(name).cloned().or(default.map(str::to_owned)).unwrap_or_else(unknown)
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                let mut name = String::new();
                while let Some(c) = chars.next_if(|c| c.is_ascii_alphanumeric() || *c == '_') {
                    name.push(c);
                }
                self.variables.get(&name).cloned().unwrap_or_else(unknown)
            }
            Some(c) if c.is_ascii_digit() || "!?$#@*-".contains(c) => {
                chars.next();
                unknown()
            }
            _ => "$".to_owned(),
        }
    }
}

/// The text up to the `)` that closes a `$(` already read, quotes and nested parentheses
/// respected; the `)` is consumed.
fn balanced(chars: &mut Peekable<Chars>) -> String {
    let (mut depth, mut quote, mut inner) = (1, None, String::new());
    for c in chars.by_ref() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            _ => {}
        }
        inner.push(c);
    }
    inner
}

/// `NAME=value` as a shell reads an assignment: a name of letters, digits and `_`, not
/// starting with a digit.
fn assignment(word: &str) -> Option<(&str, &str)> {
    let (name, value) = word.split_once('=')?;
    let mut letters = name.chars();
    let first = letters.next()?;
    ((first.is_ascii_alphabetic() || first == '_') && letters.all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some((name, value))
}
