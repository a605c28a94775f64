//! A URL's parts, found without a URL parser: its user part (`user:secret@` in
//! `http://user:secret@host:8000/v1`) and its host.
//!
//! Parley sends keys in headers only, so every HTTP client, flag and field refuses a base URL
//! that carries a user part ([`base`]), and a database URL is shown and stored without its
//! password (the store's `redact_url`): neither reaches a database, a log or an error's text. A
//! model at a loopback address ([`is_loopback`]) is served on Parley's own machine, which then
//! leaves it a core (`parley run`'s workers).

/// A URL cut at its authority: `scheme` before `://`, the user part before the authority's
/// last `@` (when there is one), the host and port, and the rest (path, query, fragment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts<'a> {
    pub scheme: &'a str,
    pub userinfo: Option<&'a str>,
    pub host: &'a str,
    pub tail: &'a str,
}

/// `url` cut into its [`Parts`]; `None` when it has no `://`.
pub fn parts(url: &str) -> Option<Parts<'_>> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((userinfo, host)) => (Some(userinfo), host),
        None => (None, authority),
    };
    Some(Parts { scheme, userinfo, host, tail })
}

/// Whether `url`'s host is this machine: `localhost`, an address in `127.0.0.0/8`, or `[::1]`.
pub fn is_loopback(url: &str) -> bool {
    let Some(Parts { host, .. }) = parts(url) else { return false };
    // Less the port: after the bracket of an IPv6 address, or after the last `:` of any other.
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or(v6, |(address, _)| address),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Why a URL cannot be the base of the calls Parley makes (a model's, a resources server's, a
/// trainer's policy), as every place that takes one checks it ([`base`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotABase {
    /// Not an `http://` or `https://` URL.
    NotHttp,
    /// It carries a user part; the URL without it, to name it by ([`credentials_refused`]).
    Credentials(String),
}

/// `url` as a base URL: an `http://` or `https://` URL without a user part, which no client
/// sends and no record should keep.
pub fn base(url: &str) -> Result<&str, NotABase> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(NotABase::NotHttp);
    }
    match credentials(url) {
        Some(without) => Err(NotABase::Credentials(without)),
        None => Ok(url),
    }
}

/// When `url` carries a user part, the URL without it, to name the URL by in an error.
pub fn credentials(url: &str) -> Option<String> {
    let Parts { scheme, userinfo, host, tail } = parts(url)?;
    userinfo.map(|_| format!("{scheme}://{host}{tail}"))
}

/// The error's text for a base URL with a user part, given as `flag` (a flag, or a field):
/// the URL without it, and what to do instead.
pub fn credentials_refused(flag: &str, without: &str) -> String {
    format!(
        "{flag} `{without}` was given with a user and password before the host; Parley does not send them, \
         and keeps URLs in its records: give the URL without them, and a key through an API key variable \
         (--api-key-env NAME)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_part_is_found_before_the_hosts_last_at() {
        let p = parts("http://user:p@ss@host:8000/v1?x=a@b#f").unwrap();
        assert_eq!(p, Parts { scheme: "http", userinfo: Some("user:p@ss"), host: "host:8000", tail: "/v1?x=a@b#f" });
        assert_eq!(parts("https://host").unwrap().userinfo, None);
        assert_eq!(
            parts("http://host/a@b").unwrap(),
            Parts { scheme: "http", userinfo: None, host: "host", tail: "/a@b" }
        );
        assert_eq!(parts("host:8000"), None);
    }

    #[test]
    fn loopback_hosts_are_this_machine_and_others_are_not() {
        for url in [
            "http://127.0.0.1:8000/v1",
            "http://127.9.0.3/v1",
            "http://localhost:1",
            "https://LOCALHOST/v1",
            "http://[::1]:8000/v1",
            "http://u@127.0.0.1:9",
        ] {
            assert!(is_loopback(url), "{url}");
        }
        for url in [
            "http://10.0.0.7:8000/v1",
            "http://localhost.example:1",
            "http://[::2]:80",
            "http://128.0.0.1",
            "https://api.example/v1",
            "127.0.0.1:8000",
        ] {
            assert!(!is_loopback(url), "{url}");
        }
    }

    #[test]
    fn a_base_is_an_http_url_without_a_user_part() {
        assert_eq!(base("http://h:8000/v1"), Ok("http://h:8000/v1"));
        assert_eq!(base("https://h/v1?user=a@b"), Ok("https://h/v1?user=a@b"));
        for url in ["h:8000/v1", "ftp://h/v1", "HTTP://h/v1", "", "/v1"] {
            assert_eq!(base(url), Err(NotABase::NotHttp), "{url}");
        }
        assert_eq!(base("http://u:secret@h/v1"), Err(NotABase::Credentials("http://h/v1".into())));
    }

    #[test]
    fn a_url_with_credentials_is_named_without_them() {
        assert_eq!(credentials("http://u:secret@10.0.0.7:8000/v1").as_deref(), Some("http://10.0.0.7:8000/v1"));
        assert_eq!(credentials("https://token@h/v1").as_deref(), Some("https://h/v1"));
        assert_eq!(credentials("http://h:8000/v1"), None);
        assert_eq!(credentials("http://h:8000/v1?user=a@b"), None);
        let text = credentials_refused("--base-url", "http://h/v1");
        assert!(text.contains("--base-url `http://h/v1`") && text.contains("--api-key-env"), "{text}");
    }
}
