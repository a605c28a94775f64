//! The telecom domain: the carrier's database on the agent's side, the customer's phone on the
//! user's, and tau2's `sync_tools`, which after every call copies line status, roaming, data
//! allowance and payment requests between the two. It never touches another domain.

mod model;
mod tools;
mod user_model;
mod user_tools;

use crate::args::Args;
use crate::data::Data;
use crate::domains::{State, Toolkits};
use crate::error::Tau2Error;
use crate::ordered_map::toml_table_keys;
use crate::toolkit::{Requestor, ToolError, ToolResult};

pub use model::TelecomDb;
pub use user_model::TelecomUserDb;

pub struct Telecom;

pub fn load(data: &Data) -> Result<State<Telecom>, Tau2Error> {
    let mut db: TelecomDb = data.read_toml("telecom/db.toml")?;
    let mut user_db: TelecomUserDb = data.read_toml("telecom/user_db.toml")?;
    // Restore the files' key order, which the TOML parser drops and tau2 keeps.
    let text = data.read("telecom/db.toml")?;
    db.phone_number_aliases.reorder(&toml_table_keys(&text, "phone_number_aliases"));
    let text = data.read("telecom/user_db.toml")?;
    user_db.device.app_statuses.reorder(&toml_table_keys(&text, "device.app_statuses"));
    user_db.surroundings.signal_strength.reorder(&toml_table_keys(&text, "surroundings.signal_strength"));
    Ok(State { db, user_db: Some(user_db) })
}

impl Toolkits for Telecom {
    const NAME: &'static str = "telecom";
    const AGENT_DB_CLASS: &'static str = "TelecomDB";
    const USER_DB_FIELD: &'static str = "device";
    type Db = TelecomDb;
    type UserDb = TelecomUserDb;

    fn call(state: &mut State<Self>, toolkit: Requestor, name: &str, args: &Args) -> Option<ToolResult> {
        match toolkit {
            Requestor::Assistant => tools::call(&mut state.db, name, args),
            Requestor::User => user_tools::call(state.user_db.as_mut()?, name, args),
        }
    }

    fn sync_tools(state: &mut State<Self>) -> Result<(), ToolError> {
        let (db, Some(user_db)) = (&mut state.db, state.user_db.as_mut()) else { return Ok(()) };
        let Some(phone) = user_db.surroundings.phone_number.clone() else {
            return Ok(());
        };
        let line = tools::line_by_phone(db, &phone)
            .map_err(|_| ToolError::new(format!("Wrong scenario, line not found for phone number: {phone}")))?
            .clone();
        let surroundings = &mut user_db.surroundings;
        surroundings.line_active = line.status == "Active";
        surroundings.roaming_allowed = line.roaming_enabled;
        let plan = tools::plan(db, &line.plan_id).map_err(|_| {
            ToolError::new(format!("Wrong scenario, invalid plan id ({}) for the phone number {phone}", line.plan_id))
        })?;
        surroundings.mobile_data_usage_exceeded = line.data_used_gb >= plan.data_limit_gb + line.data_refueling_gb;

        if let Some(request) = surroundings.payment_request.clone()
            && request.paid
        {
            tools::bill_mut(db, &request.bill_id)?.status = "Paid".into();
            user_db.surroundings.payment_request = None;
        }
        if user_db.surroundings.payment_request.is_none() {
            let customer = tools::customer_by_phone(db, &phone)?;
            if let Some(bill) = tools::awaiting_payment(db, customer)?.first() {
                user_db.surroundings.payment_request = Some(user_model::PaymentRequest {
                    bill_id: bill.bill_id.clone(),
                    amount_due: bill.total_due,
                    paid: false,
                });
            }
        }
        Ok(())
    }
}
