//! Data discovery, task conversion, splits, prompts and counts.

use environment_tau2::{Data, DomainOptions, GREETING, Tau2Error, load, user_guidelines};
use parley_core::Role;

use crate::common::{data, domain, folder};

#[test]
fn a_folder_given_is_read_and_none_means_the_built_in_copy() {
    let dir = data();
    assert_eq!(Data::new(Some(&dir)).unwrap(), Data::Folder(dir.clone()));
    let missing = dir.join("nope");
    assert!(matches!(Data::new(Some(&missing)), Err(Tau2Error::MissingDataDir(_))));
    assert_eq!(Data::new(None).unwrap(), Data::Embedded);
}

/// The built-in copy loads into the same domains as the folder: tasks, splits, prompts, tools,
/// initial databases (by tau2's hash) and the user's guidelines, solo variants included. With
/// `embedded::tests`, which compares the packed files with the folder's, this is what keeps the
/// copy from going stale.
#[test]
fn the_built_in_copy_loads_as_the_folder_does() {
    for name in environment_tau2::DOMAINS {
        for solo in [false, true] {
            let options = DomainOptions { solo, ..DomainOptions::default() };
            let (Ok(ours), theirs) = (load(&folder(), name, options.clone()), load(&Data::Embedded, name, options))
            else {
                continue;
            };
            let built_in = theirs.unwrap();
            assert_eq!(built_in.tasks, ours.tasks, "{name} solo={solo}");
            assert_eq!(built_in.splits, ours.splits, "{name}");
            assert_eq!(built_in.policy(), ours.policy(), "{name}");
            assert_eq!(built_in.counts(), ours.counts(), "{name}");
            assert_eq!(built_in.user_tools(), ours.user_tools(), "{name}");
            let hashes =
                |d: &environment_tau2::Domain| d.tau2_environment().open_session(&d.tasks[0]).unwrap().db_hashes();
            assert_eq!(hashes(&built_in), hashes(&ours), "{name}: the initial databases");
        }
    }
    assert_eq!(user_guidelines(&Data::Embedded).unwrap(), user_guidelines(&folder()).unwrap());
}

#[test]
fn every_domain_loads_with_its_counts_and_splits() {
    let dir = folder();
    let expected = [("mock", 4, 2, 10), ("airline", 14, 0, 50), ("retail", 16, 0, 114), ("telecom", 13, 30, 20)];
    for (name, tools, user_tools, tasks) in expected {
        let d = load(&dir, name, DomainOptions::default()).unwrap();
        let counts = d.counts();
        assert_eq!((counts.tools, counts.user_tools, counts.tasks), (tools, user_tools, tasks), "{name}");
        assert!(d.tasks.iter().all(|t| t.tools.len() == tools), "{name}: agent tools on every task");
    }
    let airline = load(&dir, "airline", DomainOptions::default()).unwrap();
    assert_eq!(airline.splits["train"].len(), 30);
    assert_eq!(airline.splits["test"].len(), 20);
    assert_eq!(airline.split("base").unwrap().len(), 50);
    let telecom = load(&dir, "telecom", DomainOptions::default()).unwrap();
    assert_eq!(telecom.splits.keys().collect::<Vec<_>>(), ["small"]);
    assert!(matches!(load(&dir, "banking", DomainOptions::default()), Err(Tau2Error::UnknownDomain(_))));
}

#[test]
fn tasks_keep_the_row_and_convert_the_history() {
    let mock = domain("mock");
    let fresh = mock.tasks.iter().find(|t| t.id == "create_task_1").unwrap();
    assert_eq!(fresh.messages.len(), 1);
    assert_eq!(fresh.messages[0].role, Role::Assistant);
    assert_eq!(fresh.messages[0].content.as_deref(), Some(GREETING));
    assert_eq!(fresh.row["id"], "create_task_1");

    let history = mock.tasks.iter().find(|t| t.id == "update_task_with_message_history").unwrap();
    let roles: Vec<Role> = history.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::Assistant]);
    assert_eq!(history.messages[1].tool_calls[0].name, "create_task");
    assert_eq!(history.messages[2].tool_call_id.as_deref(), Some("call_1"));
}

#[test]
fn the_system_prompt_is_taus() {
    let mock = domain("mock");
    let policy = std::fs::read_to_string(data().join("mock/policy.md")).unwrap();
    let expected = format!(
        "<instructions>\nYou are a customer service agent that helps the user according to the <policy> provided below.\n\
         In each turn you can either:\n- Send a message to the user.\n- Make a tool call.\nYou cannot do both at the same time.\n\n\
         Try to be helpful and always follow the policy. Always make sure you generate valid JSON only.\n</instructions>\n\
         <policy>\n{policy}\n</policy>"
    );
    assert_eq!(mock.policy(), expected);
    let telecom = domain("telecom");
    assert!(telecom.policy().contains("</instructions>\n<policy>\n<main_policy>\n"));
    assert!(telecom.policy().ends_with("\n</tech_support_policy>\n</policy>"));
}

#[test]
fn solo_variants_exist_for_mock_and_telecom_only() {
    let dir = folder();
    let solo = DomainOptions { solo: true, ..DomainOptions::default() };
    let mock = load(&dir, "mock", solo.clone()).unwrap();
    assert!(!mock.tasks.is_empty());
    let first = &mock.tasks[0];
    assert_eq!(first.messages[0].role, Role::System);
    assert!(first.messages[0].content_str().contains("<ticket>\n"));
    assert!(
        first.tools.iter().any(|t| t.name == "done") && first.tools.iter().any(|t| t.name == "check_notifications")
    );
    assert!(load(&dir, "telecom", solo.clone()).is_ok());
    assert!(matches!(load(&dir, "airline", solo), Err(Tau2Error::Invalid(_))));
}
