//! Apps (Penchant's own admin API; the global admin key only):
//! `POST /1/apps`, `GET /1/apps`, `PUT /1/apps/{appID}`, `DELETE /1/apps/{appID}`, and the
//! event layout's migration: `POST /1/apps/{appID}/layout` starts it, `GET` follows it. The two
//! reads of one app, `GET /1/apps/{appID}` and `GET /1/apps/{appID}/layout`, also answer a key
//! of that app with ACL `settings` (the dashboard's overview). `GET /1/apps/{appID}/export` and
//! `POST /1/apps/{appID}/import` move an app between nodes and backends as NDJSON.

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::TryStreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

use penchant_engine::EngineError;
use penchant_engine::events::Layout;
use penchant_engine::tenancy::App;

use crate::AppState;
use crate::auth::{Auth, GlobalAdmin, may_read_app};
use crate::error::{ApiError, to_json};
use crate::json::JsonBody;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/1/apps", get(list).post(create))
        .route("/1/apps/{app_id}", get(show).delete(remove).put(update))
        .route("/1/apps/{app_id}/layout", get(layout).post(migrate))
        .route("/1/apps/{app_id}/export", get(export))
        .route(
            "/1/apps/{app_id}/import",
            // An export is as large as the app: read as a stream, never whole.
            post(import).layer(DefaultBodyLimit::disable()),
        )
}

/// `GET /1/apps/{appID}/export`: every row of the app as NDJSON
/// ([`penchant_engine::portability`]), streamed as it is read.
async fn export(
    _: GlobalAdmin,
    State(state): State<AppState>,
    Path(app_id): Path<String>,
) -> Result<Response, ApiError> {
    let lines = state.engine.export_app(&app_id).await?;
    let body = Body::from_stream(lines.inspect_err(move |e| {
        tracing::error!(app = %app_id, error = %e, "export cut short");
    }));
    Ok(([(CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

/// `POST /1/apps/{appID}/import`: an export of that app, written on this node (201), if the
/// app does not exist here.
async fn import(
    _: GlobalAdmin,
    State(state): State<AppState>,
    Path(app_id): Path<String>,
    body: Body,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let mut body = body.into_data_stream();
    let imported = state.engine.import_app(&app_id, &mut body).await;
    if imported.is_err() {
        // A refusal comes after the first line, while the client still sends: read the rest,
        // so that it reads the answer rather than a connection closed under its upload.
        while let Ok(Some(_)) = body.try_next().await {}
    }
    Ok((StatusCode::CREATED, to_json(&imported?)?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NewApp {
    #[serde(rename = "appID")]
    app_id: Option<String>,
    #[serde(default)]
    name: String,
    retention_days: Option<u32>,
    #[serde(default)]
    event_layout: Layout,
    /// The placement target its rows live in (default: the default target).
    placement: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AppChange {
    name: Option<String>,
    retention_days: Option<u32>,
    /// Refused unless unchanged: a layout changes through its migration.
    event_layout: Option<Layout>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Migration {
    event_layout: Layout,
}

async fn update(
    _: GlobalAdmin,
    State(state): State<AppState>,
    Path(app_id): Path<String>,
    JsonBody(body): JsonBody<AppChange>,
) -> Result<Json<Value>, ApiError> {
    if let Some(layout) = body.event_layout {
        let app = state.engine.app(&app_id).await?;
        if app.is_some_and(|a| a.event_layout != layout) {
            return Err(ApiError::bad_request(format!(
                "eventLayout changes by migrating the app's events: POST /1/apps/{app_id}/layout \
                 {{\"eventLayout\": \"{layout}\"}}"
            )));
        }
    }
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
    let retention = body
        .retention_days
        .unwrap_or(penchant_engine::tenancy::MAX_RETENTION_DAYS);
    let (app, admin_key) = match (&body.placement, &body.app_id) {
        (Some(target), Some(id)) => {
            state
                .engine
                .create_app_in(id, &body.name, retention, body.event_layout, target)
                .await?
        }
        (Some(_), None) => {
            return Err(ApiError::bad_request(
                "placement needs the app's appID (its placement is written before its rows)",
            ));
        }
        (None, id) => {
            state
                .engine
                .create_app(id.as_deref(), &body.name, retention, body.event_layout)
                .await?
        }
    };
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "appID": app.app_id,
            "name": app.name,
            "createdAt": app.created_at,
            "retentionDays": app.retention_days,
            "eventLayout": app.event_layout,
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

async fn find(state: &AppState, app_id: &str) -> Result<App, ApiError> {
    state.engine.app(app_id).await?.ok_or_else(|| {
        ApiError::from(EngineError::NotFound(format!(
            "app `{app_id}` does not exist"
        )))
    })
}

/// One app's settings.
async fn show(
    admin: Result<GlobalAdmin, ApiError>,
    auth: Result<Auth, ApiError>,
    State(state): State<AppState>,
    Path(app_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    may_read_app(&app_id, admin, auth)?;
    to_json(&find(&state, &app_id).await?)
}

/// The app's layouts and its latest migration (`null` if none ran).
async fn layout(
    admin: Result<GlobalAdmin, ApiError>,
    auth: Result<Auth, ApiError>,
    State(state): State<AppState>,
    Path(app_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    may_read_app(&app_id, admin, auth)?;
    let app = find(&state, &app_id).await?;
    let migration = state.engine.layout_migration(&app_id).await?;
    Ok(Json(json!({
        "eventLayout": app.event_layout,
        "alsoWritten": app.also_written,
        "migration": migration,
    })))
}

/// Start moving the app's events to another layout (202, with the migration's status).
async fn migrate(
    _: GlobalAdmin,
    State(state): State<AppState>,
    Path(app_id): Path<String>,
    JsonBody(body): JsonBody<Migration>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let status = state
        .engine
        .migrate_layout(&app_id, body.event_layout)
        .await?;
    Ok((StatusCode::ACCEPTED, to_json(&status)?))
}
