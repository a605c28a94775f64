//! A tower layer that reads each answer's body whole, inside the stack, up to a size limit.
//!
//! Reading the body here rather than in the caller puts it under the per-attempt timeout (a
//! server that stalls mid-body is cut off like one that never answers) and under the retry
//! policy (a connection reset mid-body is retried like a refused one), and it bounds memory: a
//! body larger than the limit is abandoned as it arrives, never buffered whole. Every key in
//! [`secrets`](crate::secrets) is redacted from the body here, before anything else reads it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut};
use http::HeaderMap;
use http_body::Body;
use http_body_util::BodyExt;
use tower::{BoxError, Layer, Service};

/// A whole answer: its status, headers and body, with every registered key redacted.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The wait the answer's `Retry-After` asks for, in seconds (HTTP dates are not read). A
    /// value too large for a `Duration` is the longest one, never a panic.
    pub fn retry_after(&self) -> Option<Duration> {
        let value = self.headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
        let seconds: f64 = value.trim().parse().ok()?;
        if seconds.is_nan() || seconds < 0.0 {
            return None;
        }
        Some(Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX))
    }

    /// The body as text, with invalid UTF-8 replaced.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

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

impl<S, R, B> Service<R> for WholeBody<S>
where
    S: Service<R, Response = http::Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = Answer;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let answer = self.inner.call(request);
        let limit = self.limit;
        Box::pin(async move { read_whole(answer.await.map_err(Into::into)?, limit).await })
    }
}

async fn read_whole<B>(response: http::Response<B>, limit: usize) -> Result<Answer, BoxError>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    let (head, mut incoming) = response.into_parts();
    // The body's declared length (its `Content-Length`), when it has one.
    let length = incoming.size_hint().exact();
    if length.is_some_and(|n| n > limit as u64) {
        return Err(TooLarge { limit }.into());
    }
    let capacity = length.map_or(8 << 10, |n| usize::try_from(n).unwrap_or(limit));
    let mut body = Vec::with_capacity(capacity.min(limit));
    while let Some(frame) = incoming.frame().await {
        // Trailers, the only other kind of frame, are not read.
        let Ok(data) = frame.map_err(Into::into)?.into_data() else { continue };
        if body.len() + data.remaining() > limit {
            return Err(TooLarge { limit }.into());
        }
        body.put(data);
    }
    let body = crate::secrets::redact_bytes(body);
    Ok(Answer { status: head.status.as_u16(), headers: head.headers, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_retry_after(value: &str) -> Answer {
        let mut answer = Answer { status: 429, ..Answer::default() };
        answer.headers.insert(http::header::RETRY_AFTER, value.parse().unwrap());
        answer
    }

    #[test]
    fn retry_after_of_any_size_never_panics() {
        assert_eq!(with_retry_after("2").retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(with_retry_after("1e300").retry_after(), Some(Duration::MAX));
        assert_eq!(with_retry_after("-1").retry_after(), None);
        assert_eq!(with_retry_after("NaN").retry_after(), None);
        assert_eq!(with_retry_after("Wed, 21 Oct 2015 07:28:00 GMT").retry_after(), None);
    }
}
