//! Apps (Penchant's own admin API; the global admin key only):
//! `POST /1/apps`, `GET /1/apps`, `PUT /1/apps/{appID}`, `DELETE /1/apps/{appID}`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::GlobalAdmin;
use crate::error::{ApiError, to_json};
use crate::json::JsonBody;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/1/apps", get(list).post(create))
        .route("/1/apps/{app_id}", delete(remove).put(update))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NewApp {
    #[serde(rename = "appID")]
    app_id: Option<String>,
    #[serde(default)]
    name: String,
    retention_days: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AppChange {
    name: Option<String>,
    retention_days: Option<u32>,
}

async fn update(
    _: GlobalAdmin,
    State(state): State<AppState>,
    Path(app_id): Path<String>,
    JsonBody(body): JsonBody<AppChange>,
) -> Result<Json<Value>, ApiError> {
    let app = state
        .engine
        .update_app(&app_id, body.name, body.retention_days)
        .await?;
    to_json(&app)
}

async fn create(
    _: GlobalAdmin,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<NewApp>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (app, admin_key) = state
        .engine
        .create_app(
            body.app_id.as_deref(),
            &body.name,
            body.retention_days
                .unwrap_or(penchant_engine::tenancy::MAX_RETENTION_DAYS),
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "appID": app.app_id,
            "name": app.name,
            "createdAt": app.created_at,
            "retentionDays": app.retention_days,
            "adminAPIKey": admin_key,
        })),
    ))
}

async fn list(_: GlobalAdmin, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let apps = state.engine.list_apps().await?;
    Ok(Json(json!({ "apps": apps })))
}

async fn remove(
    _: GlobalAdmin,
    State(state): State<AppState>,
    Path(app_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    state.engine.delete_app(&app_id).await?;
    Ok(Json(json!({ "deletedAt": crate::iso_now() })))
}
