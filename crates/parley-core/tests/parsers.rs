//! Property tests: the parsers of task rows, messages and stored names never panic, whatever
//! JSON or text they are given, and a row they accept keeps what it was read from.

use parley_core::nemo_gym::task_from_row;
use parley_core::{FailureClass, Message, Termination};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Any JSON document, biased towards the keys the parsers look for.
fn json_value() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("responses_create_params".to_owned()),
        Just("input".to_owned()),
        Just("role".to_owned()),
        Just("content".to_owned()),
        Just("tools".to_owned()),
        Just("tool_calls".to_owned()),
        Just("type".to_owned()),
        Just("name".to_owned()),
        Just("parameters".to_owned()),
        Just("id".to_owned()),
        "[a-z_]{1,12}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop_oneof![Just("user".to_owned()), Just("function".to_owned()), ".{0,24}"].prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_json_row_is_a_task_or_a_named_error(row in json_value()) {
        match task_from_row(3, row.clone()) {
            Ok(task) => {
                prop_assert_eq!(task.index, 3);
                prop_assert_eq!(task.row, row);
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn rows_with_arbitrary_requests_never_panic(params in json_value(), extra in json_value()) {
        let _ = task_from_row(0, json!({"responses_create_params": params, "extra": extra}));
    }

    #[test]
    fn any_text_is_parsed_as_a_row_without_panicking(text in ".{0,200}") {
        if let Ok(row) = serde_json::from_str::<Value>(&text) {
            let _ = task_from_row(0, row);
        }
    }

    #[test]
    fn any_json_is_a_message_or_an_error(value in json_value()) {
        if let Ok(message) = serde_json::from_value::<Message>(value) {
            // What was read writes back and reads again as the same message.
            let again: Message = serde_json::from_value(serde_json::to_value(&message).unwrap()).unwrap();
            prop_assert_eq!(again, message);
        }
    }

    /// Every stored name reads back as the value it names, and a name that is one letter off
    /// (or any other text) reads as nothing: so the text in the store cannot be mistaken.
    #[test]
    fn stored_names_parse_only_to_themselves(
        name in proptest::sample::select(stored_names()),
        edit in proptest::option::of((0usize..40, "[a-z_]")),
        other in "[a-z_]{0,30}",
    ) {
        let text = match edit {
            Some((at, letter)) => {
                let mut text = name.clone();
                text.insert_str(at.min(text.len()), &letter);
                text
            }
            None => name.clone(),
        };
        for text in [text, other] {
            let known = stored_names().contains(&text);
            let termination = Termination::parse(&text);
            let class = FailureClass::parse(&text);
            prop_assert_eq!(termination.is_some() || class.is_some(), known, "{}", text);
            if let Some(t) = termination {
                prop_assert_eq!(t.as_str(), text.as_str());
            }
            if let Some(c) = class {
                prop_assert_eq!(c.as_str(), text.as_str());
            }
        }
    }
}

/// The names the store keeps for terminations and failure classes.
fn stored_names() -> Vec<String> {
    let terminations = Termination::ALL.iter().map(|t| t.as_str().to_owned());
    terminations.chain(FailureClass::ALL.iter().map(|c| c.as_str().to_owned())).collect()
}
