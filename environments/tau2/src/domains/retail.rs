//! The retail domain: products, users and orders, with tau2's `RetailTools`. It never touches
//! another domain.

mod model;
mod tools;

use std::path::Path;

use crate::args::Args;
use crate::domains::{read_json, set_model};
use crate::error::Tau2Error;
use crate::pyjson::Py;
use crate::toolkit::{DomainState, Requestor, ToolResult};

pub use model::RetailDb;

#[derive(Debug, Clone)]
pub struct RetailState {
    pub db: RetailDb,
}

impl RetailState {
    pub fn load(dir: &Path) -> Result<RetailState, Tau2Error> {
        Ok(RetailState { db: read_json(&dir.join("db.json"))? })
    }
}

impl DomainState for RetailState {
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

    fn canonical(&self, toolkit: Requestor) -> Option<String> {
        (toolkit == Requestor::Assistant).then(|| Py::canonical(&self.db))
    }

    fn same_db(&self, other: &dyn DomainState, toolkit: Requestor) -> bool {
        let Some(other) = other.as_any().downcast_ref::<RetailState>() else { return false };
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
            Requestor::User => Err("the retail domain has no user database".into()),
        }
    }
}
