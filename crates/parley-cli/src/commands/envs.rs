//! `parley envs`: what environments there are, with their tools and task counts.

use std::io::Write;

use crate::cli::EnvsArgs;

pub fn envs(args: EnvsArgs) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{:<14}  {:>5}  {:>10}  {:>6}  about", "env", "tools", "user tools", "tasks")?;
    let multi = environment_multi_step::tools().len();
    writeln!(
        out,
        "{:<14}  {:>5}  {:>10}  {:>6}  NeMo Gym's example_multi_step in-process; tasks from `parley tasks multi-step`",
        "multi-step", multi, 0, "any"
    )?;
    match environment_tau2::data_dir(args.data_dir.as_deref()) {
        Ok(dir) => {
            for name in environment_tau2::DOMAINS {
                match environment_tau2::load(&dir, name, Default::default()) {
                    Ok(domain) => {
                        let c = domain.counts();
                        let splits: Vec<String> =
                            domain.splits.iter().map(|(split, ids)| format!("{split} {}", ids.len())).collect();
                        writeln!(
                            out,
                            "{:<14}  {:>5}  {:>10}  {:>6}  tau2's {name} domain; splits: {}",
                            format!("tau2:{name}"),
                            c.tools,
                            c.user_tools,
                            c.tasks,
                            splits.join(", ")
                        )?;
                    }
                    Err(e) => writeln!(out, "{:<14}  could not load: {e}", format!("tau2:{name}"))?,
                }
            }
        }
        Err(e) => writeln!(out, "{:<14}  {e}", "tau2:*")?,
    }
    writeln!(
        out,
        "{:<14}  {:>5}  {:>10}  {:>6}  NeMo Gym resources servers: --config CONFIG.yaml or --server URL",
        "nemo-gym", "-", "-", "rows"
    )?;
    writeln!(
        out,
        "{:<14}  {:>5}  {:>10}  {:>6}  MCP servers: --mcp-stdio COMMAND, --mcp-http URL",
        "mcp", "-", "-", "rows"
    )?;
    writeln!(
        out,
        "{:<14}  {:>5}  {:>10}  {:>6}  From parts: tasks from --tasks, tools from MCP or NeMo Gym (or none), --reward",
        "custom", "-", "-", "rows"
    )?;
    Ok(())
}
