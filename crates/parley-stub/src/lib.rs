//! A deterministic OpenAI-compatible model server for tests, benchmarks and dry runs.
//!
//! `parley-stub` is a test double. It never runs a model and never pretends to: every answer
//! follows from the request and the [`StubConfig`] by the rules below, so a test can predict
//! it byte for byte and a benchmark measures the runtime rather than a model.
//!
//! # Endpoints
//!
//! - `GET /v1/models` lists one model, `parley-stub`. Requests may name any model; the answer
//!   echoes the requested name.
//! - `POST /v1/chat/completions`: OpenAI Chat Completions, non-streaming.
//! - `POST /v1/responses`: OpenAI Responses, non-streaming and stateless (`input` is all the
//!   stub reads; `previous_response_id` is ignored).
//! - `GET /stub/stats`: the request counters, see [Statistics](#statistics).
//! - `POST /pooling`: a reward model in vLLM's pooling shape; the score (`data[0].data[0]`) is
//!   the character count of the last `assistant` message's text over 100, at most 1.
//!
//! Any other path answers 404 with an OpenAI-style error. Bodies may be up to 64 MiB.
//!
//! # Answers
//!
//! The stub first counts *k*, the tool results in the current user turn: in Chat Completions
//! the messages with role `tool` after the last message with role `user`; in Responses the
//! `function_call_output` items after the last `user` message. With no user message, every
//! tool result counts.
//!
//! Only function tools count (`{"type": "function", "function": {...}}` in Chat Completions,
//! `{"type": "function", "name", ...}` in Responses); other tool kinds are ignored.
//!
//! **Probes.** With [`StubConfig::probe`], every agent request (one that is neither a simulated
//! user's, below, nor a judge prompt with [`StubConfig::judge`]) is answered by the probe's
//! script instead of the rules below: a tool call (as below, tool number *k* mod the number of
//! tools) or a text. The scripts are documented in [`Probe`]'s module: empty, the question
//! repeated, every choice, a wrong value in the right format, a long answer, tool outputs
//! copied, hedges, and a flood of tool calls.
//!
//! **Scripts.** With [`StubConfig::scripts`], an agent request whose `seed` names a scripted
//! session is answered by its [`Script`]: its next call not yet made (counted by the request's
//! tool results), then its closing text, ahead of every rule below.
//!
//! **Tool call.** When the request offers at least one function tool, `tool_choice` is not
//! `"none"`, and *k* < [`StubConfig::tool_calls`], the answer is exactly one call of tool
//! number *k* mod (number of tools), with arguments synthesized from the tool's `parameters`
//! schema (see [Synthesis](#synthesis); a tool without `parameters` gets `{}`). The call id is
//! `call_` followed by 16 hex digits of FNV-1a over the conversation hash and *k*, so it is the
//! same on every run ([`serve_with`] and [`CallIds::Repeated`] give every call the id
//! `call_0000000000000000` instead, as some local servers do). In Chat Completions the message has `content: null`, one entry in
//! `tool_calls`, and `finish_reason` is `tool_calls`. In Responses the output is one
//! `function_call` item with that `call_id` and `id` `fc_` plus the same digits.
//!
//! **Final text.** Otherwise the answer is a text (`finish_reason: "stop"`; in Responses one
//! `message` item with one `output_text` part):
//!
//! 1. with a structured-output request (Chat Completions `response_format: {"type":
//!    "json_schema", "json_schema": {"schema": S}}`, Responses `text: {"format": {"type":
//!    "json_schema", "schema": S}}`), the JSON document synthesized from S, serialized;
//! 2. else, for a simulated user's request (its system text contains `###STOP###`), `Yes, please
//!    go ahead.` while the request holds fewer than [`StubConfig::user_turns`] `assistant`
//!    messages (the user's own earlier turns), then `Thank you, that is all. ###STOP###` (unless
//!    [`StubConfig::user_faults`] makes the conversation's user fail on purpose: see
//!    [`UserFaultMode`]);
//! 3. else, with [`StubConfig::judge`], a judge verdict for a prompt with `GOLD:` and
//!    `CANDIDATE:` sections (see [`verdict`]), or a judged user review (see [`user_review`]);
//! 4. else, when [`StubConfig::answers`] has a row whose first user text is the request's, that
//!    row's answer (see [`AnswerKey`]: right, wrong or malformed by a hash of the prompt; or,
//!    with a [`Learner`], right with a chance that rises as the row is practised);
//! 5. else [`StubConfig::final_text`] when set;
//! 6. else `Result: ` followed by the text of the last tool result of the current turn,
//!    when *k* > 0;
//! 7. else `Hello from parley-stub.`.
//!
//! So with the default two tool calls a conversation goes: tool call, tool call, final text;
//! a structured-output request with tools makes its tool calls first and ends with the JSON.
//! `json_object` response formats are not special: they get the plain final text.
//!
//! **Reasoning.** With [`StubConfig::reasoning`] set, every answer also carries a thought:
//! `Step k: the task needs NAME, so I call it.` before a tool call, `Step k: I have what I
//! need, so I answer.` before a text. In Chat Completions it is the message's
//! `reasoning_content` or `reasoning` field (see [`StubReasoning`]); in Responses it is a
//! `reasoning` item before the answer, `{"type": "reasoning", "id": "rs_…", "summary":
//! [{"type": "summary_text", "text": THOUGHT}], "encrypted_content": "enc_…"}`, where both ids
//! follow from the thought's FNV-1a. Reasoning sent back in a request is read as nothing more
//! than text to count.
//!
//! The text of a message (or tool result) is its `content` (or `output`) string, or the
//! concatenated `text` fields of its content parts.
//!
//! **Ids and numbers.** The completion id is `chatcmpl-`, the response id `resp_` and the
//! Responses message id `msg_`, each followed by 16 hex digits of FNV-1a over the request
//! body's bytes. `created` and `created_at` are 0. Usage is an estimate: prompt (input)
//! tokens are the characters of every message's text / 4 (Responses add the `instructions`
//! and the tool results' outputs), completion (output) tokens are the characters of the
//! answer text or of the call's arguments / 4, each at least 1, and the total is their sum.
//! The same request body therefore always gets the same bytes back, unless a fault intervenes.
//!
//! # Synthesis
//!
//! Values for tool arguments and structured outputs come from the JSON Schema, by these rules
//! (the first that applies wins):
//!
//! - `const` → that value; `enum` → its first value;
//! - `anyOf` / `oneOf` → the value for the first alternative;
//! - `type` is read as given; in a list of types the first one that is not `"null"` counts;
//!   a schema without `type` but with `properties` is an object;
//! - object → the properties named in `required` (every property when there is no
//!   `required`), each synthesized from its own schema; a required name without a schema
//!   gets `null`. Keys come out in `serde_json`'s map order: sorted by name (in schema order
//!   instead if something in the build turns on `serde_json`'s `preserve_order` feature);
//! - string → the property's name with its first letter uppercased (`synonym` →
//!   `"Synonym"`); array items use the array's name; a top-level string is `"Value"`;
//! - integer → `minimum` (rounded up) if given, else 0; number → `minimum` if given, else
//!   0.0; boolean → `true`; null → `null`;
//! - array → one item synthesized from `items`, or `[]` when there is no `items`;
//! - anything else (no type, `$ref`, `true`) → `null`.
//!
//! For example, `{"type": "object", "properties": {"synonym_values": {"type": "array",
//! "items": {"type": "integer"}}}, "required": ["synonym_values"]}` gives
//! `{"synonym_values":[0]}`.
//!
//! # Latency and faults
//!
//! Every answer to the two model endpoints, errors included, is sent [`StubConfig::latency`]
//! after its request arrived: the stub's own work happens within that time instead of adding
//! to it. With [`StubConfig::latency_spread`], each answer's latency is drawn evenly around it
//! instead (by arrival order and seed), so sessions that start together drift apart as they
//! do against a real model. A `hang` fault's sleep comes on top.
//!
//! Bad requests (body not JSON, not an object, no string `model`, no non-empty `messages` or
//! `input`, a message without a string `role`, a function tool without a string name, a
//! structured-output format without a schema) get 400 with an `invalid_request_error`:
//! `{"error": {"message", "type", "param": null, "code": null}}`. No fault applies to them.
//!
//! Every well-formed request draws at most one fault, deterministically. The stub keeps, for
//! each distinct body, the number *n* of times it was seen before, and computes
//! *h* = splitmix64(FNV-1a(seed, FNV-1a(body), *n*)) and *u* = (top 53 bits of *h*) / 2^53 in
//! [0, 1). It walks the kinds of [`Faults`] in order with cumulative fractions, and the first
//! kind whose cumulative fraction exceeds *u* applies:
//!
//! 1. `rate_limit` → 429 with `Retry-After: `[`StubConfig::retry_after_secs`] and a
//!    `rate_limit_error` (code `rate_limit_exceeded`);
//! 2. `server_error` → 500 with a `server_error`;
//! 3. `hang` → sleeps [`StubConfig::hang`], then answers normally (when [`serve`] shuts down
//!    during the sleep, the request gets 503 instead);
//! 4. `malformed` → 200, `content-type: application/json`, and a truncated body:
//!    `{"id": "chatcmpl-broken", "choices": [` (Responses: `{"id": "resp_broken", "output": [`);
//! 5. `bad_arguments` → when the answer is a tool call, its arguments are broken: the
//!    non-JSON `{"oops": ` when *h* is even, the JSON object `{}` (required properties
//!    missing) when *h* is odd. When the answer is a text, it is sent unharmed;
//! 6. `reset` → 200 and its headers, then the connection is dropped before any of the body;
//! 7. `huge` → 200 with a valid answer whose text is [`StubConfig::huge_bytes`] of `x`
//!    (32 MiB by default), for clients that must bound what they read.
//!
//! Because *n* is part of the draw, a retry of the same body draws afresh: with
//! `rate_limit: 0.5` a client that retries gets through, and a whole run with the same seed
//! and the same requests in the same order replays the same faults. When every fraction is 0
//! the stub keeps no per-body counts at all.
//!
//! # Statistics
//!
//! [`Stats`] (returned by [`router`]) and `GET /stub/stats` count:
//!
//! - `requests`: requests to the two model endpoints, counted on arrival, bad ones included;
//! - `by_status`: answers sent, by HTTP status (`"200"`, `"400"`, `"429"`, …), counted when
//!   sent, so a hanging request appears in `requests` but not yet here;
//! - `conversations`: well-formed requests per conversation key;
//! - `turns`: well-formed requests per `"<conversation key>/<number of messages>"` (input
//!   items in Responses). A count above 1 means the same turn was asked for twice: a retry,
//!   or a resumed run that redid work.
//! - `learner` (only with a [`Learner`]): answers given, how many while the row's chance lay in
//!   [0.1, 0.9] (`in_band`), the rows, and their mean chance now (`mean_chance`).
//!
//! The conversation key ([`conversation_key`]) is 16 hex digits of FNV-1a over the system
//! text and the first user message's text. The system text is the first `system` or
//! `developer` message; in Responses a non-empty `instructions` takes its place. Conversations
//! that start alike (repeated samples of one task) share a key.
//!
//! ```json
//! {"requests": 3, "by_status": {"200": 3},
//!  "conversations": {"9f0c1e2d3a4b5c6d": 3},
//!  "turns": {"9f0c1e2d3a4b5c6d/2": 1, "9f0c1e2d3a4b5c6d/4": 1, "9f0c1e2d3a4b5c6d/6": 1}}
//! ```

mod answers;
mod chat;
mod config;
mod error;
mod fault;
mod hash;
mod probe;
mod responses;
mod scripts;
mod server;
mod stats;
mod synth;
mod token_ids;
mod turn;
mod user_faults;

pub use answers::{AnswerKey, Learner, MALFORMED, judgement, user_review, verdict};
pub use config::{ConfigError, Faults, StubConfig, StubReasoning};
pub use probe::{FLOOD, Probe, Seen, Step};
pub use scripts::{Script, Scripts};
pub use server::{CallIds, router, serve, serve_with};
pub use stats::{Stats, conversation_key};
pub use token_ids::TokenMode;
pub use user_faults::UserFaultMode;
