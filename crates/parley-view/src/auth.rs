//! Who may read: on loopback anyone on this machine; elsewhere only requests carrying the
//! bearer token, in an `Authorization: Bearer TOKEN` header or in the cookie a browser gets by
//! opening any page once with `?token=TOKEN`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

const COOKIE: &str = "parley_view_token";

/// The token requests must carry, or none.
#[derive(Clone)]
pub struct Access {
    token: Option<Arc<str>>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token itself is never printed.
        f.debug_struct("Access").field("token", &self.token.as_ref().map(|_| "…")).finish()
    }
}

impl Access {
    /// Every request is served: for a viewer bound to loopback.
    pub fn open() -> Access {
        Access { token: None }
    }

    /// Only requests that carry `token` are served.
    pub fn token(token: &str) -> Access {
        Access { token: Some(token.into()) }
    }
}

/// Equal tokens, compared in time that does not depend on where they first differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn carried(headers: &HeaderMap, token: &str) -> bool {
    let bearer = headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.strip_prefix("Bearer "))
        .any(|t| same(t.trim().as_bytes(), token.as_bytes()));
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .any(|t| same(t.as_bytes(), token.as_bytes()));
    bearer || cookie
}

pub async fn check(State(access): State<Arc<Access>>, request: Request, next: Next) -> Response {
    let Some(token) = access.token.as_deref() else {
        return next.run(request).await;
    };
    if carried(request.headers(), token) {
        return next.run(request).await;
    }
    // A browser cannot send a header from the address bar: `?token=` sets the cookie once and
    // sends it on to the same page without the token in its address.
    let offered = request.uri().query().into_iter().flat_map(|q| q.split('&')).find_map(|kv| kv.strip_prefix("token="));
    if let Some(offered) = offered
        && same(offered.as_bytes(), token.as_bytes())
    {
        let path = request.uri().path().to_owned();
        let mut response = Redirect::to(&path).into_response();
        if let Ok(cookie) = HeaderValue::from_str(&format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict")) {
            response.headers_mut().insert(header::SET_COOKIE, cookie);
        }
        return response;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "401 Unauthorized: this viewer needs its token (Authorization: Bearer TOKEN, or open a page with ?token=TOKEN)\n",
    )
        .into_response()
}
