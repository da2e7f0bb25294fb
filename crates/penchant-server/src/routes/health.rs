//! `GET /health`: the version, the store backend and the uptime, once one small read of the
//! data plane succeeds (503 when the store does not answer).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;

pub fn routes() -> Router<AppState> {
    Router::new().route("/health", get(health))
}

async fn health(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state.engine.check_store().await?;
    Ok(Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "store": &*state.backend,
        "uptimeSeconds": state.started.elapsed().as_secs(),
    })))
}
