//! The rows a batch of turns writes, built once for both writers: each table's row is one struct,
//! made by one function from what the session sent ([`TurnRows::gather`] walks a batch), so the
//! two stores store the same values. Only how the rows are bound differs, and [`rows!`] declares
//! both from one list of columns: each row's values as parameters of a statement
//! ([`Row::bind_after`], [`Row::params_and`]: SQLite's committing thread, whose statements insert
//! up to a few dozen rows each) or one array per column ([`MessageColumns`] and the like,
//! PostgreSQL's, whose one statement reads them with `UNNEST`).

use std::collections::HashSet;

use parley_core::{
    Message, MessageRecord, ModelCall, Party, Reward, Role, Sampling, SessionId, SessionOutcome, ToolCallRecord,
};
use sqlx::Arguments;
use sqlx::error::BoxDynError;
use sqlx::postgres::PgArguments;

use crate::handle::Write;
use crate::shared::PromptIds;

/// A row of one table, as SQLite's committing thread binds it.
pub(crate) trait Row {
    /// The row's columns: the parameters it binds.
    const COLUMNS: usize;

    /// The row's values in column order, bound by reference as one statement's parameters,
    /// and `last` after them, a value the statement takes for every row.
    fn params_and<'b>(&'b self, last: &'b dyn rusqlite::ToSql) -> impl rusqlite::Params + 'b;

    /// Binds the row's values by reference, in column order, as the parameters after the first
    /// `before` of `statement`: one row of a statement that inserts several.
    fn bind_after(&self, statement: &mut rusqlite::Statement<'_>, before: usize) -> rusqlite::Result<()>;
}

/// Declares each table's row (a struct with one field per column, in the order its statements
/// name them), its [`Row`] binding, and its columns: the same rows as one `Vec` per column,
/// collected from the rows and bound in the same order ([`bind`](MessageColumns::bind)).
macro_rules! rows {
    ($(
        $(#[$doc:meta])*
        struct $row:ident$(<$lt:lifetime>)? as $columns:ident { $($field:ident: $ty:ty,)* }
    )*) => {$(
        $(#[$doc])*
        pub(crate) struct $row$(<$lt>)? {
            $(pub(crate) $field: $ty,)*
        }

        impl$(<$lt>)? Row for $row$(<$lt>)? {
            const COLUMNS: usize = [$(stringify!($field)),*].len();

            fn bind_after(&self, statement: &mut rusqlite::Statement<'_>, before: usize) -> rusqlite::Result<()> {
                let mut at = before;
                $(
                    at += 1;
                    statement.raw_bind_parameter(at, &self.$field)?;
                )*
                Ok(())
            }

            fn params_and<'b>(&'b self, last: &'b dyn rusqlite::ToSql) -> impl rusqlite::Params + 'b {
                [$(&self.$field as &dyn rusqlite::ToSql,)* last]
            }
        }

        #[doc = concat!("The columns of a batch's [`", stringify!($row), "`]s, one array each.")]
        #[derive(Default)]
        pub(crate) struct $columns$(<$lt>)? {
            $($field: Vec<$ty>,)*
        }

        impl$(<$lt>)? FromIterator<$row$(<$lt>)?> for $columns$(<$lt>)? {
            fn from_iter<I: IntoIterator<Item = $row$(<$lt>)?>>(rows: I) -> Self {
                let mut columns = Self::default();
                for row in rows {
                    $(columns.$field.push(row.$field);)*
                }
                columns
            }
        }

        impl$(<$lt>)? $columns$(<$lt>)? {
            /// Binds one array per column, in column order.
            pub(crate) fn bind(&self, arguments: &mut PgArguments) -> Result<(), BoxDynError> {
                $(arguments.add(&self.$field)?;)*
                Ok(())
            }
        }
    )*};
}

rows! {
    /// A row of `messages`.
    struct MessageRow<'a> as MessageColumns {
        session: i64,
        seq: i64,
        role: &'static str,
        content: Option<&'a str>,
        tool_calls: Option<String>,
        tool_call_id: Option<&'a str>,
        parts: Option<String>,
        reasoning: Option<String>,
        tokens: Option<String>,
        content_id: Option<i64>,
    }

    /// A row of `model_calls`.
    struct CallRow<'a> as CallColumns {
        session: i64,
        seq: i64,
        endpoint: &'a str,
        request: Option<&'a str>,
        response: Option<&'a str>,
        prompt_tokens: i64,
        completion_tokens: i64,
        latency_ms: f64,
        attempts: i64,
        error: Option<&'a str>,
        party: &'static str,
        finish_reason: Option<&'a str>,
        sampling: Option<String>,
    }

    /// A row of `tool_calls`.
    struct ToolRow<'a> as ToolColumns {
        session: i64,
        seq: i64,
        party: &'static str,
        call_id: &'a str,
        name: &'a str,
        arguments: &'a str,
        output: &'a str,
        is_error: bool,
        write: bool,
        malformed: bool,
        truncated: bool,
        duration_us: i64,
    }

    /// A finished session's end, the values its row of `sessions` is updated with.
    struct EndRow<'a> as EndColumns {
        session: i64,
        termination: &'static str,
        reward: Option<f64>,
        error: Option<&'a str>,
        failure: Option<&'static str>,
        steps: i64,
        retries: i64,
        duration_ms: f64,
        token_contiguity: Option<&'a str>,
        user_faults: Option<String>,
    }

    /// A finished session's score by its environment (version 1), a row of `scores`.
    struct ScoreRow as ScoreColumns {
        session: i64,
        value: f64,
        breakdown: String,
    }
}

/// Serialized for a text column: tool calls, parts, reasoning, tokens and sampling are plain data
/// (strings, numbers and JSON values), so they serialize.
fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    parley_core::json::to_string(value).unwrap_or_default()
}

/// Whether a tool-result message says only what the row of its tool call keeps: its text is
/// the call's output and its call id the call's. Its row then keeps neither (both NULL), and
/// reading puts them back from the call's row, so a tool's output is stored once. No other
/// tool message has neither: a tool result always answers a call by its id.
pub(crate) fn told_by(m: &Message, call: &ToolCallRecord) -> bool {
    m.role == Role::Tool
        && m.content.as_deref() == Some(call.output.as_str())
        && m.tool_call_id.as_deref() == Some(call.call_id.as_str())
}

/// Sampling settings as `model_calls` keeps them: only those the request set, as a setting
/// left out reads back unset. Most calls set one or two, and a row per call keeps them.
fn sampling(s: &Sampling) -> String {
    #[derive(serde::Serialize)]
    struct Set<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        temperature: Option<&'a f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        top_p: Option<&'a f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        max_tokens: Option<&'a u32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        seed: Option<&'a u64>,
    }
    let Sampling { temperature, top_p, max_tokens, seed } = s;
    json(&Set {
        temperature: temperature.as_ref(),
        top_p: top_p.as_ref(),
        max_tokens: max_tokens.as_ref(),
        seed: seed.as_ref(),
    })
}

impl<'a> MessageRow<'a> {
    /// The row of a message; a tool result that says what its tool call's row says (`tool`,
    /// the call of the same seq) leaves its text and call id to that row (see [`told_by`]). A
    /// system prompt that `texts` keeps once has its id in `content_id` and its text in
    /// `content` until [`TurnRows::settle`] says which of the two the row keeps.
    pub(crate) fn new(
        session: SessionId,
        r: &'a MessageRecord,
        tool: Option<&ToolCallRecord>,
        prompts: &mut PromptIds,
    ) -> MessageRow<'a> {
        let m = &r.message;
        let told = tool.is_some_and(|t| told_by(m, t));
        MessageRow {
            session,
            seq: i64::from(r.seq),
            role: m.role.as_str(),
            content: if told { None } else { m.content.as_deref() },
            tool_calls: (!m.tool_calls.is_empty()).then(|| json(&m.tool_calls)),
            tool_call_id: if told { None } else { m.tool_call_id.as_deref() },
            parts: (!m.parts.is_empty()).then(|| json(&m.parts)),
            reasoning: m.reasoning.as_ref().map(json),
            tokens: m.tokens.as_ref().map(json),
            content_id: prompts.of(m),
        }
    }
}

impl<'a> CallRow<'a> {
    /// The call that produced the message `seq` of `role`; its bodies only when `raw`.
    pub(crate) fn new(session: SessionId, seq: u32, role: Role, c: &'a ModelCall, raw: bool) -> CallRow<'a> {
        // The agent's calls produce its messages, the user's theirs.
        let party = match role {
            Role::User => Party::User,
            _ => Party::Agent,
        };
        CallRow {
            session,
            seq: i64::from(seq),
            endpoint: &c.endpoint,
            // The bodies are bound as the text that went over the wire: no copy, no second
            // serialization.
            request: raw.then(|| c.request.get()),
            response: if raw { c.response.as_ref().map(|r| r.get()) } else { None },
            prompt_tokens: c.usage.prompt_tokens as i64,
            completion_tokens: c.usage.completion_tokens as i64,
            latency_ms: c.latency.as_secs_f64() * 1e3,
            attempts: i64::from(c.attempts),
            error: c.error.as_deref(),
            party: party.as_str(),
            finish_reason: c.finish_reason.as_deref(),
            sampling: c.sampling.as_ref().map(sampling),
        }
    }
}

impl<'a> ToolRow<'a> {
    pub(crate) fn new(session: SessionId, t: &'a ToolCallRecord) -> ToolRow<'a> {
        ToolRow {
            session,
            seq: i64::from(t.seq),
            party: t.party.as_str(),
            call_id: &t.call_id,
            name: &t.name,
            arguments: &t.arguments,
            output: &t.output,
            is_error: t.is_error,
            write: t.write,
            malformed: t.malformed,
            truncated: t.truncated,
            duration_us: i64::try_from(t.duration.as_micros()).unwrap_or(i64::MAX),
        }
    }
}

impl<'a> EndRow<'a> {
    pub(crate) fn new(session: SessionId, o: &'a SessionOutcome) -> EndRow<'a> {
        EndRow {
            session,
            termination: o.termination.as_str(),
            reward: o.reward.as_ref().map(|r| r.value),
            error: o.error.as_deref(),
            failure: o.failure.map(|f| f.as_str()),
            steps: i64::from(o.steps),
            retries: i64::from(o.retries),
            duration_ms: o.duration.as_secs_f64() * 1e3,
            token_contiguity: o.token_contiguity.as_deref(),
            user_faults: crate::row::faults_text(&o.user_faults),
        }
    }
}

impl ScoreRow {
    pub(crate) fn new(session: SessionId, r: &Reward) -> ScoreRow {
        // Written as it stands, not cloned into a `Value` first.
        ScoreRow { session, value: r.value, breakdown: json(&r.breakdown) }
    }
}

/// Every row a batch of writes makes, table by table, in the order of the writes.
#[derive(Default)]
pub(crate) struct TurnRows<'a> {
    pub(crate) messages: Vec<MessageRow<'a>>,
    pub(crate) calls: Vec<CallRow<'a>>,
    pub(crate) tools: Vec<ToolRow<'a>>,
    pub(crate) ends: Vec<EndRow<'a>>,
    pub(crate) scores: Vec<ScoreRow>,
    /// The tool lists the rows' requests keep apart in `texts` (see `delta`): the call row's
    /// index in `calls`, the list's id and text, and the request as it was sent.
    apart: Vec<(usize, i64, &'a str, &'a str)>,
}

impl<'a> TurnRows<'a> {
    /// The rows of `writes` (those a writer keeps, after its fence check); model calls' bodies
    /// only when `raw`. Its system prompts are still to be settled ([`TurnRows::settle`]).
    pub(crate) fn gather(
        writes: impl IntoIterator<Item = &'a Write>,
        raw: bool,
        prompts: &mut PromptIds,
    ) -> TurnRows<'a> {
        let mut rows = TurnRows::default();
        for w in writes {
            let session = w.claim.session;
            for r in &w.turn.messages {
                let tool = w.turn.tool_calls.iter().find(|t| t.seq == r.seq);
                rows.messages.push(MessageRow::new(session, r, tool, prompts));
                if let Some(call) = &r.call {
                    if let Some(a) = w.apart.iter().find(|a| raw && a.seq == r.seq) {
                        rows.apart.push((rows.calls.len(), a.id, &a.text, a.whole.get()));
                    }
                    rows.calls.push(CallRow::new(session, r.seq, r.message.role, call, raw));
                }
            }
            rows.tools.extend(w.turn.tool_calls.iter().map(|t| ToolRow::new(session, t)));
            if let Some(o) = &w.outcome {
                rows.ends.push(EndRow::new(session, o));
                if let Some(r) = &o.reward {
                    rows.scores.push(ScoreRow::new(session, r));
                }
            }
        }
        rows
    }

    /// The texts of these rows that `texts` keeps once (see [`PromptIds`]), each once,
    /// that the writer does not yet know `texts` holds (`stored`).
    pub(crate) fn new_texts(&self, stored: &HashSet<i64>) -> Vec<(i64, &'a str)> {
        let prompts = self.messages.iter().filter_map(|m| Some((m.content_id?, m.content?)));
        let lists = self.apart.iter().map(|&(_, id, text, _)| (id, text));
        let mut texts: Vec<(i64, &'a str)> = prompts.chain(lists).filter(|(id, _)| !stored.contains(id)).collect();
        texts.sort_unstable();
        texts.dedup();
        texts
    }

    /// Each system prompt's row keeps its id alone when `texts` holds its text (its id in
    /// `stored`), and its text alone when it does not (the text stored under the id is
    /// another's); so does a request that keeps its tool list apart: it names the list, or it is
    /// stored as it was sent.
    pub(crate) fn settle(&mut self, stored: &HashSet<i64>) {
        for m in &mut self.messages {
            match m.content_id {
                Some(id) if stored.contains(&id) => m.content = None,
                Some(_) => m.content_id = None,
                None => {}
            }
        }
        for &(call, id, _, whole) in &self.apart {
            if !stored.contains(&id) {
                self.calls[call].request = Some(whole);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use parley_core::Sampling;

    #[test]
    fn sampling_is_stored_without_what_is_unset_and_reads_back_the_same() {
        let all = Sampling { temperature: Some(0.7), top_p: Some(0.9), max_tokens: Some(64), seed: Some(u64::MAX) };
        let one = Sampling { seed: Some(7), ..Sampling::default() };
        for s in [all, one, Sampling::default()] {
            let stored = super::sampling(&s);
            assert!(!stored.contains("null"), "{stored}");
            assert_eq!(serde_json::from_str::<Sampling>(&stored).unwrap(), s, "{stored}");
        }
        assert_eq!(super::sampling(&Sampling { seed: Some(7), ..Sampling::default() }), r#"{"seed":7}"#);
    }
}
