//! Algolia's indexing routes for records:
//!
//! - `POST /1/indexes/{index}/batch` and `POST /1/indexes/*/batch` (actions `addObject`,
//!   `updateObject`, `partialUpdateObject`, `partialUpdateObjectNoCreate`, `deleteObject`,
//!   `delete`, `clear`),
//! - `PUT`/`GET`/`DELETE /1/indexes/{index}/{objectID}`,
//! - `POST /1/indexes/{index}/{objectID}/partial` (`?createIfNotExists=false` to not create;
//!   Algolia's `_operation`s, [`penchant_engine::catalog::OPERATIONS`]),
//! - `GET /1/indexes/{index}/task/{taskID}`.
//!
//! Writes are applied before the response is sent, so every task is `published`; a request's
//! writes are all or nothing (all checked before the first is written). Task IDs are unique per
//! request (the node's clock in microseconds).

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use penchant_engine::catalog::{Record, Write};
use penchant_engine::tenancy::Acl;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Auth;
use crate::error::ApiError;
use crate::json::JsonBody;

/// Add the routes to `router`, which must accept a literal `*` segment (Algolia's "every
/// index"): built with `without_v07_checks` (a merged router would be checked again).
pub fn add(router: Router<AppState>) -> Router<AppState> {
    router
        .route("/1/indexes/*/batch", post(batch_many))
        .route(
            "/1/indexes/*/recommendations",
            post(super::recommend::recommendations),
        )
        .route("/1/indexes/{index}/batch", post(batch_one))
        .route("/1/indexes/{index}/task/{task_id}", get(task))
        .route(
            "/1/indexes/{index}/{object_id}",
            get(get_object).put(put_object).delete(delete_object),
        )
        .route("/1/indexes/{index}/{object_id}/partial", post(partial))
}

fn task_id() -> i64 {
    penchant_store::validate::now_micros() + i64::from(rand_suffix())
}

/// Sub-millisecond uniqueness for task IDs issued in the same millisecond.
fn rand_suffix() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed) % 1000
}

#[derive(Debug, Deserialize)]
struct BatchBody {
    requests: Vec<BatchRequest>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BatchRequest {
    action: String,
    #[serde(default)]
    body: Option<Value>,
    index_name: Option<String>,
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, msg)
}

fn as_record(body: Option<Value>) -> Result<Record, ApiError> {
    match body {
        Some(Value::Object(map)) => Ok(map),
        Some(_) => Err(bad("body must be a JSON object")),
        None => Err(bad("body is required for this action")),
    }
}

/// One batch request as a catalog write, with the ACL it needs.
fn to_write(req: BatchRequest) -> Result<(Write, Acl), ApiError> {
    Ok(match req.action.as_str() {
        "addObject" => (Write::Put(as_record(req.body)?), Acl::AddObject),
        "updateObject" => {
            let record = as_record(req.body)?;
            if !record.contains_key("objectID") {
                return Err(bad("Missing objectID in updateObject"));
            }
            (Write::Put(record), Acl::AddObject)
        }
        "partialUpdateObject" => (
            Write::Partial {
                record: as_record(req.body)?,
                create: true,
            },
            Acl::AddObject,
        ),
        "partialUpdateObjectNoCreate" => (
            Write::Partial {
                record: as_record(req.body)?,
                create: false,
            },
            Acl::AddObject,
        ),
        "deleteObject" => {
            let record = as_record(req.body)?;
            let id = match record.get("objectID") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => return Err(bad("Missing objectID in deleteObject")),
            };
            (Write::Delete(id), Acl::DeleteObject)
        }
        "delete" | "clear" => (Write::Clear, Acl::DeleteObject),
        other => return Err(bad(format!("Invalid action: {other}"))),
    })
}

async fn apply(
    auth: &Auth,
    state: &AppState,
    requests: Vec<(String, BatchRequest)>,
) -> Result<Vec<String>, ApiError> {
    let mut writes = Vec::with_capacity(requests.len());
    for (index, req) in requests {
        let (write, acl) = to_write(req)?;
        auth.require(acl)?;
        writes.push((index, write));
    }
    let app = &auth.0.app_id;
    Ok(state.engine.write_records(app, writes).await?)
}

async fn batch_one(
    auth: Auth,
    State(state): State<AppState>,
    Path(index): Path<String>,
    JsonBody(body): JsonBody<BatchBody>,
) -> Result<Json<Value>, ApiError> {
    let requests = body
        .requests
        .into_iter()
        .map(|r| (index.clone(), r))
        .collect();
    let ids = apply(&auth, &state, requests).await?;
    let ids: Vec<String> = ids.into_iter().filter(|id| !id.is_empty()).collect();
    Ok(Json(json!({ "taskID": task_id(), "objectIDs": ids })))
}

async fn batch_many(
    auth: Auth,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<BatchBody>,
) -> Result<Json<Value>, ApiError> {
    let mut requests = Vec::with_capacity(body.requests.len());
    for mut r in body.requests {
        let index = r
            .index_name
            .take()
            .ok_or_else(|| bad("indexName is required in every request of a multi-index batch"))?;
        requests.push((index, r));
    }
    let indexes: Vec<String> = requests.iter().map(|(i, _)| i.clone()).collect();
    let ids = apply(&auth, &state, requests).await?;
    let task = task_id();
    let tasks: BTreeMap<String, i64> = indexes.into_iter().map(|i| (i, task)).collect();
    let ids: Vec<String> = ids.into_iter().filter(|id| !id.is_empty()).collect();
    Ok(Json(json!({ "taskID": tasks, "objectIDs": ids })))
}

async fn task(
    auth: Auth,
    Path((_index, task_id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    auth.require(Acl::Search)
        .or_else(|_| auth.require(Acl::AddObject))?;
    task_id
        .parse::<i64>()
        .map_err(|_| bad(format!("Invalid taskID: {task_id}")))?;
    Ok(Json(json!({ "status": "published", "pendingTask": false })))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GetParams {
    attributes_to_retrieve: Option<String>,
}

async fn get_object(
    auth: Auth,
    State(state): State<AppState>,
    Path((index, object_id)): Path<(String, String)>,
    Query(params): Query<GetParams>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let record = state
        .engine
        .record(app, &index, &object_id)
        .await?
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "ObjectID does not exist"))?;
    let record = match params.attributes_to_retrieve {
        None => record,
        Some(list) => {
            let wanted: Vec<&str> = list.split(',').map(str::trim).collect();
            if wanted.contains(&"*") {
                record
            } else {
                record
                    .into_iter()
                    .filter(|(k, _)| k == "objectID" || wanted.contains(&k.as_str()))
                    .collect()
            }
        }
    };
    Ok(Json(Value::Object(record)))
}

async fn put_object(
    auth: Auth,
    State(state): State<AppState>,
    Path((index, object_id)): Path<(String, String)>,
    JsonBody(mut record): JsonBody<Record>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::AddObject)?.app_id;
    record.insert("objectID".into(), Value::String(object_id.clone()));
    state
        .engine
        .write_records(app, vec![(index, Write::Put(record))])
        .await?;
    Ok(Json(json!({
        "objectID": object_id,
        "taskID": task_id(),
        "updatedAt": crate::iso_now(),
    })))
}

async fn delete_object(
    auth: Auth,
    State(state): State<AppState>,
    Path((index, object_id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::DeleteObject)?.app_id;
    state
        .engine
        .write_records(app, vec![(index, Write::Delete(object_id))])
        .await?;
    Ok(Json(
        json!({ "taskID": task_id(), "deletedAt": crate::iso_now() }),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartialParams {
    create_if_not_exists: Option<bool>,
}

async fn partial(
    auth: Auth,
    State(state): State<AppState>,
    Path((index, object_id)): Path<(String, String)>,
    Query(params): Query<PartialParams>,
    JsonBody(mut record): JsonBody<Record>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::AddObject)?.app_id;
    record.insert("objectID".into(), Value::String(object_id.clone()));
    let write = Write::Partial {
        record,
        create: params.create_if_not_exists.unwrap_or(true),
    };
    state
        .engine
        .write_records(app, vec![(index, write)])
        .await?;
    Ok(Json(json!({
        "objectID": object_id,
        "taskID": task_id(),
        "updatedAt": crate::iso_now(),
    })))
}
