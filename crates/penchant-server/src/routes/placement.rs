//! Residency (Penchant's own admin API; the global admin key only — `GET
//! /1/apps/{appID}/placement` also answers a key of that app with ACL `settings`, as the
//! dashboard shows it): where an app's rows are, and moving them ([`penchant_engine::residency`]).
//!
//! - `GET /1/placement/targets`: `{targets, default}`, the configured targets;
//! - `GET /1/apps/{appID}/placement`: `{target, alsoWritten, move}`: where the app's rows are,
//!   and its latest move (of the app or of one of its users; `null` if none ran);
//! - `POST /1/apps/{appID}/placement` `{target}`: 202, start moving the app's rows there;
//! - `GET /1/apps/{appID}/placement/users`: `{users: [{userToken, target, alsoWritten}]}`, the
//!   users placed on their own;
//! - `GET /1/apps/{appID}/placement/users/{userToken}`: where that user's rows are;
//! - `PUT /1/apps/{appID}/placement/users/{userToken}` `{target}`: place a user who has no rows
//!   yet; `POST` the same: 202, start moving the user's rows there.
//!
//! A new app is placed when it is created: `POST /1/apps {"appID", "placement"}`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::{Auth, GlobalAdmin, may_read_app};
use crate::error::{ApiError, to_json};
use crate::json::JsonBody;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/1/placement/targets", get(targets))
        .route("/1/apps/{app_id}/placement", get(show).post(move_app))
        .route("/1/apps/{app_id}/placement/users", get(users))
        .route(
            "/1/apps/{app_id}/placement/users/{user}",
            get(show_user).put(place_user).post(move_user),
        )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Target {
    target: String,
}

async fn targets(_: GlobalAdmin, State(state): State<AppState>) -> Json<Value> {
    let targets = state.engine.placement_targets();
    Json(json!({ "targets": targets, "default": targets[0] }))
}

async fn placement(state: &AppState, app: &str, user: Option<&str>) -> Result<Value, ApiError> {
    let (placement, status) = state.engine.placement(app, user).await?;
    Ok(json!({
        "target": placement.target,
        "alsoWritten": placement.also_written,
        "move": status,
    }))
}

async fn show(
    admin: Result<GlobalAdmin, ApiError>,
    auth: Result<Auth, ApiError>,
    State(state): State<AppState>,
    Path(app): Path<String>,
) -> Result<Json<Value>, ApiError> {
    may_read_app(&app, admin, auth)?;
    Ok(Json(placement(&state, &app, None).await?))
}

async fn show_user(
    _: GlobalAdmin,
    State(state): State<AppState>,
    Path((app, user)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(placement(&state, &app, Some(&user)).await?))
}

async fn users(
    _: GlobalAdmin,
    State(state): State<AppState>,
    Path(app): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let users: Vec<Value> = state
        .engine
        .placed_users(&app)
        .await?
        .into_iter()
        .map(|(user, p)| {
            json!({"userToken": user, "target": p.target, "alsoWritten": p.also_written})
        })
        .collect();
    Ok(Json(json!({ "users": users })))
}

async fn move_app(
    _: GlobalAdmin,
    State(state): State<AppState>,
    Path(app): Path<String>,
    JsonBody(body): JsonBody<Target>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let status = state
        .engine
        .move_placement(&app, None, &body.target)
        .await?;
    Ok((StatusCode::ACCEPTED, to_json(&status)?))
}

async fn move_user(
    _: GlobalAdmin,
    State(state): State<AppState>,
    Path((app, user)): Path<(String, String)>,
    JsonBody(body): JsonBody<Target>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let status = state
        .engine
        .move_placement(&app, Some(&user), &body.target)
        .await?;
    Ok((StatusCode::ACCEPTED, to_json(&status)?))
}

async fn place_user(
    _: GlobalAdmin,
    State(state): State<AppState>,
    Path((app, user)): Path<(String, String)>,
    JsonBody(body): JsonBody<Target>,
) -> Result<Json<Value>, ApiError> {
    let placement = state.engine.place(&app, Some(&user), &body.target).await?;
    to_json(&placement)
}
