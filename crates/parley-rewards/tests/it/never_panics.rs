//! Bad input never panics: any text as an answer, a gold answer, a reply to a choice row, or a
//! `--reward` component.

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

    #[test]
    fn any_reward_component_text_parses_or_is_refused(text in "\\PC{0,40}") {
        let _ = text.parse::<parley_rewards::RewardSpec>();
    }
}
