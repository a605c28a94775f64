//! A run's tasks, read lazily. A task file is checked in one pass that keeps nothing but the
//! names of its bad lines, then read again row by row as the run is recorded; a stored run's
//! tasks are read back a page at a time as its sessions are driven. So memory does not grow
//! with the number of tasks: a run over a million rows holds a page of them at once.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parley_core::nemo_gym::task_from_row;
use parley_core::{RunId, Task, ToolLists};
use parley_store::Store;
use serde_json::Value;

use crate::environment::{EnvKind, Judged, Tau2Domain, tau2_domain};
use crate::error::{UsageError, usage};
use crate::settings::{BadRows, RunSettings, defaults};

/// Rows read from the store at once when a run's tasks are read back.
const PAGE: usize = 512;

/// Where a new run's tasks come from.
#[derive(Debug)]
pub enum TaskSource {
    /// Generated multi-step rows.
    Generated { count: usize, seed: u64 },
    /// A NeMo Gym JSONL file, already checked: `skip` names its lines to leave out.
    File { path: PathBuf, limit: Option<usize>, multi_step: bool, skip: Vec<usize> },
    /// The environment's own (tau2's domains), known once it is open.
    Environment,
    /// Tasks already read and numbered from 0 (a probe's, chosen from a source read before).
    Given(Vec<Arc<Task>>),
}

/// What the check of a task file found.
#[derive(Debug, Default)]
pub struct FileCheck {
    /// `file:line: why` for every row that cannot be read.
    pub bad: Vec<String>,
    /// `file:line: message i: part j: why` for every content part that may not reach the model
    /// as meant (an unknown type, a broken data URL). Such rows run, their parts kept as given.
    pub warnings: Vec<String>,
}

impl TaskSource {
    /// Where the settings' tasks come from. A task file is read through once here: with
    /// `--bad-rows fail` a bad row refuses the run (every bad line named, up to ten shown); with
    /// `skip` the bad lines are returned, to be reported, and left out.
    pub fn from_settings(settings: &RunSettings) -> Result<(TaskSource, FileCheck), UsageError> {
        TaskSource::from_settings_checked(settings, &|_| Ok(()))
    }

    /// The same, each row of a task file also checked by `check` (the environment's and the
    /// reward's [`Environment::check`](parley_core::Environment::check)): a row it refuses is a
    /// bad row, named with its line and refused or left out as `--bad-rows` says, before any
    /// model call.
    pub fn from_settings_checked(
        settings: &RunSettings,
        check_task: &dyn Fn(&parley_core::Task) -> Result<(), String>,
    ) -> Result<(TaskSource, FileCheck), UsageError> {
        let Some(path) = &settings.tasks else {
            if settings.env.brings_tasks() && settings.env != EnvKind::MultiStep {
                return Ok((TaskSource::Environment, FileCheck::default()));
            }
            let count = settings.num_tasks.unwrap_or(defaults::NUM_TASKS);
            return Ok((TaskSource::Generated { count, seed: 0 }, FileCheck::default()));
        };
        let multi_step = settings.env == EnvKind::MultiStep;
        let mut skip = Vec::new();
        let mut check = FileCheck::default();
        let mut good = 0usize;
        for (line, row) in Rows::open(path)? {
            if settings.num_tasks.is_some_and(|n| good >= n) {
                break;
            }
            match row.and_then(|row| parse(good, row, multi_step)).and_then(|task| check_task(&task).map(|()| task)) {
                Ok(task) => {
                    good += 1;
                    for (i, m) in task.messages.iter().enumerate() {
                        for problem in m.part_problems() {
                            check.warnings.push(format!("{}:{line}: message {i}: {problem}", path.display()));
                        }
                    }
                }
                Err(why) => {
                    skip.push(line);
                    check.bad.push(format!("{}:{line}: {why}", path.display()));
                }
            }
        }
        if !check.bad.is_empty() && settings.bad_rows == BadRows::Fail {
            let shown = check.bad.iter().take(10).cloned().collect::<Vec<_>>().join("\n  ");
            let more =
                if check.bad.len() > 10 { format!("\n  ... and {} more", check.bad.len() - 10) } else { String::new() };
            return Err(usage(format!(
                "{} of the rows in {} cannot be read:\n  {shown}{more}\nfix them, or pass --bad-rows skip to run the \
                 other rows",
                check.bad.len(),
                path.display()
            )));
        }
        if good == 0 {
            return Err(usage(format!("--tasks {}: no task rows to run", path.display())));
        }
        let source = TaskSource::File { path: path.clone(), limit: Some(good), multi_step, skip };
        Ok((source, check))
    }

    /// The tasks, one at a time, numbered from 0; `given` are the environment's own.
    pub fn tasks(
        self,
        given: Option<&[Arc<Task>]>,
    ) -> anyhow::Result<Box<dyn Iterator<Item = anyhow::Result<Arc<Task>>> + Send>> {
        let mut lists = ToolLists::default();
        Ok(match self {
            TaskSource::Generated { count, seed } => {
                Box::new(environment_multi_step::generate(count, seed).enumerate().map(move |(i, row)| {
                    let task = task_from_row(i, row).map_err(|e| anyhow::anyhow!("generated task {i}: {e}"))?;
                    Ok(Arc::new(lists.share(task)))
                }))
            }
            TaskSource::File { path, limit, multi_step, skip } => {
                let mut index = 0;
                let rows = Rows::open(&path)?.filter(move |(line, _)| skip.binary_search(line).is_err());
                Box::new(rows.take(limit.unwrap_or(usize::MAX)).map(move |(line, row)| {
                    // The check found this row good; it can only fail now if the file changed.
                    let task = row.and_then(|row| parse(index, row, multi_step)).map_err(|why| {
                        anyhow::anyhow!("{}:{line} changed while the run was recorded: {why}", path.display())
                    })?;
                    index += 1;
                    Ok(Arc::new(lists.share(task)))
                }))
            }
            TaskSource::Environment => {
                let given = given.ok_or_else(|| anyhow::anyhow!("the environment brought no tasks"))?.to_vec();
                Box::new(given.into_iter().map(Ok))
            }
            TaskSource::Given(tasks) => Box::new(tasks.into_iter().map(Ok)),
        })
    }
}

/// The non-empty lines of a task file with their numbers (from 1), each parsed as JSON. A
/// UTF-8 byte-order mark at the start is skipped, as editors on some systems write one.
pub(crate) struct Rows {
    lines: std::iter::Enumerate<std::io::Lines<std::io::BufReader<std::fs::File>>>,
}

impl Rows {
    pub(crate) fn open(path: &Path) -> Result<Rows, UsageError> {
        crate::settings::check_file("--tasks", path)?;
        let file = std::fs::File::open(path).map_err(|e| usage(format!("--tasks {}: {e}", path.display())))?;
        Ok(Rows { lines: std::io::BufReader::new(file).lines().enumerate() })
    }
}

impl Iterator for Rows {
    type Item = (usize, Result<Value, String>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (n, line) = self.lines.next()?;
            let line = match line {
                Ok(line) => line,
                Err(e) => return Some((n + 1, Err(format!("not text ({e})")))),
            };
            let line = if n == 0 { line.trim_start_matches('\u{feff}') } else { line.as_str() };
            if line.trim().is_empty() {
                continue;
            }
            return Some((n + 1, serde_json::from_str(line).map_err(|e| format!("not a JSON row ({e})"))));
        }
    }
}

/// A row as a task; a multi-step row may declare only tools the environment can run.
pub(crate) fn parse(index: usize, row: Value, multi_step: bool) -> Result<Task, String> {
    let task = task_from_row(index, row).map_err(|e| e.to_string())?;
    if multi_step {
        // The environment's own list, made once for every row read.
        let known = environment_multi_step::default_tools();
        if let Some(unknown) = task.tools.iter().find(|t| !known.iter().any(|k| k.name == t.name)) {
            let names: Vec<&str> = known.iter().map(|k| k.name.as_str()).collect();
            return Err(format!(
                "the row declares the tool `{}`, which the multi-step environment does not have (it has {})",
                unknown.name,
                names.join(", ")
            ));
        }
    }
    Ok(task)
}

/// A stored run's tasks by index, read back a page at a time. Sessions are driven in id order,
/// and the trials of a task are adjacent, so one page serves many sessions in a row. tau2 tasks
/// are rebuilt from their domain, by the id stored with the run.
pub struct StoredTasks {
    store: Arc<Store>,
    run: RunId,
    tau2: Option<environment_tau2::Domain>,
    lists: ToolLists,
    page: BTreeMap<usize, Arc<Task>>,
}

impl StoredTasks {
    pub fn new(store: Arc<Store>, run: RunId, settings: &RunSettings) -> anyhow::Result<StoredTasks> {
        let tau2 = match settings.env {
            EnvKind::Tau2(domain) => Some(Self::domain(settings, domain)?),
            _ => None,
        };
        Ok(StoredTasks { store, run, tau2, lists: ToolLists::default(), page: BTreeMap::new() })
    }

    fn domain(settings: &RunSettings, domain: Tau2Domain) -> anyhow::Result<environment_tau2::Domain> {
        Ok(tau2_domain(settings, domain, Judged::No)?.0)
    }

    /// Every task of the run, in order: for documents that list them all first (tau2's
    /// results), which only small runs write.
    pub async fn all(&mut self) -> anyhow::Result<Vec<Arc<Task>>> {
        let mut all = Vec::new();
        loop {
            match self.get(all.len()).await {
                Ok(task) => all.push(task),
                Err(_) if self.page.is_empty() => return Ok(all),
                Err(e) => return Err(e),
            }
        }
    }

    /// The task at `index`.
    pub async fn get(&mut self, index: usize) -> anyhow::Result<Arc<Task>> {
        if let Some(task) = self.page.get(&index) {
            return Ok(Arc::clone(task));
        }
        let rows = Box::pin(self.store.task_rows_from(self.run, index as i64, PAGE)).await?;
        self.page.clear();
        for (i, row) in rows {
            let i = i as usize;
            let task = match &self.tau2 {
                Some(domain) => {
                    let id = row.get("id").and_then(Value::as_str).unwrap_or_default();
                    let task = domain.tasks.iter().find(|t| t.id == id).ok_or_else(|| {
                        anyhow::anyhow!("task `{id}` of run {} is not in the {} domain", self.run, domain.name)
                    })?;
                    Task { index: i, ..task.clone() }
                }
                None => self.lists.share(
                    task_from_row(i, row).map_err(|e| anyhow::anyhow!("stored task {i} of run {}: {e}", self.run))?,
                ),
            };
            self.page.insert(i, Arc::new(task));
        }
        self.page.get(&index).cloned().ok_or_else(|| anyhow::anyhow!("run {} has no task {index}", self.run))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(tasks: &Path, bad_rows: BadRows, num_tasks: Option<usize>) -> RunSettings {
        let mut s: RunSettings = serde_json::from_value(serde_json::json!({
            "env": "nemo-gym", "tasks": tasks, "num_tasks": num_tasks, "base_url": null, "model": "m",
            "api_key_env": null, "concurrency": 4, "endpoint_concurrency": 4, "trials": 1, "db": "x.db",
            "out": null, "max_steps": 5, "max_errors": 5, "session_timeout_secs": 10.0,
            "call_timeout_secs": 10.0, "max_retries": 1, "system_prompt": null, "sampling": {}, "raw_calls": true
        }))
        .unwrap();
        s.bad_rows = bad_rows;
        s
    }

    fn row(id: usize) -> String {
        format!(r#"{{"id": {id}, "responses_create_params": {{"input": [{{"role": "user", "content": "q{id}"}}]}}}}"#)
    }

    #[test]
    fn a_file_is_read_lazily_with_its_bad_rows_left_out_and_a_byte_order_mark_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let text = format!("\u{feff}{}\nnot json\n\n{}\n{{\"id\": 9}}\n{}\n", row(0), row(1), row(2));
        std::fs::write(&path, text).unwrap();

        let err = TaskSource::from_settings(&settings(&path, BadRows::Fail, None)).unwrap_err();
        assert!(
            err.to_string().contains("t.jsonl:2: not a JSON row") && err.to_string().contains("t.jsonl:5"),
            "{err}"
        );

        let (source, check) = TaskSource::from_settings(&settings(&path, BadRows::Skip, None)).unwrap();
        assert_eq!(check.bad.len(), 2);
        let tasks: Vec<Arc<Task>> = source.tasks(None).unwrap().map(Result::unwrap).collect();
        let texts: Vec<(usize, String)> =
            tasks.iter().map(|t| (t.index, t.messages[0].content_str().to_owned())).collect();
        assert_eq!(texts, [(0, "q0".to_owned()), (1, "q1".to_owned()), (2, "q2".to_owned())]);

        let (source, _) = TaskSource::from_settings(&settings(&path, BadRows::Skip, Some(2))).unwrap();
        assert_eq!(source.tasks(None).unwrap().count(), 2);
    }

    #[test]
    fn a_multi_step_row_may_declare_only_the_environments_tools() {
        let with_tools = |names: &[&str]| {
            let tools: Vec<serde_json::Value> = names
                .iter()
                .map(|n| serde_json::json!({"type": "function", "name": n, "parameters": {"type": "object"}}))
                .collect();
            serde_json::json!({"responses_create_params": {"input": [{"role": "user", "content": "q"}], "tools": tools}})
        };
        for _ in 0..2 {
            // Twice: every check after the first reads the list already made.
            let known = parse(0, with_tools(&["get_synonym_value", "extract_synonym_values"]), true).unwrap();
            assert_eq!(known.tools.len(), 2);
            let err = parse(3, with_tools(&["get_synonym_value", "rm_rf"]), true).unwrap_err();
            assert_eq!(
                err,
                "the row declares the tool `rm_rf`, which the multi-step environment does not have (it has \
                 get_synonym_value, extract_synonym_values)"
            );
        }
        // Another environment's rows declare what they like.
        assert!(parse(3, with_tools(&["rm_rf"]), false).is_ok());
    }

    #[test]
    fn a_folder_or_a_device_is_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let err = TaskSource::from_settings(&settings(dir.path(), BadRows::Fail, None)).unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
        let err = TaskSource::from_settings(&settings(Path::new("/dev/null"), BadRows::Fail, None)).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}
