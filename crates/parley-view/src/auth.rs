//! Who may read: on loopback anyone on this machine; elsewhere only requests carrying the
//! bearer token, in an `Authorization: Bearer TOKEN` header or in the cookie a browser gets by
//! opening any page once with `?token=TOKEN`. Either way no web page of another site, and no
//! name that is not this server's on loopback (DNS rebinding), is served ([`parley_http::guard`]).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use parley_http::guard::Site;

const COOKIE: &str = "parley_view_token";

/// The token requests must carry, or none, and the site the viewer is.
#[derive(Clone)]
pub struct Access {
    token: Option<Arc<str>>,
    site: Site,
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
        Access { token: None, site: Site::default() }
    }

    /// Only requests that carry `token` are served.
    pub fn token(token: &str) -> Access {
        Access { token: Some(token.into()), site: Site::default() }
    }

    /// Served at `site` (which names and web pages may reach it).
    pub fn at(self, site: Site) -> Access {
        Access { site, ..self }
    }
}

fn carried(headers: &HeaderMap, token: &str) -> bool {
    let bearer = parley_http::guard::carries_bearer(headers, token);
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .any(|t| parley_http::guard::same(t.as_bytes(), token.as_bytes()));
    bearer || cookie
}

pub async fn check(State(access): State<Arc<Access>>, request: Request, next: Next) -> Response {
    if let Err(why) = access.site.check(request.headers()) {
        return (StatusCode::FORBIDDEN, format!("403 Forbidden: {why}\n")).into_response();
    }
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
        && parley_http::guard::same(offered.as_bytes(), token.as_bytes())
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
