//! A cookie jar for one session with one server: NeMo Gym keys per-session state on a signed
//! session cookie, so every session keeps its own jar and sends it back on every call.

use std::collections::BTreeMap;

/// Cookies by name. Only name and value matter here: every server is reached on one origin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CookieJar {
    cookies: BTreeMap<String, String>,
}

impl CookieJar {
    /// Merges `Set-Cookie` header values: a new value replaces the old one, an expired or
    /// empty cookie removes it.
    pub fn merge<'a>(&mut self, set_cookies: impl IntoIterator<Item = &'a str>) {
        for header in set_cookies {
            let mut parts = header.split(';');
            let Some((name, value)) = parts.next().and_then(|p| p.split_once('=')) else { continue };
            let (name, value) = (name.trim(), value.trim().trim_matches('"'));
            let expired = parts.any(|attribute| {
                let attribute = attribute.trim().to_ascii_lowercase();
                attribute == "max-age=0" || attribute.starts_with("max-age=-")
            });
            if expired || value.is_empty() {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
        }
    }

    /// The `Cookie` header value, or `None` for an empty jar.
    pub fn header(&self) -> Option<String> {
        (!self.cookies.is_empty())
            .then(|| self.cookies.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join("; "))
    }

    pub fn is_empty(&self) -> bool {
        self.cookies.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_replaces_and_expires_cookies() {
        let mut jar = CookieJar::default();
        jar.merge(["S___x=abc.def; path=/; Max-Age=1209600; httponly; samesite=lax", "b=1"]);
        assert_eq!(jar.header().as_deref(), Some("S___x=abc.def; b=1"));
        jar.merge(["b=2; path=/"]);
        assert_eq!(jar.header().as_deref(), Some("S___x=abc.def; b=2"));
        jar.merge(["S___x=; Max-Age=0"]);
        assert_eq!(jar.header().as_deref(), Some("b=2"));
    }
}
