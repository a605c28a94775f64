//! Errors as pages: a request that names nothing (404) or asks badly (400) gets a page that
//! says what was wrong; a store that cannot be read gets a 500 page with the store's message.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::html;
use parley_core::StoreError;

use crate::layout::shell;

/// Why a page could not be shown.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("{0}")]
    Store(StoreError),
}

impl From<StoreError> for PageError {
    fn from(e: StoreError) -> PageError {
        match e {
            StoreError::NotFound(what) => PageError::NotFound(what),
            other => PageError::Store(other),
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let (status, title) = match &self {
            PageError::NotFound(_) => (StatusCode::NOT_FOUND, "Not found"),
            PageError::BadRequest(_) => (StatusCode::BAD_REQUEST, "Bad request"),
            PageError::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, "The store could not be read"),
        };
        if status.is_server_error() {
            tracing::warn!(error = %self, "a page failed");
        }
        let body = shell(
            title,
            None,
            html! {
                h1 { (title) }
                p.error { (self.to_string()) }
                p { a href="/" { "All runs" } }
            },
        );
        (status, body).into_response()
    }
}

/// Any path the viewer does not serve.
pub async fn not_found(uri: axum::http::Uri) -> PageError {
    PageError::NotFound(format!("the page {}", uri.path()))
}
