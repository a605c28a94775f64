//! The conventions of Parley's code that no compiler enforces, each checked by a test over the
//! repository's files, so that breaking one fails `cargo nextest run` like any other bug:
//!
//! - every module opens with a `//!` comment that says what it is for;
//! - no crate declares a dependency it does not use;
//! - `parley-core` depends only on what it may (it holds the seams every other crate builds on,
//!   and stays light: no database driver, HTTP stack or async runtime);
//! - no status is compared as a string: a session's or a run's status is an enum end to end;
//! - every relative link in the documentation (`[text](path)`, `[text](path#anchor)`) names a
//!   file that exists and, with an anchor, a heading of that file, as GitHub slugs headings.
//!   Links to other sites are not followed: the tests need no network.
//!
//! A rule that becomes a convention gets a test here, written against [`rust_files`] or
//! [`members`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What `parley-core` may depend on, and why each is light.
const CORE_DEPENDENCIES: &[(&str, &str)] = &[
    ("async-trait", "the seam traits are async; a proc macro, nothing at run time"),
    ("serde", "every type of the domain is read and written"),
    ("serde_json", "task rows, tool arguments and raw model bodies are JSON"),
    ("thiserror", "the seams' error enums; a proc macro"),
];

/// What `parley-core`'s own tests may use beside it.
const CORE_DEV_DEPENDENCIES: &[&str] = &["proptest"];

/// Crates that `parley-core` must not pull in, however indirectly.
const CORE_FORBIDDEN: &[&str] = &["sqlx", "sqlx-core", "axum", "hyper", "reqwest", "async-openai", "tokio"];

#[test]
fn every_module_says_what_it_is_for() {
    let bare: Vec<String> = rust_files()
        .into_iter()
        .filter(|file| {
            let text = read(file);
            let first = text.lines().find(|line| !line.trim().is_empty()).unwrap_or_default();
            !first.starts_with("//!")
        })
        .map(|file| relative(&file))
        .collect();
    assert!(
        bare.is_empty(),
        "open each of these with a `//!` line saying what the module is for:\n{}",
        bare.join("\n")
    );
}

#[test]
fn no_crate_declares_a_dependency_it_does_not_use() {
    let mut unused = Vec::new();
    for member in members() {
        let manifest = manifest(&member.join("Cargo.toml"));
        let code = sources(&member, &manifest, false);
        let tests = code.clone() + &sources(&member, &manifest, true);
        let build = std::fs::read_to_string(member.join("build.rs")).unwrap_or_default();
        for (table, text) in [("dependencies", &code), ("dev-dependencies", &tests), ("build-dependencies", &build)] {
            for name in manifest.get(table).and_then(toml::Value::as_table).into_iter().flat_map(|t| t.keys()) {
                let ident = name.replace('-', "_");
                if uses(text, &ident) {
                    continue;
                }
                let fix = if table == "dependencies" && uses(&tests, &ident) {
                    "only its tests use it: move it to [dev-dependencies]"
                } else {
                    "nothing uses it: remove it"
                };
                unused.push(format!("{}: [{table}] {name}: {fix}", relative(&member.join("Cargo.toml"))));
            }
        }
    }
    assert!(unused.is_empty(), "dependencies their crates do not use:\n{}", unused.join("\n"));
}

#[test]
fn parley_core_depends_only_on_what_it_may() {
    let manifest = manifest(&root().join("crates/parley-core/Cargo.toml"));
    let names = |table: &str| -> BTreeSet<String> {
        manifest.get(table).and_then(toml::Value::as_table).map(|t| t.keys().cloned().collect()).unwrap_or_default()
    };
    let (dependencies, dev_dependencies) = (names("dependencies"), names("dev-dependencies"));
    let allowed: BTreeSet<String> = CORE_DEPENDENCIES.iter().map(|(name, _)| (*name).to_owned()).collect();
    let extra: Vec<&String> = dependencies.difference(&allowed).collect();
    assert!(extra.is_empty(), "parley-core must stay light; move the code that needs {extra:?} out of it");
    let allowed: BTreeSet<String> = CORE_DEV_DEPENDENCIES.iter().map(|name| (*name).to_owned()).collect();
    let extra: Vec<&String> = dev_dependencies.difference(&allowed).collect();
    assert!(extra.is_empty(), "parley-core's tests use {extra:?}; test that in a crate that depends on it");
    // And nothing they pull in is heavy: the lock file's graph from its own dependencies.
    let pulled = lock_closure(&dependencies);
    let heavy: Vec<&&str> = CORE_FORBIDDEN.iter().filter(|name| pulled.contains(**name)).collect();
    assert!(heavy.is_empty(), "parley-core pulls in {heavy:?} through {pulled:?}");
}

/// The stored names of `SessionStatus` and `RunStatus`.
const STATUS_NAMES: &[&str] = &["pending", "running", "finished", "interrupted"];

/// Where a status name may be compared as text: the enums' own mapping to their stored names, and
/// tau2's domains, whose orders, reservations and tasks have statuses of their own (tau2's data).
const STATUS_TEXT_ALLOWED: &[&str] = &["crates/parley-core/src/store.rs", "environments/tau2/"];

#[test]
fn no_status_is_compared_as_a_string() {
    let mut found = Vec::new();
    for file in rust_files() {
        let name = relative(&file);
        if name.starts_with("xtask/") || STATUS_TEXT_ALLOWED.iter().any(|allowed| name.starts_with(allowed)) {
            continue;
        }
        for (number, line) in read(&file).lines().enumerate() {
            if compares_a_status_name(line) {
                found.push(format!("{name}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "compare a status as `SessionStatus` or `RunStatus` (or against its `as_str()`), not as a literal:\n{}",
        found.join("\n")
    );
}

/// Whether a line compares something with a status name written as a Rust string literal: `==`,
/// `!=`, a match arm, or an `assert_eq!`/`assert_ne!` that lists one. A status name in SQL (the
/// store's columns) or in a comment is not a comparison.
fn compares_a_status_name(line: &str) -> bool {
    let code = line.split("//").next().unwrap_or_default();
    STATUS_NAMES.iter().any(|status| {
        let literal = format!("\"{status}\"");
        code.match_indices(&literal).any(|(at, _)| {
            let before = code[..at].trim_end();
            let after = code[at + literal.len()..].trim_start();
            before.ends_with("==")
                || before.ends_with("!=")
                || after.starts_with("==")
                || after.starts_with("!=")
                || after.starts_with("=>")
                || before.contains("assert_eq!")
                || before.contains("assert_ne!")
        })
    })
}

#[test]
fn a_status_literal_compared_is_found_and_one_in_sql_or_a_column_name_is_not() {
    assert!(compares_a_status_name(r#"if row.status == "finished" {"#));
    assert!(compares_a_status_name(r#"    "pending" => Status::Pending,"#));
    assert!(compares_a_status_name(r#"assert_eq!((row.trial, row.status.as_str()), (2, "pending"));"#));
    assert!(!compares_a_status_name(r#"UPDATE sessions SET status = 'finished' WHERE id = ?"#));
    assert!(!compares_a_status_name(r#"finished: get("finished")?,"#));
    assert!(!compares_a_status_name(r#"// a status == "finished" in a comment"#));
}

/// The documentation whose links must resolve: the root's README and architecture, the guides
/// (`docs/`), and the Markdown files beside the benchmarks, the integrations, the deployment
/// manifests and the environments. Data shipped as Markdown (tau2's policies) is not ours to link.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md"), root().join("ARCHITECTURE.md")];
    for dir in ["docs", "bench", "integrations", "deploy"] {
        walk_matching(&root().join(dir), ".md", &mut files);
    }
    for entry in std::fs::read_dir(root().join("environments")).unwrap() {
        let readme = entry.unwrap().path().join("README.md");
        if readme.is_file() {
            files.push(readme);
        }
    }
    files.sort();
    files
}

#[test]
fn every_link_in_the_documentation_resolves() {
    let documents = documents();
    assert!(documents.len() > 10, "the documentation was found: {documents:?}");
    let mut broken = Vec::new();
    for file in &documents {
        broken.extend(broken_links(&relative(file), &read(file), &|path| {
            // A folder or a file that is not text (a picture) exists, with no headings.
            let path = root().join(path);
            path.exists().then(|| std::fs::read_to_string(path).unwrap_or_default())
        }));
    }
    assert!(broken.is_empty(), "links that lead nowhere:\n{}", broken.join("\n"));
}

/// The links of `text` (the file `doc`, relative to the root) that lead nowhere, one message
/// each. `target` reads a file by its path from the root: `None` when there is none, the empty
/// text for a folder.
fn broken_links(doc: &str, text: &str, target: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let own = anchors(text);
    let mut broken = Vec::new();
    for (line, link) in links(text) {
        let (path, anchor) = link.split_once('#').map_or((link.as_str(), None), |(p, a)| (p, Some(a)));
        let (name, found) = if path.is_empty() {
            (doc.to_owned(), Some(own.clone()))
        } else {
            let Some(name) = resolve(doc, path) else {
                broken.push(format!("{doc}:{line}: `{link}` leaves the repository"));
                continue;
            };
            let Some(text) = target(&name) else {
                broken.push(format!("{doc}:{line}: `{link}`: there is no {name}"));
                continue;
            };
            (name.clone(), name.ends_with(".md").then(|| anchors(&text)))
        };
        // An anchor is checked in Markdown only: a line of a source file (`#L10`) is GitHub's.
        if let (Some(anchor), Some(found)) = (anchor, found)
            && !found.contains(anchor)
        {
            let known: Vec<&str> = found.iter().map(String::as_str).collect();
            broken.push(format!(
                "{doc}:{line}: `{link}`: {name} has no heading `#{anchor}`; it has {}",
                known.join(", ")
            ));
        }
    }
    broken
}

/// Every link target of a Markdown text that is not another site's, with its line: inline links
/// and images (`[text](target "title")`) and reference definitions (`[name]: target`). Code (fenced
/// blocks and inline spans) holds no links.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in prose_lines(text) {
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut targets: Vec<&str> = prose.match_indices("](").map(|(at, _)| &prose[at + 2..]).collect();
        let definition = prose.trim_start().strip_prefix('[').and_then(|rest| rest.split_once(']'));
        if let Some(target) = definition.and_then(|(_, after)| after.strip_prefix(':')) {
            targets.push(target.trim_start());
        }
        for rest in targets {
            let target = rest.split([')', ' ', '\t']).next().unwrap_or_default();
            let target = target.trim_start_matches('<').trim_end_matches('>');
            let external = target.contains("://") || target.starts_with("mailto:");
            if !target.is_empty() && !external {
                found.push((number, target.to_owned()));
            }
        }
    }
    found
}

/// The lines of a Markdown text outside fenced code blocks, numbered from 1.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut lines = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(marker)) => fence = Some(marker),
            (Some(open), Some(marker)) if open == marker => fence = None,
            (None, None) => lines.push((number + 1, line)),
            _ => {}
        }
    }
    lines
}

/// The anchors of a Markdown text's headings, as GitHub makes them: each heading's slug, a
/// repeated one numbered (`-1`, `-2`, ...) in order.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.len() - line.trim_start_matches('#').len();
        let Some(heading) = line[hashes..].strip_prefix(' ').filter(|_| (1..=6).contains(&hashes)) else {
            continue;
        };
        let slug = slug(heading.trim().trim_end_matches('#').trim());
        let mut anchor = slug.clone();
        let mut repeat = 0;
        while !found.insert(anchor.clone()) {
            repeat += 1;
            anchor = format!("{slug}-{repeat}");
        }
    }
    found
}

/// GitHub's slug of a heading: lower case, letters, digits, `-` and `_` kept, every space a `-`,
/// everything else (punctuation, backticks) dropped.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The path from the root of `path` as written in the file `doc` (relative to the root), its
/// `.` and `..` taken away; `None` when it climbs out of the repository.
fn resolve(doc: &str, path: &str) -> Option<String> {
    let mut parts: Vec<&str> = doc.split('/').collect();
    parts.pop();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    Some(parts.join("/"))
}

#[test]
fn a_link_to_a_missing_file_or_heading_is_found_and_a_good_one_is_not() {
    let guide = "# The CLI and `parley.toml`\n\n## Exit codes\n\n## Exit codes\n\nSee [here](#exit-codes-1).\n";
    let files = |path: &str| match path {
        "docs/cli.md" => Some(guide.to_owned()),
        "docs/picture.png" | "deploy" => Some(String::new()),
        _ => None,
    };
    let readme = "\
[guide](docs/cli.md) [settings](docs/cli.md#the-cli-and-parleytoml) ![a picture](docs/picture.png)
[the manifests](deploy) [a site](https://example.com/missing.md) `[code](nowhere.md)`
[top](#top)

# Top

```sh
echo '[not a link](nowhere.md)'
```
[gone](docs/gone.md) [no such heading](docs/cli.md#exit-code) [up](../outside.md)
[reference]: docs/missing.md
";
    let broken = broken_links("README.md", readme, &files);
    assert_eq!(broken.len(), 4, "{broken:#?}");
    assert!(broken[0].starts_with("README.md:10: `docs/gone.md`: there is no docs/gone.md"), "{}", broken[0]);
    assert!(
        broken[1].contains("docs/cli.md has no heading `#exit-code`; it has exit-codes, exit-codes-1"),
        "{}",
        broken[1]
    );
    assert!(broken[2].contains("`../outside.md` leaves the repository"), "{}", broken[2]);
    assert!(broken[3].starts_with("README.md:11: `docs/missing.md`"), "{}", broken[3]);
    assert!(broken_links("docs/cli.md", guide, &files).is_empty());
    assert_eq!(
        resolve("docs/cli.md", "../integrations/tau2-user/README.md").as_deref(),
        Some("integrations/tau2-user/README.md")
    );
    assert_eq!(
        slug("NeMo RL and NeMo Gym: whole rollouts through /run"),
        "nemo-rl-and-nemo-gym-whole-rollouts-through-run"
    );
}

/// The repository's root folder.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask sits in the repository's root").to_path_buf()
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root()).unwrap_or(path).display().to_string()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn manifest(path: &Path) -> toml::Table {
    read(path).parse().unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every Rust file of the repository, build outputs and installed peers (hidden folders,
/// `target`, `node_modules`) left out.
fn rust_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    walk(&root(), &mut files);
    files.sort();
    files
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    walk_matching(dir, ".rs", files);
}

/// Every file under `dir` whose name ends with `suffix`, hidden folders, `target` and
/// `node_modules` left out.
fn walk_matching(dir: &Path, suffix: &str, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type().unwrap();
        if name.starts_with('.') || name == "target" || name == "node_modules" || kind.is_symlink() {
            continue;
        }
        if kind.is_dir() {
            walk_matching(&entry.path(), suffix, files);
        } else if name.ends_with(suffix) {
            files.push(entry.path());
        }
    }
}

fn rust_files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if dir.is_dir() {
        walk(dir, &mut files);
    }
    files
}

/// The workspace's crates, as the root manifest lists them (`dir/*` or `dir`).
fn members() -> Vec<PathBuf> {
    let workspace = manifest(&root().join("Cargo.toml"));
    let patterns = workspace["workspace"]["members"].as_array().expect("workspace.members");
    let mut members = Vec::new();
    for pattern in patterns.iter().filter_map(toml::Value::as_str) {
        match pattern.strip_suffix("/*") {
            Some(dir) => {
                for entry in std::fs::read_dir(root().join(dir)).unwrap() {
                    let path = entry.unwrap().path();
                    if path.join("Cargo.toml").is_file() {
                        members.push(path);
                    }
                }
            }
            None => {
                assert!(!pattern.contains('*'), "tidy reads `dir/*` and plain paths, not {pattern}");
                members.push(root().join(pattern));
            }
        }
    }
    members.sort();
    members
}

/// A crate's code: its library and binaries (`src/`), or, with `tests`, its tests, benchmarks
/// and examples (those folders, and wherever its `[[test]]` targets live).
fn sources(member: &Path, manifest: &toml::Table, tests: bool) -> String {
    let mut dirs = Vec::new();
    if tests {
        dirs.extend(["tests", "benches", "examples"].map(|d| member.join(d)));
        for target in ["test", "bench", "example"] {
            let declared = manifest.get(target).and_then(toml::Value::as_array).into_iter().flatten();
            for path in declared.filter_map(|t| t.get("path")).filter_map(toml::Value::as_str) {
                dirs.push(member.join(path).parent().unwrap().to_path_buf());
            }
        }
    } else {
        dirs.push(member.join("src"));
    }
    dirs.iter().flat_map(|dir| rust_files_under(dir)).map(|file| read(&file)).collect::<Vec<_>>().join("\n")
}

/// Whether `code` names the crate `ident`: a path through it (`ident::`), or a `use` or
/// `extern crate` of it. A word in a comment does not count.
fn uses(code: &str, ident: &str) -> bool {
    let word = |at: usize| {
        let before = code[..at].chars().next_back();
        let after = code[at + ident.len()..].chars().next();
        let inner = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !inner(before) && !inner(after)
    };
    code.match_indices(ident).any(|(at, _)| {
        word(at)
            && (code[at + ident.len()..].starts_with("::")
                || code[..at].ends_with("use ")
                || code[..at].ends_with("extern crate "))
    })
}

/// The crates the lock file says `roots` pull in, the roots included.
fn lock_closure(roots: &BTreeSet<String>) -> BTreeSet<String> {
    let lock = manifest(&root().join("Cargo.lock"));
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for package in lock["package"].as_array().expect("the lock file's packages") {
        let name = package["name"].as_str().unwrap().to_owned();
        let needs = package.get("dependencies").and_then(toml::Value::as_array).into_iter().flatten();
        // An entry is `name`, or `name version` where several versions are locked.
        let needs = needs.filter_map(toml::Value::as_str).map(|d| d.split(' ').next().unwrap().to_owned());
        graph.entry(name).or_default().extend(needs);
    }
    let mut seen = BTreeSet::new();
    let mut next: Vec<String> = roots.iter().cloned().collect();
    while let Some(name) = next.pop() {
        if seen.insert(name.clone()) {
            next.extend(graph.get(&name).into_iter().flatten().cloned());
        }
    }
    seen
}
