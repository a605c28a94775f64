//! An environment made of MCP servers: their tools, listed and called over stdio or streamable
//! HTTP, and a [`Scorer`] for the trajectory, since MCP has no verify.
//!
//! Owns: the MCP client connections. A shared server is connected once and serves every
//! session; a per-session server (stdio only) is started at `open` and stopped at `close`.
//! Tool results and tool errors (an `isError` result, or an MCP error answer such as an unknown
//! tool or bad arguments) are tool output text for the model; a server that dies or hangs is an
//! [`EnvError`] naming the server and the call. Never panics on what a server sends.

mod connection;
mod lines;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use parley_core::{
    EnvError, EnvSession, Environment, Message, Party, Reward, Task, Termination, ToolList, ToolOutput, ToolSpec,
};
use serde_json::Value;

use crate::error::RemoteError;
use crate::http::ServerOptions;
use connection::Connection;
use parley_rewards::{Context, Scorer};

/// How to reach one MCP server.
#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// A command Parley starts, speaking MCP on its stdin and stdout.
    Stdio { command: String, args: Vec<String>, env: Vec<(String, String)>, cwd: Option<PathBuf> },
    /// A streamable HTTP endpoint already running (`http://host:port/mcp`).
    Http { url: String },
}

/// One MCP server of an environment.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerSpec {
    /// Named in errors and logs.
    pub name: String,
    pub transport: McpTransport,
    /// Start a fresh server for every session (stdio only), so that no state leaks between
    /// sessions. Otherwise one connection serves every session.
    pub per_session: bool,
}

impl McpServerSpec {
    /// A stdio server started by `command args...`, shared by every session.
    pub fn stdio(name: &str, command: &str, args: &[&str]) -> McpServerSpec {
        McpServerSpec {
            name: name.into(),
            transport: McpTransport::Stdio {
                command: command.into(),
                args: args.iter().map(|a| (*a).to_owned()).collect(),
                env: Vec::new(),
                cwd: None,
            },
            per_session: false,
        }
    }

    /// A streamable HTTP server at `url`, shared by every session.
    pub fn http(name: &str, url: &str) -> McpServerSpec {
        McpServerSpec { name: name.into(), transport: McpTransport::Http { url: url.into() }, per_session: false }
    }

    /// One server per session (stdio only).
    pub fn per_session(mut self) -> McpServerSpec {
        self.per_session = true;
        self
    }
}

/// Tools from one or more MCP servers, scored by a [`Scorer`].
pub struct McpEnvironment {
    name: String,
    specs: Vec<McpServerSpec>,
    /// Connections of the shared servers, by position in `specs`.
    shared: Vec<Option<Arc<Connection>>>,
    scorer: Arc<dyn Scorer>,
    options: ServerOptions,
}

impl std::fmt::Debug for McpEnvironment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpEnvironment").field("name", &self.name).field("specs", &self.specs).finish_non_exhaustive()
    }
}

impl McpEnvironment {
    /// Connects the shared servers now (and lists their tools); per-session servers start at
    /// each `open`. `options` bounds every call: timeout, retries of the connection, and calls
    /// in flight per server.
    pub async fn connect(
        name: &str,
        servers: Vec<McpServerSpec>,
        scorer: Arc<dyn Scorer>,
        options: &ServerOptions,
    ) -> Result<McpEnvironment, RemoteError> {
        if servers.is_empty() {
            return Err(RemoteError::Config(format!("MCP environment `{name}` names no server")));
        }
        let mut shared = Vec::with_capacity(servers.len());
        for spec in &servers {
            if spec.per_session && matches!(spec.transport, McpTransport::Http { .. }) {
                return Err(RemoteError::Config(format!(
                    "MCP server `{}`: only stdio servers can be started per session",
                    spec.name
                )));
            }
            shared.push(if spec.per_session { None } else { Some(Arc::new(Connection::open(spec, options).await?)) });
        }
        let environment =
            McpEnvironment { name: name.into(), specs: servers, shared, scorer, options: options.clone() };
        // Two servers offering one tool name would make calls ambiguous: refuse early.
        let connections: Vec<Arc<Connection>> = environment.shared.iter().flatten().cloned().collect();
        routes(&connections)?;
        Ok(environment)
    }

    /// The tools of the shared servers (per-session servers list theirs at `open`).
    pub fn shared_tools(&self) -> Vec<ToolSpec> {
        self.shared.iter().flatten().flat_map(|c| c.tools().iter().cloned()).collect()
    }

    /// Stops the shared servers. Sessions still open fail their next call.
    pub async fn shutdown(&self) {
        for connection in self.shared.iter().flatten() {
            connection.close().await;
        }
    }
}

/// Tool name → the connection that offers it.
fn routes(connections: &[Arc<Connection>]) -> Result<HashMap<String, Arc<Connection>>, RemoteError> {
    let mut routes: HashMap<String, Arc<Connection>> = HashMap::new();
    for connection in connections {
        for tool in connection.tools() {
            if let Some(other) = routes.insert(tool.name.clone(), connection.clone()) {
                return Err(RemoteError::Config(format!(
                    "MCP servers `{}` and `{}` both offer a tool named `{}`",
                    other.name(),
                    connection.name(),
                    tool.name
                )));
            }
        }
    }
    Ok(routes)
}

#[async_trait]
impl Environment for McpEnvironment {
    fn name(&self) -> &str {
        &self.name
    }

    async fn open(&self, task: &Task) -> Result<Box<dyn EnvSession>, EnvError> {
        let mut connections = Vec::with_capacity(self.specs.len());
        let mut own = Vec::new();
        for (spec, shared) in self.specs.iter().zip(&self.shared) {
            match shared {
                Some(connection) => connections.push(connection.clone()),
                None => match Connection::open(spec, &self.options).await {
                    Ok(connection) => {
                        let connection = Arc::new(connection);
                        own.push(connection.clone());
                        connections.push(connection);
                    }
                    Err(e) => {
                        for connection in &own {
                            connection.close().await;
                        }
                        return Err(e.into());
                    }
                },
            }
        }
        let routes = routes(&connections)?;
        let tools = connections.iter().flat_map(|c| c.tools().iter().cloned()).collect::<ToolList>();
        Ok(Box::new(McpSession { task: task.clone(), tools, routes, own, scorer: self.scorer.clone() }))
    }
}

struct McpSession {
    task: Task,
    tools: ToolList,
    routes: HashMap<String, Arc<Connection>>,
    /// Per-session servers, stopped at close.
    own: Vec<Arc<Connection>>,
    scorer: Arc<dyn Scorer>,
}

#[async_trait]
impl EnvSession for McpSession {
    fn tools(&self) -> &ToolList {
        &self.tools
    }

    async fn call(&mut self, _party: Party, name: &str, arguments: &Value) -> Result<ToolOutput, EnvError> {
        let Some(connection) = self.routes.get(name) else {
            return Ok(ToolOutput::error(format!("no MCP server of this environment offers a tool named `{name}`")));
        };
        Ok(connection.call(name, arguments).await?)
    }

    async fn score(&mut self, transcript: &[Message], termination: Termination) -> Result<Reward, EnvError> {
        let cx = Context { task: &self.task, transcript, termination, env_reward: None };
        let score = self.scorer.score(&cx).await.map_err(|e| EnvError::new(e.to_string()))?;
        Ok(Reward { value: score.value, breakdown: score.details })
    }

    async fn close(&mut self) {
        for connection in self.own.drain(..) {
            connection.close().await;
        }
    }
}
