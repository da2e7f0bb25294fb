//! Penchant's HTTP server.
//!
//! Handlers are thin: they extract and validate the request, call the [`Engine`], and wrap the
//! result. Errors become HTTP responses in one place, [`error::ApiError`]. Routes live one file
//! per resource under [`routes`].

pub mod auth;
pub mod error;
pub mod json;
pub mod metered;
pub mod metrics;
pub mod protocol;
pub mod routes;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use penchant_engine::Engine;
use tokio::net::TcpListener;
use tower_http::cors::CorsLayer;
use tower_http::trace::TraceLayer;

/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct AppState {
    pub engine: Engine,
    /// A short name of the store backend, for `/health`.
    pub backend: Arc<str>,
    pub started: Instant,
    /// What `/metrics` reports.
    pub metrics: Arc<metrics::Metrics>,
}

impl AppState {
    pub fn new(engine: Engine, backend: &str) -> Self {
        Self::with_metrics(engine, backend, Arc::default())
    }

    /// With metrics shared with others (a [`metered::MeteredStore`] under the engine).
    pub fn with_metrics(engine: Engine, backend: &str, metrics: Arc<metrics::Metrics>) -> Self {
        Self {
            engine,
            backend: backend.into(),
            started: Instant::now(),
            metrics,
        }
    }
}

/// The application's routes.
pub fn router(state: AppState) -> Router {
    // Algolia's paths have a literal `*` segment (`/1/indexes/*/batch`).
    let router = routes::indexes::add(Router::new().without_v07_checks());
    router
        .merge(routes::health::routes())
        .merge(metrics::routes())
        .merge(routes::apps::routes())
        .merge(routes::keys::routes())
        .merge(routes::events::routes())
        .merge(routes::personalization::routes())
        .merge(routes::bloom::routes())
        .merge(routes::vectors::routes())
        .merge(routes::recommend::routes())
        // Errors are Algolia's JSON, unknown routes and methods included.
        .fallback(error::unknown_route)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(axum::middleware::from_fn(error::json_errors))
        .route_layer(axum::middleware::from_fn_with_state(
            state.metrics.clone(),
            metrics::track,
        ))
        // Browsers call the Insights API from any origin (search-insights).
        .layer(CorsLayer::permissive())
        .layer(TraceLayer::new_for_http())
        .with_state(state)
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

/// Serve `app` (usually [`router`]) until `shutdown` resolves, then stop accepting connections
/// and let in-flight requests finish. The caller flushes the engine afterwards.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
