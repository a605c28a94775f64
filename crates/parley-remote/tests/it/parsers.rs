//! Property tests: NeMo Gym configs of any shape are loaded or refused with a reason, and a
//! loaded config lists its server instances without panicking.

use parley_remote::launcher::config;
use proptest::prelude::*;

fn yaml_text() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        "[a-z_]{1,10}:".prop_map(String::from),
        "  [a-z_]{1,10}: [a-z0-9_./]{0,10}".prop_map(String::from),
        "    [a-z_]{1,10}:".prop_map(String::from),
        "      (entrypoint|host|port|domain): [a-z0-9_.]{0,10}".prop_map(String::from),
        Just("  resources_servers:".to_owned()),
        Just("- item".to_owned()),
        ".{0,20}",
    ];
    prop::collection::vec(line, 0..12).prop_map(|lines| lines.join("\n"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn any_config_text_loads_or_is_refused(text in yaml_text()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, &text).unwrap();
        match config::load(std::slice::from_ref(&path), dir.path()) {
            Ok(merged) => {
                let _ = config::instances(&merged);
            }
            Err(e) => prop_assert!(e.to_string().contains("config.yaml"), "{e}"),
        }
    }
}
