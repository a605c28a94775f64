//! `parley init`'s scaffolds: the files of a custom environment a person can run at once (task
//! rows, a `parley.toml` with a composite reward, a tool server to start from, a README of next
//! steps), kept as files under `templates/init/` and filled in here.
//!
//! A `parley.toml` is read with its relative paths taken from the directory Parley runs in, so
//! the settings written here name the folder's files by absolute path: `parley run --settings
//! DIR/parley.toml` then works from anywhere.

use std::path::Path;

/// Where the scaffold's tools come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Tools {
    /// An MCP tool server over stdio (Python, standard library only), started by Parley.
    Mcp,
    /// A NeMo Gym resources server (Python, standard library only), started by you.
    Gym,
    /// No tools: single-turn questions.
    None,
}

impl Tools {
    /// The scaffold's files: name in the folder, template text.
    fn templates(self) -> &'static [(&'static str, &'static str)] {
        macro_rules! template {
            ($kind:literal, $name:literal) => {
                ($name, include_str!(concat!("../templates/init/", $kind, "/", $name)))
            };
        }
        match self {
            Tools::Mcp => &[
                template!("mcp", "tasks.jsonl"),
                template!("mcp", "parley.toml"),
                template!("mcp", "tools_server.py"),
                template!("mcp", "README.md"),
            ],
            Tools::Gym => &[
                template!("gym", "tasks.jsonl"),
                template!("gym", "parley.toml"),
                template!("gym", "resources_server.py"),
                template!("gym", "README.md"),
            ],
            Tools::None => {
                &[template!("none", "tasks.jsonl"), template!("none", "parley.toml"), template!("none", "README.md")]
            }
        }
    }

    /// What the tools are, in a few words.
    pub fn about(self) -> &'static str {
        match self {
            Tools::Mcp => "tools from an MCP server that Parley starts over stdio",
            Tools::Gym => "tools and a verifier from a NeMo Gym resources server",
            Tools::None => "no tools: single-turn questions",
        }
    }
}

/// One file of a scaffold.
#[derive(Debug, Clone, PartialEq)]
pub struct File {
    /// Its name inside the folder.
    pub name: &'static str,
    pub text: String,
    /// Whether it is a program to run (a tool server), so it is written executable.
    pub executable: bool,
}

/// The files of a scaffold for the folder `dir` (an absolute path), or why it cannot be made.
pub fn files(tools: Tools, dir: &Path) -> Result<Vec<File>, String> {
    let path = |name: &str| dir.join(name).display().to_string();
    // `mcp_stdio` is one command line split at whitespace, so the server's path cannot hold any.
    let server = path("tools_server.py");
    if tools == Tools::Mcp && server.contains(char::is_whitespace) {
        return Err(format!(
            "{}: an MCP server's command line is split at spaces, so its path cannot contain one: choose a folder \
             whose path has none",
            dir.display()
        ));
    }
    let values = [
        ("{{tasks}}", toml_string(&path("tasks.jsonl"))),
        ("{{db}}", toml_string(&path("parley.db"))),
        ("{{out}}", toml_string(&path("rollouts.jsonl"))),
        ("{{mcp_stdio}}", toml_string(&format!("python3 {server}"))),
    ];
    Ok(tools
        .templates()
        .iter()
        .map(|(name, template)| {
            let text = values.iter().fold((*template).to_owned(), |text, (key, value)| text.replace(key, value));
            File { name, text, executable: name.ends_with(".py") }
        })
        .collect())
}

/// `text` as a TOML string, quoted and escaped.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled_and_every_settings_file_parses() {
        for tools in [Tools::Mcp, Tools::Gym, Tools::None] {
            // A quote in the folder's name must come out escaped (an MCP server's path cannot
            // hold the space).
            let dir = if tools == Tools::Mcp { "/tmp/\"env\"" } else { "/tmp/my \"env\"" };
            for file in files(tools, Path::new(dir)).unwrap() {
                for key in ["{{tasks}}", "{{db}}", "{{out}}", "{{mcp_stdio}}"] {
                    assert!(!file.text.contains(key), "{tools:?} {}: {key} is left", file.name);
                }
                if file.name == "parley.toml" {
                    let table: toml::Table = toml::from_str(&file.text).unwrap();
                    assert_eq!(table["run"]["tasks"].as_str(), Some(format!("{dir}/tasks.jsonl").as_str()));
                }
                if file.name.ends_with(".jsonl") {
                    for row in file.text.lines() {
                        let row: serde_json::Value = serde_json::from_str(row).unwrap();
                        assert!(row["expected_answer"].is_string(), "{row}");
                    }
                }
            }
        }
    }

    #[test]
    fn an_mcp_server_path_with_a_space_is_refused() {
        assert!(files(Tools::Mcp, Path::new("/tmp/my env")).unwrap_err().contains("choose a folder"));
        assert!(files(Tools::None, Path::new("/tmp/my env")).is_ok());
    }
}
