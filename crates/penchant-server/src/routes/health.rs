//! `GET /health`: liveness, with the version, the store backend and the uptime.

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
    // Touch the store so a broken backend shows here.
    state.engine.store().list_tables().await?;
    Ok(Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "store": &*state.backend,
        "uptimeSeconds": state.started.elapsed().as_secs(),
    })))
}
