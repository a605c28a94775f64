//! The mock domain: tasks and users on the agent's side, a notification inbox on the user's.
//! Models, tools and helpers mirror tau2's `domains/mock`; it never touches another domain.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::args::Args;
use crate::domains::{model, read_json, set_model};
use crate::error::Tau2Error;
use crate::ordered_map::OrderedMap;
use crate::pyjson::Py;
use crate::toolkit::{DomainState, Out, Requestor, ToolError, ToolResult};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub task_id: String,
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    pub user_id: String,
    pub name: String,
    pub tasks: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MockDb {
    pub tasks: OrderedMap<Task>,
    pub users: OrderedMap<User>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    pub notification_id: String,
    pub message: String,
    #[serde(default = "unread")]
    pub status: String,
    #[serde(default)]
    pub task_id: Option<String>,
}

fn unread() -> String {
    "unread".into()
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MockUserDb {
    #[serde(default)]
    pub notifications: OrderedMap<Notification>,
}

#[derive(Debug, Clone)]
pub struct MockState {
    pub db: MockDb,
    pub user_db: MockUserDb,
}

impl MockState {
    pub fn load(dir: &Path) -> Result<MockState, Tau2Error> {
        Ok(MockState { db: read_json(&dir.join("db.json"))?, user_db: read_json(&dir.join("user_db.json"))? })
    }

    fn create_task(&mut self, args: &Args) -> ToolResult {
        let user_id = args.str("user_id")?;
        let title = args.str("title")?;
        let description = args.opt_str("description")?;
        if !self.db.users.contains_key(&user_id) {
            return Err(ToolError::new(format!("User {user_id} not found")));
        }
        let task_id = format!("task_{}", self.db.tasks.len() + 1);
        let task = Task { task_id: task_id.clone(), title, description, status: "pending".into() };
        self.db.tasks.insert(task_id.clone(), task.clone());
        if let Some(user) = self.db.users.get_mut(&user_id) {
            user.tasks.push(task_id);
        }
        Ok(model(&task))
    }

    fn update_task_status(&mut self, args: &Args) -> ToolResult {
        let task_id = args.str("task_id")?;
        let status = args.str("status")?;
        let task =
            self.db.tasks.get_mut(&task_id).ok_or_else(|| ToolError::new(format!("Task {task_id} not found")))?;
        task.status = status;
        Ok(model(task))
    }

    fn dismiss_notification(&mut self, args: &Args) -> ToolResult {
        let id = args.str("notification_id")?;
        let n = self
            .user_db
            .notifications
            .get_mut(&id)
            .ok_or_else(|| ToolError::new(format!("Notification {id} not found")))?;
        n.status = "read".into();
        Ok(Out::Str(format!("Notification {id} dismissed")))
    }

    fn add_notification(&mut self, args: &Args) -> ToolResult {
        let notification = Notification {
            notification_id: args.str("notification_id")?,
            message: args.str("message")?,
            status: unread(),
            task_id: args.opt_str("task_id")?,
        };
        self.user_db.notifications.insert(notification.notification_id.clone(), notification.clone());
        Ok(model(&notification))
    }
}

fn boolean(b: bool) -> ToolResult {
    Ok(Out::Json(Py::Bool(b)))
}

impl DomainState for MockState {
    fn clone_box(&self) -> Box<dyn DomainState> {
        Box::new(self.clone())
    }

    fn call(&mut self, toolkit: Requestor, name: &str, args: &Args) -> Option<ToolResult> {
        Some(match (toolkit, name) {
            (Requestor::Assistant, "create_task") => self.create_task(args),
            (Requestor::Assistant, "get_users") => Ok(model(&self.db.users.values().collect::<Vec<_>>())),
            (Requestor::Assistant, "update_task_status") => self.update_task_status(args),
            (Requestor::Assistant, "transfer_to_human_agents") => Ok(Out::Str("Transfer successful".into())),
            (Requestor::Assistant, "assert_number_of_tasks") => (|| {
                let user_id = args.str("user_id")?;
                let expected = args.int("expected_number")?;
                let user =
                    self.db.users.get(&user_id).ok_or_else(|| ToolError::new(format!("User {user_id} not found")))?;
                boolean(user.tasks.len() as i64 == expected)
            })(),
            (Requestor::Assistant, "assert_task_status") => (|| {
                let task_id = args.str("task_id")?;
                let expected = args.str("expected_status")?;
                let task =
                    self.db.tasks.get(&task_id).ok_or_else(|| ToolError::new(format!("Task {task_id} not found")))?;
                boolean(task.status == expected)
            })(),
            (Requestor::User, "check_notifications") => {
                Ok(model(&self.user_db.notifications.values().collect::<Vec<_>>()))
            }
            (Requestor::User, "dismiss_notification") => self.dismiss_notification(args),
            (Requestor::User, "add_notification") => self.add_notification(args),
            (Requestor::User, "assert_notification_status") => (|| {
                let id = args.str("notification_id")?;
                let expected = args.str("expected_status")?;
                let n = self
                    .user_db
                    .notifications
                    .get(&id)
                    .ok_or_else(|| ToolError::new(format!("Notification {id} not found")))?;
                boolean(n.status == expected)
            })(),
            _ => return None,
        })
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
        let Some(other) = other.as_any().downcast_ref::<MockState>() else { return false };
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
