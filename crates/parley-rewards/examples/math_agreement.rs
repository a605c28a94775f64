//! Compares Parley's math scorer with math-verify's labels on answer pairs (`bench/math-agreement`
//! writes them): prints the agreement per source and the pairs on which the two differ.
//!
//!     cargo run -p parley-rewards --example math_agreement -- PAIRS.jsonl

use std::collections::BTreeMap;

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: math_agreement PAIRS.jsonl");
        std::process::exit(64);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(66);
        }
    };
    let mut by_source: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(pair) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let (gold, reply) = (pair["gold"].as_str().unwrap_or(""), pair["reply"].as_str().unwrap_or(""));
        let theirs = pair["math_verify"].as_bool().unwrap_or(false);
        let ours = parley_rewards::math::grade(gold, reply);
        let entry = by_source.entry(pair["source"].as_str().unwrap_or("?").to_owned()).or_default();
        entry.0 += 1;
        if ours == theirs {
            entry.1 += 1;
        } else {
            println!("differs: gold {gold:?} reply {reply:?}: parley {ours}, math-verify {theirs}");
        }
    }
    let (mut all, mut agreed) = (0, 0);
    println!("{:<12} {:>6} {:>8} {:>9}", "source", "pairs", "agree", "agreement");
    for (source, (n, a)) in &by_source {
        println!("{source:<12} {n:>6} {a:>8} {:>8.2}%", 100.0 * *a as f64 / *n as f64);
        all += n;
        agreed += a;
    }
    println!("{:<12} {all:>6} {agreed:>8} {:>8.2}%", "all", 100.0 * agreed as f64 / all.max(1) as f64);
}
