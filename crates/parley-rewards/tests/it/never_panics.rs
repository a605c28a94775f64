//! Bad input never panics: any text as an answer, a gold answer, a reply to a choice row, or a
//! `--reward` component; and a component is either read as what it names or refused by name.

use parley_rewards::{RewardSpec, ScorerKind};
use proptest::prelude::*;
use serde_json::json;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn math_takes_any_text(gold in "\\PC{0,40}", reply in "\\PC{0,80}") {
        let _ = parley_rewards::math::grade(&gold, &reply);
        let _ = parley_rewards::math::equivalent(&gold, &reply);
    }

    #[test]
    fn latex_shaped_text_never_panics(gold in "[-+*/^_!(){}\\[\\]\\\\a-z0-9.,%$ ]{0,30}",
                                      reply in "[-+*/^_!(){}\\[\\]\\\\a-z0-9.,%$ ]{0,30}") {
        let _ = parley_rewards::math::equivalent(&gold, &reply);
        let _ = parley_rewards::math::extract_answer(&reply);
    }

    #[test]
    fn choice_takes_any_reply_and_row(reply in "\\PC{0,80}", letter in "\\PC{0,3}", regex in "\\PC{0,12}") {
        let row = json!({"options": [{"A": "x"}, {letter.clone(): "y"}], "expected_answer": letter,
                         "template_metadata": {"output_regex": regex, "answer_prefix": "Final:"}});
        for mode in [None, Some(parley_rewards::choice::GradingMode::LenientAnswerColonMd)] {
            let _ = parley_rewards::choice::Choice { mode }.extract(&reply, &row);
        }
    }

    /// A component is read as the scorer it names, with checked options, or refused with a
    /// message that quotes the text or names the component.
    #[test]
    fn any_reward_component_text_parses_or_is_refused(text in prop_oneof![component_text(), "\\PC{0,40}"]) {
        match text.parse::<RewardSpec>() {
            Ok(spec) => {
                let scorer = text.split_once(':').map_or(text.as_str(), |(scorer, _)| scorer).trim();
                prop_assert_eq!(spec.scorer.as_str(), scorer, "{}", text);
                prop_assert!(spec.check().is_ok(), "{}: {:?}", text, spec);
            }
            Err(e) => {
                let said = e.to_string();
                let named = said.starts_with(&format!("--reward {text}: ")) || said.starts_with("reward `");
                prop_assert!(named, "{}: {}", text, said);
            }
        }
    }
}

/// `--reward` text near what a user writes: a scorer (known or not), then `KEY=VALUE` options
/// of every kind the scorers read, some of them nonsense.
fn component_text() -> impl Strategy<Value = String> {
    let known: Vec<String> = ScorerKind::ALL.iter().map(|k| k.as_str().to_owned()).collect();
    let scorer = prop_oneof![3 => proptest::sample::select(known), 1 => "[a-z]{1,8}"];
    let key = proptest::sample::select(vec![
        "weight",
        "cap",
        "name",
        "success",
        "budget",
        "pattern",
        "grading-mode",
        "contains",
        "field",
        "colour",
    ]);
    let value = prop_oneof![
        "-?[0-9]{1,3}(\\.[0-9]{1,2})?",
        "[a-z_]{0,10}",
        Just("true".to_owned()),
        Just("lenient_boxed".to_owned()),
        "[(\\[a-z.*+]{0,6}",
    ];
    let pair = prop_oneof![4 => (key, value).prop_map(|(k, v)| format!("{k}={v}")), 1 => "\\PC{0,8}"];
    (scorer, proptest::collection::vec(pair, 0..4))
        .prop_map(|(scorer, pairs)| if pairs.is_empty() { scorer } else { format!("{scorer}:{}", pairs.join(",")) })
}
