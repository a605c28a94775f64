//! A tower layer that reads each answer's body whole, inside the stack, up to a size limit.
//!
//! Reading the body here rather than in the caller puts it under the per-attempt timeout (a
//! server that stalls mid-body is cut off like one that never answers) and under the retry
//! layer (a connection reset mid-body is retried like a refused one), and it bounds memory: a
//! body larger than the limit is abandoned as it arrives, never buffered whole.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use async_openai::middleware::HttpRequestFactory;
use reqwest::Response;
use tower::{BoxError, Layer, Service};

/// An answer whose body passed the limit.
#[derive(Debug, thiserror::Error)]
#[error("the response body is larger than the limit of {limit} bytes; raise --max-response-bytes to accept it")]
pub struct TooLarge {
    pub limit: usize,
}

#[derive(Debug, Clone, Copy)]
pub struct WholeBodyLayer {
    pub limit: usize,
}

impl<S> Layer<S> for WholeBodyLayer {
    type Service = WholeBody<S>;

    fn layer(&self, inner: S) -> WholeBody<S> {
        WholeBody { inner, limit: self.limit }
    }
}

#[derive(Debug, Clone)]
pub struct WholeBody<S> {
    inner: S,
    limit: usize,
}

impl<S> Service<HttpRequestFactory> for WholeBody<S>
where
    S: Service<HttpRequestFactory, Response = Response>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: HttpRequestFactory) -> Self::Future {
        let answer = self.inner.call(request);
        let limit = self.limit;
        Box::pin(async move { read_whole(answer.await.map_err(Into::into)?, limit).await })
    }
}

async fn read_whole(mut response: Response, limit: usize) -> Result<Response, BoxError> {
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(TooLarge { limit }.into());
    }
    let mut body = Vec::with_capacity(response.content_length().map_or(8 << 10, |n| n as usize));
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Err(TooLarge { limit }.into());
        }
        body.extend_from_slice(&chunk);
    }
    let mut whole = http::Response::new(body);
    *whole.status_mut() = response.status();
    *whole.version_mut() = response.version();
    *whole.headers_mut() = std::mem::take(response.headers_mut());
    Ok(Response::from(whole))
}
