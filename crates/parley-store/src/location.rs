//! Where a store lives, as `--db` names it: a SQLite file, or a PostgreSQL database by its URL.
//!
//! A URL may carry a password. It is kept only to connect: every way a location is shown or
//! stored (`Display`, `Debug`, serde, [`DbLocation::redacted`]) leaves the password out, so that
//! it never reaches a terminal, a log line or a run's stored settings.

use std::path::{Path, PathBuf};

use crate::pg::is_postgres_url;

/// A SQLite file or a PostgreSQL URL.
#[derive(Clone, PartialEq, Eq)]
pub enum DbLocation {
    File(PathBuf),
    /// The URL as given, password included (see the module's note).
    Postgres(String),
}

impl DbLocation {
    /// A `postgres://` or `postgresql://` URL names PostgreSQL; anything else is a file path.
    pub fn parse(db: &str) -> DbLocation {
        if is_postgres_url(db) { DbLocation::Postgres(db.to_owned()) } else { DbLocation::File(db.into()) }
    }

    /// The SQLite file, when it is one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            DbLocation::File(path) => Some(path),
            DbLocation::Postgres(_) => None,
        }
    }

    /// The location as it may be shown and stored: the file's path, or the URL without its
    /// password.
    pub fn redacted(&self) -> String {
        match self {
            DbLocation::File(path) => path.display().to_string(),
            DbLocation::Postgres(url) => redact_url(url),
        }
    }
}

/// `url` without the password of its user part (`user:secret@host` becomes `user@host`) and
/// without a `password=` query parameter, which PostgreSQL's URLs also accept.
pub fn redact_url(url: &str) -> String {
    let Some(parley_core::url::Parts { scheme, userinfo, host, tail }) = parley_core::url::parts(url) else {
        return url.to_owned();
    };
    let authority = match userinfo {
        Some(user) => format!("{}@{host}", user.split_once(':').map_or(user, |(name, _)| name)),
        None => host.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let (query, fragment) = match query.split_once('#') {
                Some((q, f)) => (q, Some(f)),
                None => (query, None),
            };
            let kept: Vec<&str> =
                query.split('&').filter(|pair| !pair.to_ascii_lowercase().starts_with("password=")).collect();
            let mut tail = path.to_owned();
            if !kept.is_empty() {
                tail.push('?');
                tail.push_str(&kept.join("&"));
            }
            if let Some(fragment) = fragment {
                tail.push('#');
                tail.push_str(fragment);
            }
            tail
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

impl std::str::FromStr for DbLocation {
    type Err = std::convert::Infallible;

    fn from_str(db: &str) -> Result<DbLocation, Self::Err> {
        Ok(DbLocation::parse(db))
    }
}

impl From<PathBuf> for DbLocation {
    fn from(path: PathBuf) -> DbLocation {
        DbLocation::File(path)
    }
}

impl From<&Path> for DbLocation {
    fn from(path: &Path) -> DbLocation {
        DbLocation::File(path.to_owned())
    }
}

impl From<&str> for DbLocation {
    fn from(db: &str) -> DbLocation {
        DbLocation::parse(db)
    }
}

impl std::fmt::Display for DbLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl std::fmt::Debug for DbLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.redacted())
    }
}

/// Stored as the text `--db` takes, without a URL's password.
impl serde::Serialize for DbLocation {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.redacted())
    }
}

impl<'de> serde::Deserialize<'de> for DbLocation {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<DbLocation, D::Error> {
        let db = String::deserialize(deserializer)?;
        Ok(DbLocation::parse(&db))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_never_shown_or_stored() {
        let db = DbLocation::parse("postgres://parley:s3cret@db.example:5432/runs?sslmode=require&password=other");
        for shown in [db.to_string(), format!("{db:?}"), serde_json::to_string(&db).unwrap(), db.redacted()] {
            assert!(!shown.contains("s3cret") && !shown.contains("other"), "{shown}");
            assert!(shown.contains("parley@db.example:5432/runs?sslmode=require"), "{shown}");
        }
        assert_eq!(redact_url("postgresql://u@h/d"), "postgresql://u@h/d");
        assert_eq!(redact_url("postgres://u:p@h"), "postgres://u@h");
        assert_eq!(redact_url("postgres://u:p%40x@h/d?password=q"), "postgres://u@h/d");
    }

    #[test]
    fn a_path_is_a_file_and_a_url_is_postgres() {
        assert_eq!(DbLocation::parse("runs/parley.db").file(), Some(Path::new("runs/parley.db")));
        assert!(matches!(DbLocation::parse("postgresql://h/d"), DbLocation::Postgres(_)));
        let stored: DbLocation = serde_json::from_str("\"x.db\"").unwrap();
        assert_eq!(stored, DbLocation::File("x.db".into()));
    }
}
