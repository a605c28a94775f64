//! A run on PostgreSQL driven by three `parley worker` processes as a cluster would fail them.
//! Each worker runs in a network namespace of its own, linked to this one by two veth pairs: one
//! to the database (through a TCP relay in the test, since the test server listens on loopback
//! only), one to the stub model. Mid-run, each while driving sessions with committed turns, one
//! worker is killed with SIGKILL; one is stopped with SIGSTOP past its leases and then continued;
//! one is cut off from the database (`ip link set down` on its link to it) past its leases and
//! then reconnected. Each time the test waits for the others to claim every session the faulty
//! worker held and to finish those it was driving. Then:
//!
//! - every session finished exactly once, with the transcripts, terminations and rewards of a
//!   single-process run of the same tasks and seeds on SQLite;
//! - no turn committed before a fault (or while the faulty worker was away) was asked of the
//!   model again after it: the stub counts the requests for each turn. A worker whose leases may
//!   have run out commits before it asks for its next turn (see `parley_engine::Leases`), so the
//!   stopped and the cut-off worker spend no call on a turn their sessions' new owners committed;
//! - back, the stopped and the cut-off worker wrote nothing more of the sessions they had been
//!   driving (the store refused their commits as fenced), and both finished the run with the
//!   others, exiting cleanly.
//!
//! Namespaces need root and `ip`. Without them the workers run on loopback, each reaching the
//! database through a relay of its own, and cutting a worker off stops its relay: it passes
//! nothing either way, as a link that is down passes nothing. The test says which way it ran. It
//! takes 20 to 30 s (10 s more for each fault that lands inside one of the worker's store
//! transactions: the rows it locks are claimed once the server ends that transaction). Like the
//! other PostgreSQL tests it needs a server (`PARLEY_TEST_POSTGRES`), and skips without one
//! unless `PARLEY_REQUIRE_PEERS=1`.

use parley_core::SessionStatus;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::postgres::PgConnectOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::crash::results;
use crate::harness::{PARLEY, Stub};
use crate::postgres::{Pg, detached_args, ok, reference_run, repeated};

/// Each worker's lease, in seconds.
const LEASE: &str = "2";
/// Sessions each worker drives at once.
const CONCURRENCY: usize = 4;
/// How long the test waits for a worker to drive sessions, or for the others to take a faulty
/// worker's sessions over.
const PATIENCE: Duration = Duration::from_secs(30);

/// Three network namespaces, each linked to this one by two veth pairs, one on each of two
/// bridges here: one network to the database, one to the model. The bridges have the first
/// address of each network, the namespaces the next three. All of it is removed when dropped,
/// whether the test passed or not.
struct Links {
    bridges: [String; 2],
    /// Each namespace, and the end of its link to the database on the bridge.
    ends: Vec<(String, String)>,
    /// The bridges' addresses: the relays to the database listen on the first, the stub on the
    /// second.
    database: Ipv4Addr,
    model: Ipv4Addr,
}

/// Runs `ip` with `args`; `Err` says what it said when it failed.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).stdin(Stdio::null()).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Links {
    /// The namespaces and their links, or why they cannot be made here.
    fn make() -> Result<Links, String> {
        // Names and addresses come from the process id, so that test processes running at once
        // never share them (an interface's name is 15 bytes at most). The two networks are the
        // halves of one /24.
        let pid = std::process::id();
        let address = |n: u8| Ipv4Addr::new(10, 128 | ((pid >> 8) & 127) as u8, pid as u8, n);
        let mut links = Links {
            bridges: [format!("pbd{pid}"), format!("pbm{pid}")],
            ends: Vec::new(),
            database: address(1),
            model: address(129),
        };
        ip(&["netns", "add", &format!("parley-{pid}-probe")])?;
        ip(&["netns", "delete", &format!("parley-{pid}-probe")])?;
        for (bridge, first) in links.bridges.iter().zip([1, 129]) {
            ip(&["link", "add", bridge, "type", "bridge"])?;
            ip(&["addr", "add", &format!("{}/25", address(first)), "dev", bridge])?;
            ip(&["link", "set", bridge, "up"])?;
        }
        for (n, name) in ["a", "b", "c"].into_iter().enumerate() {
            let namespace = format!("parley-{pid}-{name}");
            ip(&["netns", "add", &namespace])?;
            links.ends.push((namespace.clone(), format!("pvd{pid}{name}")));
            for (bridge, (net, first)) in links.bridges.iter().zip([("d", 1), ("m", 129)]) {
                let (outside, inside) = (format!("pv{net}{pid}{name}"), format!("pw{net}{pid}{name}"));
                ip(&["link", "add", &outside, "type", "veth", "peer", "name", &inside])?;
                ip(&["link", "set", &inside, "netns", &namespace])?;
                ip(&["link", "set", &outside, "master", bridge])?;
                ip(&["link", "set", &outside, "up"])?;
                let own = format!("{}/25", address(first + 1 + n as u8));
                ip(&["-n", &namespace, "addr", "add", &own, "dev", &inside])?;
                ip(&["-n", &namespace, "link", "set", &inside, "up"])?;
            }
            ip(&["-n", &namespace, "link", "set", "lo", "up"])?;
        }
        Ok(links)
    }

    /// Brings the database link of worker `n` down (`false`) or up again (`true`), at the bridge's
    /// end: the packets between the worker and the database are lost, as when a cable is pulled,
    /// and nothing comes back to say so.
    fn set(&self, n: usize, up: bool) {
        ip(&["link", "set", &self.ends[n].1, if up { "up" } else { "down" }]).unwrap();
    }
}

impl Drop for Links {
    fn drop(&mut self) {
        // Removing a namespace removes its veth pairs.
        for (namespace, _) in &self.ends {
            let _ = ip(&["netns", "delete", namespace]);
        }
        for bridge in &self.bridges {
            let _ = ip(&["link", "delete", bridge]);
        }
    }
}

/// A TCP relay from a port of its own to the database server. Cut, it passes nothing either way
/// (what it has read waits, as packets on a link that is down are sent again once it is up) and
/// connections made meanwhile wait too.
struct Relay {
    port: u16,
    open: watch::Sender<bool>,
}

impl Relay {
    async fn start(at: IpAddr, server: String) -> Relay {
        let listener = TcpListener::bind((at, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (open, watching) = watch::channel(true);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (server, mut watching) = (server.clone(), watching.clone());
                tokio::spawn(async move {
                    if watching.wait_for(|open| *open).await.is_err() {
                        return;
                    }
                    let Ok(upstream) = TcpStream::connect(&server).await else { return };
                    let (from_client, to_client) = client.into_split();
                    let (from_server, to_server) = upstream.into_split();
                    tokio::join!(
                        pass(from_client, to_server, watching.clone()),
                        pass(from_server, to_client, watching)
                    );
                });
            }
        });
        Relay { port, open }
    }

    fn set(&self, open: bool) {
        self.open.send_replace(open);
    }
}

/// Copies `from` to `to` while the relay is open; while it is cut, waits.
async fn pass(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut open: watch::Receiver<bool>,
) {
    let mut buffer = vec![0; 64 << 10];
    loop {
        if open.wait_for(|open| *open).await.is_err() {
            break;
        }
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if open.wait_for(|open| *open).await.is_err() || to.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// `url` with its host and port replaced by `authority` (its user, database and options kept).
fn through(url: &str, authority: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let user = rest[..end].rsplit_once('@').map(|(user, _)| format!("{user}@")).unwrap_or_default();
    format!("{scheme}://{user}{authority}{}", &rest[end..])
}

/// A worker process, killed when dropped (a failed test leaves none behind).
struct Worker {
    child: Child,
    log: PathBuf,
}

impl Worker {
    fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args([signal, &pid]).status().unwrap().success(), "kill {signal} {pid}");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pending sessions whose claim is held by the worker on `host`.
async fn held(pg: &Pg, host: &str) -> BTreeSet<i64> {
    let owners = format!("{host}:%");
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM sessions WHERE status = 'pending' AND owner LIKE $1")
        .bind(owners)
        .fetch_all(&pg.pool)
        .await
        .unwrap();
    ids.into_iter().collect()
}

/// Of `sessions`, those with a committed turn: the ones a worker was driving.
async fn started(pg: &Pg, sessions: &BTreeSet<i64>) -> BTreeSet<i64> {
    let ids: Vec<i64> = sessions.iter().copied().collect();
    let started: Vec<i64> = sqlx::query_scalar("SELECT DISTINCT session_id FROM messages WHERE session_id = ANY($1)")
        .bind(ids)
        .fetch_all(&pg.pool)
        .await
        .unwrap();
    started.into_iter().collect()
}

/// The sessions a worker held when a fault came: every pending one it had claimed, and of those
/// the ones it was driving (with a committed turn).
struct Held {
    all: BTreeSet<i64>,
    driving: BTreeSet<i64>,
}

impl Held {
    async fn now(pg: &Pg, host: &str) -> Held {
        let all = held(pg, host).await;
        Held { driving: started(pg, &all).await, all }
    }
}

/// Brings a fault on the worker on `host` (`fault(true)`) at a moment when it is driving sessions
/// with committed turns, and returns what it held. (A session's first turn is committed with its
/// second, so there are moments when a worker drives none: then the fault is lifted,
/// `fault(false)`, and brought again.)
async fn at_a_turn(pg: &Pg, host: &str, mut fault: impl FnMut(bool)) -> Held {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if !Held::now(pg, host).await.driving.is_empty() {
            fault(true);
            let held = Held::now(pg, host).await;
            if !held.driving.is_empty() {
                return held;
            }
            fault(false);
        }
        assert!(Instant::now() < deadline, "{host} was driving no session");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the others have claimed every session the worker on `host` held at a fault (its
/// leases ran out), and finished those it was driving. (A session whose row the worker's store
/// transaction had locked when the fault came is claimed once the server ends that transaction,
/// 10 s on.)
async fn taken_over(pg: &Pg, host: &str, at_fault: &Held) {
    let driving: Vec<i64> = at_fault.driving.iter().copied().collect();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let unfinished: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM sessions WHERE id = ANY($1) AND status <> 'finished'")
                .bind(&driving)
                .fetch_one(&pg.pool)
                .await
                .unwrap();
        if unfinished == 0 && held(pg, host).await.is_disjoint(&at_fault.all) {
            return;
        }
        assert!(Instant::now() < deadline, "the sessions {:?} of {host} were not taken over", at_fault.all);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The turns committed so far, with the stub's count of requests for each turn now.
struct Snapshot {
    what: &'static str,
    committed: Vec<String>,
    asked: Value,
}

impl Snapshot {
    async fn take(what: &'static str, pg: &Pg, stub: &Stub) -> Snapshot {
        let committed = pg.recorded_turns().await;
        Snapshot { what, committed, asked: stub.stats()["turns"].clone() }
    }

    /// Asserts that no turn committed when the snapshot was taken was asked for since.
    fn check(&self, now: &Value) {
        assert!(!self.committed.is_empty(), "turns were committed {}", self.what);
        for turn in &self.committed {
            assert_eq!(now[turn], self.asked[turn], "turn {turn}, committed {}, was asked for again", self.what);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn workers_killed_stopped_and_cut_off_finish_every_session_once_as_one_process_would() {
    let Some(pg) = Pg::new().await else { return };
    let server = PgConnectOptions::from_str(&pg.url).unwrap();
    assert!(server.get_socket().is_none(), "PARLEY_TEST_POSTGRES names a server by host and port");
    let server = format!("{}:{}", server.get_host(), server.get_port());
    let work = reference_run();

    let links =
        Links::make().map_err(|why| eprintln!("no network namespaces here ({why}): the workers run on loopback"));
    let (database, model) =
        links.as_ref().map_or((Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST), |l| (l.database, l.model));
    if links.is_ok() {
        eprintln!(
            "each worker runs in a network namespace, linked to the database at {database} and the model at {model}"
        );
    }
    let stub = Stub::start_at(&model.to_string(), 0, &["--latency-ms", "150"]);
    ok(&work.parley(&detached_args(&stub, &pg.url)));

    let names = ["machine-a", "machine-b", "machine-c"];
    let mut relays = Vec::new();
    let mut workers = Vec::new();
    for (n, name) in names.into_iter().enumerate() {
        let relay = Relay::start(IpAddr::V4(database), server.clone()).await;
        let db = through(&pg.url, &format!("{database}:{}", relay.port));
        let log = work.path(&format!("{name}.log"));
        let mut command = match &links {
            Ok(links) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", &links.ends[n].0, PARLEY]);
                command
            }
            Err(()) => Command::new(PARLEY),
        };
        let child = command
            .current_dir(work.dir.path())
            .args(["worker", "--db", &db, "--run", "1", "--concurrency", &CONCURRENCY.to_string()])
            // Another machine each, as far as the store can tell: a claim ends with its lease.
            .envs([("HOSTNAME", name), ("PARLEY_LEASE_SECS", LEASE), ("RUST_LOG", "warn,parley_engine=info")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        relays.push(relay);
        workers.push(Worker { child, log });
    }
    let cut = |n: usize, off: bool| match &links {
        Ok(links) => links.set(n, !off),
        Err(()) => relays[n].set(!off),
    };
    let started_at = Instant::now();
    let [mut a, b, c] = <[Worker; 3]>::try_from(workers).ok().unwrap();
    pg.wait_finished(10).await;

    // A is killed, while driving sessions with committed turns: its claims stay in the store until
    // their leases run out, and the others take its sessions over from their committed turns.
    let deadline = Instant::now() + PATIENCE;
    while Held::now(&pg, "machine-a").await.driving.is_empty() {
        assert!(Instant::now() < deadline, "machine-a was driving no session");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let killed = Snapshot::take("when A was killed", &pg, &stub).await;
    let a_held = Held::now(&pg, "machine-a").await;
    assert!(!a_held.all.is_empty(), "the killed worker held sessions");
    taken_over(&pg, "machine-a", &a_held).await;
    let took = |what: &str, held: &Held| {
        let (secs, all, driving) = (started_at.elapsed().as_secs_f64(), held.all.len(), held.driving.len());
        eprintln!("{secs:.1} s: {what}; the others took over its {all} sessions, {driving} of them under way");
    };
    took("A killed", &a_held);

    // B is stopped past its leases: C takes its sessions over. Continued, B finds its commits
    // refused.
    let b_held = at_a_turn(&pg, "machine-b", |stop| b.signal(if stop { "-STOP" } else { "-CONT" })).await;
    taken_over(&pg, "machine-b", &b_held).await;
    let stopped = Snapshot::take("while B was stopped", &pg, &stub).await;
    b.signal("-CONT");
    took("B stopped", &b_held);

    // C is cut off from the database past its leases: B takes its sessions over. Reconnected, C
    // finds its commits refused.
    let c_held = at_a_turn(&pg, "machine-c", |off| cut(2, off)).await;
    let cut_off = Snapshot::take("when C was cut off", &pg, &stub).await;
    taken_over(&pg, "machine-c", &c_held).await;
    let away = Snapshot::take("while C was cut off", &pg, &stub).await;
    cut(2, false);
    took("C cut off", &c_held);

    // B and C finish the run.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut running = [b, c];
    let mut exits = [None, None];
    while exits.iter().any(Option::is_none) {
        for (worker, exit) in running.iter_mut().zip(&mut exits) {
            if exit.is_none() {
                *exit = worker.child.try_wait().unwrap();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the run did not end: {:?}",
            running.iter().map(Worker::log).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("{:.1} s: the run is done", started_at.elapsed().as_secs_f64());
    for ((worker, exit), at_fault) in running.iter().zip(exits).zip([&b_held, &c_held]) {
        let log = worker.log();
        assert!(exit.unwrap().success(), "{log}");
        assert!(log.contains("run 1 is done"), "{log}");
        // Back, it wrote nothing more of the sessions it was driving: the store refused each
        // one's next commit (another owner had claimed it), or, where the fault came in the middle
        // of the transaction writing it, the server had ended that transaction.
        for session in &at_fault.driving {
            let span = format!("session{{id={session} ");
            let refused = log.lines().any(|line| {
                line.contains(&span)
                    && (line.contains("was claimed by another owner") || line.contains("could not record"))
            });
            assert!(refused, "the late commits of session {session} were refused: {log}");
        }
    }

    // Every session finished once, as one process on SQLite finishes them.
    let sessions = pg.results().await;
    assert_eq!(sessions.len(), 200);
    assert!(sessions.values().all(|(status, ..)| status == SessionStatus::Finished.as_str()));
    assert_eq!(sessions, results(&work, "reference.db").await);
    // No committed turn was asked for again.
    let asked = stub.stats();
    for snapshot in [&killed, &stopped, &cut_off, &away] {
        snapshot.check(&asked["turns"]);
    }
    // Asked twice, each: a turn a faulty worker asked for and never committed, which the new owner
    // of its session asked for again. At a fault, a worker drives up to CONCURRENCY sessions, each
    // with at most two such turns (the one whose commit is under way, and the one asked beside
    // it), and as many more wait on the commit of their end, with one.
    let again = repeated(&asked);
    assert!(again.len() <= 3 * 3 * CONCURRENCY, "only turns in flight at a fault were asked again: {again:?}");
    eprintln!("{} turns in flight at a fault were asked for again", again.len());
    drop(links);
    pg.remove().await;
}
