//! The connection loop of Parley's servers (`parley serve`, `parley view`): HTTP/1.1 and 2 with
//! upgrades (WebSocket), graceful shutdown, and what a careless or hostile client cannot hold:
//! a request's head must arrive within [`Limits::header_timeout`] (a client sending a byte a
//! second is cut off), and at most [`Limits::connections`] are open at once (beyond them the
//! listener waits, so the process never runs out of file descriptors for the clients it serves).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// What one client may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time for a request's head (request line and headers) to arrive whole.
    pub header_timeout: Duration,
    /// Connections open at once.
    pub connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { header_timeout: Duration::from_secs(10), connections: 16_384 }
    }
}

/// Serves `service` on `listener` until `shutdown` completes, then lets the connections in
/// flight finish their requests.
pub async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    S: tower::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    let graceful = GracefulShutdown::new();
    let open = Arc::new(Semaphore::new(limits.connections.max(1)));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&open).acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors or a connection reset before it was taken: wait a
                    // moment rather than spin.
                    tracing::warn!(%error, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(service.clone());
        let (builder, watcher) = (Arc::clone(&builder), graceful.watcher());
        tokio::spawn(async move {
            // The header timeout starts with a request's first byte: a connection that sends
            // none within it (nor between requests, which the timeout covers) is let go.
            let mut first = [0u8; 1];
            if !matches!(tokio::time::timeout(limits.header_timeout, stream.peek(&mut first)).await, Ok(Ok(1..))) {
                drop(permit);
                return;
            }
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            if let Err(error) = watcher.watch(connection.into_owned()).await {
                tracing::debug!(error = %error, "a connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
