//! The airline domain: flights, users and reservations, with tau2's `AirlineTools`. The
//! database hash sorts each reservation's passengers first, as tau2's `FlightDB.get_hash` does.
//! It never touches another domain.

mod model;
mod tools;

use std::path::Path;

use crate::args::Args;
use crate::domains::{read_json, set_model};
use crate::error::Tau2Error;
use crate::pyjson::Py;
use crate::toolkit::{DomainState, Requestor, ToolResult};

pub use model::FlightDb;

#[derive(Debug, Clone)]
pub struct AirlineState {
    pub db: FlightDb,
}

impl AirlineState {
    pub fn load(dir: &Path) -> Result<AirlineState, Tau2Error> {
        Ok(AirlineState { db: read_json(&dir.join("db.json"))? })
    }
}

impl DomainState for AirlineState {
    fn clone_box(&self) -> Box<dyn DomainState> {
        Box::new(self.clone())
    }

    fn call(&mut self, toolkit: Requestor, name: &str, args: &Args) -> Option<ToolResult> {
        match toolkit {
            Requestor::Assistant => tools::call(&mut self.db, name, args),
            Requestor::User => None,
        }
    }

    fn db(&self, toolkit: Requestor) -> Option<Py> {
        (toolkit == Requestor::Assistant).then(|| Py::from_serialize(&self.db))
    }

    fn same_db(&self, other: &dyn DomainState, toolkit: Requestor) -> bool {
        let Some(other) = other.as_any().downcast_ref::<AirlineState>() else { return false };
        match toolkit {
            Requestor::Assistant => self.db == other.db,
            Requestor::User => true,
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn set_db(&mut self, toolkit: Requestor, db: &Py) -> Result<(), String> {
        match toolkit {
            Requestor::Assistant => set_model(&mut self.db, db),
            Requestor::User => Err("the airline domain has no user database".into()),
        }
    }

    /// Passenger order is incidental to a reservation, so tau2 hashes each reservation's
    /// passengers sorted by their `json.dumps(..., sort_keys=True)`.
    fn canonical(&self, toolkit: Requestor) -> Option<String> {
        if toolkit != Requestor::Assistant {
            return None;
        }
        let mut db = serde_json::to_value(&self.db).expect("models serialize to JSON");
        if let Some(reservations) = db.get_mut("reservations").and_then(serde_json::Value::as_object_mut) {
            for reservation in reservations.values_mut() {
                if let Some(passengers) = reservation.get_mut("passengers").and_then(serde_json::Value::as_array_mut) {
                    passengers.sort_by_cached_key(crate::pyjson::canonical_value);
                }
            }
        }
        Some(crate::pyjson::canonical_value(&db))
    }
}
