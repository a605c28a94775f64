//! The retail domain: products, users and orders, with tau2's `RetailTools`. It never touches
//! another domain.

mod model;
mod tools;

use crate::args::Args;
use crate::domains::{State, Toolkits};
use crate::toolkit::{Requestor, ToolResult};
use crate::view::View;

pub use model::RetailDb;

pub struct Retail;

impl Toolkits for Retail {
    const NAME: &'static str = "retail";
    const AGENT_DB_CLASS: &'static str = "RetailDB";
    type Db = RetailDb;
    type UserDb = ();

    fn view(db: &RetailDb) -> View<'_> {
        View::Object(vec![
            ("products", View::Table(&db.products)),
            ("users", View::Table(&db.users)),
            ("orders", View::Table(&db.orders)),
        ])
    }

    fn call(state: &mut State<Self>, toolkit: Requestor, name: &str, args: &Args) -> Option<ToolResult> {
        match toolkit {
            Requestor::Assistant => tools::call(&mut state.db, name, args),
            Requestor::User => None,
        }
    }
}
