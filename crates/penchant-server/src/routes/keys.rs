//! API keys of the caller's app, as Algolia's key API: `POST /1/keys`, `GET /1/keys`,
//! `GET /1/keys/{key}`, `DELETE /1/keys/{key}` (ACL `admin`).
//!
//! Keys are stored hashed, so a list shows each key's first characters (`value: "3f9a1c…"`),
//! not the key; `GET /1/keys/{key}` echoes the key it was given.

use std::collections::BTreeSet;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use penchant_engine::tenancy::{Acl, KeyInfo};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Auth;
use crate::error::ApiError;
use crate::json::JsonBody;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/1/keys", get(list).post(create))
        .route("/1/keys/{key}", get(show).delete(remove))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewKey {
    acl: BTreeSet<Acl>,
    #[serde(default)]
    description: String,
}

fn describe(value: &str, info: &KeyInfo) -> Value {
    json!({
        "value": value,
        "acl": info.acl,
        "description": info.description,
        "createdAt": info.created_at,
        "validity": 0,
    })
}

async fn create(
    auth: Auth,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<NewKey>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Admin)?.app_id;
    let (key, _) = state
        .engine
        .create_key(app, body.acl, &body.description)
        .await?;
    Ok(Json(json!({ "key": key, "createdAt": crate::iso_now() })))
}

async fn list(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Admin)?.app_id;
    let keys = state.engine.list_keys(app).await?;
    let keys: Vec<Value> = keys
        .iter()
        .map(|k| describe(&format!("{}…", k.prefix), k))
        .collect();
    Ok(Json(json!({ "keys": keys })))
}

fn no_such_key() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "Key does not exist")
}

async fn show(
    auth: Auth,
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Admin)?.app_id;
    let info = state.engine.get_key(app, &key).await?;
    info.map(|i| Json(describe(&key, &i)))
        .ok_or_else(no_such_key)
}

async fn remove(
    auth: Auth,
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Admin)?.app_id;
    if state.engine.delete_key(app, &key).await? {
        Ok(Json(json!({ "deletedAt": crate::iso_now() })))
    } else {
        Err(no_such_key())
    }
}
