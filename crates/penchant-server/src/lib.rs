//! Penchant's HTTP server.
//!
//! Handlers are thin: they extract and validate the request, call the [`Engine`], and wrap the
//! result. Errors become HTTP responses in one place, [`error::ApiError`]. Routes live one file
//! per resource under [`routes`].

pub mod auth;
pub mod context;
pub mod error;
pub mod json;
pub mod listener;
pub mod metrics;
pub mod protocol;
pub mod ratelimit;
pub mod routes;

pub use listener::{BodyTimeout, HttpLimits, MIN_BODY_RATE, serve, serve_with};

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use penchant_engine::Engine;
use tower_http::cors::CorsLayer;
use tower_http::trace::TraceLayer;

/// What every handler can reach (cloned for every request: the engine, whose clone is an `Arc`
/// count per subsystem, sits behind one `Arc`).
#[derive(Debug, Clone)]
pub struct AppState {
    pub engine: Arc<Engine>,
    /// A short name of the store backend, for `/health`.
    pub backend: Arc<str>,
    pub started: Instant,
    /// What `/metrics` reports.
    pub metrics: Arc<metrics::Metrics>,
    /// Keys' requests per client and hour.
    pub rate_limiter: Arc<ratelimit::RateLimiter>,
}

impl AppState {
    pub fn new(engine: Engine, backend: &str) -> Self {
        Self::with_metrics(engine, backend, Arc::default())
    }

    /// With metrics shared with others (a [`penchant_store::metered::MeteredStore`] under the engine).
    pub fn with_metrics(engine: Engine, backend: &str, metrics: Arc<metrics::Metrics>) -> Self {
        Self {
            engine: Arc::new(engine),
            backend: backend.into(),
            started: Instant::now(),
            metrics,
            rate_limiter: Arc::default(),
        }
    }

    /// With rate limits that trust these proxies and remember this many clients.
    pub fn with_rate_limits(mut self, config: ratelimit::RateLimitConfig) -> Self {
        self.rate_limiter = Arc::new(ratelimit::RateLimiter::new(config));
        self
    }
}

/// The application's routes.
pub fn router(state: AppState) -> Router {
    // Algolia's paths have a literal `*` segment (`/1/indexes/*/batch`).
    let router = routes::indexes::add(Router::new().without_v07_checks());
    router
        .merge(routes::health::routes())
        .merge(routes::openapi::routes())
        .merge(metrics::routes())
        .merge(routes::apps::routes())
        .merge(routes::abtests::routes())
        .merge(routes::backups::routes())
        .merge(routes::keys::routes())
        .merge(routes::events::routes())
        .merge(routes::personalization::routes())
        .merge(routes::bloom::routes())
        .merge(routes::vectors::routes())
        .merge(routes::recommend::routes())
        .merge(routes::stats::routes())
        .merge(routes::placement::routes())
        .merge(routes::dashboard::routes())
        // Errors are Algolia's JSON, unknown routes and methods included.
        .fallback(error::unknown_route)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(axum::middleware::from_fn(error::json_errors))
        .route_layer(axum::middleware::from_fn_with_state(
            state.metrics.clone(),
            metrics::track,
        ))
        // Browsers call the Insights API from any origin (search-insights); every response
        // header is exposed to them.
        .layer(CorsLayer::permissive())
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
        // A correlation id per request, the rate-limit headers, gzip request bodies.
        .layer(axum::middleware::from_fn(context::around))
        .with_state(state)
}

/// The span of a request, at debug level (at info, a span's fields would be formatted for
/// every request): method, path and request id — never the query string (where
/// `search-insights` puts the API key) nor a key in a path. Errors logged at any level carry
/// the request id themselves ([`context::request_id`]).
fn request_span(request: &Request<Body>) -> tracing::Span {
    let id = request
        .headers()
        .get(context::REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    tracing::debug_span!(
        "request",
        method = %request.method(),
        path = %loggable_path(request.uri().path()),
        request_id = %id,
    )
}

/// A path as it may be logged or echoed: an API key in it (`/1/keys/{key}`) is replaced.
pub(crate) fn loggable_path(path: &str) -> std::borrow::Cow<'_, str> {
    match path.strip_prefix("/1/keys/") {
        Some(rest) if !rest.is_empty() => {
            let after = rest.find('/').map_or("", |i| &rest[i..]);
            format!("/1/keys/{{key}}{after}").into()
        }
        _ => path.into(),
    }
}

/// Now, as ISO 8601 (Algolia's `createdAt`/`deletedAt` strings).
pub(crate) fn iso_now() -> String {
    iso(penchant_store::validate::now_micros() / 1000)
}

/// A time in ms since the epoch, as ISO 8601.
pub(crate) fn iso(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}
