//! The four domains' worlds. Each submodule owns one domain's database models (field order and
//! types as tau2's pydantic models, so dumps match byte for byte) and its toolkits' functions,
//! tools and helpers alike, with tau2's logic and messages. They never see sessions, messages
//! or scoring: only [`DomainState`] calls.

pub mod airline;
pub mod mock;
pub mod retail;
pub mod telecom;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::args::Args;
use crate::data::Data;
use crate::error::Tau2Error;
use crate::pyjson::Py;
use crate::toolkit::{DomainState, Requestor, ToolError, ToolResult};
use crate::view::View;

/// Loads a domain's initial world from its folder of the data.
pub fn load_state(domain: &str, data: &Data) -> Result<Box<dyn DomainState>, Tau2Error> {
    Ok(match domain {
        "mock" => Box::new(mock::load(data)?),
        "airline" => Box::new(State::<airline::Airline> { db: data.read_json("airline/db.json")?, user_db: None }),
        "retail" => Box::new(State::<retail::Retail> { db: data.read_json("retail/db.json")?, user_db: None }),
        "telecom" => Box::new(telecom::load(data)?),
        other => return Err(Tau2Error::UnknownDomain(other.to_owned())),
    })
}

/// What a domain brings to its world: the types of its two databases and its toolkits'
/// functions. Everything else a world does ([`DomainState`]) is the same for every domain.
pub trait Toolkits: Send + Sync + 'static {
    /// tau2's name of the domain, for messages.
    const NAME: &'static str;
    type Db: Clone + Serialize + DeserializeOwned + Send + Sync;
    /// `()` for a domain without a user toolkit (its `user_db` is always `None`).
    type UserDb: Clone + Serialize + DeserializeOwned + Send + Sync;

    /// Any function of a toolkit by name; `None` when it has none of that name.
    fn call(state: &mut State<Self>, toolkit: Requestor, name: &str, args: &Args) -> Option<ToolResult>;

    /// tau2's `Environment.sync_tools`.
    fn sync_tools(_state: &mut State<Self>) -> Result<(), ToolError> {
        Ok(())
    }

    /// The agent's database in the parts the scorer compares it by ([`View`]). By default one
    /// part, compared by its whole dump; a domain whose tables are `OrderedMap`s names them, so
    /// that the records a session left alone are skipped by pointer. The names are the fields'
    /// names in the dump (a test checks that the parts make up the dump exactly).
    fn view(db: &Self::Db) -> View<'_> {
        View::Value(db)
    }

    /// The user's database, as [`Toolkits::view`].
    fn user_view(db: &Self::UserDb) -> View<'_> {
        View::Value(db)
    }

    /// tau2's class of the agent database and the user-database field its user tools read
    /// first: what a user tool's `AttributeError` names when it runs on the agent database.
    const AGENT_DB_CLASS: &'static str;
    const USER_DB_FIELD: &'static str = "";
}

/// One domain's world: the agent's database and, in dual-control domains, the user's.
pub struct State<T: Toolkits + ?Sized> {
    pub db: T::Db,
    pub user_db: Option<T::UserDb>,
}

impl<T: Toolkits> DomainState for State<T> {
    fn clone_box(&self) -> Box<dyn DomainState> {
        Box::new(State::<T> { db: self.db.clone(), user_db: self.user_db.clone() })
    }

    fn call(&mut self, toolkit: Requestor, name: &str, args: &Args) -> Option<ToolResult> {
        T::call(self, toolkit, name, args)
    }

    fn sync_tools(&mut self) -> Result<(), ToolError> {
        T::sync_tools(self)
    }

    fn db(&self, toolkit: Requestor) -> Option<Py> {
        match toolkit {
            Requestor::Assistant => Some(Py::from_serialize(&self.db)),
            Requestor::User => self.user_db.as_ref().map(Py::from_serialize),
        }
    }

    fn set_db(&mut self, toolkit: Requestor, db: &Py) -> Result<(), String> {
        match (toolkit, &mut self.user_db) {
            (Requestor::Assistant, _) => set_model(&mut self.db, db),
            (Requestor::User, Some(user_db)) => set_model(user_db, db),
            (Requestor::User, None) => Err(format!("the {} domain has no user database", T::NAME)),
        }
    }

    fn canonical(&self, toolkit: Requestor) -> Option<String> {
        match toolkit {
            Requestor::Assistant => Some(Py::canonical(&self.db)),
            Requestor::User => self.user_db.as_ref().map(Py::canonical),
        }
    }

    fn view(&self, toolkit: Requestor) -> Option<View<'_>> {
        match toolkit {
            Requestor::Assistant => Some(T::view(&self.db)),
            Requestor::User => self.user_db.as_ref().map(T::user_view),
        }
    }

    fn user_tool_on_agent_db(&self) -> ToolError {
        ToolError::new(format!("'{}' object has no attribute '{}'", T::AGENT_DB_CLASS, T::USER_DB_FIELD))
    }
}

/// A model as tau2 returns it from a tool (`model_dump()` then `json.dumps`).
pub(crate) fn model<T: serde::Serialize>(value: &T) -> crate::toolkit::Out {
    crate::toolkit::Out::Json(crate::pyjson::Py::from_serialize(value))
}

pub(crate) fn set_model<T: DeserializeOwned>(slot: &mut T, db: &crate::pyjson::Py) -> Result<(), String> {
    *slot = db.to_model().map_err(|e| e.to_string())?;
    Ok(())
}
