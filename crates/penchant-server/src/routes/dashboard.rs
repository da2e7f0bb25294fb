//! `GET /dashboard`: the web dashboard, a static page (HTML, ES modules, CSS) embedded in the
//! binary. It holds no credentials and serves no data: the page asks the API itself, with the
//! App ID and API key the user signs in with, so the assets need none.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::AppState;
use crate::error::ApiError;

/// The page's files: name under `/dashboard/`, media type, content.
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../../dashboard/index.html"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("../../dashboard/style.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../dashboard/app.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../dashboard/api.js"),
    ),
    (
        "ui.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../dashboard/ui.js"),
    ),
    (
        "chart.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../dashboard/chart.js"),
    ),
    (
        "pages.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../dashboard/pages.js"),
    ),
    (
        "strategy.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../dashboard/strategy.js"),
    ),
    (
        "abtests.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../dashboard/abtests.js"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_bytes!("../../dashboard/favicon.svg"),
    ),
];

/// Scripts and styles from the page's own origin only: no inline script, no inline style
/// attribute in the HTML (scripts set `element.style` properties, which CSP allows).
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; img-src 'self' data:; style-src 'self'";

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/dashboard", get(index))
        .route("/dashboard/", get(index))
        .route("/dashboard/{file}", get(asset))
}

async fn index() -> Response {
    serve("index.html")
        .unwrap_or_else(|| ApiError::internal("index.html is not embedded").into_response())
}

async fn asset(Path(file): Path<String>) -> Response {
    serve(&file).unwrap_or_else(|| {
        ApiError::not_found(format!("the dashboard has no file {file}")).into_response()
    })
}

/// An asset's response, or `None` for a name the dashboard does not have.
fn serve(name: &str) -> Option<Response> {
    let (_, media_type, bytes) = ASSETS.iter().find(|(n, _, _)| *n == name)?;
    let mut response = (*bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file the page loads is embedded, and the page loads no other origin.
    #[test]
    fn the_page_loads_embedded_files_only() {
        let html = std::str::from_utf8(ASSETS[0].2).unwrap();
        for (name, _, bytes) in ASSETS {
            // SVG's namespace is a name, not a place the page loads from.
            let text = String::from_utf8_lossy(bytes).replace("http://www.w3.org/2000/svg", "");
            assert!(
                !text.contains("http://") && !text.contains("https://"),
                "{name} names another origin"
            );
            if name.ends_with(".html") {
                assert!(!text.contains(" style=\""), "{name} has an inline style");
                assert!(!text.contains("<script>"), "{name} has an inline script");
            }
        }
        for name in ["/dashboard/app.js", "/dashboard/style.css"] {
            assert!(html.contains(name), "index.html does not load {name}");
        }
    }
}
