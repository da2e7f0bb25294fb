//! Algolia's indexing routes for records:
//!
//! - `POST /1/indexes/{index}/batch` and `POST /1/indexes/*/batch` (actions `addObject`,
//!   `updateObject`, `partialUpdateObject`, `partialUpdateObjectNoCreate`, `deleteObject`,
//!   `delete`, `clear`),
//! - `POST /1/indexes/{index}` (a record, its objectID generated when it has none),
//! - `PUT`/`GET`/`DELETE /1/indexes/{index}/{objectID}`, `POST /1/indexes/*/objects` (several),
//! - `POST /1/indexes/{index}/{objectID}/partial` (`?createIfNotExists=false` to not create;
//!   Algolia's `_operation`s, [`penchant_engine::catalog::OPERATIONS`]),
//! - `GET /1/indexes/{index}/task/{taskID}`.
//!
//! Whole indexes (settings, listing, browsing, copies, moves, deletion) are in
//! [`super::manage`]; [`add`] registers both, so that the literal routes (`*/objects`,
//! `{index}/settings`, ...) are matched before `{index}/{objectID}`.
//!
//! Writes are applied before the response is sent, so every task is `published`; a request's
//! writes are all or nothing (all checked before the first is written). Task IDs need no table:
//! see [`task_id`]. A batch holds at most [`MAX_BATCH_REQUESTS`] operations, a `getObjects`
//! call at most [`MAX_GET_OBJECTS`] records (Algolia documents no count, only body sizes; its
//! clients send batches of 1,000).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use penchant_engine::catalog::{Record, Write};
use penchant_engine::tenancy::{Acl, Principal};
use serde::Deserialize;
use serde_json::{Value, json};

use super::manage;
use crate::AppState;
use crate::auth::Auth;
use crate::error::ApiError;
use crate::json::JsonBody;

/// Add the routes to `router`, which must accept a literal `*` segment (Algolia's "every
/// index"): built with `without_v07_checks` (a merged router would be checked again).
pub fn add(router: Router<AppState>) -> Router<AppState> {
    router
        .route("/1/indexes", get(manage::list))
        .route("/1/indexes/*/batch", post(batch_many))
        .route("/1/indexes/*/objects", post(get_objects))
        .route(
            "/1/indexes/*/recommendations",
            post(super::recommend::recommendations),
        )
        .route(
            "/1/indexes/{index}",
            post(save_object).delete(manage::delete_index),
        )
        .route("/1/indexes/{index}/batch", post(batch_one))
        .route("/1/indexes/{index}/clear", post(manage::clear))
        .route(
            "/1/indexes/{index}/browse",
            get(manage::browse_get).post(manage::browse_post),
        )
        .route("/1/indexes/{index}/deleteByQuery", post(manage::delete_by))
        .route("/1/indexes/{index}/operation", post(manage::operation))
        .route(
            "/1/indexes/{index}/settings",
            get(manage::settings).put(manage::set_settings),
        )
        .route("/1/indexes/{index}/task/{task_id}", get(task))
        .route(
            "/1/indexes/{index}/{object_id}",
            get(get_object).put(put_object).delete(delete_object),
        )
        .route("/1/indexes/{index}/{object_id}/partial", post(partial))
}

/// Seconds since 2024-01-01, the time part of a task ID.
const TASK_EPOCH_SECS: i64 = 1_704_067_200;
/// Task IDs stay below 2^53: JavaScript reads JSON numbers as doubles.
const TASK_SECS_BITS: u32 = 30;

fn task_check(app: &str, high: i64) -> i64 {
    let mut bytes = Vec::with_capacity(app.len() + 8);
    bytes.extend_from_slice(app.as_bytes());
    bytes.extend_from_slice(&high.to_be_bytes());
    (xxhash_rust::xxh3::xxh3_64(&bytes) & 0xFFFF) as i64
}

fn task_secs() -> i64 {
    let secs = penchant_store::validate::now_micros() / 1_000_000 - TASK_EPOCH_SECS;
    secs.clamp(0, (1 << TASK_SECS_BITS) - 1)
}

/// A new task ID of an app, below 2^53 (JavaScript's exact integers): the seconds since 2024
/// (30 bits), a counter (7 bits), and 16 bits of a hash of the app and both — so that any node
/// tells a task it issued (published: the write was applied before the answer) from one it did
/// not (a typo, another app's), with no table of tasks. Copies and moves are waited on under
/// either index's name, so the check names the app only.
pub(crate) fn task_id(app: &str) -> i64 {
    static NEXT: AtomicU8 = AtomicU8::new(0);
    let counter = i64::from(NEXT.fetch_add(1, Ordering::Relaxed) & 0x7F);
    let high = (task_secs() << 7) | counter;
    (high << 16) | task_check(app, high)
}

/// Whether `id` is a task issued for `app` (and not from the future).
fn task_issued(app: &str, id: i64) -> bool {
    let high = id >> 16;
    (0..1 << 53).contains(&id)
        && (id & 0xFFFF) == task_check(app, high)
        && (high >> 7) <= task_secs() + 60
}

/// Most operations in one batch (`/1/indexes/{index}/batch`, `/1/indexes/*/batch`): a batch is
/// checked whole, then written at once, and the 2 MB body holds about 100,000 short ones. Ten
/// times the clients' chunk (1,000).
pub const MAX_BATCH_REQUESTS: usize = 10_000;
/// Most records one `POST /1/indexes/*/objects` asks for: each is looked up and answered in
/// one response (a browse page holds as many).
pub const MAX_GET_OBJECTS: usize = 1_000;

/// Whether a call may hold `n` requests: checked before anything is read or written.
fn check_count(n: usize, limit: usize) -> Result<(), ApiError> {
    if n > limit {
        return Err(bad(format!(
            "requests: {n} requests in one call, the limit is {limit}"
        )));
    }
    Ok(())
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
    check_count(body.requests.len(), MAX_BATCH_REQUESTS)?;
    let requests = body
        .requests
        .into_iter()
        .map(|r| (index.clone(), r))
        .collect();
    let ids = apply(&auth, &state, requests).await?;
    let ids: Vec<String> = ids.into_iter().filter(|id| !id.is_empty()).collect();
    Ok(Json(
        json!({ "taskID": task_id(&auth.0.app_id), "objectIDs": ids }),
    ))
}

async fn batch_many(
    auth: Auth,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<BatchBody>,
) -> Result<Json<Value>, ApiError> {
    check_count(body.requests.len(), MAX_BATCH_REQUESTS)?;
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
    let task = task_id(&auth.0.app_id);
    let tasks: BTreeMap<String, i64> = indexes.into_iter().map(|i| (i, task)).collect();
    let ids: Vec<String> = ids.into_iter().filter(|id| !id.is_empty()).collect();
    Ok(Json(json!({ "taskID": tasks, "objectIDs": ids })))
}

async fn task(
    auth: Auth,
    Path((_index, task_id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth
        .require(Acl::AddObject)
        .or_else(|_| auth.require(Acl::Search))?
        .app_id;
    let id = task_id
        .parse::<i64>()
        .map_err(|_| bad(format!("Invalid taskID: {task_id}")))?;
    if !task_issued(app, id) {
        return Err(ApiError::not_found("Task does not exist"));
    }
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
    let caller = auth.require(Acl::Search)?;
    let record = state
        .engine
        .record(&caller.app_id, &index, &object_id)
        .await?
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "ObjectID does not exist"))?;
    let asked: Option<Vec<String>> = params
        .attributes_to_retrieve
        .map(|list| list.split(',').map(|a| a.trim().to_owned()).collect());
    let view = View::of(&state, caller, &index, asked).await?;
    Ok(Json(Value::Object(view.apply(record))))
}

/// What of an index's records a caller sees, as Algolia serves them: the attributes the
/// request asks for (`attributesToRetrieve`), else those of the index's `attributesToRetrieve`
/// setting, else all; never the index's `unretrievableAttributes` (dotted paths reach nested
/// objects) unless the key may see them (`seeUnretrievableAttributes`, or an admin key).
/// `objectID` always.
#[derive(Debug, Clone, Default)]
pub(crate) struct View {
    wanted: Option<Vec<String>>,
    hidden: Vec<String>,
}

impl View {
    /// The view of `index`'s records for `caller`, asking for `asked`.
    pub(crate) async fn of(
        state: &AppState,
        caller: &Principal,
        index: &str,
        asked: Option<Vec<String>>,
    ) -> Result<View, ApiError> {
        let settings = state.engine.serving_settings(&caller.app_id, index).await?;
        let list = |name: &str| -> Option<Vec<String>> {
            let items = settings.as_ref()?.get(name)?.as_array()?;
            Some(
                items
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect(),
            )
        };
        let hidden = if caller.allows(Acl::SeeUnretrievableAttributes) {
            Vec::new()
        } else {
            list("unretrievableAttributes").unwrap_or_default()
        };
        let wanted = asked
            .or_else(|| list("attributesToRetrieve"))
            .filter(|w| !w.iter().any(|a| a == "*"));
        Ok(View { wanted, hidden })
    }

    /// A record as the caller sees it.
    pub(crate) fn apply(&self, record: Record) -> Record {
        let mut record: Record = match &self.wanted {
            Some(wanted) => record
                .into_iter()
                .filter(|(k, _)| k == "objectID" || wanted.contains(k))
                .collect(),
            None => record,
        };
        for path in &self.hidden {
            remove_path(&mut record, path);
        }
        record
    }
}

/// Remove an attribute by dotted path (`cost`, `supplier.price`); `objectID` stays.
fn remove_path(record: &mut Record, path: &str) {
    if path == "objectID" || record.remove(path).is_some() {
        return;
    }
    if let Some((head, rest)) = path.split_once('.')
        && let Some(Value::Object(inner)) = record.get_mut(head)
    {
        remove_path(inner, rest);
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ObjectsBody {
    requests: Vec<ObjectRequest>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ObjectRequest {
    index_name: String,
    #[serde(rename = "objectID")]
    object_id: String,
    attributes_to_retrieve: Option<Vec<String>>,
}

/// `POST /1/indexes/*/objects`: records of any indexes, `null` where there is none, in request
/// order.
async fn get_objects(
    auth: Auth,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<ObjectsBody>,
) -> Result<Json<Value>, ApiError> {
    let caller = auth.require(Acl::Search)?;
    check_count(body.requests.len(), MAX_GET_OBJECTS)?;
    let wanted: Vec<(String, String)> = body
        .requests
        .iter()
        .map(|r| (r.index_name.clone(), r.object_id.clone()))
        .collect();
    let records = state.engine.records(&caller.app_id, &wanted).await?;
    let mut results = Vec::with_capacity(records.len());
    for (record, request) in records.into_iter().zip(body.requests) {
        results.push(match record {
            Some(r) => {
                let asked = request.attributes_to_retrieve;
                let view = View::of(&state, caller, &request.index_name, asked).await?;
                Value::Object(view.apply(r))
            }
            None => Value::Null,
        });
    }
    Ok(Json(json!({ "results": results })))
}

/// `POST /1/indexes/{index}`: add a record (its objectID generated when it has none).
async fn save_object(
    auth: Auth,
    State(state): State<AppState>,
    Path(index): Path<String>,
    JsonBody(record): JsonBody<Record>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let app = &auth.require(Acl::AddObject)?.app_id;
    let ids = state
        .engine
        .write_records(app, vec![(index, Write::Put(record))])
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "objectID": ids.first(),
            "taskID": task_id(app),
            "createdAt": crate::iso_now(),
        })),
    ))
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
        "taskID": task_id(app),
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
        json!({ "taskID": task_id(app), "deletedAt": crate::iso_now() }),
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
        "taskID": task_id(app),
        "updatedAt": crate::iso_now(),
    })))
}
