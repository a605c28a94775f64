//! Content parts and reasoning: what a message holds beside plain text, read from and written to
//! both OpenAI wire forms (Chat Completions and Responses).
//!
//! Nothing a dataset or an endpoint sends is dropped here. A part of a type Parley does not know,
//! or one it cannot read, becomes [`Part::Raw`] and is sent on as it came; a data URL that does
//! not decode is kept as given and named by [`Part::problem`], so the caller can warn.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One part of a message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    Text {
        text: String,
    },
    /// An image by URL: `https://…`, or a `data:` URL that holds the image itself.
    Image {
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// Audio as base64 data and its format (`wav`, `mp3`).
    Audio {
        data: String,
        format: String,
    },
    /// A part Parley does not know, kept exactly as it was given.
    Raw {
        value: Value,
    },
}

impl Part {
    /// Reads one part in either wire form: Chat Completions (`text`, `image_url`, `input_audio`)
    /// or Responses (`input_text`, `output_text`, `input_image`, `input_audio`). Anything else,
    /// or a known type without its fields, is kept raw.
    pub fn from_json(value: &Value) -> Part {
        let str_at = |pointer: &str| value.pointer(pointer).and_then(Value::as_str).map(str::to_owned);
        let part = match value.get("type").and_then(Value::as_str) {
            Some("text" | "input_text" | "output_text") => str_at("/text").map(|text| Part::Text { text }),
            // Chat Completions nests the URL (`image_url: {url, detail}`); some servers send the URL as a string.
            Some("image_url") => str_at("/image_url/url")
                .or_else(|| str_at("/image_url"))
                .map(|url| Part::Image { url, detail: str_at("/image_url/detail").or_else(|| str_at("/detail")) }),
            // Responses gives the URL flat (`image_url`, `detail`); a `file_id` image stays raw.
            Some("input_image") => str_at("/image_url").map(|url| Part::Image { url, detail: str_at("/detail") }),
            Some("input_audio") => match (str_at("/input_audio/data"), str_at("/input_audio/format")) {
                (Some(data), Some(format)) => Some(Part::Audio { data, format }),
                _ => None,
            },
            _ => None,
        };
        part.unwrap_or_else(|| Part::Raw { value: value.clone() })
    }

    /// Reads a `content` value: a string is one text part, a list is its parts, anything else is
    /// read as one part (an object may be one; a number is kept raw). `null` is no parts.
    pub fn list_from_json(content: &Value) -> Vec<Part> {
        match content {
            Value::Null => Vec::new(),
            Value::String(text) => vec![Part::Text { text: text.clone() }],
            Value::Array(parts) => parts.iter().map(Part::from_json).collect(),
            other => vec![Part::from_json(other)],
        }
    }

    pub fn as_text(&self) -> Option<&str> {
        match self {
            Part::Text { text } => Some(text),
            _ => None,
        }
    }

    /// The Chat Completions form.
    pub fn to_chat_json(&self) -> Value {
        match self {
            Part::Text { text } => json!({"type": "text", "text": text}),
            Part::Image { url, detail } => {
                let mut image = json!({"url": url});
                if let Some(detail) = detail {
                    image["detail"] = json!(detail);
                }
                json!({"type": "image_url", "image_url": image})
            }
            Part::Audio { data, format } => {
                json!({"type": "input_audio", "input_audio": {"data": data, "format": format}})
            }
            Part::Raw { value } => value.clone(),
        }
    }

    /// The Responses form; `output` names text an assistant wrote (`output_text`).
    pub fn to_responses_json(&self, output: bool) -> Value {
        match self {
            Part::Text { text } if output => json!({"type": "output_text", "text": text, "annotations": []}),
            Part::Text { text } => json!({"type": "input_text", "text": text}),
            // Responses requires `detail`; `auto` is what OpenAI assumes when Chat Completions omits it.
            Part::Image { url, detail } => {
                json!({"type": "input_image", "image_url": url, "detail": detail.as_deref().unwrap_or("auto")})
            }
            Part::Audio { data, format } => {
                json!({"type": "input_audio", "input_audio": {"data": data, "format": format}})
            }
            Part::Raw { value } => value.clone(),
        }
    }

    /// The part's type and size for people: `image (png data URL, 1.0 MiB)`, never the data.
    pub fn describe(&self) -> String {
        match self {
            Part::Text { text } => format!("text ({} chars)", text.chars().count()),
            Part::Image { url, .. } => match DataUrl::parse(url) {
                Some(data) => format!("image ({} data URL, {})", data.media_type, size(data.decoded_len())),
                None if url.starts_with("data:") => format!("image (broken data URL, {})", size(url.len())),
                None => format!("image ({})", head(url, 80)),
            },
            Part::Audio { data, format } => {
                format!("audio ({format}, {})", size(base64_len(data).unwrap_or(data.len())))
            }
            Part::Raw { value } => {
                let kind = value.get("type").and_then(Value::as_str).unwrap_or("untyped");
                format!("raw part `{}` ({})", head(kind, 40), size(value.to_string().len()))
            }
        }
    }

    /// Why the part may not reach a model as meant, or `None` when it is well-formed.
    pub fn problem(&self) -> Option<String> {
        match self {
            Part::Text { .. } => None,
            Part::Image { url, .. } if url.starts_with("data:") && DataUrl::parse(url).is_none() => {
                Some(format!("an image with a broken data URL ({}), kept as given", head(url, 48)))
            }
            Part::Image { .. } => None,
            Part::Audio { data, format } if base64_len(data).is_none() => {
                Some(format!("{format} audio whose data is not base64, kept as given"))
            }
            Part::Audio { .. } => None,
            Part::Raw { value } => Some(match value.get("type").and_then(Value::as_str) {
                Some(kind) => format!("a part of unknown type `{}`, kept as given", head(kind, 40)),
                None => format!("a part Parley cannot read ({}), kept as given", head(&value.to_string(), 48)),
            }),
        }
    }
}

/// A `data:<media type>;base64,<data>` URL that decodes.
struct DataUrl<'a> {
    media_type: &'a str,
    data: &'a str,
}

impl<'a> DataUrl<'a> {
    fn parse(url: &'a str) -> Option<DataUrl<'a>> {
        let (header, data) = url.strip_prefix("data:")?.split_once(',')?;
        let media_type = header.strip_suffix(";base64")?;
        base64_len(data)?;
        Some(DataUrl { media_type: if media_type.is_empty() { "unknown" } else { media_type }, data })
    }

    fn decoded_len(&self) -> usize {
        base64_len(self.data).unwrap_or(0)
    }
}

/// The decoded length of standard base64 text (padding optional), or `None` when it is not
/// base64. Checked by hand so that `parley-core` needs no codec.
fn base64_len(data: &str) -> Option<usize> {
    let body = data.trim_end_matches('=');
    let padding = data.len() - body.len();
    let valid = body.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/');
    if !valid || padding > 2 || body.len() % 4 == 1 || (padding > 0 && !data.len().is_multiple_of(4)) {
        return None;
    }
    Some(body.len() * 3 / 4)
}

fn size(bytes: usize) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

/// The first `chars` characters of `text`, with `…` when it was longer.
fn head(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// Which field a model's reasoning came in: what it is sent back as, when it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningSpelling {
    /// Chat Completions `message.reasoning_content` (vLLM before 0.11, DeepSeek, SGLang).
    #[default]
    ReasoningContent,
    /// Chat Completions `message.reasoning` (vLLM from 0.11, OpenRouter).
    Reasoning,
    /// Responses `reasoning` output items.
    Responses,
}

impl ReasoningSpelling {
    /// Where it came from, for people: `reasoning_content`, `reasoning` or `responses`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningSpelling::ReasoningContent => "reasoning_content",
            ReasoningSpelling::Reasoning => "reasoning",
            ReasoningSpelling::Responses => "responses",
        }
    }

    /// The Chat Completions field it goes back in; Responses reasoning goes back as
    /// `reasoning_content`, the field chat templates read.
    pub fn chat_field(self) -> &'static str {
        match self {
            ReasoningSpelling::Reasoning => "reasoning",
            ReasoningSpelling::ReasoningContent | ReasoningSpelling::Responses => "reasoning_content",
        }
    }
}

/// A model's reasoning beside its answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reasoning {
    /// The reasoning text (for Responses: the summaries' and reasoning contents' text, joined).
    pub text: String,
    pub spelling: ReasoningSpelling,
    /// The provider's reasoning items exactly as they came (ids, `summary`, `encrypted_content`),
    /// so that they can be sent back unchanged; empty for Chat Completions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<Value>,
}

impl Reasoning {
    /// Chat Completions reasoning: `reasoning`, else `reasoning_content`, when either is a
    /// non-empty string. `reasoning` wins when a server writes both (vLLM did while it renamed
    /// the field), because that server reads `reasoning` back from assistant messages and, in
    /// some versions, ignores `reasoning_content` there.
    pub fn from_chat_message(message: &Value) -> Option<Reasoning> {
        let text = |field: &str| message.get(field).and_then(Value::as_str);
        Reasoning::from_chat_fields(text("reasoning"), text("reasoning_content"))
    }

    /// [`Reasoning::from_chat_message`] of the two fields' strings, as a reader that does not
    /// build the message as a tree has them.
    pub fn from_chat_fields(reasoning: Option<&str>, reasoning_content: Option<&str>) -> Option<Reasoning> {
        [(reasoning, ReasoningSpelling::Reasoning), (reasoning_content, ReasoningSpelling::ReasoningContent)]
            .into_iter()
            .find_map(|(text, spelling)| {
                let text = text.filter(|t| !t.is_empty())?;
                Some(Reasoning { text: text.to_owned(), spelling, items: Vec::new() })
            })
    }

    /// Responses reasoning from its `reasoning` items: their summaries' and contents' text.
    pub fn from_responses_items(items: Vec<Value>) -> Option<Reasoning> {
        if items.is_empty() {
            return None;
        }
        let mut text = String::new();
        for item in &items {
            for list in ["summary", "content"] {
                for part in item.get(list).and_then(Value::as_array).into_iter().flatten() {
                    if let Some(t) = part.get("text").and_then(Value::as_str) {
                        if !text.is_empty() {
                            text.push('\n');
                        }
                        text.push_str(t);
                    }
                }
            }
        }
        Some(Reasoning { text, spelling: ReasoningSpelling::Responses, items })
    }

    /// Whether the provider gave its reasoning encrypted, to be sent back on later turns.
    pub fn encrypted(&self) -> bool {
        self.items.iter().any(|i| i.get("encrypted_content").is_some_and(|c| c.as_str().is_some_and(|s| !s.is_empty())))
    }

    /// The Responses `reasoning` items: the provider's own when it gave them, else one item made
    /// from the text (`id` names it after the message's place in the transcript).
    pub fn responses_items(&self, id: &str) -> Vec<Value> {
        if !self.items.is_empty() {
            return self.items.clone();
        }
        vec![json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": self.text}],
            "content": [{"type": "reasoning_text", "text": self.text}]})]
    }
}

/// Whether the reasoning of earlier assistant turns goes back to the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningReplay {
    /// What vLLM and OpenAI expect: left out of Chat Completions requests (chat templates drop
    /// earlier turns' reasoning themselves); sent back to a Responses endpoint only when it gave
    /// `encrypted_content`, which it needs to continue the same chain of thought.
    #[default]
    Auto,
    /// Always sent back, for endpoints whose template reads earlier turns' reasoning.
    Keep,
    /// Never sent back.
    Drop,
}

impl ReasoningReplay {
    /// Whether `reasoning` goes back in a request to a Chat Completions (`responses == false`)
    /// or Responses endpoint.
    pub fn sends(self, reasoning: &Reasoning, responses: bool) -> bool {
        match self {
            ReasoningReplay::Keep => true,
            ReasoningReplay::Drop => false,
            ReasoningReplay::Auto => responses && reasoning.encrypted(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_wire_forms_read_back_to_the_same_parts() {
        let png = "data:image/png;base64,iVBORw0KGgo=";
        let parts = [
            Part::Text { text: "look".into() },
            Part::Image { url: png.into(), detail: Some("high".into()) },
            Part::Audio { data: "UklGRg==".into(), format: "wav".into() },
            Part::Raw { value: json!({"type": "file", "file": {"file_id": "f1"}}) },
        ];
        for part in &parts {
            assert_eq!(&Part::from_json(&part.to_chat_json()), part);
            assert_eq!(&Part::from_json(&part.to_responses_json(false)), part);
        }
        assert_eq!(
            Part::from_json(&json!({"type": "image_url", "image_url": png})),
            Part::Image { url: png.into(), detail: None }
        );
    }

    #[test]
    fn problems_name_unknown_types_and_broken_data_urls() {
        assert_eq!(Part::Image { url: "data:image/png;base64,iVBORw0KGgo=".into(), detail: None }.problem(), None);
        assert_eq!(Part::Image { url: "https://x/y.png".into(), detail: None }.problem(), None);
        let broken = Part::Image { url: "data:image/png;base64,@@not base64@@".into(), detail: None };
        assert!(broken.problem().unwrap().contains("broken data URL"));
        assert!(Part::Image { url: "data:image/png,abc".into(), detail: None }.problem().is_some());
        let unknown = Part::from_json(&json!({"type": "hologram", "x": 1}));
        assert!(unknown.problem().unwrap().contains("`hologram`"));
        assert!(Part::Audio { data: "%%%".into(), format: "wav".into() }.problem().is_some());
    }

    #[test]
    fn descriptions_give_type_and_size_never_the_data() {
        // 1,400,000 base64 characters hold 1,050,000 bytes.
        let data = "A".repeat(1_400_000);
        let image = Part::Image { url: format!("data:image/png;base64,{data}"), detail: None };
        let text = image.describe();
        assert!(text.starts_with("image (image/png data URL, ") && text.ends_with("MiB)"), "{text}");
        assert!(text.len() < 64);
        assert_eq!(Part::Text { text: "héllo".into() }.describe(), "text (5 chars)");
    }

    #[test]
    fn reasoning_is_read_from_each_spelling() {
        let old = Reasoning::from_chat_message(&json!({"reasoning_content": "a", "content": "x"})).unwrap();
        assert_eq!((old.text.as_str(), old.spelling), ("a", ReasoningSpelling::ReasoningContent));
        let new = Reasoning::from_chat_message(&json!({"reasoning": "b"})).unwrap();
        assert_eq!((new.text.as_str(), new.spelling.chat_field()), ("b", "reasoning"));
        assert!(Reasoning::from_chat_message(&json!({"reasoning": null, "reasoning_content": ""})).is_none());
        let both = Reasoning::from_chat_message(&json!({"reasoning": "b", "reasoning_content": "b"})).unwrap();
        assert_eq!(both.spelling, ReasoningSpelling::Reasoning, "the newer field is the one sent back");
        let item = json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "c"}],
            "encrypted_content": "gAAA"});
        let responses = Reasoning::from_responses_items(vec![item.clone()]).unwrap();
        assert_eq!(responses.text, "c");
        assert!(responses.encrypted());
        assert_eq!(responses.responses_items("rs_9"), vec![item]);
        assert!(ReasoningReplay::Auto.sends(&responses, true));
        assert!(!ReasoningReplay::Auto.sends(&responses, false));
        assert!(!ReasoningReplay::Auto.sends(&new, true));
        assert!(ReasoningReplay::Keep.sends(&new, false));
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let key = prop_oneof![
            Just("type".to_owned()),
            Just("text".to_owned()),
            Just("image_url".to_owned()),
            Just("url".to_owned()),
            Just("detail".to_owned()),
            Just("input_audio".to_owned()),
            Just("data".to_owned()),
            Just("format".to_owned()),
            Just("summary".to_owned()),
            Just("encrypted_content".to_owned()),
            "[a-z_]{1,8}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            prop_oneof![
                Just("text".to_owned()),
                Just("input_image".to_owned()),
                Just("image_url".to_owned()),
                Just("input_audio".to_owned()),
                Just("data:image/png;base64,".to_owned()),
                ".{0,12}"
            ]
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 5, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((key.clone(), inner), 0..5)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Any JSON reads as parts without a panic, and nothing is lost: each part written back
        /// in its own form reads back the same.
        #[test]
        fn any_content_reads_as_parts_and_round_trips(content in json_value()) {
            for part in Part::list_from_json(&content) {
                proptest::prop_assert_eq!(&Part::from_json(&part.to_chat_json()), &part);
                let _ = (part.describe(), part.problem());
            }
            let _ = Reasoning::from_chat_message(&content);
            if let Value::Array(items) = &content {
                let _ = Reasoning::from_responses_items(items.clone()).map(|r| r.encrypted());
            }
        }
    }
}
