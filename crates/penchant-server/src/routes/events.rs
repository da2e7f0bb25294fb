//! `POST /1/events`: Algolia's Insights API (ACL `search`).
//!
//! As `search-insights` sends them: credentials may come in the query string, the body may be
//! `text/plain` (`sendBeacon`), and browsers send a CORS preflight first (answered by the
//! router's CORS layer). The body is checked by [`crate::protocol::insights`]: every event must
//! be valid or none is stored, with Algolia's messages.

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::routing::post;
use axum::{Json, Router};
use penchant_engine::tenancy::Acl;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Auth;
use crate::error::{ApiError, ErrorKind};
use crate::protocol::insights::{MAX_BODY_BYTES, validate_request};

pub fn routes() -> Router<AppState> {
    Router::new().route(
        "/1/events",
        post(push).layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES)),
    )
}

async fn push(
    auth: Auth,
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let app = auth.require(Acl::Search)?.app_id.clone();
    // The one check of the body's size: the route's limit (a gzip body's, inflated).
    let body = body.map_err(|e| match crate::json::body_error(e) {
        e if e.kind == ErrorKind::PayloadTooLarge => {
            ApiError::kind(ErrorKind::PayloadTooLarge, "Request Entity Too Large")
        }
        other => other,
    });
    let body = body.inspect_err(|e| state.metrics.events_rejected(e.status().as_u16()))?;
    let hop = body.len() >= HOP_FROM_BYTES;
    let work = Ingest {
        state: state.clone(),
        app,
        body,
    };
    let ingested = match ingest_runtime() {
        Some(runtime) if hop => runtime
            .spawn(work.run())
            .await
            .map_err(|e| ApiError::internal(format!("the ingestion task failed: {e}")))?,
        _ => work.run().await,
    };
    ingested?;
    Ok(Json(json!({"status": 200, "message": "OK"})))
}

/// One request's events, to check and push.
struct Ingest {
    state: AppState,
    app: String,
    body: Bytes,
}

impl Ingest {
    async fn run(self) -> Result<(), ApiError> {
        let Ingest { state, app, body } = self;
        let request = validate_request(&body, state.engine.now_ms())
            .inspect_err(|e| state.metrics.events_rejected(e.status().as_u16()))?;
        let count = request.events.len();
        state
            .engine
            .push_request(&app, request.events, &request.stamped)
            .await?;
        state.metrics.events_ingested(count);
        Ok(())
    }
}

/// Bodies from this size on (a batch of tens of events) are ingested on [`ingest_runtime`];
/// a few events are not worth the two thread hand-offs.
const HOP_FROM_BYTES: usize = 16 << 10;

/// The threads batches of events are ingested on, one per core: a runtime of their own, so
/// that the operating system shares the cores between a batch's work and the requests served
/// meanwhile. On the serving runtime a batch's steps (parsing, counting, scoring a thousand
/// events without yielding) hold a worker for milliseconds while reads queue behind them;
/// here a read waits only for the kernel to schedule the thread it woke, which preempts a
/// busy ingesting one. One runtime per process, made at the first batch; `None` if it cannot
/// be (batches then run where they arrive).
fn ingest_runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RUNTIME: std::sync::OnceLock<Option<tokio::runtime::Runtime>> =
        std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(2, usize::from);
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(cores)
                .thread_name("penchant-ingest")
                .enable_all()
                .build()
                .inspect_err(|e| tracing::warn!(error = %e, "no runtime for ingestion"))
                .ok()
        })
        .as_ref()
}
