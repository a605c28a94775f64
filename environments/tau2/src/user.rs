//! tau2's global guidelines for its simulated user, read from the data as
//! `tau2/user/user_simulator.py` reads them: `user_simulator/simulation_guidelines.md`, and
//! `simulation_guidelines_tools.md` for a user with tools of its own (dual control).

use std::path::Path;

use crate::domains::read;
use crate::error::Tau2Error;

/// Where the guidelines are, inside the data folder.
const FOLDER: &str = "user_simulator";
const PLAIN: &str = "simulation_guidelines.md";
const TOOLS: &str = "simulation_guidelines_tools.md";

/// What tau2's default persona config (`PersonaConfig()`, which adds nothing) replaces in the
/// guidelines.
const PERSONA_MARK: &str = "<PERSONA_GUIDELINES>";

/// tau2's user guidelines, as its `UserSimulator` puts them in its system prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserGuidelines {
    /// For a user without tools.
    pub plain: String,
    /// For a user with tools.
    pub tools: String,
}

/// Reads tau2's user guidelines from `<data_dir>/user_simulator/`, or from beside the data folder
/// when it is tau2's own `data/tau2/domains` (whose sibling is `data/tau2/user_simulator`).
pub fn user_guidelines(data_dir: &Path) -> Result<UserGuidelines, Tau2Error> {
    let folder = [data_dir.join(FOLDER), data_dir.join("..").join(FOLDER)]
        .into_iter()
        .find(|f| f.join(PLAIN).is_file())
        .ok_or_else(|| Tau2Error::NoUserGuidelines(data_dir.join(FOLDER).join(PLAIN)))?;
    let guidelines = |name: &str| -> Result<String, Tau2Error> {
        Ok(python_text(&read(&folder.join(name))?).replace(PERSONA_MARK, ""))
    };
    Ok(UserGuidelines { plain: guidelines(PLAIN)?, tools: guidelines(TOOLS)? })
}

/// A file's text as Python's `open(path, "r").read()` gives it: universal newlines, so `\r\n`
/// and a lone `\r` read as `\n`.
fn python_text(text: &str) -> String {
    if text.contains('\r') { text.replace("\r\n", "\n").replace('\r', "\n") } else { text.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guidelines_are_found_inside_the_data_folder_or_beside_tau2s_domains() {
        let dir = tempfile::tempdir().unwrap();
        let inside = dir.path().join("data");
        std::fs::create_dir_all(inside.join(FOLDER)).unwrap();
        std::fs::write(inside.join(FOLDER).join(PLAIN), "plain\r\nrules<PERSONA_GUIDELINES>\n").unwrap();
        std::fs::write(inside.join(FOLDER).join(TOOLS), "tools").unwrap();
        let read = user_guidelines(&inside).unwrap();
        assert_eq!(read, UserGuidelines { plain: "plain\nrules\n".into(), tools: "tools".into() });

        // tau2's layout: data/tau2/domains beside data/tau2/user_simulator.
        let domains = inside.join("domains");
        std::fs::create_dir_all(&domains).unwrap();
        assert_eq!(user_guidelines(&domains).unwrap(), read);

        let err = user_guidelines(dir.path()).unwrap_err();
        assert!(err.to_string().contains("simulation_guidelines.md"), "{err}");
    }
}
