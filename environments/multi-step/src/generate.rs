//! Writes any number of `example_multi_step` task rows, deterministically from a seed.

use parley_core::rng::SplitMix;
use serde_json::{Value, json};

use crate::{synonym_value, tools};

/// Terms and their synonyms. A task names one term; its answer is the values of some of the
/// term's synonyms, and the term itself is the minefield (reporting its value is a mistake).
const VOCABULARY: &[(&str, &[&str])] = &[
    ("Hot", &["Blazing", "Warm", "Scorching", "Heated", "Sweltering"]),
    ("Cold", &["Chilly", "Frigid", "Icy", "Freezing", "Cool"]),
    ("Fast", &["Quick", "Rapid", "Swift", "Speedy", "Brisk"]),
    ("Big", &["Large", "Huge", "Vast", "Enormous", "Massive"]),
    ("Happy", &["Cheerful", "Joyful", "Content", "Glad", "Merry"]),
    ("Sad", &["Gloomy", "Unhappy", "Sorrowful", "Downcast", "Blue"]),
    ("Bright", &["Brilliant", "Radiant", "Luminous", "Vivid", "Gleaming"]),
    ("Old", &["Ancient", "Aged", "Elderly", "Antique", "Vintage"]),
];

const QUESTIONS: &[&str] = &[
    "What factors make a place feel {term}, and how do they interact?",
    "How would you describe something that is {term}?",
    "Why do people call some days {term}?",
    "Which everyday things are usually {term}?",
];

const INSTRUCTIONS: &str = "# Instructions\nYou are an extraction agent. You will be provided a user query and you need to \
    use the tools provided to you to extract a list of synonym values. You will be provided with a bunch of synonyms \
    for each. For each term, please see if it is relevant to the user query. Get the values for the synonyms of the \
    relevant term, then call `extract_synonym_values` once with the values in the order the synonyms are listed.";

/// `count` task rows in NeMo Gym's format.
pub fn generate(count: usize, seed: u64) -> impl Iterator<Item = Value> {
    let mut rng = SplitMix::new(seed);
    let tools: Vec<Value> = tools()
        .iter()
        .map(|t| {
            json!({"type": "function", "name": t.name, "description": t.description,
                   "parameters": t.parameters, "strict": t.strict})
        })
        .collect();
    (0..count).map(move |id| {
        let (term, synonyms) = VOCABULARY[rng.below(VOCABULARY.len() as u64) as usize];
        let first = rng.below(synonyms.len() as u64) as usize;
        let second = (first + 1 + rng.below(synonyms.len() as u64 - 1) as usize) % synonyms.len();
        let chosen = [synonyms[first], synonyms[second]];
        let listing: Vec<String> = VOCABULARY
            .iter()
            .map(|(t, s)| {
                let shown: Vec<&str> = if *t == term { chosen.to_vec() } else { s[..2].to_vec() };
                format!("- {t}: {}", shown.join(", "))
            })
            .collect();
        let question = QUESTIONS[rng.below(QUESTIONS.len() as u64) as usize].replace("{term}", &term.to_lowercase());
        json!({
            "id": id,
            "responses_create_params": {
                "input": [
                    {"role": "system", "content": format!("{INSTRUCTIONS}\n\n# Terms and synonyms\n{}", listing.join("\n"))},
                    {"role": "user", "content": question},
                ],
                "tools": tools,
                "parallel_tool_calls": false,
            },
            "expected_synonyms": chosen,
            "expected_synonym_values": chosen.map(synonym_value),
            "minefield_label": term,
            "minefield_label_value": synonym_value(term),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_core::nemo_gym::task_from_row;

    #[test]
    fn rows_are_deterministic_valid_tasks() {
        let a: Vec<Value> = generate(20, 7).collect();
        let b: Vec<Value> = generate(20, 7).collect();
        assert_eq!(a, b);
        assert_ne!(a, generate(20, 8).collect::<Vec<_>>());
        for (i, row) in a.into_iter().enumerate() {
            let values = row["expected_synonym_values"].clone();
            let names = row["expected_synonyms"].clone();
            assert_ne!(names[0], names[1]);
            assert_eq!(values[0], synonym_value(names[0].as_str().unwrap()));
            let task = task_from_row(i, row).unwrap();
            assert_eq!(task.tools.len(), 2);
            assert_eq!(task.messages.len(), 2);
        }
    }

    #[test]
    fn warm_is_worth_407_as_in_nemo_gym() {
        assert_eq!(synonym_value("Warm"), 407);
        assert_eq!(synonym_value("Blazing"), 711);
    }
}
