//! The airline domain: flights, users and reservations, with tau2's `AirlineTools`. It never
//! touches another domain.

mod model;
mod tools;

use crate::args::Args;
use crate::domains::{State, Toolkits};
use crate::toolkit::{Requestor, ToolResult};
use crate::view::View;

pub use model::FlightDb;

pub struct Airline;

impl Toolkits for Airline {
    const NAME: &'static str = "airline";
    const AGENT_DB_CLASS: &'static str = "FlightDB";
    type Db = FlightDb;
    type UserDb = ();

    fn view(db: &FlightDb) -> View<'_> {
        View::Object(vec![
            ("flights", View::Table(&db.flights)),
            ("users", View::Table(&db.users)),
            ("reservations", View::Table(&db.reservations)),
        ])
    }

    fn call(state: &mut State<Self>, toolkit: Requestor, name: &str, args: &Args) -> Option<ToolResult> {
        match toolkit {
            Requestor::Assistant => tools::call(&mut state.db, name, args),
            Requestor::User => None,
        }
    }
}
