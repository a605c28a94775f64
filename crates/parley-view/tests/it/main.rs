//! The router without a socket (`oneshot`), on an empty store: what a page answers when there is
//! nothing to show, an id that names nothing, a malformed one, and a request without the token.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use parley_store::{SqliteStore, StoreOptions};
use parley_view::{Access, router};
use tower::ServiceExt;

async fn get(app: &axum::Router, path: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
    let mut request = Request::get(path);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = app.clone().oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("parley.db"), StoreOptions::default()).await.unwrap();
    (dir, store)
}

#[tokio::test]
async fn an_empty_store_has_pages_that_say_so() {
    let (_dir, store) = store().await;
    let app = router(store, Access::open());
    let (status, body) = get(&app, "/", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("holds no runs yet"), "{body}");
    for (path, want) in [
        ("/runs/1", StatusCode::NOT_FOUND),
        ("/runs/1/sessions", StatusCode::NOT_FOUND),
        ("/sessions/1", StatusCode::NOT_FOUND),
        ("/sessions/0", StatusCode::BAD_REQUEST),
        ("/sessions/99999999999999999999999", StatusCode::BAD_REQUEST),
        ("/runs/1/sessions?limit=5000", StatusCode::BAD_REQUEST),
        ("/compare?a=1&b=x", StatusCode::BAD_REQUEST),
        ("/style.css/../etc", StatusCode::NOT_FOUND),
    ] {
        let (status, body) = get(&app, path, &[]).await;
        assert_eq!(status, want, "{path}: {body}");
        assert!(body.starts_with("<!DOCTYPE html>"), "{path} answers with a page: {body}");
    }
}

#[tokio::test]
async fn with_a_token_only_its_holders_are_served() {
    let (_dir, store) = store().await;
    let app = router(store, Access::token("t0ken"));
    assert_eq!(get(&app, "/", &[]).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(get(&app, "/", &[("authorization", "Bearer t0ke")]).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(get(&app, "/", &[("authorization", "Basic t0ken")]).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(get(&app, "/", &[("cookie", "parley_view_token=wrong")]).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(get(&app, "/?token=nope", &[]).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(get(&app, "/", &[("authorization", "Bearer t0ken")]).await.0, StatusCode::OK);
    assert_eq!(get(&app, "/", &[(header::COOKIE.as_str(), "a=b; parley_view_token=t0ken")]).await.0, StatusCode::OK);
    assert_eq!(get(&app, "/?token=t0ken", &[]).await.0, StatusCode::SEE_OTHER);
}

/// The crate's escaping invariant as a check on its sources: no markup is ever taken as already
/// escaped, so everything a page shows passes through maud's escaping.
#[test]
fn no_source_file_bypasses_escaping() {
    let mut stack = vec![std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files += 1;
                let source = std::fs::read_to_string(&path).unwrap();
                let code: String = source.lines().filter(|l| !l.trim_start().starts_with("//")).collect();
                assert!(!code.contains("PreEscaped"), "{} uses PreEscaped", path.display());
                assert!(!code.contains("maud::Render for"), "{} renders raw markup", path.display());
            }
        }
    }
    assert!(files >= 10, "read {files} source files");
}
