//! Bloom filters over HTTP, in the spirit of RedisBloom's commands (Penchant's own routes).
//!
//! Named key sets (pixiv's partitioned filters):
//! - `POST /1/sets` (`editSettings`) `{name, capacity, errorRate, partitionBytes?, maxErrorRate?}`:
//!   reserve (`BF.RESERVE`); `GET /1/sets` (`search`): list;
//! - `GET /1/sets/{name}` (`search`): info (`BF.INFO`); `DELETE /1/sets/{name}` (`editSettings`);
//! - `POST /1/sets/{name}/add` `{key}` → `{added}` and `/madd` `{keys}` → `{added: [..]}`
//!   (`addObject`);
//! - `POST /1/sets/{name}/exists` `{key}` → `{exists}` and `/mexists` `{keys}` → `{exists: [..]}`
//!   (`search`);
//! - `POST /1/sets/{name}/rebuild` (`editSettings`): the body is the key list, one per line,
//!   streamed; 200 with the rebuild, or 409 when the new generation's estimated false-positive
//!   rate passes `maxErrorRate` (the set keeps its generation).
//!
//! Users' seen filters (Coffee Meets Bagel's):
//! - `GET/PUT /1/seen/settings` (`search` / `editSettings`): `{filterBits, errorRate, eventTypes}`;
//! - `GET /1/seen/users/{userToken}` (`search`): info; `DELETE` (`deleteObject`): forget;
//! - `POST /1/seen/users/{userToken}/add` `{objectID}` / `/madd` `{objectIDs}` (`search`, as
//!   events are pushed), `/exists` `{objectID}` / `/mexists` `{objectIDs}` and `/unseen`
//!   `{objectIDs}` → `{objectIDs: [the unseen ones, in order]}` (`search`).

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use penchant_engine::seen::SeenSettings;
use penchant_engine::sets::SetConfig;
use penchant_engine::tenancy::Acl;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Auth;
use crate::error::ApiError;
use crate::json::JsonBody;

/// Bodies of key lists: 100,000 keys of up to ~160 bytes.
const MAX_BODY_BYTES: usize = 16 << 20;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/1/sets", get(list_sets).post(reserve))
        .route("/1/sets/{name}", get(set_info).delete(delete_set))
        .route("/1/sets/{name}/add", post(set_add))
        .route("/1/sets/{name}/madd", post(set_madd))
        .route("/1/sets/{name}/exists", post(set_exists))
        .route("/1/sets/{name}/mexists", post(set_mexists))
        .route("/1/sets/{name}/rebuild", post(rebuild))
        .route(
            "/1/seen/settings",
            get(seen_settings).put(set_seen_settings),
        )
        .route(
            "/1/seen/users/{user_token}",
            get(seen_info).delete(seen_clear),
        )
        .route("/1/seen/users/{user_token}/add", post(seen_add))
        .route("/1/seen/users/{user_token}/madd", post(seen_madd))
        .route("/1/seen/users/{user_token}/exists", post(seen_exists))
        .route("/1/seen/users/{user_token}/mexists", post(seen_mexists))
        .route("/1/seen/users/{user_token}/unseen", post(seen_unseen))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Reserve {
    name: String,
    #[serde(flatten)]
    config: SetConfig,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct One {
    key: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Many {
    keys: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OneId {
    #[serde(rename = "objectID")]
    object_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ManyIds {
    #[serde(rename = "objectIDs")]
    object_ids: Vec<String>,
}

fn json<T: serde::Serialize>(value: T) -> Result<Json<Value>, ApiError> {
    serde_json::to_value(value)
        .map(Json)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

async fn reserve(
    auth: Auth,
    State(state): State<AppState>,
    body: Result<JsonBody<Value>, ApiError>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    // Parsed in two steps, so that a missing or mistyped field gets a message naming it.
    let JsonBody(body) = body?;
    let Reserve { name, config } = serde_json::from_value(body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("Invalid set: {e}")))?;
    let info = state.engine.sets().reserve(app, &name, config).await?;
    Ok((StatusCode::CREATED, json(info)?))
}

async fn list_sets(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let sets = state.engine.sets().list(app).await?;
    Ok(Json(json!({ "sets": sets })))
}

async fn set_info(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    json(state.engine.sets().info(app, &name).await?)
}

async fn delete_set(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    state.engine.sets().delete(app, &name).await?;
    Ok(Json(json!({ "deletedAt": crate::iso_now() })))
}

async fn set_add(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<One>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::AddObject)?.app_id;
    let added = state.engine.sets().add(app, &name, &[body.key]).await?;
    Ok(Json(json!({ "added": added[0] })))
}

async fn set_madd(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<Many>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::AddObject)?.app_id;
    let added = state.engine.sets().add(app, &name, &body.keys).await?;
    Ok(Json(json!({ "added": added })))
}

async fn set_exists(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<One>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let exists = state.engine.sets().exists(app, &name, &[body.key]).await?;
    Ok(Json(json!({ "exists": exists[0] })))
}

async fn set_mexists(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<Many>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let exists = state.engine.sets().exists(app, &name, &body.keys).await?;
    Ok(Json(json!({ "exists": exists })))
}

async fn rebuild(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    // The key list may be far larger than any JSON body: it is read as a stream.
    let lines = body.into_data_stream();
    json(state.engine.sets().rebuild(app, &name, lines).await?)
}

async fn seen_settings(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    json(&*state.engine.seen().settings(app).await?)
}

async fn set_seen_settings(
    auth: Auth,
    State(state): State<AppState>,
    body: Result<JsonBody<Value>, ApiError>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    let JsonBody(body) = body?;
    let settings: SeenSettings = serde_json::from_value(body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("Invalid settings: {e}")))?;
    state
        .engine
        .seen()
        .set_settings(app, settings.clone())
        .await?;
    Ok(Json(
        json!({ "updatedAt": crate::iso_now(), "settings": settings }),
    ))
}

async fn seen_info(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    json(state.engine.seen().info(app, &user).await?)
}

async fn seen_clear(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
) -> Result<StatusCode, ApiError> {
    let app = &auth.require(Acl::DeleteObject)?.app_id;
    state.engine.seen().clear(app, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn seen_add(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
    JsonBody(body): JsonBody<OneId>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let added = state
        .engine
        .seen()
        .add(app, &user, &[body.object_id])
        .await?;
    Ok(Json(json!({ "added": added[0] })))
}

async fn seen_madd(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
    JsonBody(body): JsonBody<ManyIds>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let added = state
        .engine
        .seen()
        .add(app, &user, &body.object_ids)
        .await?;
    Ok(Json(json!({ "added": added })))
}

async fn seen_exists(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
    JsonBody(body): JsonBody<OneId>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let exists = state
        .engine
        .seen()
        .exists(app, &user, &[body.object_id])
        .await?;
    Ok(Json(json!({ "exists": exists[0] })))
}

async fn seen_mexists(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
    JsonBody(body): JsonBody<ManyIds>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let exists = state
        .engine
        .seen()
        .exists(app, &user, &body.object_ids)
        .await?;
    Ok(Json(json!({ "exists": exists })))
}

async fn seen_unseen(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
    JsonBody(body): JsonBody<ManyIds>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let unseen = state
        .engine
        .seen()
        .unseen(app, &user, &body.object_ids)
        .await?;
    Ok(Json(json!({ "objectIDs": unseen })))
}
