//! The conventions of Parley's code that no compiler enforces, each checked by a test over the
//! repository's files, so that breaking one fails `cargo nextest run` like any other bug:
//!
//! - every module opens with a `//!` comment that says what it is for;
//! - no crate declares a dependency it does not use;
//! - `parley-core` depends only on what it may (it holds the seams every other crate builds on,
//!   and stays light: no database driver, HTTP stack or async runtime);
//! - no status is compared as a string: a session's or a run's status is an enum end to end.
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
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type().unwrap();
        if name.starts_with('.') || name == "target" || name == "node_modules" || kind.is_symlink() {
            continue;
        }
        if kind.is_dir() {
            walk(&entry.path(), files);
        } else if name.ends_with(".rs") {
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
