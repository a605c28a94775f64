//! tau2's global guidelines for its simulated user, read from the data as
//! `tau2/user/user_simulator.py` reads them: `user_simulator/simulation_guidelines.md`, and
//! `simulation_guidelines_tools.md` for a user with tools of its own (dual control).

use crate::data::Data;
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

/// Reads tau2's user guidelines from the data's `user_simulator/`, or from beside a data folder
/// that is tau2's own `data/tau2/domains` (whose sibling is `data/tau2/user_simulator`).
pub fn user_guidelines(data: &Data) -> Result<UserGuidelines, Tau2Error> {
    let folder = [FOLDER.to_owned(), format!("../{FOLDER}")]
        .into_iter()
        .find(|f| data.exists(&format!("{f}/{PLAIN}")))
        .ok_or_else(|| Tau2Error::NoUserGuidelines(data.path(&format!("{FOLDER}/{PLAIN}"))))?;
    let guidelines = |name: &str| -> Result<String, Tau2Error> {
        Ok(python_text(&data.read(&format!("{folder}/{name}"))?).replace(PERSONA_MARK, ""))
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
        let read = user_guidelines(&Data::Folder(inside.clone())).unwrap();
        assert_eq!(read, UserGuidelines { plain: "plain\nrules\n".into(), tools: "tools".into() });

        // tau2's layout: data/tau2/domains beside data/tau2/user_simulator.
        let domains = inside.join("domains");
        std::fs::create_dir_all(&domains).unwrap();
        assert_eq!(user_guidelines(&Data::Folder(domains)).unwrap(), read);

        let err = user_guidelines(&Data::Folder(dir.path().to_owned())).unwrap_err();
        assert!(err.to_string().contains("simulation_guidelines.md"), "{err}");

        // The built-in copy has them in its own user_simulator/.
        let built_in = user_guidelines(&Data::Embedded).unwrap();
        assert!(built_in.plain.contains("customer") && built_in.tools.contains("tool"), "{built_in:?}");
    }
}
