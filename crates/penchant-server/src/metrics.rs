//! `GET /metrics`: the server's metrics in Prometheus' text format (OpenMetrics), with the
//! `prometheus-client` crate. Per route (its template, e.g. `/1/profiles/personalization/{user_token}`,
//! so that user tokens never become label values) and method (the standard ones; any other is
//! `other`): request counts by status and latency
//! histograms; events ingested and rejected; store operations (timed by
//! [`penchant_store::metered::MeteredStore`]); and, read from the engine at each scrape, its caches' hits
//! and misses, its jobs' progress, per app the events waiting for their items' records and
//! those counted later, and the store backend's own gauges (RocksDB's memtables, pending
//! compactions, block cache).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use penchant_engine::EngineStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::AppState;
use crate::error::ApiError;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteStatus {
    method: &'static str,
    route: String,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Route {
    method: &'static str,
    route: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Status {
    status: u16,
}

/// The labels of one store operation ([`penchant_store::metered::MeteredStore`]).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreOpLabels {
    pub backend: &'static str,
    pub workload: &'static str,
    pub op: &'static str,
    pub table: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AppLabel {
    app: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheName {
    cache: &'static str,
}

/// The engine's figures, as of the scrape being answered: a collector encodes them.
#[derive(Debug, Default)]
struct EngineFigures(Arc<Mutex<EngineStats>>);

impl Collector for EngineFigures {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let stats = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let per_cache = [
            (
                "cache_hits",
                "lookups a node cache answered",
                MetricType::Counter,
            ),
            (
                "cache_misses",
                "lookups a node cache missed (absent or expired)",
                MetricType::Counter,
            ),
            (
                "cache_entries",
                "entries a node cache holds",
                MetricType::Gauge,
            ),
        ];
        for (i, (name, help, kind)) in per_cache.into_iter().enumerate() {
            let mut family = encoder.encode_descriptor(name, help, None, kind)?;
            for (cache, s) in &stats.caches {
                let labels = CacheName { cache };
                let value = [s.hits, s.misses, s.entries][i];
                let metric = family.encode_family(&labels)?;
                match kind {
                    MetricType::Counter => ConstCounter::new(value).encode(metric)?,
                    _ => ConstGauge::new(value as i64).encode(metric)?,
                }
            }
        }
        let counters = [
            (
                "recomputed_users",
                "users the node's recompute jobs went through",
                stats.recomputed_users,
            ),
            (
                "recomputed_events",
                "rows the node's recompute jobs read (per-day aggregates: one per user and active day)",
                stats.recomputed_events,
            ),
        ];
        for (name, help, value) in counters {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(value).encode(metric)?;
        }
        let per_app = [
            (
                "events_waiting",
                "events stored naming items without a catalog record yet, by app",
            ),
            (
                "events_counted_late",
                "waiting events whose last missing record was written, by app",
            ),
        ];
        for (i, (name, help)) in per_app.into_iter().enumerate() {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (app, waiting, counted) in &stats.waiting_events {
                let labels = AppLabel { app: app.clone() };
                let metric = family.encode_family(&labels)?;
                ConstCounter::new([*waiting, *counted][i]).encode(metric)?;
            }
        }
        let refresh = &stats.profile_refresh;
        let mut metric = encoder.encode_descriptor(
            "profile_refresh_duration_seconds",
            "the streaming refresh of an ingested batch's users' profiles",
            None,
            MetricType::Histogram,
        )?;
        metric.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            refresh.sum_seconds,
            refresh.count,
            &refresh.buckets,
            None,
        )?;
        let gauges = std::iter::once((
            "jobs_running",
            "recompute jobs running on the node",
            stats.jobs_running as f64,
        ))
        .chain(stats.store.iter().map(|g| (g.name, g.help, g.value)));
        for (name, help, value) in gauges {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(value).encode(metric)?;
        }
        Ok(())
    }
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
    store_latency: Family<StoreOpLabels, Histogram, fn() -> Histogram>,
    store_errors: Family<StoreOpLabels, Counter>,
    engine: Arc<Mutex<EngineStats>>,
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
        let store_latency =
            Family::<StoreOpLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            );
        registry.register(
            "store_operation_duration_seconds",
            "Store operations by backend, workload, operation and table (a read: until its stream is done)",
            store_latency.clone(),
        );
        let store_errors = Family::<StoreOpLabels, Counter>::default();
        registry.register(
            "store_errors",
            "Store operations that failed, by backend, workload, operation and table",
            store_errors.clone(),
        );
        let engine = EngineFigures::default();
        let figures = engine.0.clone();
        registry.register_collector(Box::new(engine));
        Self {
            engine: figures,
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

    /// The metrics in Prometheus' text format, with the engine's figures as they are now.
    pub fn encode(&self, engine: EngineStats) -> Result<String, std::fmt::Error> {
        *self.engine.lock().unwrap_or_else(|e| e.into_inner()) = engine;
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// A request's method as a label: the standard methods by name, any other as `other` (a method
/// is any token the client sends; each label value is a series kept for the process' life).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// The route template a response answered (for the request's log line, written outside the
/// router).
#[derive(Debug, Clone)]
pub(crate) struct RouteTemplate(pub String);

/// Count and time every request by its method and route template (never the raw path: the
/// labels' values are bounded).
pub async fn track(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let method = method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_owned();
    let started = Instant::now();
    let mut response = next.run(request).await;
    response
        .extensions_mut()
        .insert(RouteTemplate(route.clone()));
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
    let text = state
        .metrics
        .encode(state.engine.stats())
        .map_err(ApiError::internal)?;
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    Ok(([(CONTENT_TYPE, content_type)], text).into_response())
}

impl penchant_store::metered::Meter for Metrics {
    /// One store operation, its time and whether it failed.
    fn store_operation(&self, op: penchant_store::metered::StoreOp, secs: f64, ok: bool) {
        let labels = StoreOpLabels {
            backend: op.backend,
            workload: op.workload,
            op: op.op,
            table: op.table,
        };
        self.store_latency.get_or_create(&labels).observe(secs);
        if !ok {
            self.store_errors.get_or_create(&labels).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use bytes::Bytes;
    use penchant_store::metered::MeteredStore;
    use penchant_store::{GcRule, Mutation, ReadRows, Store, Workload};

    use super::*;

    #[tokio::test]
    async fn operations_are_timed_and_failures_counted() {
        let metrics = Arc::new(Metrics::default());
        let store = MeteredStore::new(
            Arc::new(penchant_store::MemStore::new()),
            "memory",
            metrics.clone(),
        );
        let families = BTreeMap::from([("f".to_owned(), GcRule::MaxVersions(1))]);
        store.create_table("t", families).await.unwrap();
        let cell = Mutation::set_now("f", Bytes::from_static(b"q"), Bytes::from_static(b"v"));
        store
            .mutate_row("t", Bytes::from_static(b"r"), vec![cell.clone()])
            .await
            .unwrap();
        let missing = store.mutate_row("nope", Bytes::from_static(b"r"), vec![cell]);
        assert!(missing.await.is_err());
        // A read as requests make it, and one of the jobs' view.
        let store: Arc<dyn Store> = Arc::new(store);
        for workload in [Workload::Serving, Workload::Batch] {
            let view = penchant_store::for_workload(&store, workload);
            let rows = view.read_all("t", ReadRows::default()).await.unwrap();
            assert_eq!(rows.len(), 1);
        }
        let text = metrics.encode(Default::default()).unwrap();
        for line in [
            r#"penchant_store_operation_duration_seconds_count{backend="memory",workload="serving",op="mutate_row",table="t"} 1"#,
            r#"penchant_store_operation_duration_seconds_count{backend="memory",workload="serving",op="mutate_row",table="nope"} 1"#,
            r#"penchant_store_operation_duration_seconds_count{backend="memory",workload="serving",op="read_rows",table="t"} 1"#,
            r#"penchant_store_operation_duration_seconds_count{backend="memory",workload="batch",op="read_rows",table="t"} 1"#,
            r#"penchant_store_errors_total{backend="memory",workload="serving",op="mutate_row",table="nope"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}:\n{text}");
        }
        assert!(!text.contains(r#"penchant_store_errors_total{backend="memory",workload="serving",op="mutate_row",table="t"}"#));
    }
}
