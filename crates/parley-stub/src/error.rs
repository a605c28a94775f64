//! OpenAI-style error answers: `{"error": {"message", "type", "param", "code"}}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error the stub answers with, in the shape OpenAI clients parse.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    kind: &'static str,
    code: Option<&'static str>,
    message: String,
}

impl ApiError {
    /// 400 `invalid_request_error`: the request could not be understood.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, kind: "invalid_request_error", code: None, message: message.into() }
    }

    /// 429 `rate_limit_error`, the injected rate-limit fault.
    pub(crate) fn rate_limited() -> Self {
        Self {
            status: StatusCode::TOO_MANY_REQUESTS,
            kind: "rate_limit_error",
            code: Some("rate_limit_exceeded"),
            message: "parley-stub: injected rate-limit fault; retry after the Retry-After delay".to_owned(),
        }
    }

    /// 500 `server_error`, the injected server-error fault.
    pub(crate) fn server_error() -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            code: None,
            message: "parley-stub: injected server-error fault; a retry may succeed".to_owned(),
        }
    }

    /// 503 `server_error`: the stub was shut down while a hang fault was sleeping.
    pub(crate) fn shutting_down() -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "server_error",
            code: None,
            message: "parley-stub: shutting down during an injected hang".to_owned(),
        }
    }

    /// 404 `invalid_request_error` for paths the stub does not serve.
    pub(crate) fn not_found(path: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            code: Some("unknown_url"),
            message: format!(
                "parley-stub serves no {path}; it serves GET /v1/models, \
                 POST /v1/chat/completions, POST /v1/responses and GET /stub/stats"
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": null,
                "code": self.code,
            }
        });
        (self.status, Json(body)).into_response()
    }
}
