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
    let app = &auth.require(Acl::Search)?.app_id;
    // The one check of the body's size: the route's limit (a gzip body's, inflated).
    let events = body
        .map_err(|e| match crate::json::body_error(e) {
            e if e.kind == ErrorKind::PayloadTooLarge => {
                ApiError::kind(ErrorKind::PayloadTooLarge, "Request Entity Too Large")
            }
            other => other,
        })
        .and_then(|body| validate_request(&body, state.engine.now_ms()))
        .inspect_err(|e| state.metrics.events_rejected(e.status().as_u16()))?;
    state.engine.push_events(app, &events).await?;
    state.metrics.events_ingested(events.len());
    Ok(Json(json!({"status": 200, "message": "OK"})))
}
