//! tau2's simulated user, as `tau2/user/user_simulator.py` prompts it: its template, the
//! scenario written as `str(task.user_scenario)` writes it (Python's `textwrap.indent`
//! included), and its default sampling. The guidelines are tau2's data, read by the caller
//! (the runtime gives tau2's domains this prompt, with `environment_tau2::user_guidelines`).
//! `tests/e2e/tau2_user.rs` holds the first request for every task of the four domains to
//! tau2's own.

use serde_json::Value;

/// tau2's `SYSTEM_PROMPT` (after its `.strip()`), in Parley's slots: the guidelines, then the
/// scenario in `<scenario>` tags.
pub const TEMPLATE: &str = "{guidelines}\n\n<scenario>\n{scenario}\n</scenario>";

/// tau2's default user temperature (`DEFAULT_LLM_TEMPERATURE_USER`).
pub const TEMPERATURE: f64 = 0.0;

/// `str(UserScenario)` of the row's `user_scenario`: `Persona:` (the row's, else `persona`)
/// and `Instructions:`, each followed by its text indented by a tab. `None` when the row has
/// no `user_scenario.instructions`.
pub fn scenario(row: &Value, persona: Option<&str>) -> Option<String> {
    let scenario = row.get("user_scenario")?;
    let instructions = match scenario.get("instructions")? {
        Value::String(text) => text.clone(),
        Value::Object(_) => structured(&scenario["instructions"]),
        _ => return None,
    };
    let persona = match scenario.get("persona") {
        Some(Value::String(p)) => Some(p.as_str()),
        _ => persona,
    };
    let mut lines = Vec::new();
    if let Some(persona) = persona {
        lines.push("Persona:".to_owned());
        lines.push(indent(persona, "\t"));
    }
    lines.push("Instructions:".to_owned());
    lines.push(indent(&instructions, "\t"));
    Some(lines.join("\n"))
}

/// `str(StructuredUserInstructions)`: the domain on its line, then each part under its title;
/// the known and unknown info only when they are there (not null).
fn structured(instructions: &Value) -> String {
    let text = |key: &str| instructions.get(key).and_then(Value::as_str);
    let mut lines = vec![format!("Domain: {}", text("domain").unwrap_or_default())];
    lines.push(format!("Reason for call:\n{}", indent(text("reason_for_call").unwrap_or_default(), "\t")));
    if let Some(known) = text("known_info") {
        lines.push(format!("Known info:\n{}", indent(known, "\t")));
    }
    if let Some(unknown) = text("unknown_info") {
        lines.push(format!("Unknown info:\n{}", indent(unknown, "\t")));
    }
    lines.push(format!("Task instructions:\n{}", indent(text("task_instructions").unwrap_or_default(), "\t")));
    lines.join("\n")
}

/// Python's `textwrap.indent(text, prefix)`: the prefix before every line that is not all
/// whitespace, lines split and kept as `str.splitlines(keepends=True)` splits them.
pub fn indent(text: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(text.len() + prefix.len());
    for line in lines(text) {
        if !line.chars().all(is_python_space) {
            out.push_str(prefix);
        }
        out.push_str(line);
    }
    out
}

/// `str.splitlines(keepends=True)`: every Unicode line boundary Python knows, `\r\n` as one.
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = match rest.char_indices().find(|&(_, c)| is_line_break(c)) {
            Some((at, '\r')) if rest[at + 1..].starts_with('\n') => at + 2,
            Some((at, c)) => at + c.len_utf8(),
            None => rest.len(),
        };
        let (line, tail) = rest.split_at(end);
        rest = tail;
        Some(line)
    })
}

fn is_line_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\x0b' | '\x0c' | '\x1c' | '\x1d' | '\x1e' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// `str.isspace` for one character: Unicode's White_Space, and the four separators
/// `\x1c`..`\x1f` that Python also counts.
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn indent_is_pythons() {
        // Values from CPython's textwrap.indent(text, "\t").
        assert_eq!(indent("a\nb", "\t"), "\ta\n\tb");
        assert_eq!(indent("a\n\nb\n", "\t"), "\ta\n\n\tb\n");
        assert_eq!(indent("a\r\n  \r\nb", "\t"), "\ta\r\n  \r\n\tb");
        assert_eq!(indent("a\u{2028}b\x1c \x1fc", "\t"), "\ta\u{2028}\tb\x1c\t \x1fc");
        assert_eq!(indent("a\x1c \x1f\x1cb", "\t"), "\ta\x1c \x1f\x1c\tb");
        assert_eq!(indent("", "\t"), "");
        assert_eq!(indent("\n", "\t"), "\n");
    }

    #[test]
    fn a_structured_scenario_reads_as_tau2_writes_it() {
        let row = json!({"user_scenario": {"persona": null, "instructions": {
            "domain": "airline", "reason_for_call": "Cancel ABC123.\nNow.", "known_info": "Id mia_li_3668.",
            "unknown_info": null, "task_instructions": "No voucher."}}});
        assert_eq!(
            scenario(&row, None).unwrap(),
            "Instructions:\n\tDomain: airline\n\tReason for call:\n\t\tCancel ABC123.\n\t\tNow.\n\t\
             Known info:\n\t\tId mia_li_3668.\n\tTask instructions:\n\t\tNo voucher."
        );
        // A persona the row lacks is the caller's; the row's comes first.
        let with = scenario(&row, Some("Terse.")).unwrap();
        assert!(with.starts_with("Persona:\n\tTerse.\nInstructions:\n"), "{with}");
        let row = json!({"user_scenario": {"persona": "Polite.", "instructions": "Ask about rain."}});
        assert_eq!(scenario(&row, Some("Terse.")).unwrap(), "Persona:\n\tPolite.\nInstructions:\n\tAsk about rain.");
        assert_eq!(scenario(&json!({"user_instructions": "x"}), None), None);
    }
}
