//! `GET /metrics`: the server's metrics in Prometheus' text format (OpenMetrics), with the
//! `prometheus-client` crate. Per route (its template, e.g. `/1/profiles/personalization/{user_token}`,
//! so that user tokens never become label values): request counts by status and latency
//! histograms; events ingested and rejected.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::AppState;
use crate::error::ApiError;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteStatus {
    method: String,
    route: String,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Route {
    method: String,
    route: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Status {
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreOp {
    backend: &'static str,
    op: &'static str,
}

type Latencies = Family<Route, Histogram, fn() -> Histogram>;

/// Latency buckets: 50 µs to about 1.6 s, doubling.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

/// The server's metrics, shared by every request.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RouteStatus, Counter>,
    latency: Latencies,
    events_ingested: Counter,
    events_rejected: Family<Status, Counter>,
    store_latency: Family<StoreOp, Histogram, fn() -> Histogram>,
    store_errors: Family<StoreOp, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("penchant");
        let requests = Family::<RouteStatus, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests by method, route template and status",
            requests.clone(),
        );
        let latency = Latencies::new_with_constructor(latency_histogram);
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency by method and route template",
            latency.clone(),
        );
        let events_ingested = Counter::default();
        registry.register(
            "events_ingested",
            "Insights events stored",
            events_ingested.clone(),
        );
        let events_rejected = Family::<Status, Counter>::default();
        registry.register(
            "events_rejected",
            "Insights requests refused, by status (422: a rule broken, 413: too large)",
            events_rejected.clone(),
        );
        let store_latency = Family::<StoreOp, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        registry.register(
            "store_operation_duration_seconds",
            "Store operations by backend and operation (a read: until its stream is done)",
            store_latency.clone(),
        );
        let store_errors = Family::<StoreOp, Counter>::default();
        registry.register(
            "store_errors",
            "Store operations that failed, by backend and operation",
            store_errors.clone(),
        );
        Self {
            registry,
            requests,
            latency,
            events_ingested,
            events_rejected,
            store_latency,
            store_errors,
        }
    }
}

impl Metrics {
    /// Events of an accepted request.
    pub fn events_ingested(&self, n: usize) {
        self.events_ingested.inc_by(n as u64);
    }

    /// A refused request of events.
    pub fn events_rejected(&self, status: u16) {
        self.events_rejected.get_or_create(&Status { status }).inc();
    }

    /// One store operation, its time and whether it failed ([`crate::metered::MeteredStore`]).
    pub fn store_operation(&self, backend: &'static str, op: &'static str, secs: f64, ok: bool) {
        let key = StoreOp { backend, op };
        self.store_latency.get_or_create(&key).observe(secs);
        if !ok {
            self.store_errors.get_or_create(&key).inc();
        }
    }

    /// The metrics in Prometheus' text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// Count and time every request by its route template.
pub async fn track(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    let key = Route { method, route };
    metrics
        .latency
        .get_or_create(&key)
        .observe(started.elapsed().as_secs_f64());
    let status = response.status().as_u16();
    metrics
        .requests
        .get_or_create(&RouteStatus {
            method: key.method,
            route: key.route,
            status,
        })
        .inc();
    response
}

pub fn routes() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let text = state.metrics.encode().map_err(ApiError::internal)?;
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    Ok(([(CONTENT_TYPE, content_type)], text).into_response())
}
