//! `parley tasks`: write generated task files.

use std::io::Write;

use anyhow::Context;

use crate::cli::{Generator, TasksArgs};

pub fn tasks(args: TasksArgs) -> anyhow::Result<()> {
    let mut out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let (rows, kind): (Box<dyn Iterator<Item = serde_json::Value>>, &str) = match args.env {
        Generator::MultiStep => (Box::new(environment_multi_step::generate(args.count, args.seed)), "multi-step"),
        Generator::Arithmetic => (Box::new((0..args.count).map(|i| arithmetic(i, args.seed))), "arithmetic"),
    };
    for row in rows {
        serde_json::to_writer(&mut out, &row)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    if let Some(path) = &args.out {
        eprintln!("wrote {} {kind} tasks to {}", args.count, path.display());
    }
    Ok(())
}

/// One arithmetic question in NeMo Gym's row format: `a × b + c` or `a × b − c` with the
/// answer in `expected_answer`, its level (1 to 3, by the size of the numbers) in `level`.
/// Row `index` of seed `seed` is always the same row.
fn arithmetic(index: usize, seed: u64) -> serde_json::Value {
    // SplitMix64 over (seed, index): every row stands alone, so a file can be cut anywhere.
    let mut state = seed ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next = move |below: u64| {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % below
    };
    let level = 1 + next(3);
    let size = 10u64.pow(level as u32);
    let (a, b, c) = (next(size) as i64, next(size) as i64, next(size) as i64);
    let minus = next(2) == 1;
    let answer = if minus { a * b - c } else { a * b + c };
    let sign = if minus { '-' } else { '+' };
    serde_json::json!({
        "id": format!("arith-{seed}-{index}"),
        "responses_create_params": {"input": [{"role": "user", "content": format!(
            "Compute {a} * {b} {sign} {c}. Think briefly, then give the final answer as \\boxed{{N}}."
        )}]},
        "expected_answer": answer.to_string(),
        "level": level,
    })
}
