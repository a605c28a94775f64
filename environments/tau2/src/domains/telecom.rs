//! The telecom domain: the carrier's database on the agent's side, the customer's phone on the
//! user's, and tau2's `sync_tools`, which after every call copies line status, roaming, data
//! allowance and payment requests between the two. It never touches another domain.

mod model;
mod tools;
mod user_model;
mod user_tools;

use std::path::Path;

use crate::args::Args;
use crate::domains::{read_toml, set_model};
use crate::error::Tau2Error;
use crate::ordered_map::toml_table_keys;
use crate::pyjson::Py;
use crate::toolkit::{DomainState, Requestor, ToolError, ToolResult};

pub use model::TelecomDb;
pub use user_model::TelecomUserDb;

#[derive(Debug, Clone)]
pub struct TelecomState {
    pub db: TelecomDb,
    pub user_db: TelecomUserDb,
}

impl TelecomState {
    pub fn load(dir: &Path) -> Result<TelecomState, Tau2Error> {
        let mut db: TelecomDb = read_toml(&dir.join("db.toml"))?;
        let mut user_db: TelecomUserDb = read_toml(&dir.join("user_db.toml"))?;
        // Restore the files' key order, which the TOML parser drops and tau2 keeps.
        let text = crate::domains::read(&dir.join("db.toml"))?;
        db.phone_number_aliases.reorder(&toml_table_keys(&text, "phone_number_aliases"));
        let text = crate::domains::read(&dir.join("user_db.toml"))?;
        user_db.device.app_statuses.reorder(&toml_table_keys(&text, "device.app_statuses"));
        user_db.surroundings.signal_strength.reorder(&toml_table_keys(&text, "surroundings.signal_strength"));
        Ok(TelecomState { db, user_db })
    }
}

impl DomainState for TelecomState {
    fn clone_box(&self) -> Box<dyn DomainState> {
        Box::new(self.clone())
    }

    fn call(&mut self, toolkit: Requestor, name: &str, args: &Args) -> Option<ToolResult> {
        match toolkit {
            Requestor::Assistant => tools::call(&mut self.db, name, args),
            Requestor::User => user_tools::call(&mut self.user_db, name, args),
        }
    }

    fn sync_tools(&mut self) -> Result<(), ToolError> {
        let Some(phone) = self.user_db.surroundings.phone_number.clone() else {
            return Ok(());
        };
        let line = tools::line_by_phone(&self.db, &phone)
            .map_err(|_| ToolError::new(format!("Wrong scenario, line not found for phone number: {phone}")))?
            .clone();
        let surroundings = &mut self.user_db.surroundings;
        surroundings.line_active = line.status == "Active";
        surroundings.roaming_allowed = line.roaming_enabled;
        let plan = tools::plan(&self.db, &line.plan_id).map_err(|_| {
            ToolError::new(format!("Wrong scenario, invalid plan id ({}) for the phone number {phone}", line.plan_id))
        })?;
        surroundings.mobile_data_usage_exceeded = line.data_used_gb >= plan.data_limit_gb + line.data_refueling_gb;

        if let Some(request) = surroundings.payment_request.clone()
            && request.paid
        {
            tools::bill_mut(&mut self.db, &request.bill_id)?.status = "Paid".into();
            self.user_db.surroundings.payment_request = None;
        }
        if self.user_db.surroundings.payment_request.is_none() {
            let customer = tools::customer_by_phone(&self.db, &phone)?;
            if let Some(bill) = tools::awaiting_payment(&self.db, customer)?.first() {
                self.user_db.surroundings.payment_request = Some(user_model::PaymentRequest {
                    bill_id: bill.bill_id.clone(),
                    amount_due: bill.total_due,
                    paid: false,
                });
            }
        }
        Ok(())
    }

    fn db(&self, toolkit: Requestor) -> Option<Py> {
        Some(match toolkit {
            Requestor::Assistant => Py::from_serialize(&self.db),
            Requestor::User => Py::from_serialize(&self.user_db),
        })
    }

    fn canonical(&self, toolkit: Requestor) -> Option<String> {
        Some(match toolkit {
            Requestor::Assistant => Py::canonical(&self.db),
            Requestor::User => Py::canonical(&self.user_db),
        })
    }

    fn same_db(&self, other: &dyn DomainState, toolkit: Requestor) -> bool {
        let Some(other) = other.as_any().downcast_ref::<TelecomState>() else { return false };
        match toolkit {
            Requestor::Assistant => self.db == other.db,
            Requestor::User => self.user_db == other.user_db,
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn set_db(&mut self, toolkit: Requestor, db: &Py) -> Result<(), String> {
        match toolkit {
            Requestor::Assistant => set_model(&mut self.db, db),
            Requestor::User => set_model(&mut self.user_db, db),
        }
    }
}
