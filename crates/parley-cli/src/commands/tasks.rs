//! `parley tasks`: write generated task files.

use std::io::Write;

use anyhow::Context;

use crate::cli::TasksArgs;

pub fn tasks(args: TasksArgs) -> anyhow::Result<()> {
    let mut out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    for row in args.env.rows(args.count, args.seed) {
        serde_json::to_writer(&mut out, &row)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    if let Some(path) = &args.out {
        eprintln!("wrote {} {} tasks to {}", args.count, args.env.name(), path.display());
    }
    Ok(())
}
