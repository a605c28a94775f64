//! One MCP client connection: started (stdio) or reached (streamable HTTP), its tools listed
//! once, calls bounded by a timeout and a concurrency limit, and a clean stop.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parley_core::{ToolOutput, ToolSpec};
use parley_http::{excerpt, secrets};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::{Peer, RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError};
use serde_json::Value;
use tokio::sync::{Mutex, Semaphore};

use super::lines::{LineLimit, TOO_LARGE};
use super::{McpServerSpec, McpTransport};
use crate::error::RemoteError;
use crate::http::ServerOptions;

pub(crate) struct Connection {
    name: String,
    peer: Peer<RoleClient>,
    service: Mutex<Option<RunningService<RoleClient, ()>>>,
    tools: Vec<ToolSpec>,
    limit: Arc<Semaphore>,
    timeout: Duration,
    /// The stdio server's process, stopped at close.
    child: Mutex<Option<tokio::process::Child>>,
    /// Bytes of one answer read at most, and whether an answer over it ended the stream.
    max_response_bytes: usize,
    overflowed: Arc<AtomicBool>,
}

impl Connection {
    pub async fn open(spec: &McpServerSpec, options: &ServerOptions) -> Result<Connection, RemoteError> {
        let label = label(spec);
        let overflowed = Arc::new(AtomicBool::new(false));
        let mut child = None;
        let service = match &spec.transport {
            McpTransport::Stdio { command, args, env, cwd } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
                if let Some(cwd) = cwd {
                    cmd.current_dir(cwd);
                }
                cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).kill_on_drop(true);
                let start_error = |cause: String| RemoteError::Connect {
                    server: label.clone(),
                    call: "start".into(),
                    attempts: 1,
                    cause,
                };
                let mut process = cmd.spawn().map_err(|e| start_error(e.to_string()))?;
                let (Some(stdout), Some(stdin)) = (process.stdout.take(), process.stdin.take()) else {
                    return Err(start_error("the server's stdin or stdout is not a pipe".into()));
                };
                child = Some(process);
                // Lines are bounded by `LineLimit`, which answers an oversized one at once; rmcp's
                // own bound would drop it silently and leave its call waiting.
                let stdout = LineLimit::new(stdout, options.max_response_bytes, overflowed.clone());
                let transport = AsyncRwTransport::new(stdout, stdin).with_max_line_length(usize::MAX);
                within(options.timeout, &label, "initialize", ().serve(transport)).await?
            }
            McpTransport::Http { url } => {
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                    config.max_json_response_size = options.max_response_bytes;
                    config.max_sse_event_size = options.max_response_bytes;
                    let transport = StreamableHttpClientTransport::from_config(config);
                    match within(options.timeout, &label, "initialize", ().serve(transport)).await {
                        Ok(service) => break service,
                        Err(e) if attempt > options.max_retries => {
                            return Err(match e {
                                RemoteError::Protocol { server, call, cause } => {
                                    RemoteError::Connect { server, call, attempts: attempt, cause }
                                }
                                other => other,
                            });
                        }
                        Err(_) => {
                            let wait = options.backoff_after(attempt);
                            tokio::time::sleep(wait).await;
                        }
                    }
                }
            }
        };
        let peer = service.peer().clone();
        let listed = within(options.timeout, &label, "tools/list", peer.list_all_tools()).await?;
        let tools = listed
            .into_iter()
            .map(|tool| ToolSpec {
                name: tool.name.to_string(),
                description: tool.description.as_deref().unwrap_or_default().to_owned(),
                parameters: Value::Object(tool.input_schema.as_ref().clone()),
                strict: false,
            })
            .collect();
        Ok(Connection {
            name: spec.name.clone(),
            peer,
            service: Mutex::new(Some(service)),
            tools,
            limit: Arc::new(Semaphore::new(options.max_concurrency.max(1))),
            timeout: options.timeout,
            child: Mutex::new(child),
            max_response_bytes: options.max_response_bytes,
            overflowed,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }

    /// Calls one tool. An MCP error answer (unknown tool, invalid arguments) is a tool error
    /// for the model; a dead, closed or hung server is a [`RemoteError`].
    pub async fn call(&self, tool: &str, arguments: &Value) -> Result<ToolOutput, RemoteError> {
        let label = format!("MCP server `{}`", self.name);
        let call = format!("tools/call `{tool}`");
        let Value::Object(arguments) = arguments else {
            return Ok(ToolOutput::error(format!("the arguments of `{tool}` must be a JSON object")));
        };
        let _permit = self.limit.acquire().await.map_err(|_| RemoteError::Protocol {
            server: label.clone(),
            call: call.clone(),
            cause: "the connection is closed".into(),
        })?;
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments.clone());
        // Open while the call is: a session whose time runs out now is the server's failure.
        let _open = parley_core::Deadline::current().map(|deadline| deadline.begin_call());
        let too_large = |label: String, call: String| RemoteError::Malformed {
            server: label,
            call,
            cause: format!(
                "the answer is larger than the limit of {} bytes; raise --max-response-bytes to accept it",
                self.max_response_bytes
            ),
            body: String::new(),
        };
        match tokio::time::timeout(self.timeout, self.peer.call_tool(params)).await {
            Err(_) => Err(RemoteError::Timeout { server: label, call, timeout: self.timeout, attempts: 1 }),
            Ok(Ok(result)) => Ok(output(&result)),
            Ok(Err(ServiceError::McpError(error))) if error.code.0 == TOO_LARGE => Err(too_large(label, call)),
            Ok(Err(ServiceError::McpError(error))) => {
                let message = secrets::redact(&error.message).into_owned();
                Ok(ToolOutput::error(format!("MCP error {}: {}", error.code.0, excerpt(&message))))
            }
            Ok(Err(_)) if self.overflowed.load(Ordering::SeqCst) => Err(too_large(label, call)),
            Ok(Err(error)) if body_too_large(&error) => Err(too_large(label, call)),
            Ok(Err(error)) => {
                let cause = excerpt(&secrets::redact(&error.to_string()));
                Err(RemoteError::Transport { server: label, call, attempts: 1, cause })
            }
        }
    }

    /// Ends the session with the server; a stdio server's process is stopped with it.
    pub async fn close(&self) {
        if let Some(mut service) = self.service.lock().await.take() {
            match service.close_with_timeout(Duration::from_secs(5)).await {
                Ok(Some(_)) => {}
                Ok(None) => tracing::warn!(server = %self.name, "the MCP connection did not close within 5 s"),
                Err(error) => tracing::warn!(server = %self.name, %error, "closing the MCP connection failed"),
            }
        }
        // Closing the connection closed the server's stdin; a server that does not exit on that
        // is stopped.
        if let Some(mut child) = self.child.lock().await.take()
            && tokio::time::timeout(Duration::from_secs(2), child.wait()).await.is_err()
        {
            let _ = child.kill().await;
        }
    }
}

/// The text a model reads for a tool result: the text blocks, other blocks as JSON, or the
/// structured content when there are no blocks.
fn output(result: &CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            other => serde_json::to_string(other).unwrap_or_default(),
        })
        .collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    // A server may quote a key Parley holds (one passed in its environment, say).
    let content = secrets::redact(&parts.join("\n")).into_owned();
    ToolOutput { content, is_error: result.is_error.unwrap_or(false), write: true }
}

/// Whether rmcp's streamable HTTP client refused an answer for its size
/// (`StreamableHttpResponseLimits`), somewhere in the error's chain of causes.
fn body_too_large(error: &ServiceError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = cause {
        if let Some(StreamableHttpError::ResponseBodyTooLarge { .. }) =
            error.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            return true;
        }
        cause = error.source();
    }
    false
}

fn label(spec: &McpServerSpec) -> String {
    match &spec.transport {
        McpTransport::Stdio { command, .. } => format!("MCP server `{}` (stdio: {command})", spec.name),
        McpTransport::Http { url } => format!("MCP server `{}` at {url}", spec.name),
    }
}

async fn within<T, E: std::fmt::Display>(
    timeout: Duration,
    label: &str,
    call: &str,
    future: impl Future<Output = Result<T, E>>,
) -> Result<T, RemoteError> {
    match tokio::time::timeout(timeout, future).await {
        Err(_) => Err(RemoteError::Timeout { server: label.into(), call: call.into(), timeout, attempts: 1 }),
        Ok(Err(e)) => Err(RemoteError::Protocol { server: label.into(), call: call.into(), cause: e.to_string() }),
        Ok(Ok(value)) => Ok(value),
    }
}
