//! What a user is told about a database that cannot serve: a directory, a full disk, damaged
//! pages. Each test makes the damage on purpose, on a real file.

use std::path::Path;
use std::str::FromStr;

use parley_core::{Claim, Message, MessageRecord, SessionStore, StoreError, TurnRecord, Unusable};
use parley_store::{SqliteStore, StoreOptions};
use sqlx::Connection;

use crate::writer::store_with_sessions;

fn problem(error: &StoreError) -> Option<Unusable> {
    match error {
        StoreError::Unusable { problem, .. } => Some(*problem),
        _ => None,
    }
}

#[tokio::test]
async fn a_directory_is_named_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let error = SqliteStore::open(dir.path(), StoreOptions::default()).await.unwrap_err();
    assert_eq!(problem(&error), Some(Unusable::Directory));
    let message = error.to_string();
    assert!(message.contains("is a directory") && message.contains("parley.db"), "{message}");
}

/// A process out of file descriptors (a run with more connections than `ulimit -n` allows) is
/// told so, not sent to look at the database's folder. The test's own process is used up: each
/// test runs in a process of its own.
#[tokio::test]
async fn a_process_out_of_files_is_told_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("parley.db");
    SqliteStore::open(&path, StoreOptions::default()).await.unwrap().close().await.unwrap();
    let mut held = Vec::new();
    while let Ok(file) = std::fs::File::open("/dev/null") {
        held.push(file);
        assert!(held.len() < 1 << 20, "the open-files limit was not reached");
    }
    let error = SqliteStore::open(&path, StoreOptions::default()).await.unwrap_err();
    drop(held);
    assert_eq!(problem(&error), Some(Unusable::OutOfFiles), "{error}");
    let message = error.to_string();
    assert!(message.contains("files open") && message.contains("ulimit -n"), "{message}");
    assert!(SqliteStore::open(&path, StoreOptions::default()).await.is_ok(), "with files to spare it opens again");
}

/// Writes to the file behind the store's back, as damage would.
async fn tamper(path: &Path, sql: &'static str) {
    let options = sqlx::sqlite::SqliteConnectOptions::from_str("sqlite:").unwrap().filename(path);
    let mut conn = sqlx::SqliteConnection::connect_with(&options).await.unwrap();
    sqlx::query(sql).execute(&mut conn).await.unwrap();
    // Into the database file itself, where a test can find the bytes.
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
}

#[tokio::test]
async fn text_that_is_not_utf8_is_named_by_table_session_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("parley.db");
    let (store, ids) = store_with_sessions(&dir, 3).await;
    for &id in &ids {
        store.commit_turn(Claim::unclaimed(id), crate::writer::turn(0)).await.unwrap();
    }
    store.close().await.unwrap();
    // The bytes of a damaged page: a lone lead byte where UTF-8 text was.
    tamper(&path, "UPDATE messages SET content = CAST(X'C328' AS TEXT) WHERE session_id = 2 AND seq = 0").await;
    tamper(&path, "UPDATE sessions SET error = CAST(X'FF' AS TEXT) WHERE id = 2").await;

    let store = SqliteStore::open(&path, StoreOptions::default()).await.unwrap();
    let error = store.transcript(2).await.unwrap_err();
    let message = error.to_string();
    assert_eq!(problem(&error), Some(Unusable::Corrupt));
    for part in ["column `content`", "table `messages`", "session 2", ".recover", &path.display().to_string()] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    assert!(store.transcript(1).await.is_ok(), "the other sessions read as before");

    // Reading the run page by page goes on past the session that cannot be read.
    let page = store.sessions_page_checked(1, 0, 100).await.unwrap();
    let read: Vec<(i64, bool)> = page.iter().map(|s| (s.id, s.row.is_ok())).collect();
    assert_eq!(read, [(1, true), (2, false), (3, true)]);
    let message = page[1].row.as_ref().unwrap_err().to_string();
    assert!(message.contains("column `error` of table `sessions` for session 2"), "{message}");
    // The whole-run reads say where too.
    let message = store.sessions(1).await.unwrap_err().to_string();
    assert!(
        message.contains("table `sessions`") && message.contains("error") && message.contains(".recover"),
        "{message}"
    );
    store.close().await.unwrap();

    tamper(&path, "UPDATE runs SET config = CAST(X'FF' AS TEXT)").await;
    let store = SqliteStore::open(&path, StoreOptions::default()).await.unwrap();
    let message = store.run(1).await.unwrap_err().to_string();
    assert!(message.contains("column `config` of table `runs` for run 1"), "{message}");
    store.close().await.unwrap();

    // A column of names (read borrowed from the row) says which name it does not know, or that
    // its bytes are not text, for the session it belongs to.
    tamper(&path, "UPDATE sessions SET status = 'finished', termination = 'gone_fishing' WHERE id = 1").await;
    tamper(&path, "UPDATE sessions SET status = 'finished', failure = CAST(X'FF' AS TEXT) WHERE id = 3").await;
    let store = SqliteStore::open(&path, StoreOptions::default()).await.unwrap();
    let page = store.sessions_page_checked(1, 0, 100).await.unwrap();
    let message = page[0].row.as_ref().unwrap_err().to_string();
    assert!(
        message.contains("column `termination` of table `sessions` for session 1")
            && message.contains(r#"unknown termination "gone_fishing""#),
        "{message}"
    );
    let message = page[2].row.as_ref().unwrap_err().to_string();
    assert!(message.contains("column `failure` of table `sessions` for session 3"), "{message}");
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_damaged_page_of_sessions_costs_only_the_sessions_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("parley.db");
    let (store, ids) = store_with_sessions(&dir, 120).await;
    store.close().await.unwrap();
    // Each session's row made long enough (with a marker to find it by) that the table spans
    // many pages.
    tamper(&path, "UPDATE sessions SET error = printf('MARKER-%04d-', id) || substr(hex(zeroblob(300)), 1, 600)").await;
    let mut bytes = std::fs::read(&path).unwrap();
    let page_size = u16::from_be_bytes([bytes[16], bytes[17]]) as usize;
    let at = bytes.windows(12).position(|w| w == b"MARKER-0060-").expect("the marker is in the file");
    let page = at / page_size;
    // An impossible b-tree page type: SQLite reports the page as malformed when it reads it.
    bytes[page * page_size..page * page_size + 8].fill(0xff);
    std::fs::write(&path, &bytes).unwrap();

    let store = SqliteStore::open(&path, StoreOptions::default()).await.unwrap();
    let reads = store.sessions_page_checked(1, 0, 1000).await.unwrap();
    assert_eq!(reads.iter().map(|r| r.id).collect::<Vec<_>>(), ids, "every session is listed");
    let damaged: Vec<i64> = reads.iter().filter(|r| r.row.is_err()).map(|r| r.id).collect();
    // Each row is over 600 bytes: a page holds fewer than `page_size / 600` of them.
    assert!(
        damaged.contains(&60) && damaged.len() * 600 < page_size,
        "only the sessions on the damaged page: {damaged:?}"
    );
    let message = reads[59].row.as_ref().unwrap_err().to_string();
    assert!(message.contains("session 60") && message.contains(".recover"), "{message}");
    store.close().await.unwrap();
}

/// Writes a file in `dir` until the disk refuses more.
fn fill(dir: &Path) {
    use std::io::Write;
    let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
    let block = vec![0u8; 4096];
    while filler.write_all(&block).is_ok() {}
    let _ = filler.sync_all();
}

/// Mounts a tmpfs of `size` at a new folder, for as long as the value lives. `None` where this
/// process may not mount (not root, or no mount namespace).
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().ok()?;
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        status.success().then_some(SmallDisk(dir))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazily: a connection the test left open (as a killed process would) keeps it busy.
        let _ = std::process::Command::new("umount").arg("-l").arg(self.0.path()).status();
    }
}

/// Fills the disk holding the store at `FULL_DISK_DB` with turns until a write fails, prints the
/// error, and exits without closing anything, as a process killed there would. Run by
/// [`a_full_disk_is_named_with_the_file_it_could_not_write`] in a child process; it does
/// nothing when run on its own.
#[tokio::test]
#[ignore = "a child process of another test"]
async fn fill_the_disk_then_die() {
    let Some(path) = std::env::var_os("FULL_DISK_DB") else { return };
    let store = SqliteStore::open(Path::new(&path), StoreOptions::default()).await.unwrap();
    let task = std::sync::Arc::new(parley_core::Task {
        index: 0,
        id: "t".into(),
        messages: vec![],
        tools: Default::default(),
        row: serde_json::json!({}).into(),
    });
    let spec = parley_core::RunSpec { environment: "test".into(), config: serde_json::json!({}) };
    let session = parley_core::SessionSpec { task_index: 0, trial: 0, seed: 0, player: parley_core::Player::Run };
    let (_, ids) = store.create_run(&spec, &[task], &[session]).await.unwrap();
    for seq in 0..1024 {
        let message = MessageRecord { seq, message: Message::user("x".repeat(16 << 10)), call: None };
        let turn = TurnRecord { messages: vec![message], tool_calls: vec![] };
        if let Err(e) = store.commit_turn(Claim::unclaimed(ids[0]), turn).await {
            println!("FULL_DISK_ERROR {e}");
            std::process::exit(0);
        }
    }
    std::process::exit(1);
}

#[tokio::test]
async fn a_full_disk_is_named_with_the_file_it_could_not_write() {
    let Some(disk) = SmallDisk::mount("2m") else {
        eprintln!("skipped: this process cannot mount a small tmpfs (it needs root)");
        return;
    };
    let path = disk.0.path().join("parley.db");
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "damage::fill_the_disk_then_die", "--ignored", "--nocapture"])
        .env("FULL_DISK_DB", &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    let error = stdout.lines().find_map(|l| l.strip_prefix("FULL_DISK_ERROR ")).expect("the child filled the disk");
    eprintln!("writing: {error}");
    assert!(error.contains("is full") && error.contains(&path.display().to_string()), "{error}");

    // The killed process left its WAL to recover; with its shared-memory file gone too, SQLite
    // must build that again, on a disk another program has filled meanwhile. SQLite says "disk
    // I/O error (code: 4874)" then.
    let _ = std::fs::remove_file(disk.0.path().join("parley.db-shm"));
    fill(disk.0.path());
    match SqliteStore::open(&path, StoreOptions::default()).await {
        Err(error) => {
            eprintln!("opening: {error}");
            assert_eq!(problem(&error), Some(Unusable::DiskFull), "{error}");
            assert!(error.to_string().contains(&path.display().to_string()), "{error}");
        }
        Ok(store) => {
            let more = TurnRecord {
                messages: vec![MessageRecord { seq: 5000, message: Message::user("x".repeat(16 << 10)), call: None }],
                tool_calls: vec![],
            };
            let error = store.commit_turn(Claim::unclaimed(1), more).await.unwrap_err();
            eprintln!("opened, then writing: {error}");
            assert_eq!(problem(&error), Some(Unusable::DiskFull), "{error}");
            let _ = store.close().await;
        }
    }
}
