//! Backups of the node's store (Penchant's own admin API; the global admin key only):
//! `POST /1/backups` takes one online into the node's backup folder (`store.backup_dir`),
//! `GET /1/backups` lists them. They are restored offline: `penchant backup restore`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::GlobalAdmin;
use crate::error::{ApiError, to_json};

pub fn routes() -> Router<AppState> {
    Router::new().route("/1/backups", get(list).post(create))
}

async fn create(
    _: GlobalAdmin,
    State(state): State<AppState>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let backup = state.engine.backup().await?;
    Ok((StatusCode::CREATED, to_json(&backup)?))
}

async fn list(_: GlobalAdmin, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let backups = state.engine.backups()?;
    Ok(Json(json!({ "backups": backups })))
}
