//! Whole indexes, as Algolia's index API has them:
//!
//! | route | ACL | answer |
//! |---|---|---|
//! | `GET /1/indexes` | `listIndexes` | `{items: [{name, createdAt, updatedAt, entries, ...}], nbPages}` |
//! | `GET /1/indexes/{index}/settings` | `settings` | the settings set (and defaults); 404 `Index does not exist` |
//! | `PUT /1/indexes/{index}/settings` | `editSettings` | `{taskID, updatedAt}`; given settings replace, `null` removes |
//! | `POST /1/indexes/{index}/clear` | `deleteObject` | `{taskID, updatedAt}`: every record gone, the index kept |
//! | `POST /1/indexes/{index}/deleteByQuery` | `deleteIndex` | `{taskID, updatedAt}`: the records that pass the filters gone |
//! | `GET`/`POST /1/indexes/{index}/browse` | `browse` | up to 1000 records in objectID order, filtered, with a `cursor` while more remain |
//! | `POST /1/indexes/{index}/operation` | `addObject` | `{taskID, updatedAt}`: `copy` (with `scope`) or `move` |
//! | `DELETE /1/indexes/{index}` | `deleteIndex` | `{taskID, deletedAt}` |

use std::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use penchant_engine::catalog::{MAX_BROWSE_HITS, Record, Scope, Settings, Write};
use penchant_engine::recommend::Filter;
use penchant_engine::tenancy::Acl;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::indexes::{View, task_id};
use crate::AppState;
use crate::auth::Auth;
use crate::error::ApiError;
use crate::json::JsonBody;

/// `GET /1/indexes`.
pub(super) async fn list(
    auth: Auth,
    State(state): State<AppState>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::ListIndexes)?.app_id;
    let items: Vec<Value> = state
        .engine
        .list_indexes(app)
        .await?
        .into_iter()
        .map(|i| {
            json!({
                "name": i.name,
                "createdAt": crate::iso(i.created_at),
                "updatedAt": crate::iso(i.updated_at),
                "entries": i.entries,
                "dataSize": 0,
                "fileSize": 0,
                "lastBuildTimeS": 0,
                "numberOfPendingTasks": 0,
                "pendingTask": false,
            })
        })
        .collect();
    Ok(Json(json!({ "items": items, "nbPages": 1 })))
}

fn index_not_found() -> ApiError {
    ApiError::not_found("Index does not exist")
}

/// Settings every index has until set otherwise.
fn with_defaults(mut settings: Settings) -> Settings {
    settings
        .entry("attributesForFaceting")
        .or_insert_with(|| json!([]));
    settings
}

/// `GET /1/indexes/{index}/settings`.
pub(super) async fn settings(
    auth: Auth,
    State(state): State<AppState>,
    Path(index): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Settings)?.app_id;
    let settings = state
        .engine
        .index_settings(app, &index)
        .await?
        .ok_or_else(index_not_found)?;
    Ok(Json(Value::Object(with_defaults(settings))))
}

/// `PUT /1/indexes/{index}/settings` (`forwardToReplicas` is accepted: Penchant keeps no
/// replicas).
pub(super) async fn set_settings(
    auth: Auth,
    State(state): State<AppState>,
    Path(index): Path<String>,
    JsonBody(changes): JsonBody<Settings>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    state
        .engine
        .set_index_settings(app, &index, changes)
        .await?;
    Ok(updated(app))
}

fn updated(app: &str) -> Json<Value> {
    Json(json!({ "taskID": task_id(app), "updatedAt": crate::iso_now() }))
}

/// `POST /1/indexes/{index}/clear`.
pub(super) async fn clear(
    auth: Auth,
    State(state): State<AppState>,
    Path(index): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::DeleteObject)?.app_id;
    state
        .engine
        .write_records(app, vec![(index, Write::Clear)])
        .await?;
    Ok(updated(app))
}

/// `DELETE /1/indexes/{index}`.
pub(super) async fn delete_index(
    auth: Auth,
    State(state): State<AppState>,
    Path(index): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::DeleteIndex)?.app_id;
    state.engine.delete_index(app, &index).await?;
    Ok(Json(
        json!({ "taskID": task_id(app), "deletedAt": crate::iso_now() }),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) enum OperationType {
    Copy,
    Move,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OperationBody {
    operation: OperationType,
    destination: String,
    scope: Option<Vec<String>>,
}

/// `POST /1/indexes/{index}/operation`.
pub(super) async fn operation(
    auth: Auth,
    State(state): State<AppState>,
    Path(index): Path<String>,
    JsonBody(body): JsonBody<OperationBody>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::AddObject)?.app_id;
    match (body.operation, body.scope) {
        (OperationType::Copy, scope) => {
            let scope = match scope {
                None => Scope::ALL,
                Some(names) => Scope::parse(&names)?,
            };
            state
                .engine
                .copy_index(app, &index, &body.destination, scope)
                .await?;
        }
        (OperationType::Move, None) => {
            state
                .engine
                .move_index(app, &index, &body.destination)
                .await?
        }
        (OperationType::Move, Some(_)) => {
            return Err(ApiError::bad_request(
                "scope is only for copy: a move takes the whole index",
            ));
        }
    }
    Ok(updated(app))
}

/// Filter parameters: Algolia's three, parsed together.
fn filter_of(params: &Map<String, Value>) -> Result<Option<Filter>, ApiError> {
    let filters = match params.get("filters") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(ApiError::bad_request("filters must be a string")),
    };
    let list = |name: &str| params.get(name).filter(|v| !v.is_null());
    Filter::parse(filters, list("facetFilters"), list("numericFilters"))
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// What a browse page reads, as a cursor carries it on (Algolia's cursors carry the
/// parameters: a request with a cursor needs nothing else).
#[derive(Debug, serde::Serialize, Deserialize)]
struct Cursor {
    after: String,
    params: Map<String, Value>,
}

const BROWSE_PARAMS: [&str; 6] = [
    "filters",
    "facetFilters",
    "numericFilters",
    "hitsPerPage",
    "attributesToRetrieve",
    "query",
];

/// A value of a URL-encoded parameter: JSON where it reads as an array, a number or a boolean
/// (`facetFilters=["brand:Apple"]`, `hitsPerPage=2`), else the text.
fn url_value(text: String) -> Value {
    match serde_json::from_str::<Value>(&text) {
        Ok(v @ (Value::Array(_) | Value::Number(_) | Value::Bool(_))) => v,
        _ => Value::String(text),
    }
}

/// Browse parameters from a body or a query string: an object, or Algolia's `{"params":
/// "url-encoded"}`; any other search parameter is ignored, as Algolia's browse ignores those
/// that rank.
fn browse_params(mut given: Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    if let Some(Value::String(encoded)) = given.remove("params") {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(&encoded)
            .map_err(|e| ApiError::bad_request(format!("params: {e}")))?;
        for (k, v) in pairs {
            given.entry(k).or_insert_with(|| url_value(v));
        }
    }
    if let Some(cursor) = given.get("cursor").and_then(Value::as_str) {
        let cursor = decode_cursor(cursor)?;
        let mut params = cursor.params;
        params.insert("after".into(), Value::String(cursor.after));
        return Ok(params);
    }
    Ok(given
        .into_iter()
        .filter(|(k, _)| BROWSE_PARAMS.contains(&k.as_str()))
        .collect())
}

fn decode_cursor(text: &str) -> Result<Cursor, ApiError> {
    URL_SAFE_NO_PAD
        .decode(text)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| ApiError::bad_request("cursor: not a cursor of a previous browse response"))
}

/// `GET /1/indexes/{index}/browse?...`.
pub(super) async fn browse_get(
    auth: Auth,
    state: State<AppState>,
    Path(index): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    let given = query
        .into_iter()
        .filter(|(k, _)| !k.to_ascii_lowercase().starts_with("x-algolia-"))
        .map(|(k, v)| (k, url_value(v)))
        .collect();
    browse(auth, state, index, given).await
}

/// `POST /1/indexes/{index}/browse`.
pub(super) async fn browse_post(
    auth: Auth,
    state: State<AppState>,
    Path(index): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let given = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        crate::json::object(&body)?
    };
    browse(auth, state, index, given).await
}

async fn browse(
    auth: Auth,
    State(state): State<AppState>,
    index: String,
    given: Map<String, Value>,
) -> Result<Json<Value>, ApiError> {
    let started = Instant::now();
    let caller = auth.require(Acl::Browse)?;
    let app = &caller.app_id;
    let mut params = browse_params(given)?;
    let after = match params.remove("after") {
        Some(Value::String(after)) => Some(after),
        _ => None,
    };
    if params
        .get("query")
        .and_then(Value::as_str)
        .is_some_and(|q| !q.trim().is_empty())
    {
        return Err(ApiError::bad_request(format!(
            "Penchant does not search: browse returns records in objectID order, narrowed by \
             filters, facetFilters and numericFilters; drop the query, or re-rank your search \
             engine's hits with POST /1/indexes/{index}/rerank"
        )));
    }
    let hits_per_page = match params.get("hitsPerPage") {
        None | Some(Value::Null) => MAX_BROWSE_HITS,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=MAX_BROWSE_HITS as u64).contains(n))
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "hitsPerPage must be an integer from 1 to {MAX_BROWSE_HITS}"
                ))
            })? as usize,
    };
    let attributes: Option<Vec<String>> = match params.get("attributesToRetrieve") {
        None | Some(Value::Null) => None,
        Some(Value::Array(list)) => Some(
            list.iter()
                .map(|a| a.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    ApiError::bad_request("attributesToRetrieve must be a list of strings")
                })?,
        ),
        Some(Value::String(list)) => Some(list.split(',').map(|a| a.trim().to_owned()).collect()),
        Some(_) => {
            return Err(ApiError::bad_request(
                "attributesToRetrieve must be a list of strings",
            ));
        }
    };
    let filter = filter_of(&params)?;
    if !state.engine.index_exists(app, &index).await? {
        return Err(index_not_found());
    }
    let page = state
        .engine
        .browse(
            app,
            &index,
            after.as_deref(),
            hits_per_page,
            filter.as_ref(),
        )
        .await?;
    let view = View::of(&state, caller, &index, attributes).await?;
    let hits: Vec<Value> = page
        .hits
        .into_iter()
        .map(|r: Record| Value::Object(view.apply(r)))
        .collect();
    let mut body = json!({
        "hits": hits,
        "page": 0,
        "hitsPerPage": hits_per_page,
        "processingTimeMS": started.elapsed().as_millis() as u64,
        "query": "",
        "params": "",
    });
    if let Some(after) = page.next {
        let cursor = serde_json::to_vec(&Cursor { after, params }).map_err(ApiError::internal)?;
        body["cursor"] = URL_SAFE_NO_PAD.encode(cursor).into();
    }
    Ok(Json(body))
}

/// `POST /1/indexes/{index}/deleteByQuery`: Algolia's `deleteBy`, with its filter parameters
/// (Penchant has no geo search: `aroundLatLng` and the like are refused).
pub(super) async fn delete_by(
    auth: Auth,
    State(state): State<AppState>,
    Path(index): Path<String>,
    JsonBody(params): JsonBody<Map<String, Value>>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::DeleteIndex)?.app_id;
    if let Some(other) = params
        .keys()
        .find(|k| !["filters", "facetFilters", "numericFilters"].contains(&k.as_str()))
    {
        return Err(ApiError::bad_request(format!(
            "deleteBy: Penchant takes filters, facetFilters and numericFilters, not {other}"
        )));
    }
    let filter = filter_of(&params)?.ok_or_else(|| {
        ApiError::bad_request(
            "deleteBy needs filters, facetFilters or numericFilters; to delete every record, \
             use POST /1/indexes/{index}/clear",
        )
    })?;
    state.engine.delete_by(app, &index, &filter).await?;
    Ok(updated(app))
}
