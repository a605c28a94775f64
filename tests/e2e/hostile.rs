//! `parley serve` under hostile and careless clients, through the real binary on loopback:
//! what such a client sends is refused, and what it abandons is freed.

use parley_core::{RunStatus, SessionStatus};
use std::time::{Duration, Instant};

use crate::harness::{Stub, Workdir};
use crate::http::request;
use crate::serve::{Serve, post_run};

/// OpenEnv HTTP sessions whose trainer stops stepping end at their `--session-timeout`, are
/// recorded as timed out and give their slots back; a reset refused meanwhile says when to try
/// again.
#[tokio::test(flavor = "multi_thread")]
async fn abandoned_openenv_sessions_free_their_slots() {
    let work = Workdir::new();
    work.tasks(4);
    let stub = Stub::start(&[]);
    let serve = Serve::start(
        &work,
        &stub,
        &["--tasks", "tasks.jsonl", "--concurrency", "2", "--queue", "2", "--session-timeout", "2"],
    );
    for _ in 0..4 {
        let (status, _, body) = request(&serve.address, "POST", "/reset", "{}", &[]);
        assert_eq!(status, 200, "{body}");
    }
    let (status, head, _) = request(&serve.address, "POST", "/reset", "{}", &[]);
    assert_eq!(status, 503, "every slot is held");
    assert!(head.contains("retry-after:"), "{head}");

    // The trainer never steps again: the sessions end at their time limit.
    let row = work.first_task_row();
    let started = Instant::now();
    let answered = loop {
        let (status, _, body) = post_run(&serve.address, &row);
        if status == 200 || started.elapsed() > Duration::from_secs(20) {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(answered.0, 200, "a slot came back: {}", answered.1);
    assert_eq!(request(&serve.address, "POST", "/reset", "{}", &[]).0, 200);
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", work.path("serve.db").display())).await.unwrap();
    let timed_out: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sessions WHERE termination = 'timeout'")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    assert_eq!(timed_out, 4, "each abandoned session is recorded as timed out");
    let metrics = request(&serve.address, "GET", "/metrics", "", &[]).2;
    let line = metrics.lines().find(|l| l.starts_with("parley_sessions_in_flight")).unwrap_or_default().to_owned();
    let value: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(-1.0);
    assert_eq!(value, 1.0, "only the last reset's session is in flight: {line}");
}

/// Sends `head` (request line and headers, without the blank line) and `body`; the status of
/// the answer, read from its head alone (an upgraded connection stays open).
fn raw(address: &str, head: &str, body: &str) -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let close = if head.contains("Upgrade:") { "" } else { "Connection: close\r\n" };
    write!(stream, "{head}\r\nContent-Length: {}\r\n{close}\r\n{body}", body.len()).unwrap();
    let mut status = String::new();
    let _ = BufReader::new(stream).read_line(&mut status);
    status.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// Sends `row` to `/run` on a raw connection and goes away after `stay`, reading no answer.
fn post_and_leave(address: &str, row: &str, stay: Duration) {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "POST /run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{row}",
        row.len()
    )
    .unwrap();
    std::thread::sleep(stay);
}

/// A client that sends its row and goes away mid-session (it reads no answer).
#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_disconnects_cancels_its_session_and_resume_finishes_it() {
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&["--latency-ms", "400"]);
    let serve = Serve::start(&work, &stub, &[]);
    let row = work.first_task_row();
    post_and_leave(&serve.address, &row, Duration::from_millis(600));
    std::thread::sleep(Duration::from_millis(1500));
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", work.path("serve.db").display())).await.unwrap();
    let (status, termination): (String, Option<String>) =
        sqlx::query_as("SELECT status, termination FROM sessions").fetch_one(&pool).await.unwrap();
    pool.close().await;
    assert_eq!((status.as_str(), termination), (SessionStatus::Pending.as_str(), None), "cancelled: kept, unfinished");
    let log = std::fs::read_to_string(work.path("serve.log")).unwrap_or_default();
    drop(serve);
    let out = crate::harness::ok(&work.parley(&["resume", "1", "--db", "serve.db"]));
    assert!(out.contains("terminations   agent_stop 1"), "{out}\n{log}");
}

/// A web page cannot drive a loopback service: a cross-site form post (`text/plain`, another
/// site's `Origin`) and a WebSocket opened by another site are refused before any session
/// starts, and a name that is not this machine's (DNS rebinding) is refused outright; a site
/// the operator allows is served.
#[test]
fn web_pages_of_other_sites_cannot_drive_a_loopback_service() {
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&[]);
    let serve = Serve::start(&work, &stub, &["--allow-origin", "https://trainer.example"]);
    let row = work.first_task_row();
    let at = &serve.address;
    let form = |origin: &str| {
        raw(at, &format!("POST /run HTTP/1.1\r\nHost: {at}\r\nContent-Type: text/plain\r\nOrigin: {origin}"), &row)
    };
    assert_eq!(form("https://evil.example"), 403, "a cross-site form post");
    assert_eq!(form("null"), 403, "a sandboxed page");
    let upgrade = |origin: &str| {
        raw(
            at,
            &format!(
                "GET /ws HTTP/1.1\r\nHost: {at}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: {origin}"
            ),
            "",
        )
    };
    assert_eq!(upgrade("https://evil.example"), 403, "another site's WebSocket");
    let port = at.rsplit(':').next().unwrap();
    let rebound = raw(at, &format!("GET /metrics HTTP/1.1\r\nHost: attacker.example:{port}"), "");
    assert_eq!(rebound, 403, "a name rebound to 127.0.0.1");
    assert_eq!(stub.stats()["requests"], 0, "no refused request reached the policy");
    assert_eq!(form("https://trainer.example"), 200, "an allowed site");
    assert_eq!(upgrade(&format!("http://{at}")), 101, "the service's own origin");
    assert_eq!(raw(at, &format!("GET /metrics HTTP/1.1\r\nHost: localhost:{port}"), ""), 200);
}

/// The viewer, likewise: another site's page cannot read transcripts, nor can a name rebound
/// to this machine.
#[test]
fn web_pages_of_other_sites_cannot_read_the_viewer() {
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&[]);
    crate::harness::ok(&crate::harness::run(&work, &stub, &[]));
    let view = crate::view::View::start_on(&work, "parley.db", &[], &[]);
    let at = view.address();
    let port = at.rsplit(':').next().unwrap();
    assert_eq!(raw(&at, &format!("GET /runs/1 HTTP/1.1\r\nHost: {at}"), ""), 200);
    assert_eq!(raw(&at, &format!("GET /runs/1 HTTP/1.1\r\nHost: rebound.example:{port}"), ""), 403);
    assert_eq!(raw(&at, &format!("GET /runs/1 HTTP/1.1\r\nHost: {at}\r\nOrigin: https://evil.example"), ""), 403);
}

/// A policy that answers every call 500 with a page of its own, keeping each request's head.
struct Capturing {
    url: String,
    heads: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

fn capturing_policy() -> Capturing {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = std::sync::Arc::clone(&heads);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut head = String::new();
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(n) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = n.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            kept.lock().unwrap().push(head.to_ascii_lowercase());
            let page = "THE-POLICY-PAGE: whatever the server at this URL chose to say";
            let mut stream = reader.into_inner();
            let _ = write!(
                stream,
                "HTTP/1.1 500 Internal Server Error\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    Capturing { url, heads }
}

/// A row's own `policy_base_url` never gets the service's API key unless the operator trusts
/// the URL with it (`--policy-url-allow`), and what an untrusted URL answered is not quoted
/// back to the client that named it.
#[test]
fn a_rows_policy_url_does_not_borrow_the_services_key() {
    let key = "sk-parley-test-0123456789";
    for trusted in [false, true] {
        let work = Workdir::new();
        work.tasks(1);
        let stub = Stub::start(&[]);
        let policy = capturing_policy();
        let prefix = policy.url.trim_end_matches("/v1").to_owned();
        let mut args = vec!["--api-key-env", "PARLEY_HOSTILE_KEY", "--max-retries", "0"];
        if trusted {
            args.extend(["--policy-url-allow", prefix.as_str()]);
        }
        let serve = Serve::start_with_env(&work, &stub, &args, &[("PARLEY_HOSTILE_KEY", key)]);
        let line = work.first_task_row();
        let mut row: serde_json::Value = serde_json::from_str(&line).unwrap();
        row["policy_base_url"] = policy.url.clone().into();
        let (status, _, body) = post_run(&serve.address, &row.to_string());
        assert_eq!(status, 502, "{body}");
        let heads = policy.heads.lock().unwrap().clone();
        assert!(!heads.is_empty(), "the row's policy was called");
        let sent_key = heads.iter().any(|h| h.contains(&format!("authorization: bearer {key}")));
        assert_eq!(sent_key, trusted, "the key went to the row's URL only when trusted: {heads:?}");
        if !trusted {
            assert!(!body.contains("THE-POLICY-PAGE"), "the URL's answer is not quoted back: {body}");
        }
        assert!(!body.contains(key), "{body}");
    }
}

/// Clients that send their request's head a byte at a time, or open a connection and send
/// nothing, are disconnected after `--header-timeout`, so they cannot hold the service's
/// connections; a normal client is served meanwhile.
#[test]
fn slow_headers_are_cut_off() {
    use std::io::{Read, Write};
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&[]);
    let serve = Serve::start(&work, &stub, &["--header-timeout", "1"]);
    // Half send the start of a head, half nothing at all (a connection opened and left).
    let mut slow: Vec<std::net::TcpStream> = (0..100)
        .map(|i| {
            let mut stream = std::net::TcpStream::connect(&serve.address).unwrap();
            if i % 2 == 0 {
                stream.write_all(b"POST /run HTTP/1.1\r\nHost: 127.0.0.1\r\n").unwrap();
            }
            stream
        })
        .collect();
    let row = work.first_task_row();
    assert_eq!(post_run(&serve.address, &row).0, 200, "a normal client is served beside them");
    // A byte a second, as a slow-loris client sends: still no whole head after the timeout.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(700));
        for stream in slow.iter_mut().step_by(2) {
            let _ = stream.write_all(b"X");
        }
    }
    let mut cut = 0;
    for stream in &mut slow {
        stream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buffer = [0u8; 512];
        // Cut off: the read ends (0 bytes or a reset), it does not time out.
        match stream.read(&mut buffer) {
            Ok(_) => cut += 1,
            Err(e) if e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut => {
                cut += 1
            }
            Err(_) => {}
        }
    }
    assert_eq!(cut, 100, "every slow client was disconnected");
}

/// Rows that cannot be run or scored are refused before any model call, as a 400 naming the
/// field (a trainer's data failure, not an infrastructure one), and by `parley run` as bad rows.
#[test]
fn rows_that_cannot_run_are_refused_before_any_model_call() {
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&[]);
    let serve = Serve::start(&work, &stub, &[]);
    let line = work.first_task_row();
    let good: serde_json::Value = serde_json::from_str(&line).unwrap();
    let mut no_input = good.clone();
    no_input["responses_create_params"]["input"] = serde_json::json!([]);
    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("expected_synonym_values");
    let mut wrong_type = good.clone();
    wrong_type["expected_synonym_values"] = "407, 222".into();
    for (row, names) in [
        (&no_input, "no user message"),
        (&missing, "`expected_synonym_values`"),
        (&wrong_type, "must be a list of numbers, not"),
    ] {
        let (status, _, body) = post_run(&serve.address, &row.to_string());
        assert_eq!(status, 400, "{body}");
        assert!(body.contains(names), "the answer names the field: {body}");
    }
    assert_eq!(stub.stats()["requests"], 0, "no model was called for them");

    // `parley run`: named by line, refused unless --bad-rows skip leaves them out.
    let rows = [line.clone(), missing.to_string(), wrong_type.to_string()];
    std::fs::write(work.path("rows.jsonl"), rows.join("\n") + "\n").unwrap();
    let out = work.parley(&["run", "--tasks", "rows.jsonl", "--base-url", &stub.url, "--db", "run.db"]);
    assert_eq!(out.status.code(), Some(64), "{}", crate::harness::text(&out.stderr));
    let stderr = crate::harness::text(&out.stderr);
    assert!(stderr.contains("rows.jsonl:2: the row has no `expected_synonym_values`"), "{stderr}");
    assert!(stderr.contains("rows.jsonl:3: `expected_synonym_values` must be a list"), "{stderr}");
    assert_eq!(stub.stats()["requests"], 0);
    let out = work.parley(&[
        "run",
        "--tasks",
        "rows.jsonl",
        "--base-url",
        &stub.url,
        "--db",
        "run.db",
        "--bad-rows",
        "skip",
        "--out",
        "out.jsonl",
    ]);
    assert!(out.status.success(), "{}", crate::harness::text(&out.stderr));
    assert!(crate::harness::text(&out.stdout).contains("1 sessions"), "{}", crate::harness::text(&out.stdout));
}

/// A reward that compares against a row field refuses rows without it, before any model call.
#[test]
fn a_rows_missing_reward_field_is_refused_before_any_model_call() {
    let work = Workdir::new();
    std::fs::write(
        work.path("qa.jsonl"),
        "{\"responses_create_params\": {\"input\": \"2+2?\"}, \"expected_answer\": \"4\"}\n\
         {\"responses_create_params\": {\"input\": \"3+3?\"}}\n",
    )
    .unwrap();
    let stub = Stub::start(&[]);
    let out =
        work.parley(&["run", "--env", "custom", "--tasks", "qa.jsonl", "--reward", "exact", "--base-url", &stub.url]);
    assert_eq!(out.status.code(), Some(64), "{}", crate::harness::text(&out.stderr));
    let stderr = crate::harness::text(&out.stderr);
    assert!(stderr.contains("qa.jsonl:2: the row has no `expected_answer`"), "{stderr}");
    assert_eq!(stub.stats()["requests"], 0);
}

/// Two runs started at once on a database that does not exist yet both migrate it: both run.
#[test]
fn two_runs_started_at_once_on_a_new_database_both_run() {
    let work = Workdir::new();
    work.tasks(2);
    let stub = Stub::start(&[]);
    for attempt in 0..5 {
        let db = format!("fresh-{attempt}.db");
        let start = |out: &str| {
            std::process::Command::new(crate::harness::PARLEY)
                .current_dir(work.dir.path())
                .args(["run", "--tasks", "tasks.jsonl", "--base-url", &stub.url, "--db", &db, "--out", out])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (start(&format!("a{attempt}.jsonl")), start(&format!("b{attempt}.jsonl")));
        for child in [a, b] {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "attempt {attempt}: {}", crate::harness::text(&out.stderr));
        }
    }
}

/// A row carrying a 5 MB image is taken, as `parley run` takes it; a body over the documented
/// 64 MiB limit is answered 413.
#[test]
fn a_row_with_a_large_image_is_taken_and_a_huge_body_refused() {
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&[]);
    let serve = Serve::start(&work, &stub, &[]);
    let line = work.first_task_row();
    let mut row: serde_json::Value = serde_json::from_str(&line).unwrap();
    let image = format!("data:image/png;base64,{}", "A".repeat(5 << 20));
    let input = row["responses_create_params"]["input"].as_array_mut().unwrap();
    input.push(serde_json::json!({"role": "user", "content": [{"type": "input_image", "image_url": image}]}));
    let (status, _, body) = post_run(&serve.address, &row.to_string());
    assert_eq!(status, 200, "{}", &body[..body.len().min(300)]);
    let huge = format!("{{\"pad\": \"{}\"}}", "x".repeat(65 << 20));
    assert_eq!(post_run(&serve.address, &huge).0, 413);
}

/// A `/run` session whose client went away is cancelled, its committed turns kept and its claim
/// given up: `parley resume` finishes it while the service that recorded it runs on.
#[test]
fn a_cancelled_run_session_is_resumed_while_the_service_runs() {
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&["--latency-ms", "400"]);
    let serve = Serve::start(&work, &stub, &[]);
    let row = work.first_task_row();
    post_and_leave(&serve.address, &row, Duration::from_millis(600));
    std::thread::sleep(Duration::from_millis(1000));
    let out = crate::harness::ok(&work.parley(&["resume", "1", "--db", "serve.db"]));
    assert!(out.contains("terminations   agent_stop 1"), "resumed beside the running service: {out}");
    drop(serve);
}

/// `parley resume` of a service run killed mid-flight continues each session with the policy
/// that played it and as it played it: a plain `/run` row against the run's endpoint with the
/// row's own sampling (a trainer's policy server refuses any other), while an OpenEnv episode
/// (the trainer played it) and a row that named its own policy URL are closed where they
/// stopped, never continued by the run's agent.
#[tokio::test(flavor = "multi_thread")]
async fn resume_continues_each_served_session_with_its_own_policy_only() {
    let work = Workdir::new();
    work.tasks(2);
    let stub = Stub::start(&["--latency-ms", "700"]);
    let row_policy = Stub::start(&["--latency-ms", "8000"]);
    let serve = Serve::start(&work, &stub, &["--tasks", "tasks.jsonl", "--temperature", "0.9"]);
    let mut plain: serde_json::Value = serde_json::from_str(&work.first_task_row()).unwrap();
    plain["responses_create_params"]["temperature"] = 0.25.into();
    plain["responses_create_params"]["top_p"] = 0.5.into();
    let mut own = plain.clone();
    own["policy_base_url"] = row_policy.url.clone().into();
    let (status, _, body) = request(&serve.address, "POST", "/reset", "{}", &[]);
    assert_eq!(status, 200, "{body}");
    let address = serve.address.clone();
    for row in [plain, own] {
        let address = address.clone();
        // Cut off when the service dies.
        std::thread::spawn(move || {
            let _ = std::panic::catch_unwind(|| post_run(&address, &row.to_string()));
        });
    }
    std::thread::sleep(Duration::from_millis(1200));
    drop(serve);

    let first = work.parley(&["resume", "1", "--db", "serve.db"]);
    let out = crate::harness::ok(&first);
    let said = crate::harness::text(&first.stderr);
    assert!(said.contains("2 unfinished sessions were played by a policy other than the run's"), "{said}");
    let again = crate::harness::text(&work.parley(&["resume", "1", "--db", "serve.db"]).stderr);
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", work.path("serve.db").display())).await.unwrap();
    /// A session's id, player, status, termination and error.
    type Row = (i64, Option<String>, String, Option<String>, Option<String>);
    let sessions: Vec<Row> = sqlx::query_as("SELECT id, player, status, termination, error FROM sessions ORDER BY id")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(sessions.len(), 3, "{sessions:?}");
    for (id, player, status, termination, error) in &sessions {
        assert_eq!(status, SessionStatus::Finished.as_str(), "session {id}: {sessions:?}\n{out}");
        match player.as_deref() {
            None => assert_eq!(termination.as_deref(), Some("agent_stop"), "the run's own policy continued it"),
            Some(other) => {
                assert_eq!(termination.as_deref(), Some("cancelled"), "{other}: {sessions:?}");
                assert!(error.as_deref().unwrap_or_default().contains("not continued"), "{error:?}");
            }
        }
    }
    let players: Vec<_> = sessions.iter().map(|s| s.1.clone().unwrap_or_default()).collect();
    assert!(players.contains(&"trainer".into()) && players.contains(&"row_policy".into()), "{players:?}");
    let plain_id = sessions.iter().find(|s| s.1.is_none()).unwrap().0;
    let sampling: Vec<(String,)> =
        sqlx::query_as("SELECT sampling FROM model_calls WHERE session_id = ? AND party = 'agent' ORDER BY seq")
            .bind(plain_id)
            .fetch_all(&pool)
            .await
            .unwrap();
    pool.close().await;
    assert!(sampling.len() >= 2, "the session went on after the restart: {sampling:?}");
    for (sent,) in &sampling {
        let sent: serde_json::Value = serde_json::from_str(sent).unwrap();
        assert_eq!((sent["temperature"].as_f64(), sent["top_p"].as_f64()), (Some(0.25), Some(0.5)), "{sent}");
    }
    // The closed sessions are settled: a second resume finds nothing left to do.
    assert!(!again.contains("were played by a policy other"), "{again}");
}

/// A WebSocket frame larger than a message may be is refused with a close frame saying so
/// (1009, message too big), not a connection dropped without a word.
#[test]
fn a_huge_websocket_frame_is_answered_with_a_close_frame() {
    use std::io::{BufRead, BufReader, Read, Write};
    let work = Workdir::new();
    work.tasks(1);
    let stub = Stub::start(&[]);
    let serve = Serve::start(&work, &stub, &[]);
    let at = &serve.address;
    let mut stream = std::net::TcpStream::connect(at).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        stream,
        "GET /ws HTTP/1.1\r\nHost: {at}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.contains(" 101 "), "{line}");
    while line != "\r\n" {
        line.clear();
        reader.read_line(&mut line).unwrap();
    }
    // A text frame of 50 MB, masked (with a zero key, so the payload goes as it is): its head,
    // then the first megabyte; the service reads the length and need not wait for the rest.
    let length: u64 = 50 << 20;
    let mut head = vec![0x81, 0x80 | 127];
    head.extend_from_slice(&length.to_be_bytes());
    head.extend_from_slice(&[0, 0, 0, 0]);
    stream.write_all(&head).unwrap();
    let _ = stream.write_all(&vec![b'a'; 1 << 20]);
    let mut frame = [0u8; 4];
    reader.read_exact(&mut frame).expect("a close frame before the connection ends");
    assert_eq!(frame[0], 0x88, "a final close frame: {frame:?}");
    assert_eq!(u16::from_be_bytes([frame[2], frame[3]]), 1009, "message too big");
}

/// `parley run` does not record a run into a database file with damaged pages, which the
/// commands that read it refuse: it exits 65 (EX_DATAERR) naming the file and how to recover.
#[test]
fn a_run_is_not_recorded_into_a_damaged_database() {
    let work = Workdir::new();
    work.tasks(40);
    let stub = Stub::start(&[]);
    crate::harness::ok(&crate::harness::run(&work, &stub, &[]));
    let path = work.path("parley.db");
    let mut bytes = std::fs::read(&path).unwrap();
    let page_size = usize::from(u16::from_be_bytes([bytes[16], bytes[17]]));
    assert!(bytes.len() / page_size > 6, "a file of several pages");
    // An impossible b-tree page type on a page past the schema's.
    let page = bytes.len() / page_size / 2;
    bytes[page * page_size..page * page_size + 8].fill(0xff);
    std::fs::write(&path, &bytes).unwrap();
    let out = crate::harness::run(&work, &stub, &[]);
    let said = crate::harness::text(&out.stderr);
    assert_eq!(out.status.code(), Some(65), "{said}");
    assert!(said.contains("damaged") && said.contains(".recover"), "{said}");
    let runs = crate::harness::text(&work.parley(&["runs", "--db", "parley.db"]).stdout);
    assert!(!runs.lines().any(|l| l.trim_start().starts_with('2')), "no second run was recorded: {runs}");
}

/// A signal while `parley run` records a large set of tasks stops it after the batch in hand,
/// gracefully: the run recorded so far is marked interrupted and named, and the exit code says
/// the run stopped early (128 + SIGTERM).
#[tokio::test]
async fn a_signal_while_tasks_are_recorded_stops_the_run_gracefully() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let work = Workdir::new();
    let stub = Stub::start(&[]);
    let mut child = Command::new(crate::harness::PARLEY)
        .current_dir(work.dir.path())
        .args(["run", "--num-tasks", "400000", "--base-url", &stub.url, "--db", "parley.db"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let size = |name: &str| std::fs::metadata(work.path(name)).map_or(0, |m| m.len());
    let started = Instant::now();
    // Until the recording is under way: the database (its write-ahead log first) grows past what
    // the schema alone takes (about 1 MiB of log on a new database's 16 KiB pages).
    while size("parley.db") + size("parley.db-wal") < 4 << 20 && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let signalled = Instant::now();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(signalled.elapsed() < Duration::from_secs(10), "it stops after the batch in hand");
    assert!(stderr.contains("stopped while recording the tasks"), "{stderr}");
    let pool = work.db().await;
    let (sessions, status): (i64, String) =
        sqlx::query_as("SELECT (SELECT COUNT(*) FROM sessions), (SELECT status FROM runs WHERE id = 1)")
            .fetch_one(&pool)
            .await
            .unwrap();
    pool.close().await;
    assert!(sessions > 0 && sessions < 400_000, "{sessions} sessions recorded");
    assert_eq!(status, RunStatus::Interrupted.as_str());
    assert!(stderr.contains(&format!("holds the first {sessions} ")), "{stderr}");
}
