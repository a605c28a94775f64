//! Starts the servers a NeMo Gym config names, the way `gym env start` does (one process per
//! instance: `cwd` = the server's folder, `python app.py`, `NEMO_GYM_CONFIG_DICT` = the merged
//! config with every host and port filled in, `NEMO_GYM_CONFIG_PATH` = the instance name),
//! waits until each answers HTTP, and stops them.
//!
//! Owns: the server processes. Each runs in its own process group, so stopping it stops
//! whatever it spawned too; a dropped [`NemoGymServers`] kills them all, and a server whose
//! `parley` was killed outright stops too (see [`WHILE_PARLEY_LIVES`]). Never starts a
//! model server, an agent or an environment server unless asked: Parley plays those parts.
//! Never installs anything: the venv must already hold NeMo Gym (`.ci/setup-peers`).

pub mod config;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::process::{Child, Command};

use crate::error::RemoteError;
use crate::http::{HttpServer, ServerOptions};
use config::Instance;

/// How to start servers.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// The Python that has NeMo Gym installed (a venv's `bin/python`).
    pub python: PathBuf,
    /// Where `nemo_gym/` and `resources_servers/` live; asked from `python` when `None`.
    pub gym_root: Option<PathBuf>,
    /// The address servers listen on.
    pub host: String,
    /// How long to wait for every server to answer.
    pub ready_timeout: Duration,
    /// Where each server's stdout and stderr go (`<instance>.log`); a fresh temporary folder
    /// when `None`.
    pub log_dir: Option<PathBuf>,
    /// Which instance types to start. Default: `resources_servers` only.
    pub server_types: Vec<String>,
    /// Merged over the configs, like NeMo Gym's `++key=value` overrides.
    pub overrides: Option<Value>,
}

impl LaunchOptions {
    /// Options for the NeMo Gym installed in the venv at `venv` (`.venv-nemo-gym`, say).
    pub fn with_venv(venv: &Path) -> LaunchOptions {
        LaunchOptions {
            python: venv.join("bin").join("python"),
            gym_root: None,
            host: "127.0.0.1".into(),
            ready_timeout: Duration::from_secs(120),
            log_dir: None,
            server_types: vec!["resources_servers".into()],
            overrides: None,
        }
    }
}

/// One started server.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningServer {
    /// The config's instance name, e.g. `example_multi_step_resources_server`.
    pub name: String,
    /// `resources_servers`, ...
    pub server_type: String,
    /// The implementation folder, e.g. `example_multi_step`.
    pub implementation: String,
    /// `http://host:port`.
    pub url: String,
    pub pid: u32,
    pub log: PathBuf,
}

/// Servers started from a NeMo Gym config. Stop them with [`shutdown`](Self::shutdown);
/// dropping the value kills them.
#[derive(Debug)]
pub struct NemoGymServers {
    servers: Vec<RunningServer>,
    children: Vec<Child>,
    config: Value,
}

/// A resources server a config names, with the agents the config binds to it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourcesServer {
    /// The config's instance name, e.g. `example_multi_step_resources_server`.
    pub name: String,
    /// The agent instances whose `resources_server` it is, e.g. `example_multi_step_simple_agent`.
    pub agents: Vec<String>,
}

impl NemoGymServers {
    /// The resources servers `configs` name, merged as [`start_all`](Self::start_all) merges
    /// them, each with its agents; nothing is started.
    pub async fn resources_servers(
        configs: &[PathBuf],
        options: &LaunchOptions,
    ) -> Result<Vec<ResourcesServer>, RemoteError> {
        let gym_root = match &options.gym_root {
            Some(root) => root.clone(),
            None => gym_root(&options.python).await?,
        };
        let merged = config::load(configs, &gym_root)?;
        Ok(config::instances(&merged)
            .into_iter()
            .filter(|i| i.server_type == "resources_servers")
            .map(|i| ResourcesServer { agents: config::agents_of(&merged, &i.name), name: i.name })
            .collect())
    }

    /// Starts the servers of one config file and waits until they answer.
    pub async fn start(config_yaml: &Path, options: &LaunchOptions) -> Result<NemoGymServers, RemoteError> {
        NemoGymServers::start_all(&[config_yaml.to_path_buf()], options).await
    }

    /// Starts the servers of several config files, merged in order, as one `gym env start
    /// --config A --config B` would.
    pub async fn start_all(configs: &[PathBuf], options: &LaunchOptions) -> Result<NemoGymServers, RemoteError> {
        let gym_root = match &options.gym_root {
            Some(root) => root.clone(),
            None => gym_root(&options.python).await?,
        };
        let mut merged = config::load(configs, &gym_root)?;
        if let Some(overrides) = &options.overrides {
            config::load_value(&mut merged, overrides.clone());
        }
        let wanted: Vec<Instance> =
            config::instances(&merged).into_iter().filter(|i| options.server_types.contains(&i.server_type)).collect();
        if wanted.is_empty() {
            return Err(RemoteError::Launch(format!(
                "the config names no server of type {:?} (configs: {configs:?})",
                options.server_types
            )));
        }
        for instance in &wanted {
            let port = match config::pinned_port(&merged, instance) {
                Some(port) => port,
                None => free_port(&options.host)?,
            };
            config::place(&mut merged, instance, &options.host, port);
        }
        config::fill_globals(&mut merged, &options.host, free_port(&options.host)?);
        let dict = serde_yaml_ng::to_string(&merged)
            .map_err(|e| RemoteError::Launch(format!("could not write the config dict: {e}")))?;
        let log_dir = match &options.log_dir {
            Some(dir) => dir.clone(),
            None => std::env::temp_dir().join(format!("parley-nemo-gym-{}-{}", std::process::id(), unique())),
        };
        std::fs::create_dir_all(&log_dir)
            .map_err(|e| RemoteError::Launch(format!("creating the log folder {}: {e}", log_dir.display())))?;

        let mut started = NemoGymServers { servers: Vec::new(), children: Vec::new(), config: merged };
        for instance in &wanted {
            let dir = gym_root.join(&instance.server_type).join(&instance.implementation);
            let entrypoint = started.config[&instance.name][&instance.server_type][&instance.implementation]
                .get("entrypoint")
                .and_then(Value::as_str)
                .unwrap_or("app.py")
                .to_owned();
            if !dir.join(&entrypoint).is_file() {
                return Err(RemoteError::Launch(format!(
                    "`{}` names server folder {}, which has no {entrypoint}",
                    instance.name,
                    dir.display()
                )));
            }
            let log = log_dir.join(format!("{}.log", instance.name));
            let child = spawn(&options.python, &dir, &entrypoint, &dict, &instance.name, &log).await?;
            let port = config::pinned_port(&started.config, instance).unwrap_or_default();
            started.servers.push(RunningServer {
                name: instance.name.clone(),
                server_type: instance.server_type.clone(),
                implementation: instance.implementation.clone(),
                url: format!("http://{}:{port}", options.host),
                pid: child.id().unwrap_or_default(),
                log,
            });
            started.children.push(child);
        }
        started.wait_ready(options.ready_timeout).await?;
        tracing::info!(servers = started.servers.len(), "NeMo Gym servers ready");
        Ok(started)
    }

    pub fn servers(&self) -> &[RunningServer] {
        &self.servers
    }

    /// The server started for instance `name`.
    pub fn get(&self, name: &str) -> Option<&RunningServer> {
        self.servers.iter().find(|s| s.name == name)
    }

    /// The merged config dict the servers were given.
    pub fn config(&self) -> &Value {
        &self.config
    }

    /// An error naming the first server that has exited, if any.
    pub fn check(&mut self) -> Result<(), RemoteError> {
        for (server, child) in self.servers.iter().zip(&mut self.children) {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(RemoteError::Launch(format!(
                    "server `{}` exited ({status}); its log {} ends with:\n{}",
                    server.name,
                    server.log.display(),
                    log_tail(&server.log)
                )));
            }
        }
        Ok(())
    }

    /// Stops every server: SIGTERM to its process group, then SIGKILL after a grace period.
    pub async fn shutdown(mut self) {
        self.stop(Duration::from_secs(5)).await;
    }

    async fn stop(&mut self, grace: Duration) {
        for child in &self.children {
            signal_group(child, Signal::SIGTERM);
        }
        // A grace too long for the clock waits as long as the children take.
        let deadline = Instant::now().checked_add(grace);
        for child in &mut self.children {
            let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
            if tokio::time::timeout(left, child.wait()).await.is_err() {
                signal_group(child, Signal::SIGKILL);
                let _ = child.wait().await;
            }
        }
        self.children.clear();
    }

    async fn wait_ready(&mut self, timeout: Duration) -> Result<(), RemoteError> {
        // A timeout too long for the clock never expires.
        let deadline = Instant::now().checked_add(timeout);
        let probe_options = ServerOptions { max_retries: 0, ..ServerOptions::default() };
        for i in 0..self.servers.len() {
            let server = self.servers[i].clone();
            let http = HttpServer::new(&server.name, &server.url, &probe_options)?;
            loop {
                if http.is_up("/").await {
                    break;
                }
                if let Err(e) = self.check() {
                    self.stop(Duration::from_secs(2)).await;
                    return Err(e);
                }
                if deadline.is_some_and(|d| Instant::now() > d) {
                    self.stop(Duration::from_secs(2)).await;
                    return Err(RemoteError::Launch(format!(
                        "server `{}` did not answer on {} within {timeout:?}; its log {} ends with:\n{}",
                        server.name,
                        server.url,
                        server.log.display(),
                        log_tail(&server.log)
                    )));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }
}

impl Drop for NemoGymServers {
    fn drop(&mut self) {
        for child in &mut self.children {
            signal_group(child, Signal::SIGKILL);
            let _ = child.try_wait();
        }
    }
}

/// What a server's Python runs before it becomes the server: it asks the kernel to send it
/// SIGTERM once its parent, this process (whose pid comes first), is gone, then runs the entry
/// point in its place (`exec`: the same process, `python <entrypoint>` as `gym env start` runs
/// it). A `parley` killed outright (SIGKILL, the OOM killer), whose destructors never run, thus
/// leaves no server behind. If the parent is gone before the request, it ends at once. Where the
/// kernel has no `prctl` (not Linux) it only runs the entry point.
///
/// The kernel sends it when the *thread* that started the server ends, so servers are started
/// from one thread that lasts as long as the process ([`start_for_good`]).
const WHILE_PARLEY_LIVES: &str = "\
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except (AttributeError, OSError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(0)
os.execv(sys.executable, [sys.executable] + sys.argv[2:])
";

/// Starts `command` from a thread that never ends before the process does (see
/// [`WHILE_PARLEY_LIVES`]): a runtime's threads may end sooner (a worker that ran
/// `block_in_place` becomes a blocking thread, which ends when idle).
async fn start_for_good(mut command: Command) -> std::io::Result<Child> {
    type Job = (Command, tokio::runtime::Handle, tokio::sync::oneshot::Sender<std::io::Result<Child>>);
    static STARTER: OnceLock<Option<std::sync::mpsc::Sender<Job>>> = OnceLock::new();
    let starter = STARTER.get_or_init(|| {
        let (jobs, received) = std::sync::mpsc::channel::<Job>();
        let thread = std::thread::Builder::new().name("parley-launcher".into()).spawn(move || {
            for (mut command, runtime, answer) in received {
                // The child is the runtime's, which reaps it.
                let _entered = runtime.enter();
                let _ = answer.send(command.spawn());
            }
        });
        thread.ok().map(|_| jobs)
    });
    match starter {
        Some(jobs) => {
            let (answer, answered) = tokio::sync::oneshot::channel();
            jobs.send((command, tokio::runtime::Handle::current(), answer)).map_err(|_| gone())?;
            answered.await.map_err(|_| gone())?
        }
        // No thread could be made: the server is started here, without the promise.
        None => command.spawn(),
    }
}

fn gone() -> std::io::Error {
    std::io::Error::other("the thread that starts servers has ended")
}

async fn spawn(
    python: &Path,
    dir: &Path,
    entrypoint: &str,
    dict: &str,
    name: &str,
    log: &Path,
) -> Result<Child, RemoteError> {
    let out = std::fs::File::create(log)
        .map_err(|e| RemoteError::Launch(format!("creating the log {}: {e}", log.display())))?;
    let err = out.try_clone().map_err(|e| RemoteError::Launch(format!("opening the log {}: {e}", log.display())))?;
    let mut command = Command::new(python);
    command
        .args(["-c", WHILE_PARLEY_LIVES, &std::process::id().to_string(), entrypoint])
        .current_dir(dir)
        .env("NEMO_GYM_CONFIG_DICT", dict)
        .env("NEMO_GYM_CONFIG_PATH", name)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    // What `source .venv/bin/activate` would do, for servers that spawn tools from the venv.
    if let Some(bin) = python.parent() {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut paths = vec![bin.to_path_buf()];
        paths.extend(std::env::split_paths(&path));
        if let Ok(joined) = std::env::join_paths(paths) {
            command.env("PATH", joined);
        }
        if let Some(venv) = bin.parent() {
            command.env("VIRTUAL_ENV", venv);
        }
    }
    start_for_good(command).await.map_err(|e| {
        RemoteError::Launch(format!("could not start `{} {entrypoint}` in {}: {e}", python.display(), dir.display()))
    })
}

fn signal_group(child: &Child, signal: Signal) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        // The group may be gone already; that is what we want.
        let _ = killpg(Pid::from_raw(pid), signal);
    }
}

/// Where NeMo Gym is installed, asked from its Python.
async fn gym_root(python: &Path) -> Result<PathBuf, RemoteError> {
    let output = Command::new(python)
        .args([
            "-c",
            "import os, nemo_gym; print(os.path.dirname(os.path.dirname(os.path.abspath(nemo_gym.__file__))))",
        ])
        .output()
        .await
        .map_err(|e| {
            RemoteError::Launch(format!(
                "could not run {}: {e}; run .ci/setup-peers, or point `python` at a venv with nemo-gym",
                python.display()
            ))
        })?;
    if !output.status.success() {
        return Err(RemoteError::Launch(format!(
            "{} cannot import nemo_gym ({}); run .ci/setup-peers: {}",
            python.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()))
}

fn free_port(host: &str) -> Result<u16, RemoteError> {
    let listener = std::net::TcpListener::bind((host, 0))
        .map_err(|e| RemoteError::Launch(format!("could not find a free port on {host}: {e}")))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| RemoteError::Launch(e.to_string()))
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The last lines of a server's log, for errors.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}
