//! Generated task files: rows in NeMo Gym's format for the environments whose tasks Parley can
//! make, the same rows for the same seed on every machine.

use parley_core::rng::SplitMix;
use serde_json::{Value, json};

/// The environments whose tasks Parley can generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Generator {
    /// NeMo Gym's `example_multi_step` rows.
    MultiStep,
    /// Single-step arithmetic questions with an `expected_answer`, for the math scorer.
    Arithmetic,
}

impl Generator {
    /// `count` rows of seed `seed`.
    pub fn rows(self, count: usize, seed: u64) -> Box<dyn Iterator<Item = Value> + Send> {
        match self {
            Generator::MultiStep => Box::new(environment_multi_step::generate(count, seed)),
            Generator::Arithmetic => Box::new((0..count).map(move |i| arithmetic(i, seed))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Generator::MultiStep => "multi-step",
            Generator::Arithmetic => "arithmetic",
        }
    }
}

/// One arithmetic question in NeMo Gym's row format: `a × b + c` or `a × b − c` with the
/// answer in `expected_answer`, its level (1 to 3, by the size of the numbers) in `level`.
/// Row `index` of seed `seed` is always the same row.
fn arithmetic(index: usize, seed: u64) -> Value {
    let mut rng = SplitMix::for_item(seed, index as u64);
    let level = 1 + rng.below(3);
    let size = 10u64.pow(level as u32);
    let (a, b, c) = (rng.below(size) as i64, rng.below(size) as i64, rng.below(size) as i64);
    let minus = rng.below(2) == 1;
    let answer = if minus { a * b - c } else { a * b + c };
    let sign = if minus { '-' } else { '+' };
    json!({
        "id": format!("arith-{seed}-{index}"),
        "responses_create_params": {"input": [{"role": "user", "content": format!(
            "Compute {a} * {b} {sign} {c}. Think briefly, then give the final answer as \\boxed{{N}}."
        )}]},
        "expected_answer": answer.to_string(),
        "level": level,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_rows_stand_alone_and_their_answers_are_right() {
        let rows: Vec<Value> = Generator::Arithmetic.rows(50, 7).collect();
        assert_eq!(rows[10], arithmetic(10, 7), "row 10 is the same cut from anywhere");
        for row in &rows {
            let question = row["responses_create_params"]["input"][0]["content"].as_str().unwrap();
            let words: Vec<&str> = question.trim_start_matches("Compute ").split(' ').take(5).collect();
            let [a, "*", b, sign, c] = words[..] else { panic!("{question}") };
            let (a, b, c): (i64, i64, i64) =
                (a.parse().unwrap(), b.parse().unwrap(), c.trim_end_matches('.').parse().unwrap());
            let answer = if sign == "-" { a * b - c } else { a * b + c };
            assert_eq!(row["expected_answer"], answer.to_string(), "{question}");
        }
        assert_ne!(Generator::Arithmetic.rows(1, 8).next(), rows.first().cloned(), "another seed, other rows");
    }
}
