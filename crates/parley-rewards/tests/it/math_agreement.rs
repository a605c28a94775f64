//! The math scorer against math-verify's own verdicts on 3,648 answer pairs, labelled by
//! `bench/math-agreement/run` (generated pairs and the math rows NeMo Gym's wheel ships).

#[test]
fn the_math_scorer_agrees_with_math_verify_on_the_committed_sample() {
    let text = include_str!("../data/math_agreement.jsonl");
    let (mut pairs, mut agreed, mut right) = (0usize, 0usize, 0usize);
    for line in text.lines() {
        let pair: serde_json::Value = serde_json::from_str(line).expect("the sample is JSON lines");
        let theirs = pair["math_verify"].as_bool().expect("each pair has math-verify's verdict");
        let ours = parley_rewards::math::grade(pair["gold"].as_str().unwrap(), pair["reply"].as_str().unwrap());
        pairs += 1;
        agreed += usize::from(ours == theirs);
        right += usize::from(theirs);
    }
    let agreement = agreed as f64 / pairs as f64;
    eprintln!("math-verify agreement: {agreed}/{pairs} = {:.2}%", 100.0 * agreement);
    assert!(pairs >= 2000, "the sample has {pairs} pairs");
    // Both verdicts occur often, so agreement cannot come from always saying one of them.
    assert!(right > pairs / 4 && right < 3 * pairs / 4, "{right} of {pairs} pairs are right");
    // The figure docs/rewards.md reports: 3,641 of 3,648 (99.81%).
    assert!(agreement >= 0.998, "agreement {agreement}");
}
