//! API keys of the caller's app, as Algolia's key API: `POST /1/keys`, `GET /1/keys`,
//! `GET /1/keys/{key}`, `DELETE /1/keys/{key}` (ACL `admin`).
//!
//! Keys are stored hashed, so a list shows each key's first characters (`value: "3f9a1c…"`),
//! not the key; `GET /1/keys/{key}` echoes the key it was given. Admin keys (an app's first key,
//! and keys made with ACL `admin`) are Penchant's form of Algolia's Admin API key, which Algolia
//! never lists: the list leaves them out, and `GET /1/keys/{key}` shows one with every ACL of
//! Algolia's it grants (clients know no ACL `admin`).

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
#[serde(rename_all = "camelCase")]
struct NewKey {
    acl: BTreeSet<Acl>,
    #[serde(default)]
    description: String,
    /// Requests per client (IP address, or `X-Algolia-UserToken`) and hour; 0: no limit.
    #[serde(default, rename = "maxQueriesPerIPPerHour")]
    max_queries_per_ip_per_hour: u32,
}

fn is_admin(info: &KeyInfo) -> bool {
    info.acl.contains(&Acl::Admin)
}

fn describe(value: &str, info: &KeyInfo) -> Value {
    let acl: Vec<Acl> = if is_admin(info) {
        Acl::ALGOLIA.to_vec()
    } else {
        info.acl.iter().copied().collect()
    };
    json!({
        "value": value,
        "acl": acl,
        "description": info.description,
        "createdAt": info.created_at,
        "validity": 0,
        "maxQueriesPerIPPerHour": info.max_queries_per_ip_per_hour,
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
        .create_key(
            app,
            body.acl,
            &body.description,
            body.max_queries_per_ip_per_hour,
        )
        .await?;
    Ok(Json(json!({ "key": key, "createdAt": crate::iso_now() })))
}

async fn list(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Admin)?.app_id;
    let keys = state.engine.list_keys(app).await?;
    let keys: Vec<Value> = keys
        .iter()
        .filter(|k| !is_admin(k))
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
