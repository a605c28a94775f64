//! The web viewer behind `parley view`: runs, their summaries and plots, pages of sessions,
//! transcripts and side-by-side comparisons, rendered on the server as HTML from templates
//! compiled into the binary (maud), read from the store through `parley-store`'s public API.
//!
//! Invariants: it only reads the store. Every string that a model, a user, a tool or a task
//! wrote reaches the page through maud's escaping (the crate never uses `PreEscaped`; a test
//! reads its sources to keep it so), plots are SVG elements built from numbers, and every
//! response carries a content security policy that allows no script at all, so hostile text in
//! a transcript is shown, never run. Bad input (an unknown id, a malformed query) is a 400 or
//! 404 page, never a panic. Off loopback, every request must carry the token (see [`Access`]).

mod auth;
mod error;
mod figures;
mod layout;
mod pages;
mod plot;
mod query;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use parley_store::Store;

pub use auth::Access;
pub use error::PageError;

/// What every handler reads from.
pub(crate) struct AppState {
    pub store: Store,
    pub figures: figures::FigureCache,
}

/// The viewer's routes over `store`, behind `access`.
pub fn router(store: impl Into<Store>, access: Access) -> Router {
    let state = Arc::new(AppState { store: store.into(), figures: figures::FigureCache::default() });
    Router::new()
        .route("/", get(pages::runs::page))
        .route("/runs/{run}", get(pages::run::page))
        .route("/runs/{run}/sessions", get(pages::sessions::page))
        .route("/runs/{run}/scores", get(pages::scores::page))
        .route("/sessions/{session}", get(pages::session::page))
        .route("/compare", get(pages::compare::page))
        .route("/style.css", get(layout::style))
        .fallback(error::not_found)
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(Arc::new(access), auth::check))
        .layer(axum::middleware::from_fn(layout::headers))
}

/// Serves `router` on `listener` until `shutdown` completes, then lets requests in flight end.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    parley_http::server::serve(listener, router, parley_http::server::Limits::default(), shutdown).await
}
