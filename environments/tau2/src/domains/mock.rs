//! The mock domain: tasks and users on the agent's side, a notification inbox on the user's.
//! Models, tools and helpers mirror tau2's `domains/mock`; it never touches another domain.

use serde::{Deserialize, Serialize};

use crate::args::Args;
use crate::data::Data;
use crate::domains::{State, Toolkits, model};
use crate::error::Tau2Error;
use crate::ordered_map::OrderedMap;
use crate::pyjson::Py;
use crate::toolkit::{Out, Requestor, ToolError, ToolResult};
use crate::view::View;

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

pub struct Mock;

pub fn load(data: &Data) -> Result<State<Mock>, Tau2Error> {
    Ok(State { db: data.read_json("mock/db.json")?, user_db: Some(data.read_json("mock/user_db.json")?) })
}

fn create_task(db: &mut MockDb, args: &Args) -> ToolResult {
    let user_id = args.str("user_id")?;
    let title = args.str("title")?;
    let description = args.opt_str("description")?;
    if !db.users.contains_key(&user_id) {
        return Err(ToolError::new(format!("User {user_id} not found")));
    }
    let task_id = format!("task_{}", db.tasks.len() + 1);
    let task = Task { task_id: task_id.clone(), title, description, status: "pending".into() };
    db.tasks.insert(task_id.clone(), task.clone());
    if let Some(user) = db.users.get_mut(&user_id) {
        user.tasks.push(task_id);
    }
    Ok(model(&task))
}

fn update_task_status(db: &mut MockDb, args: &Args) -> ToolResult {
    let task_id = args.str("task_id")?;
    let status = args.str("status")?;
    let task = db.tasks.get_mut(&task_id).ok_or_else(|| ToolError::new(format!("Task {task_id} not found")))?;
    task.status = status;
    Ok(model(task))
}

fn dismiss_notification(user_db: &mut MockUserDb, args: &Args) -> ToolResult {
    let id = args.str("notification_id")?;
    let n = user_db.notifications.get_mut(&id).ok_or_else(|| ToolError::new(format!("Notification {id} not found")))?;
    n.status = "read".into();
    Ok(Out::Str(format!("Notification {id} dismissed")))
}

fn add_notification(user_db: &mut MockUserDb, args: &Args) -> ToolResult {
    let notification = Notification {
        notification_id: args.str("notification_id")?,
        message: args.str("message")?,
        status: unread(),
        task_id: args.opt_str("task_id")?,
    };
    user_db.notifications.insert(notification.notification_id.clone(), notification.clone());
    Ok(model(&notification))
}

fn boolean(b: bool) -> ToolResult {
    Ok(Out::Json(Py::Bool(b)))
}

impl Toolkits for Mock {
    const NAME: &'static str = "mock";
    const AGENT_DB_CLASS: &'static str = "MockDB";
    const USER_DB_FIELD: &'static str = "notifications";
    type Db = MockDb;
    type UserDb = MockUserDb;

    fn view(db: &MockDb) -> View<'_> {
        View::Object(vec![("tasks", View::Table(&db.tasks)), ("users", View::Table(&db.users))])
    }

    fn user_view(db: &MockUserDb) -> View<'_> {
        View::Object(vec![("notifications", View::Table(&db.notifications))])
    }

    fn call(state: &mut State<Self>, toolkit: Requestor, name: &str, args: &Args) -> Option<ToolResult> {
        let db = &mut state.db;
        let user_db = state.user_db.as_mut()?;
        Some(match (toolkit, name) {
            (Requestor::Assistant, "create_task") => create_task(db, args),
            (Requestor::Assistant, "get_users") => Ok(model(&db.users.values().collect::<Vec<_>>())),
            (Requestor::Assistant, "update_task_status") => update_task_status(db, args),
            (Requestor::Assistant, "transfer_to_human_agents") => Ok(Out::Str("Transfer successful".into())),
            (Requestor::Assistant, "assert_number_of_tasks") => (|| {
                let user_id = args.str("user_id")?;
                let expected = args.int("expected_number")?;
                let user = db.users.get(&user_id).ok_or_else(|| ToolError::new(format!("User {user_id} not found")))?;
                boolean(user.tasks.len() as i64 == expected)
            })(),
            (Requestor::Assistant, "assert_task_status") => (|| {
                let task_id = args.str("task_id")?;
                let expected = args.str("expected_status")?;
                let task = db.tasks.get(&task_id).ok_or_else(|| ToolError::new(format!("Task {task_id} not found")))?;
                boolean(task.status == expected)
            })(),
            (Requestor::User, "check_notifications") => Ok(model(&user_db.notifications.values().collect::<Vec<_>>())),
            (Requestor::User, "dismiss_notification") => dismiss_notification(user_db, args),
            (Requestor::User, "add_notification") => add_notification(user_db, args),
            (Requestor::User, "assert_notification_status") => (|| {
                let id = args.str("notification_id")?;
                let expected = args.str("expected_status")?;
                let n = user_db
                    .notifications
                    .get(&id)
                    .ok_or_else(|| ToolError::new(format!("Notification {id} not found")))?;
                boolean(n.status == expected)
            })(),
            _ => return None,
        })
    }
}
