//! The environments a run can name (`--env`), each with its tools and tasks as far as they are
//! known without starting anything: what `parley envs` lists.

use std::path::Path;

/// One environment of the catalogue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// As `--env` names it.
    pub name: String,
    /// The agent's tools and the simulated user's, when the environment brings its own.
    pub tools: Option<(usize, usize)>,
    /// How many tasks it brings (`any` for generated ones, `rows` for a task file's).
    pub tasks: String,
    /// What it is, or why it cannot be loaded.
    pub about: String,
    /// Whose data it brings and under which license, when it is built into Parley.
    pub credit: Option<&'static str>,
}

impl Listing {
    fn new(name: &str, tools: Option<(usize, usize)>, tasks: &str, about: impl Into<String>) -> Listing {
        Listing { name: name.to_owned(), tools, tasks: tasks.to_owned(), about: about.into(), credit: None }
    }
}

/// Every environment kind, tau2's domains read from `data_dir` (the front end's `--data-dir` or
/// `$PARLEY_TAU2_DATA`), else from the copy built into Parley.
pub fn catalogue(data_dir: Option<&Path>) -> Vec<Listing> {
    let mut listings = vec![Listing::new(
        "multi-step",
        Some((environment_multi_step::default_tools().len(), 0)),
        "any",
        "NeMo Gym's example_multi_step in-process; tasks from `parley tasks multi-step`",
    )];
    match environment_tau2::Data::new(data_dir) {
        Ok(data) => {
            let (from, credit) = match &data {
                environment_tau2::Data::Folder(dir) => (format!("from {}", dir.display()), None),
                environment_tau2::Data::Embedded => ("built in".to_owned(), Some(environment_tau2::Data::CREDIT)),
            };
            for name in environment_tau2::DOMAINS {
                let env = format!("tau2:{name}");
                listings.push(match environment_tau2::load(&data, name, Default::default()) {
                    Ok(domain) => {
                        let c = domain.counts();
                        let splits: Vec<String> =
                            domain.splits.iter().map(|(split, ids)| format!("{split} {}", ids.len())).collect();
                        let about = format!("tau2's {name} domain ({from}); splits: {}", splits.join(", "));
                        Listing {
                            credit,
                            ..Listing::new(&env, Some((c.tools, c.user_tools)), &c.tasks.to_string(), about)
                        }
                    }
                    Err(e) => Listing::new(&env, None, "-", format!("could not load: {e}")),
                });
            }
        }
        Err(e) => listings.push(Listing::new("tau2:*", None, "-", e.to_string())),
    }
    listings.extend([
        Listing::new("nemo-gym", None, "rows", "NeMo Gym resources servers: --config CONFIG.yaml or --server URL"),
        Listing::new("mcp", None, "rows", "MCP servers: --mcp-stdio COMMAND, --mcp-http URL"),
        Listing::new(
            "custom",
            None,
            "rows",
            "From parts: tasks from --tasks, tools from MCP or NeMo Gym (or none), --reward",
        ),
    ]);
    listings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_and_each_name_reads_back_as_an_environment() {
        let listings = catalogue(Some(Path::new("/nonexistent-tau2-data")));
        let names: Vec<&str> = listings.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["multi-step", "tau2:*", "nemo-gym", "mcp", "custom"]);
        for name in names.iter().filter(|n| !n.ends_with('*')) {
            assert!(name.parse::<crate::EnvKind>().is_ok(), "`--env {name}` is accepted");
        }
        assert!(listings[1].about.contains("/nonexistent-tau2-data"), "{}", listings[1].about);
    }

    #[test]
    fn without_a_folder_tau2s_domains_come_from_the_built_in_copy_with_their_credit() {
        let listings = catalogue(None);
        let tau2: Vec<(&str, &str)> = listings
            .iter()
            .filter(|l| l.name.starts_with("tau2:"))
            .map(|l| (l.name.as_str(), l.tasks.as_str()))
            .collect();
        assert_eq!(tau2, [("tau2:mock", "10"), ("tau2:airline", "50"), ("tau2:retail", "114"), ("tau2:telecom", "20")]);
        let airline = &listings[2];
        assert!(airline.about.contains("built in") && airline.credit.is_some_and(|c| c.contains("MIT")), "{airline:?}");
    }
}
