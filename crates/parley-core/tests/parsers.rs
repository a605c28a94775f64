//! Property tests: the parsers of task rows, messages and stored names never panic, whatever
//! JSON they are given; a row they accept keeps what it was read from; a well-formed row reads
//! as the task it describes, and one broken in one place is refused with that place named.

use parley_core::nemo_gym::task_from_row;
use parley_core::{FailureClass, Message, Role, Termination, ToolCall};
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

/// A row as NeMo Gym writes one, and the task it must read as: instructions, an input that is a
/// text or a list of messages, calls and their outputs, tools, an id, and fields of its own.
fn well_formed_row() -> impl Strategy<Value = (Value, Vec<Message>, Vec<String>, Option<String>)> {
    let text = "\\PC{0,16}";
    let item = prop_oneof![
        (prop::sample::select(vec!["user", "system", "developer", "assistant"]), text).prop_map(|(role, content)| {
            let message = Message::text(Role::parse(role).unwrap(), content.clone());
            (json!({"role": role, "content": content}), message)
        }),
        ("[a-z_]{1,8}", "[a-z_]{1,12}", text).prop_map(|(id, name, arguments)| {
            let call = ToolCall { id: id.clone(), name: name.clone(), arguments: arguments.clone() };
            let item = json!({"type": "function_call", "call_id": id, "name": name, "arguments": arguments});
            (item, Message::assistant_calls(None, vec![call]))
        }),
        ("[a-z_]{1,8}", text).prop_map(|(id, output)| {
            let message = Message::tool_result(id.clone(), output.clone());
            (json!({"type": "function_call_output", "call_id": id, "output": output}), message)
        }),
    ];
    let input = prop_oneof![
        text.prop_map(|t: String| (json!(t), vec![Message::user(t)])),
        prop::collection::vec(item, 0..6).prop_map(|items| {
            let (items, messages): (Vec<Value>, Vec<Message>) = items.into_iter().unzip();
            (Value::Array(items), messages)
        }),
    ];
    let tools = proptest::option::of(prop::collection::vec(("[a-z_]{1,12}", any::<bool>()), 0..4));
    let id =
        proptest::option::of(prop_oneof!["[a-z0-9-]{1,10}".prop_map(Value::from), any::<u32>().prop_map(Value::from)]);
    (proptest::option::of(text), input, tools, id, json_value()).prop_map(|(instructions, input, tools, id, extra)| {
        let (input, mut messages) = input;
        let mut params = json!({"input": input});
        if let Some(instructions) = &instructions {
            params["instructions"] = json!(instructions);
            messages.insert(0, Message::system(instructions.clone()));
        }
        let mut names = Vec::new();
        if let Some(tools) = tools {
            // Both spellings of a tool: Responses' flat one and Chat Completions' nested one.
            let tools: Vec<Value> = tools
                .into_iter()
                .map(|(name, nested)| {
                    names.push(name.clone());
                    let function = json!({"name": name, "parameters": {"type": "object"}});
                    if nested { json!({"type": "function", "function": function}) } else { function }
                })
                .collect();
            params["tools"] = Value::Array(tools);
        }
        let mut row = json!({"responses_create_params": params, "extra": extra});
        let id = id.map(|id| {
            let text = id.as_str().map_or_else(|| id.to_string(), str::to_owned);
            row["id"] = id;
            text
        });
        (row, messages, names, id)
    })
}

/// One way to break a well-formed row, and a word its error must name.
#[derive(Debug, Clone)]
enum Break {
    /// No `responses_create_params`.
    NoParams,
    /// An `input` that is neither a text nor a list.
    Input(Value),
    /// An input item with no `role` (nor a `type` that needs none).
    ItemWithoutRole,
    /// A `function_call` item without its `name`.
    CallWithoutName,
    /// `tools` that are not a list.
    ToolsNotAList(Value),
    /// A tool with no `name`.
    ToolWithoutName,
}

fn a_break() -> impl Strategy<Value = Break> {
    let not_a_list = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        Just(json!({"role": "user"})),
    ];
    prop_oneof![
        Just(Break::NoParams),
        not_a_list.clone().prop_map(Break::Input),
        Just(Break::ItemWithoutRole),
        Just(Break::CallWithoutName),
        not_a_list.prop_filter("null tools are no tools", |v| !v.is_null()).prop_map(Break::ToolsNotAList),
        Just(Break::ToolWithoutName),
    ]
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

    /// Whatever a row's request holds, it is read only when its `input` is a text or a list,
    /// and a refusal names the part of the row at fault.
    #[test]
    fn a_row_is_read_only_with_an_input_it_can_read(params in json_value(), extra in json_value()) {
        let row = json!({"responses_create_params": params, "extra": extra});
        match task_from_row(0, row.clone()) {
            Ok(task) => {
                prop_assert!(matches!(params.get("input"), Some(Value::String(_) | Value::Array(_))), "{}", params);
                prop_assert_eq!(task.row, row);
            }
            Err(e) => {
                let said = e.to_string();
                let named = ["`responses_create_params", "input item", "tool "].iter().any(|part| said.contains(part));
                prop_assert!(named, "{}", said);
            }
        }
    }

    /// A well-formed row reads as the task it describes: its opening messages in order, its
    /// tools in order, its id (or its index without one), and the row itself.
    #[test]
    fn a_well_formed_row_reads_as_the_task_it_describes(
        (row, messages, tools, id) in well_formed_row(),
        index in 0usize..1000,
    ) {
        let task = task_from_row(index, row.clone());
        prop_assert!(task.is_ok(), "{:?}: {}", task, row);
        let task = task.unwrap();
        prop_assert_eq!(&task.messages, &messages);
        prop_assert_eq!(task.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>(), tools);
        prop_assert_eq!(task.id, id.unwrap_or_else(|| index.to_string()));
        prop_assert_eq!(task.index, index);
        prop_assert_eq!(task.row, row);
    }

    /// A well-formed row broken in one place is refused, and the refusal says where.
    #[test]
    fn a_row_broken_in_one_place_is_refused_by_name((row, ..) in well_formed_row(), broken in a_break()) {
        let mut row = row;
        let params = &mut row["responses_create_params"];
        let named = match &broken {
            Break::NoParams => {
                row.as_object_mut().unwrap().remove("responses_create_params");
                "`responses_create_params`".to_owned()
            }
            Break::Input(value) => {
                params["input"] = value.clone();
                "`responses_create_params.input`".to_owned()
            }
            Break::ItemWithoutRole => {
                let at = push_item(params, json!({"content": "hi"}));
                format!("input item {at}: an input message needs a `role`")
            }
            Break::CallWithoutName => {
                let at = push_item(params, json!({"type": "function_call", "call_id": "c", "arguments": "{}"}));
                format!("input item {at}: a `\"function_call\"` item needs a string `name`")
            }
            Break::ToolsNotAList(value) => {
                params["tools"] = value.clone();
                "`responses_create_params.tools` must be a list".to_owned()
            }
            Break::ToolWithoutName => {
                if !params["tools"].is_array() {
                    params["tools"] = json!([]);
                }
                let tools = params["tools"].as_array_mut().unwrap();
                tools.push(json!({"type": "function", "parameters": {}}));
                format!("tool {} has no `name`", tools.len() - 1)
            }
        };
        let read = task_from_row(0, row);
        prop_assert!(read.is_err(), "{:?} was read: {:?}", broken, read);
        let said = read.unwrap_err().to_string();
        prop_assert!(said.contains(&named), "{:?}: {} does not say {}", broken, said, named);
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

/// Adds `item` at the end of the row's input (made a list of its text first), and says where.
fn push_item(params: &mut Value, item: Value) -> usize {
    if let Some(text) = params["input"].as_str() {
        params["input"] = json!([{"role": "user", "content": text}]);
    }
    let items = params["input"].as_array_mut().expect("a well-formed row's input is a text or a list");
    items.push(item);
    items.len() - 1
}

/// The names the store keeps for terminations and failure classes.
fn stored_names() -> Vec<String> {
    let terminations = Termination::ALL.iter().map(|t| t.as_str().to_owned());
    terminations.chain(FailureClass::ALL.iter().map(|c| c.as_str().to_owned())).collect()
}
