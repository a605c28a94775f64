//! The page shell (head, navigation, style sheet), the headers every response carries, and
//! small formatting helpers shared by the pages.

use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

/// The style sheet, served from `/style.css` so that the policy can forbid inline styles and
/// scripts alike.
const STYLE: &str = include_str!("style.css");

/// No script may run, from anywhere; styles and images come only from the viewer itself. This
/// is the second wall behind escaping: even text that escaped it could not execute.
const POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; \
                      frame-ancestors 'none'";

pub async fn headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // Pages show a database that changes while a run goes on; never serve a stale copy.
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

pub async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8"), (header::CACHE_CONTROL, "max-age=300")], STYLE).into_response()
}

/// A whole page. `refresh` reloads it every so many seconds: a running run's pages use it to
/// follow sessions as they finish without any script.
pub fn shell(title: &str, refresh: Option<u32>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(seconds) = refresh {
                    meta http-equiv="refresh" content=(seconds);
                }
                title { (title) " · Parley" }
                link rel="stylesheet" href="/style.css";
            }
            body {
                nav { a.brand href="/" { "Parley" } " " a href="/" { "Runs" } }
                main { (body) }
            }
        }
    }
}

/// A reward, or a dash when there is none.
pub fn reward(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |v| format!("{v:.3}"))
}

/// Milliseconds, or a dash.
pub fn ms(value: Option<f64>) -> String {
    match value {
        Some(v) if v >= 10_000.0 => format!("{:.1} s", v / 1000.0),
        Some(v) => format!("{v:.1} ms"),
        None => "–".to_owned(),
    }
}

/// A fraction in [0, 1], or a dash.
pub fn fraction(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |v| format!("{v:.3}"))
}

/// The most of one text a page shows; a tool's output may be megabytes, and the page says
/// how much it left out rather than making the browser lay out all of it.
pub const SHOWN_BYTES: usize = 64 * 1024;

/// `text` cut to [`SHOWN_BYTES`] at a character boundary, with a note of what was left out.
pub fn clipped(text: &str) -> Markup {
    if text.len() <= SHOWN_BYTES {
        return html! { (text) };
    }
    let mut end = SHOWN_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    html! {
        (&text[..end])
        span.clip { "… (" (text.len() - end) " more bytes not shown)" }
    }
}

/// JSON text shown indented when it parses, as it was otherwise.
pub fn json_text(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_owned())
}
