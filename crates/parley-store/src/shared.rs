//! What many rows say alike, stored once: a task file's tool lists and sessions' long system
//! prompts. Each is kept under an id made from its text (the first eight bytes of its SHA-256,
//! the same in every process and version), and put back where it was when its row is read.
//!
//! - **Tool lists.** A task file repeats its tools on every row (NeMo Gym rows carry them in
//!   `responses_create_params.tools`), often half of the row's bytes, and most files offer every
//!   row the same ones. A row of `tasks` is kept without its list, which `task_tools` keeps once
//!   for the run; the row read back is the same JSON value as the row recorded. Two lists of one
//!   run with the same id are told apart when the second is recorded: its rows keep their list.
//! - **System prompts.** A run's sessions open with a few prompts between them, often
//!   kilobytes each (a tau2 domain's policy, an environment's instructions). A system message
//!   of [`SHARED_TEXT`] bytes or more keeps its text in `texts`, and its row in `messages` names
//!   it (`content_id`). A text another holds under the same id stays in its row.
//!
//! Both are stored by one statement that answers what is stored under the id ([`STORE_TEXT`],
//! [`STORE_TOOL_LIST`]): the text given, or another's.

use std::sync::Arc;

use parley_core::TaskRow;
use parley_core::task_row::SharedTools;
use serde::ser::Serialize;
use sha2::{Digest, Sha256};

/// A task row as `tasks` keeps it: its JSON, and the tool list left out of it, if one was.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredRow {
    pub row: String,
    pub tools: Option<ToolList>,
}

/// A tool list as `task_tools` keeps it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolList {
    pub id: i64,
    pub text: Arc<str>,
}

impl StoredRow {
    /// The row to store: without its tool list when it has a non-empty one, else whole.
    pub(crate) fn of(row: &TaskRow) -> StoredRow {
        let Some(tools) = row.tools().filter(|t| t.as_array().is_some_and(|a| !a.is_empty())) else {
            return StoredRow { row: json(row), tools: None };
        };
        // A list held apart has its text written already, or writes it once for every row.
        let text = match row.apart().and_then(|list| list.text()) {
            Some(text) => text.get().to_owned(),
            None => tools.to_string(),
        };
        let id = id_of(&text);
        StoredRow { row: json(&row.without_tools()), tools: Some(ToolList { id, text: text.into() }) }
    }

    /// The rows to store, each tool list they share written and hashed once: rows read from a
    /// task file hold one `Arc` for the list they have alike (a million rows, one list).
    pub(crate) fn of_each<'a>(rows: impl IntoIterator<Item = &'a TaskRow>) -> Vec<StoredRow> {
        let mut last: Option<(&Arc<SharedTools>, ToolList)> = None;
        // Collected from a sized iterator: one allocation, as large as the rows.
        rows.into_iter()
            .map(|row| {
                let shared = row.apart();
                let known = last.as_ref().filter(|(list, _)| shared.is_some_and(|s| Arc::ptr_eq(s, list)));
                let stored = match known {
                    Some((_, list)) => StoredRow { row: json(&row.without_tools()), tools: Some(list.clone()) },
                    None => StoredRow::of(row),
                };
                if let (Some(shared), Some(list)) = (shared, &stored.tools)
                    && known.is_none()
                {
                    last = Some((shared, list.clone()));
                }
                stored
            })
            .collect()
    }

    /// The row whole again, its tool list kept in the row: the list's id belongs to another.
    pub(crate) fn keep_tools(&mut self, row: &TaskRow) {
        *self = StoredRow { row: json(row), tools: None };
    }
}

/// How long a system message's text is, in bytes, for `texts` to keep it once: below this the
/// id and the lookup cost about what they save.
pub(crate) const SHARED_TEXT: usize = 256;

/// The texts seen last with their ids ([`id_of`]), so that a text seen again is compared, not
/// hashed again (a kilobyte or more of SHA-256 against a comparison of its bytes). Past `most`
/// texts, the one kept longest gives way.
#[derive(Debug)]
pub(crate) struct TextIds {
    kept: Vec<(Arc<str>, i64)>,
    most: usize,
}

impl TextIds {
    pub(crate) fn new(most: usize) -> TextIds {
        TextIds { kept: Vec::with_capacity(most), most: most.max(1) }
    }

    /// `text`'s id, and the text as kept.
    pub(crate) fn of(&mut self, text: &str) -> (i64, &Arc<str>) {
        let at = match self.kept.iter().position(|(kept, _)| **kept == *text) {
            Some(at) => at,
            None => {
                if self.kept.len() == self.most {
                    self.kept.remove(0);
                }
                self.kept.push((text.into(), id_of(text)));
                self.kept.len() - 1
            }
        };
        let (text, id) = &self.kept[at];
        (*id, text)
    }
}

/// The ids `texts` keeps messages' texts under, when a message is one whose text is stored once:
/// a system prompt of [`SHARED_TEXT`] bytes or more. None holds a NUL, which PostgreSQL's text
/// cannot (such a message is refused in its row, with its session alone).
///
/// A writer keeps the prompts it saw last with their ids: a run's sessions open with a few
/// prompts between them, so each prompt's text is hashed once, not once a session.
#[derive(Debug)]
pub(crate) struct PromptIds(TextIds);

impl Default for PromptIds {
    fn default() -> PromptIds {
        PromptIds(TextIds::new(PromptIds::MOST))
    }
}

impl PromptIds {
    /// The prompts kept.
    const MOST: usize = 8;

    /// The id `m`'s text is kept under in `texts`, when it is one that is stored once.
    pub(crate) fn of(&mut self, m: &parley_core::Message) -> Option<i64> {
        if m.role != parley_core::Role::System {
            return None;
        }
        let text = m.content.as_deref().filter(|t| t.len() >= SHARED_TEXT && !t.contains('\0'))?;
        Some(self.0.of(text).0)
    }
}

/// Stores a text under its id unless one is there, and answers the text stored under the id:
/// the one given, or another's (two texts with the same eight bytes). One statement for both
/// stores; a writer runs it once per text it has not yet seen stored ([`KnownTexts`]).
pub(crate) const STORE_TEXT: &str =
    "INSERT INTO texts (id, text) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET text = texts.text RETURNING text";

/// Stores a run's tool list under its id unless one is there, and answers the list stored
/// under the id, as [`STORE_TEXT`] does for texts.
pub(crate) const STORE_TOOL_LIST: &str = "INSERT INTO task_tools (run_id, id, tools) VALUES ($1, $2, $3) \
     ON CONFLICT (run_id, id) DO UPDATE SET tools = task_tools.tools RETURNING tools";

/// The ids of the texts a writer has seen stored in `texts` as it stored them. Bounded: past
/// [`KnownTexts::MOST`] it starts over, and a text it forgot costs one statement again.
#[derive(Debug, Default)]
pub(crate) struct KnownTexts(std::collections::HashSet<i64>);

impl KnownTexts {
    const MOST: usize = 4096;

    pub(crate) fn ids(&self) -> &std::collections::HashSet<i64> {
        &self.0
    }

    pub(crate) fn add(&mut self, id: i64) {
        if self.0.len() >= Self::MOST {
            self.0.clear();
        }
        self.0.insert(id);
    }

    pub(crate) fn forget(&mut self, id: i64) {
        self.0.remove(&id);
    }
}

/// The first eight bytes of the text's SHA-256, as a shared text or list is keyed: the same in
/// every process and version.
pub(crate) fn id_of(text: &str) -> i64 {
    let digest = Sha256::digest(text.as_bytes());
    let mut first = [0; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// Serializing a JSON value to text cannot fail: its maps have string keys.
fn json(value: &impl Serialize) -> String {
    parley_core::json::to_string(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn row() -> Value {
        json!({
            "id": 3,
            "responses_create_params": {
                "input": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "name": "get", "parameters": {"type": "object"}}],
                "parallel_tool_calls": false,
            },
            "expected": ["a"],
        })
    }

    #[test]
    fn a_row_stored_without_its_tools_is_the_same_value_once_restored() {
        let row = row();
        let stored = StoredRow::of(&TaskRow::from(row.clone()));
        let tools = stored.tools.clone().expect("the row's tools are left out");
        assert!(!stored.row.contains("\"get\""), "{}", stored.row);
        let back: Value = serde_json::from_str(&stored.row).unwrap();
        assert_ne!(back, row);
        let list = SharedTools::new(serde_json::from_str(&tools.text).unwrap());
        let back = TaskRow::with_tools(back, std::sync::Arc::new(list));
        assert_eq!(back, row);
        assert_eq!(stored.row, {
            let mut less = row.clone();
            less["responses_create_params"].as_object_mut().unwrap().remove("tools");
            less.to_string()
        });
        assert_eq!(StoredRow::of(&back), stored, "a row sharing its list is stored as one holding its own");
    }

    #[test]
    fn the_same_list_has_the_same_id_and_another_list_another() {
        let of = |row: &Value| StoredRow::of(&TaskRow::from(row.clone()));
        let a = of(&row()).tools.unwrap();
        let mut other = row();
        other["id"] = json!(4);
        assert_eq!(of(&other).tools.unwrap(), a, "another row, the same list");
        other["responses_create_params"]["tools"][0]["name"] = json!("put");
        assert_ne!(of(&other).tools.unwrap().id, a.id);
    }

    #[test]
    fn rows_sharing_a_list_share_its_text_and_are_stored_as_each_alone() {
        let list = Arc::new(SharedTools::new(row()["responses_create_params"]["tools"].clone()));
        let mut fields = row();
        fields["responses_create_params"].as_object_mut().unwrap().remove("tools");
        let sharing = |id: i64| {
            let mut fields = fields.clone();
            fields["id"] = json!(id);
            TaskRow::with_tools(fields, Arc::clone(&list))
        };
        // Between them, a row holding a list of its own, another one.
        let mut own = row();
        own["responses_create_params"]["tools"][0]["name"] = json!("put");
        let rows = [sharing(0), sharing(1), TaskRow::from(own), sharing(2)];
        let stored = StoredRow::of_each(&rows);
        assert_eq!(stored, rows.iter().map(StoredRow::of).collect::<Vec<_>>());
        let text = |i: usize| Arc::clone(&stored[i].tools.as_ref().unwrap().text);
        assert!(Arc::ptr_eq(&text(0), &text(1)) && Arc::ptr_eq(&text(0), &text(3)), "written once");
        assert!(!Arc::ptr_eq(&text(0), &text(2)));
    }

    #[test]
    fn a_long_system_prompt_has_the_id_of_its_text_however_often_it_is_seen() {
        use parley_core::{Message, Role};
        let prompt = |n: usize| format!("{n} {}", "policy ".repeat(60));
        let mut ids = PromptIds::default();
        let first = ids.of(&Message::text(Role::System, prompt(0)));
        assert_eq!(first, Some(id_of(&prompt(0))));
        // More prompts than are kept, then the first again: each has its own text's id.
        for n in 1..=2 * PromptIds::MOST {
            assert_eq!(ids.of(&Message::text(Role::System, prompt(n))), Some(id_of(&prompt(n))));
            assert_eq!(ids.of(&Message::text(Role::System, prompt(0))), first, "after {n} others");
        }
        assert!(ids.0.kept.len() <= PromptIds::MOST);
        assert_eq!(ids.of(&Message::text(Role::User, prompt(0))), None, "a user's message is kept in its row");
        assert_eq!(ids.of(&Message::text(Role::System, "short")), None);
        assert_eq!(ids.of(&Message::text(Role::System, format!("{}\0", prompt(0)))), None, "a NUL stays in its row");
    }

    /// A text seen again among the last few is the one kept, with its own text's id; one that
    /// gave way is kept anew, under the same id.
    #[test]
    fn a_text_seen_again_is_the_one_kept_with_its_own_id() {
        let mut ids = TextIds::new(2);
        let (a, kept_a) = ids.of("alpha");
        let kept_a = Arc::clone(kept_a);
        assert_eq!(a, id_of("alpha"));
        let (again, kept) = ids.of(&String::from("alpha"));
        assert_eq!(again, a);
        assert!(Arc::ptr_eq(kept, &kept_a), "the text kept, not a copy");
        assert_eq!(ids.of("beta").0, id_of("beta"));
        assert_eq!(ids.of("gamma").0, id_of("gamma"));
        // "alpha" gave way to "gamma".
        let (after, kept) = ids.of("alpha");
        assert_eq!(after, a);
        assert!(!Arc::ptr_eq(kept, &kept_a));
        assert_eq!(ids.kept.len(), 2);
    }

    #[test]
    fn rows_without_a_list_are_stored_whole() {
        for row in [
            json!({"question": "2+2?"}),
            json!({"responses_create_params": {"input": "hi", "tools": []}}),
            json!({"responses_create_params": {"input": "hi", "tools": "not a list"}}),
            json!({"responses_create_params": "text"}),
            json!([1, 2]),
        ] {
            let stored = StoredRow::of(&TaskRow::from(row.clone()));
            assert_eq!(stored, StoredRow { row: row.to_string(), tools: None }, "{row}");
        }
    }
}
