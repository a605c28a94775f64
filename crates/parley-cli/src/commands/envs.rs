//! `parley envs`: what environments there are, with their tools and task counts.

use std::io::Write;

use parley_runtime::catalogue::catalogue;

use crate::cli::EnvsArgs;

pub fn envs(args: EnvsArgs) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{:<14}  {:>5}  {:>10}  {:>6}  about", "env", "tools", "user tools", "tasks")?;
    let listings = catalogue(args.data_dir.as_deref());
    for listing in &listings {
        let (tools, user_tools) =
            listing.tools.map_or_else(|| ("-".to_owned(), "-".to_owned()), |(a, u)| (a.to_string(), u.to_string()));
        writeln!(out, "{:<14}  {tools:>5}  {user_tools:>10}  {:>6}  {}", listing.name, listing.tasks, listing.about)?;
    }
    // Each credit once, after the table: the built-in data's origin and license.
    let mut credits: Vec<&str> = listings.iter().filter_map(|l| l.credit).collect();
    credits.dedup();
    for credit in credits {
        writeln!(out, "\n{credit}")?;
    }
    Ok(())
}
