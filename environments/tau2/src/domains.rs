//! The four domains' worlds. Each submodule owns one domain's database models (field order and
//! types as tau2's pydantic models, so dumps match byte for byte) and its toolkits' functions,
//! tools and helpers alike, with tau2's logic and messages. They never see sessions, messages
//! or scoring: only [`DomainState`] calls.

pub mod airline;
pub mod mock;
pub mod retail;
pub mod telecom;

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::error::Tau2Error;
use crate::toolkit::DomainState;

/// Loads a domain's initial world from its data folder.
pub fn load_state(domain: &str, dir: &Path) -> Result<Box<dyn DomainState>, Tau2Error> {
    Ok(match domain {
        "mock" => Box::new(mock::MockState::load(dir)?),
        "airline" => Box::new(airline::AirlineState::load(dir)?),
        "retail" => Box::new(retail::RetailState::load(dir)?),
        "telecom" => Box::new(telecom::TelecomState::load(dir)?),
        other => return Err(Tau2Error::UnknownDomain(other.to_owned())),
    })
}

pub(crate) fn read(path: &Path) -> Result<String, Tau2Error> {
    std::fs::read_to_string(path).map_err(|source| Tau2Error::Io { path: path.to_owned(), source })
}

pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, Tau2Error> {
    serde_json::from_str(&read(path)?).map_err(|e| Tau2Error::Parse { path: path.to_owned(), message: e.to_string() })
}

pub(crate) fn read_toml<T: DeserializeOwned>(path: &Path) -> Result<T, Tau2Error> {
    toml::from_str(&read(path)?).map_err(|e| Tau2Error::Parse { path: path.to_owned(), message: e.to_string() })
}

/// A model as tau2 returns it from a tool (`model_dump()` then `json.dumps`).
pub(crate) fn model<T: serde::Serialize>(value: &T) -> crate::toolkit::Out {
    crate::toolkit::Out::Json(crate::pyjson::Py::from_serialize(value))
}

pub(crate) fn set_model<T: DeserializeOwned>(slot: &mut T, db: &crate::pyjson::Py) -> Result<(), String> {
    *slot = db.to_model().map_err(|e| e.to_string())?;
    Ok(())
}
