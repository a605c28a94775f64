//! Ids from paths and values from query strings, checked: anything malformed is a
//! [`PageError::BadRequest`] that names the parameter, never a panic and never passed on.

use axum::extract::Query;
use axum::http::Uri;

use crate::error::PageError;

/// A positive id from a path segment.
pub fn id(segment: &str, what: &str) -> Result<i64, PageError> {
    segment
        .parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| PageError::BadRequest(format!("{what} `{segment}` is not an id (a positive whole number)")))
}

/// A query string's parameters, of which a page names those it takes.
pub struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    /// The parameters of `uri`, refusing names outside `known` so that a mistyped filter is
    /// reported rather than silently ignored.
    pub fn of(uri: &Uri, known: &[&str]) -> Result<Params, PageError> {
        let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(uri)
            .map_err(|e| PageError::BadRequest(format!("the query string cannot be read: {e}")))?;
        if let Some((name, _)) = pairs.iter().find(|(name, _)| !known.contains(&name.as_str())) {
            return Err(PageError::BadRequest(format!(
                "unknown parameter `{name}`; this page takes: {}",
                known.join(", ")
            )));
        }
        Ok(Params { pairs })
    }

    /// The last non-empty value of `name` (an empty form field counts as absent).
    pub fn text(&self, name: &str) -> Option<&str> {
        self.pairs.iter().rev().find(|(n, v)| n == name && !v.is_empty()).map(|(_, v)| v.as_str())
    }

    pub fn int(&self, name: &str) -> Result<Option<i64>, PageError> {
        self.text(name)
            .map(|v| {
                v.trim()
                    .parse::<i64>()
                    .map_err(|_| PageError::BadRequest(format!("{name} `{v}` is not a whole number")))
            })
            .transpose()
    }

    pub fn number(&self, name: &str) -> Result<Option<f64>, PageError> {
        self.text(name)
            .map(|v| {
                v.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| PageError::BadRequest(format!("{name} `{v}` is not a number")))
            })
            .transpose()
    }

    /// A value that must be one of `choices`, each known by its `name_of`.
    pub fn choice<T: Copy>(
        &self,
        name: &str,
        choices: &[T],
        name_of: fn(T) -> &'static str,
    ) -> Result<Option<T>, PageError> {
        let Some(v) = self.text(name) else { return Ok(None) };
        match choices.iter().copied().find(|&c| name_of(c) == v) {
            Some(choice) => Ok(Some(choice)),
            None => {
                let names: Vec<&str> = choices.iter().map(|&c| name_of(c)).collect();
                Err(PageError::BadRequest(format!("{name} `{v}` is not one of: {}", names.join(", "))))
            }
        }
    }
}
