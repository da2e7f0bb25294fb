//! `POST /1/events`: Algolia's Insights API (ACL `search`).
//!
//! As `search-insights` sends them: credentials may come in the query string, the body may be
//! `text/plain` (`sendBeacon`), and browsers send a CORS preflight first (answered by the
//! router's CORS layer). Every event must be valid or none is stored; errors carry Algolia's
//! messages (`docs/research/insights-errors.md`).

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use penchant_engine::events::{MAX_BODY_BYTES, validate_request};
use penchant_engine::tenancy::Acl;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Auth;
use crate::error::ApiError;

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
    let body =
        body.map_err(|_| ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "Request Entity Too Large"))?;
    let now = penchant_store::validate::now_micros() / 1000;
    let events = validate_request(&body, now).map_err(|r| {
        let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::UNPROCESSABLE_ENTITY);
        ApiError::new(status, r.message)
    })?;
    state.engine.push_events(app, &events).await?;
    Ok(Json(json!({"status": 200, "message": "OK"})))
}
