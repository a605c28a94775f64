//! What Parley's servers (`parley serve`, `parley view`) check of a request before serving it:
//! that it carries the bearer token, when one is set, and that no web page sent it from a
//! browser. A page on another site can send a form or a `fetch` to a loopback port (with an
//! `Origin` header naming its own site), and a site whose DNS name turns to 127.0.0.1 can read
//! the answers (its requests name its own name in `Host`); neither reaches a loopback server
//! that refuses foreign origins and hosts. Trainers, `curl` and other programs send no `Origin`.

use http::HeaderMap;
use http::header::{AUTHORIZATION, HOST, ORIGIN};

/// Shortest bearer token a server off loopback accepts.
pub const MIN_TOKEN_LEN: usize = 16;

/// Equal secrets, compared in time that does not depend on where they first differ.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether an `Authorization` header carries `token` (the scheme's case does not matter).
pub fn carries_bearer(headers: &HeaderMap, token: &str) -> bool {
    headers.get_all(AUTHORIZATION).iter().filter_map(|v| v.to_str().ok()).any(|value| {
        let (scheme, given) = value.trim().split_once(' ').unwrap_or((value, ""));
        scheme.eq_ignore_ascii_case("bearer") && same(given.trim().as_bytes(), token.as_bytes())
    })
}

/// Why a token cannot guard a server that other machines reach, or `None` when it can.
pub fn weak_token(token: &str) -> Option<String> {
    (token.len() < MIN_TOKEN_LEN).then(|| {
        format!(
            "the token is {} characters; one that guards a port other machines reach needs at least \
             {MIN_TOKEN_LEN} (for example `openssl rand -hex 16`)",
            token.len()
        )
    })
}

/// Which browsers' requests a server takes.
#[derive(Debug, Clone, Default)]
pub struct Site {
    /// Served on loopback: only this machine's names are taken in `Host`.
    loopback: bool,
    /// Origins whose pages may send requests (`https://trainer.example:8443`), beside the
    /// server's own.
    origins: Vec<String>,
}

impl Site {
    /// A server on `address`, taking pages of `origins` beside its own.
    pub fn new(address: std::net::IpAddr, origins: Vec<String>) -> Site {
        let origins = origins.into_iter().map(|o| o.trim_end_matches('/').to_ascii_lowercase()).collect();
        Site { loopback: address.is_loopback(), origins }
    }

    /// `Ok` when the request may be served; else why not (answered 403).
    pub fn check(&self, headers: &HeaderMap) -> Result<(), String> {
        let host = headers.get(HOST).and_then(|v| v.to_str().ok()).unwrap_or_default().to_ascii_lowercase();
        if self.loopback && !host.is_empty() && !is_local_name(host_name(&host)) {
            return Err(format!(
                "`Host: {host}` is not this machine's name: a server on loopback answers only to localhost, \
                 127.0.0.1 and [::1]"
            ));
        }
        let Some(origin) = headers.get(ORIGIN) else { return Ok(()) };
        let origin = origin.to_str().unwrap_or("null").trim_end_matches('/').to_ascii_lowercase();
        let own = ["http://", "https://"].iter().any(|scheme| origin.strip_prefix(scheme) == Some(host.as_str()));
        if own || self.origins.contains(&origin) {
            return Ok(());
        }
        Err(format!(
            "requests from web pages of `{origin}` are refused; start the server with --allow-origin {origin} to take \
             them"
        ))
    }
}

/// The name in a `Host` value, without its port (`[::1]:8080` → `[::1]`).
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

fn is_local_name(name: &str) -> bool {
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    name == "localhost"
        || name.ends_with(".localhost")
        || bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn a_bearer_token_is_read_whatever_the_schemes_case() {
        let token = "0123456789abcdef";
        assert!(carries_bearer(&headers(&[("authorization", "Bearer 0123456789abcdef")]), token));
        assert!(carries_bearer(&headers(&[("authorization", "bearer 0123456789abcdef")]), token));
        assert!(carries_bearer(&headers(&[("authorization", "BEARER  0123456789abcdef ")]), token));
        assert!(!carries_bearer(&headers(&[("authorization", "Basic 0123456789abcdef")]), token));
        assert!(!carries_bearer(&headers(&[("authorization", "Bearer 0123456789abcdeF")]), token));
        assert!(!carries_bearer(&headers(&[]), token));
        assert!(weak_token("x").is_some() && weak_token(token).is_none());
    }

    #[test]
    fn on_loopback_only_local_names_and_own_or_allowed_origins_are_served() {
        let site = Site::new("127.0.0.1".parse().unwrap(), vec!["https://trainer.example/".into()]);
        assert!(site.check(&headers(&[("host", "127.0.0.1:8080")])).is_ok());
        assert!(site.check(&headers(&[("host", "localhost:8080")])).is_ok());
        assert!(site.check(&headers(&[("host", "[::1]:8080")])).is_ok());
        assert!(site.check(&headers(&[])).is_ok(), "HTTP/1.0 without a Host");
        let rebound = site.check(&headers(&[("host", "attacker.example:8080")])).unwrap_err();
        assert!(rebound.contains("attacker.example"), "{rebound}");
        assert!(site.check(&headers(&[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:8080")])).is_ok());
        assert!(site.check(&headers(&[("host", "127.0.0.1:8080"), ("origin", "https://trainer.example")])).is_ok());
        let foreign = site.check(&headers(&[("host", "127.0.0.1:8080"), ("origin", "https://evil.example")]));
        assert!(foreign.unwrap_err().contains("--allow-origin https://evil.example"));
        assert!(site.check(&headers(&[("host", "127.0.0.1:8080"), ("origin", "null")])).is_err());
        // Off loopback any name reaches the server (a cluster's names vary); origins still count.
        let cluster = Site::new("10.0.0.5".parse().unwrap(), vec![]);
        assert!(cluster.check(&headers(&[("host", "node-3.cluster:8080")])).is_ok());
        assert!(
            cluster.check(&headers(&[("host", "node-3.cluster:8080"), ("origin", "https://evil.example")])).is_err()
        );
    }
}
