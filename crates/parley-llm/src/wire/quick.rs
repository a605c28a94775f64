//! Replies of the usual shape read by hand, straight from the body's text: each field a reply is
//! made of read into its place, strings borrowed where they hold no escapes, token ids and
//! log-probs straight into their lists, every other value checked and passed over. A reply of
//! any other shape (content as a list of parts, a field of an unexpected type, a list where an
//! object belongs, nesting past [`DEPTH`], token ids that do not agree) is declined, and the tree
//! reads or refuses it as before, so both ways give the same reply.
//!
//! Only JSON is read, as serde_json reads it: the body is UTF-8 throughout, a string holds no
//! control character and only the escapes JSON has (a `\u` surrogate only as half of a pair),
//! a number is written as JSON writes one and one serde_json reads (its own reader checks every
//! number that is not a short integer, and reads every float), no comma trails, and nothing but
//! whitespace follows the document. serde_json's own reader, with serde visitors for these
//! fields, took a third more instructions (`docs/performance.md`): a reply is mostly short keys
//! and values passed over, and each went through serde's calls.

use std::borrow::Cow;
use std::sync::Arc;

use parley_core::{Message, Reasoning, Role, TokenIds, ToolCall, Usage};

/// The reply in `body` if it has the usual shape, with its token ids when `token_ids` (see
/// [`token_ids_of`]); `None` sends it to the tree.
pub(super) fn reply(body: &[u8], token_ids: bool) -> Option<(Message, Option<String>, Usage)> {
    // The whole body checked for UTF-8 once, as the tree checks every string (skipped fields'
    // strings among them).
    let text = std::str::from_utf8(body).ok()?;
    let mut reader = Reader { text, at: 0, depth: 0, token_ids };
    let Reply { choice, usage, prompt_token_ids } = reader.named()?;
    reader.end()?;
    let Choice { message, finish_reason, token_ids: choice_ids, logprobs } = choice?;
    let Fields { content, tool_calls, reasoning, reasoning_content, tokens } = message?;
    let tokens = match token_ids {
        true => token_ids_of(tokens, prompt_token_ids, choice_ids, logprobs)?.map(Arc::new),
        false => None,
    };
    let tool_calls = tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, Call { id, function })| {
            let Function { name, arguments } = function?;
            Some(ToolCall {
                id: id.map_or_else(|| format!("call_{i}"), Cow::into_owned),
                name: name.map(Cow::into_owned).unwrap_or_default(),
                arguments: arguments.map(Cow::into_owned).unwrap_or_default(),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let reasoning = Reasoning::from_chat_fields(reasoning.as_deref(), reasoning_content.as_deref()).map(Box::new);
    let message = Message {
        content: content.map(Cow::into_owned),
        tool_calls,
        reasoning,
        tokens,
        ..Message::empty(Role::Assistant)
    };
    let usage = usage.map_or_else(Usage::default, |u| Usage {
        prompt_tokens: u.prompt_tokens.unwrap_or(0),
        completion_tokens: u.completion_tokens.unwrap_or(0),
    });
    Some((message, finish_reason.map(Cow::into_owned), usage))
}

/// The tokens of a reply, in the tree's order of spellings (see `wire::token_ids_of`): the
/// message's three fields first, then vLLM's `choices[0].token_ids` and top-level
/// `prompt_token_ids`, then the log-prob entries' `token_id:<n>`. `Some(None)` for a reply with
/// no token ids; `None` (declined) for ids the tree would refuse: a log-prob entry without its
/// number, or what `wire::paired` refuses.
fn token_ids_of(
    message: MessageTokens,
    top_prompt: Option<Vec<u32>>,
    choice_ids: Option<Vec<u32>>,
    logprobs: Option<Logprobs<'_>>,
) -> Option<Option<TokenIds>> {
    let entries = match logprobs.and_then(|l| l.content) {
        Some(entries) => Some(
            entries
                .into_iter()
                .map(|e| {
                    let id = e.token.as_ref().and_then(|t| t.strip_prefix("token_id:")?.parse::<u32>().ok());
                    Some((id, e.logprob?))
                })
                .collect::<Option<Vec<_>>>()?,
        ),
        None => None,
    };
    let prompt = message.prompt_token_ids.or(top_prompt);
    let generation = message.generation_token_ids.or(choice_ids);
    super::paired(prompt, generation, message.generation_log_probs, entries).ok()
}

/// How deep lists and objects may nest before a reply is left to the tree (serde_json's own
/// limit, which the tree keeps, is 128).
const DEPTH: usize = 64;

/// A place in the body's text. Every method reads one value (or a token of one) from after the
/// whitespace at the place, and moves past it; `None` when the text there is not what it reads,
/// which declines the reply.
struct Reader<'a> {
    text: &'a str,
    at: usize,
    /// The lists and objects open at the place.
    depth: usize,
    /// Whether the reply's token fields are read (else passed over, as the tree leaves them).
    token_ids: bool,
}

/// A number's text, and whether it is a plain integer: digits alone, as `u64` and `u32` fields
/// take them.
struct Number<'a> {
    text: &'a str,
    plain: bool,
}

impl<'a> Reader<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte after whitespace, not taken.
    fn peek(&mut self) -> Option<u8> {
        let bytes = self.bytes();
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(self.at) {
            self.at += 1;
        }
        bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// Nothing but whitespace is left.
    fn end(&mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }

    /// `word`, whole.
    fn literal(&mut self, word: &str) -> Option<()> {
        self.peek()?;
        self.bytes()[self.at..].starts_with(word.as_bytes()).then(|| self.at += word.len())
    }

    /// `null`, read as `None`, or what `read` reads.
    fn or_null<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        match self.peek()? {
            b'n' => self.literal("null").map(|()| None),
            _ => read(self).map(Some),
        }
    }

    /// An object, each field's value read by `field` by the field's name (or passed over:
    /// [`Reader::skip`]). A name given twice is read twice, and its last value kept, as the
    /// tree keeps it.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.open()?;
        if self.peek()? == b'}' {
            return self.close();
        }
        loop {
            let name = self.string()?;
            self.eat(b':')?;
            field(self, &name)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => return self.close(),
                _ => return None,
            }
        }
    }

    /// A list, each item read by `item`.
    fn list(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        self.open()?;
        if self.peek()? == b']' {
            return self.close();
        }
        loop {
            item(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => return self.close(),
                _ => return None,
            }
        }
    }

    /// A list's items read by `item`, in order.
    fn items<T>(&mut self, mut item: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let mut items = Vec::new();
        self.list(|r| item(r).map(|i| items.push(i)))?;
        Some(items)
    }

    /// A list's first item read by `item` (`None` for an empty list), the others passed over.
    fn first<T>(&mut self, mut item: impl FnMut(&mut Self) -> Option<T>) -> Option<Option<T>> {
        let mut first = None;
        self.list(|r| match first.is_none() {
            true => item(r).map(|i| first = Some(i)),
            false => r.skip(),
        })?;
        Some(first)
    }

    fn open(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= DEPTH).then_some(())
    }

    /// Takes the closing bracket that [`Reader::peek`] just saw.
    fn close(&mut self) -> Option<()> {
        self.at += 1;
        self.depth -= 1;
        Some(())
    }

    /// A string, borrowed from the body unless it has escapes.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let (text, bytes) = (self.text, self.bytes());
        let start = self.at;
        let mut at = parley_core::json::next_special(bytes, start)?;
        if bytes[at] == b'"' {
            self.at = at + 1;
            return text.get(start..at).map(Cow::Borrowed);
        }
        let mut out = String::with_capacity(at - start + 16);
        out.push_str(text.get(start..at)?);
        loop {
            match bytes[at] {
                b'"' => {
                    self.at = at + 1;
                    return Some(Cow::Owned(out));
                }
                b'\\' => at = unescape(bytes, at + 1, &mut out)?,
                // A control character, which a string must escape.
                _ => return None,
            }
            let next = parley_core::json::next_special(bytes, at)?;
            out.push_str(text.get(at..next)?);
            at = next;
        }
    }

    /// A number, checked as serde_json reads it.
    fn number(&mut self) -> Option<Number<'a>> {
        self.peek()?;
        let (bytes, start) = (self.bytes(), self.at);
        let digits = |mut i: usize| {
            while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            i
        };
        let mut i = start + usize::from(bytes[start] == b'-');
        i = match bytes.get(i)? {
            b'0' => i + 1,
            b'1'..=b'9' => digits(i + 1),
            _ => return None,
        };
        let mut plain = bytes[start] != b'-';
        if bytes.get(i) == Some(&b'.') {
            let end = digits(i + 1);
            (end > i + 1).then_some(())?;
            (i, plain) = (end, false);
        }
        if let Some(b'e' | b'E') = bytes.get(i) {
            let signed = i + 1 + usize::from(matches!(bytes.get(i + 1), Some(b'+' | b'-')));
            let end = digits(signed);
            (end > signed).then_some(())?;
            (i, plain) = (end, false);
        }
        self.at = i;
        let text = self.text.get(start..i)?;
        // A short integer is always one serde_json reads; any other number is read by it, which
        // refuses one out of a float's range, as the tree does.
        if !(plain && text.len() <= 19) {
            serde_json::from_str::<f64>(text).ok()?;
        }
        Some(Number { text, plain })
    }

    /// A count: a plain integer that fits, as `Value::as_u64` reads one.
    fn u64(&mut self) -> Option<u64> {
        self.number().filter(|n| n.plain)?.text.parse().ok()
    }

    /// A list of token ids.
    fn ids(&mut self) -> Option<Vec<u32>> {
        self.items(|r| r.number().filter(|n| n.plain)?.text.parse().ok())
    }

    /// A float, as serde_json reads it.
    fn f64(&mut self) -> Option<f64> {
        serde_json::from_str(self.number()?.text).ok()
    }

    /// Passes over any value, checked.
    fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => self.object(|r, _| r.skip()),
            b'[' => self.list(Reader::skip),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            _ => self.number().map(drop),
        }
    }
}

/// Appends what the escape after a backslash (`bytes[at]` on) stands for to `out`, and returns
/// the index past it; `None` for one JSON has not, or a surrogate that is not half of a pair
/// (which serde_json refuses in a string it reads).
fn unescape(bytes: &[u8], at: usize, out: &mut String) -> Option<usize> {
    let c = match bytes.get(at)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\x08',
        b'f' => '\x0c',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let high = hex(bytes, at + 1)?;
            let (c, end) = match high {
                0xD800..=0xDBFF => {
                    (bytes.get(at + 5..at + 7)? == b"\\u").then_some(())?;
                    let low = hex(bytes, at + 7)?;
                    (0xDC00..=0xDFFF).contains(&low).then_some(())?;
                    (0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00), at + 11)
                }
                0xDC00..=0xDFFF => return None,
                _ => (high, at + 5),
            };
            out.push(char::from_u32(c)?);
            return Some(end);
        }
        _ => return None,
    };
    out.push(c);
    Some(at + 1)
}

/// The four hex digits at `bytes[at..]`.
fn hex(bytes: &[u8], at: usize) -> Option<u32> {
    bytes.get(at..at + 4)?.iter().try_fold(0, |n, &b| Some(n * 16 + char::from(b).to_digit(16)?))
}

/// An object read by field name, each field's value into its place: what [`Reader::named`]
/// reads. A name the object does not take is passed over ([`Reader::skip`]).
trait Named<'a>: Default {
    fn field(&mut self, r: &mut Reader<'a>, name: &str) -> Option<()>;
}

impl<'a> Reader<'a> {
    /// An object of `T`'s fields.
    fn named<T: Named<'a>>(&mut self) -> Option<T> {
        let mut object = T::default();
        self.object(|r, name| object.field(r, name))?;
        Some(object)
    }
}

/// The reply's fields; token fields only when the reader was asked for token ids (else the tree
/// reads none either, and they are passed over).
#[derive(Default)]
struct Reply<'a> {
    /// `choices[0]`, when `choices` is a list that has one.
    choice: Option<Choice<'a>>,
    usage: Option<Counts>,
    /// vLLM's spelling of the prompt's tokens.
    prompt_token_ids: Option<Vec<u32>>,
}

impl<'a> Named<'a> for Reply<'a> {
    fn field(&mut self, r: &mut Reader<'a>, name: &str) -> Option<()> {
        match name {
            "choices" => self.choice = r.first(Reader::named)?,
            "usage" => self.usage = r.or_null(Reader::named)?,
            "prompt_token_ids" if r.token_ids => self.prompt_token_ids = r.or_null(Reader::ids)?,
            _ => r.skip()?,
        }
        Some(())
    }
}

#[derive(Default)]
struct Choice<'a> {
    /// `None` when absent; a `message` that is not an object is declined.
    message: Option<Fields<'a>>,
    finish_reason: Option<Cow<'a, str>>,
    /// vLLM's spelling of the generated tokens.
    token_ids: Option<Vec<u32>>,
    logprobs: Option<Logprobs<'a>>,
}

impl<'a> Named<'a> for Choice<'a> {
    fn field(&mut self, r: &mut Reader<'a>, name: &str) -> Option<()> {
        match name {
            "message" => self.message = Some(r.named()?),
            "finish_reason" => self.finish_reason = r.or_null(Reader::string)?,
            "token_ids" if r.token_ids => self.token_ids = r.or_null(Reader::ids)?,
            "logprobs" if r.token_ids => self.logprobs = r.or_null(Reader::named)?,
            _ => r.skip()?,
        }
        Some(())
    }
}

/// The fields of `choices[0].message` that a reply is read from.
#[derive(Default)]
struct Fields<'a> {
    content: Option<Cow<'a, str>>,
    tool_calls: Option<Vec<Call<'a>>>,
    reasoning: Option<Cow<'a, str>>,
    reasoning_content: Option<Cow<'a, str>>,
    tokens: MessageTokens,
}

/// The three token fields of `choices[0].message` (vLLM servers that serve RL trainers).
#[derive(Default)]
struct MessageTokens {
    prompt_token_ids: Option<Vec<u32>>,
    generation_token_ids: Option<Vec<u32>>,
    generation_log_probs: Option<Vec<f64>>,
}

impl<'a> Named<'a> for Fields<'a> {
    fn field(&mut self, r: &mut Reader<'a>, name: &str) -> Option<()> {
        let tokens = &mut self.tokens;
        match name {
            "content" => self.content = r.or_null(Reader::string)?,
            "tool_calls" => self.tool_calls = r.or_null(|r| r.items(Reader::named))?,
            "reasoning" => self.reasoning = r.or_null(Reader::string)?,
            "reasoning_content" => self.reasoning_content = r.or_null(Reader::string)?,
            "prompt_token_ids" if r.token_ids => tokens.prompt_token_ids = r.or_null(Reader::ids)?,
            "generation_token_ids" if r.token_ids => tokens.generation_token_ids = r.or_null(Reader::ids)?,
            "generation_log_probs" if r.token_ids => {
                tokens.generation_log_probs = r.or_null(|r| r.items(Reader::f64))?;
            }
            _ => r.skip()?,
        }
        Some(())
    }
}

#[derive(Default)]
struct Call<'a> {
    id: Option<Cow<'a, str>>,
    /// `None` when absent (the tree refuses the reply) or null (the tree reads a nameless
    /// call): either way declined.
    function: Option<Function<'a>>,
}

impl<'a> Named<'a> for Call<'a> {
    fn field(&mut self, r: &mut Reader<'a>, name: &str) -> Option<()> {
        match name {
            "id" => self.id = r.or_null(Reader::string)?,
            "function" => self.function = r.or_null(Reader::named)?,
            _ => r.skip()?,
        }
        Some(())
    }
}

#[derive(Default)]
struct Function<'a> {
    name: Option<Cow<'a, str>>,
    arguments: Option<Cow<'a, str>>,
}

impl<'a> Named<'a> for Function<'a> {
    fn field(&mut self, r: &mut Reader<'a>, name: &str) -> Option<()> {
        match name {
            "name" => self.name = r.or_null(Reader::string)?,
            "arguments" => self.arguments = r.or_null(Reader::string)?,
            _ => r.skip()?,
        }
        Some(())
    }
}

/// `usage`'s token counts.
#[derive(Default)]
struct Counts {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

impl Named<'_> for Counts {
    fn field(&mut self, r: &mut Reader<'_>, name: &str) -> Option<()> {
        match name {
            "prompt_tokens" => self.prompt_tokens = r.or_null(Reader::u64)?,
            "completion_tokens" => self.completion_tokens = r.or_null(Reader::u64)?,
            _ => r.skip()?,
        }
        Some(())
    }
}

/// `choices[0].logprobs`.
#[derive(Default)]
struct Logprobs<'a> {
    content: Option<Vec<Entry<'a>>>,
}

impl<'a> Named<'a> for Logprobs<'a> {
    fn field(&mut self, r: &mut Reader<'a>, name: &str) -> Option<()> {
        match name {
            "content" => self.content = r.or_null(|r| r.items(Reader::named))?,
            _ => r.skip()?,
        }
        Some(())
    }
}

/// A log-prob entry: the token (`token_id:<n>` when the server writes ids) and its log-prob.
#[derive(Default)]
struct Entry<'a> {
    token: Option<Cow<'a, str>>,
    logprob: Option<f64>,
}

impl<'a> Named<'a> for Entry<'a> {
    fn field(&mut self, r: &mut Reader<'a>, name: &str) -> Option<()> {
        match name {
            "token" => self.token = r.or_null(Reader::string)?,
            "logprob" => self.logprob = r.or_null(Reader::f64)?,
            _ => r.skip()?,
        }
        Some(())
    }
}
