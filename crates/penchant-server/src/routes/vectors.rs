//! Vector spaces, similarity and ALS training (Penchant's own routes).
//!
//! Spaces:
//! - `POST /1/vectors` (`editSettings`) `{name, dimension, metric?, index?}` → 201 the space;
//!   `GET /1/vectors` (`search`): list; `GET /1/vectors/{space}` (`search`);
//!   `DELETE /1/vectors/{space}` (`editSettings`): the space and its vectors.
//!
//! Vectors (`{kind}` is `users` or `items`):
//! - `POST /1/vectors/{space}/{kind}` (`addObject`): a JSON body
//!   `{"vectors": [{"id": "...", "vector": [..]}]}`, or with `Content-Type:
//!   application/octet-stream` records of `u16 LE id length · id · dimension × f32 LE`. Every
//!   vector is checked before any is written. → `{written}`.
//! - `GET /1/vectors/{space}/{kind}/{id}` (`search`) → `{id, vector}` (a user the space's
//!   training did not see is folded in); `DELETE` (`deleteObject`).
//!
//! Similarity (`search`):
//! - `POST /1/vectors/{space}/search` `{vector | objectID | userToken, k?, candidates?,
//!   exclude?, metric?, exact?}` → `{hits: [{objectID, score}]}`;
//! - `POST /1/vectors/{space}/similar-to-liked` `{userToken, last?, aggregate?, k?, candidates?,
//!   exclude?, metric?, exact?}` → `{liked: [..], hits}`.
//!
//! ALS (`editSettings`):
//! - `POST /1/als/train` `{space?, factors?, regularization?, alpha?, iterations?, cgSteps?,
//!   seed?, threads?, weights?, index?}` → 202 the training's status; `GET /1/als/train`
//!   (`search`): the latest training's status;
//! - `POST /1/als/evaluate` (the same body, plus `holdout?` (a count) or `holdoutFraction?`,
//!   `k?`, `queues?: {name: [source…]}`) → a table of popularity, each model a queue blends,
//!   each blend given and each queue defined, scored on each user's latest events.

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use axum::{Json, Router};
use penchant_engine::tenancy::Acl;
use std::collections::BTreeMap;

use penchant_engine::recommend::Source;
use penchant_engine::vectors::training::{EvaluationRequest, Holdout, TrainingConfig};
use penchant_engine::vectors::{self, Aggregate, Kind, Metric, Query, SearchOptions, SpaceConfig};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Auth;
use crate::error::{ApiError, to_json};
use crate::json::JsonBody;

/// Bodies of vector uploads: 100,000 vectors of 100 floats, as JSON.
const MAX_BODY_BYTES: usize = 256 << 20;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/1/vectors", get(list_spaces).post(create_space))
        .route("/1/vectors/{space}", get(space).delete(delete_space))
        .route("/1/vectors/{space}/search", post(search))
        .route("/1/vectors/{space}/rollback", post(rollback))
        .route(
            "/1/vectors/{space}/similar-to-liked",
            post(similar_to_liked),
        )
        .route("/1/vectors/{space}/{kind}", post(upload))
        .route(
            "/1/vectors/{space}/{kind}/{id}",
            get(vector).delete(delete_vector),
        )
        .route("/1/als/train", get(training).post(train))
        .route("/1/als/evaluate", post(evaluate))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}

/// A body parsed in two steps, so that a missing or mistyped field gets a message naming it.
fn parse<T: DeserializeOwned>(what: &str, body: Value) -> Result<T, ApiError> {
    serde_json::from_value(body).map_err(|e| ApiError::bad_request(format!("Invalid {what}: {e}")))
}

fn kind_of(kind: &str) -> Result<Kind, ApiError> {
    match kind {
        "users" => Ok(Kind::User),
        "items" => Ok(Kind::Item),
        other => Err(ApiError::not_found(format!(
            "unknown vector kind `{other}`: expected `users` or `items`"
        ))),
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Create {
    name: String,
    #[serde(flatten)]
    config: SpaceConfig,
}

async fn create_space(
    auth: Auth,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    let Create { name, config } = parse("space", body)?;
    let space = state.engine.create_space(app, &name, config).await?;
    Ok((StatusCode::CREATED, to_json(&space)?))
}

async fn list_spaces(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let spaces = state.engine.list_spaces(app).await?;
    Ok(Json(json!({ "spaces": spaces })))
}

async fn space(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let (space, serving) = state.engine.space_serving(app, &name).await?;
    let mut body = serde_json::to_value(&*space).map_err(ApiError::internal)?;
    body["serving"] = serde_json::to_value(serving).map_err(ApiError::internal)?;
    Ok(Json(body))
}

async fn rollback(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    to_json(&*state.engine.rollback_space(app, &name).await?)
}

async fn delete_space(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    state.engine.delete_space(app, &name).await?;
    Ok(Json(json!({ "deletedAt": crate::iso_now() })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Upload {
    vectors: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    id: String,
    vector: Vec<Option<f32>>,
}

async fn upload(
    auth: Auth,
    State(state): State<AppState>,
    Path((name, kind)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::AddObject)?.app_id;
    let kind = kind_of(&kind)?;
    let binary = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/octet-stream"));
    let entries = if binary {
        let space = state.engine.space(app, &name).await?;
        vectors::parse_binary(&body, space.dimension)?
    } else {
        let body: Value = serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("Invalid JSON: {e}")))?;
        // serde reads a struct from an array too (see `JsonBody`): only an object is a body.
        if !body.is_object() {
            return Err(ApiError::bad_request(crate::json::NOT_AN_OBJECT));
        }
        let Upload { vectors } = parse("vectors", body)?;
        vectors
            .into_iter()
            .map(|Entry { id, vector }| {
                // JSON has no NaN: a non-number (null) is named like one.
                let floats = vector.iter().map(|x| x.unwrap_or(f32::NAN)).collect();
                (id, floats)
            })
            .collect()
    };
    let written = state.engine.put_vectors(app, &name, kind, &entries).await?;
    Ok(Json(json!({ "written": written })))
}

async fn vector(
    auth: Auth,
    State(state): State<AppState>,
    Path((name, kind, id)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let kind = kind_of(&kind)?;
    match state.engine.vector(app, &name, kind, &id).await? {
        Some(vector) => {
            let vector: Vec<f64> = vector.into_iter().map(vectors::json_f32).collect();
            Ok(Json(json!({ "id": id, "vector": vector })))
        }
        None => Err(ApiError::not_found(format!(
            "{} '{id}' has no vector in space '{name}'",
            if kind == Kind::User { "user" } else { "item" }
        ))),
    }
}

async fn delete_vector(
    auth: Auth,
    State(state): State<AppState>,
    Path((name, kind, id)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::DeleteObject)?.app_id;
    let kind = kind_of(&kind)?;
    state.engine.delete_vector(app, &name, kind, &id).await?;
    Ok(Json(json!({ "deletedAt": crate::iso_now() })))
}

fn default_k() -> usize {
    10
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Search {
    #[serde(default)]
    vector: Option<Vec<Option<f32>>>,
    #[serde(default, rename = "objectID")]
    object_id: Option<String>,
    #[serde(default)]
    user_token: Option<String>,
    #[serde(default = "default_k")]
    k: usize,
    #[serde(default)]
    candidates: Option<Vec<String>>,
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    metric: Option<Metric>,
    #[serde(default)]
    exact: bool,
}

async fn search(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let s: Search = parse("search", body)?;
    let query = match (s.vector, s.object_id, s.user_token) {
        (Some(v), None, None) => Query::Vector(v.iter().map(|x| x.unwrap_or(f32::NAN)).collect()),
        (None, Some(id), None) => Query::Item(id),
        (None, None, Some(user)) => Query::User(user),
        _ => {
            return Err(ApiError::bad_request(
                "give exactly one of `vector`, `objectID` and `userToken`",
            ));
        }
    };
    let options = SearchOptions {
        k: s.k,
        candidates: s.candidates,
        exclude: s.exclude,
        metric: s.metric,
        exact: s.exact,
    };
    let hits = state
        .engine
        .search_vectors(app, &name, query, &options)
        .await?;
    Ok(Json(json!({ "hits": hits })))
}

fn default_last() -> usize {
    5
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Liked {
    user_token: String,
    #[serde(default = "default_last")]
    last: usize,
    #[serde(default)]
    aggregate: Aggregate,
    #[serde(default = "default_k")]
    k: usize,
    #[serde(default)]
    candidates: Option<Vec<String>>,
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    metric: Option<Metric>,
    #[serde(default)]
    exact: bool,
}

async fn similar_to_liked(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let l: Liked = parse("request", body)?;
    let options = SearchOptions {
        k: l.k,
        candidates: l.candidates,
        exclude: l.exclude,
        metric: l.metric,
        exact: l.exact,
    };
    let (liked, hits) = state
        .engine
        .similar_to_liked(app, &name, &l.user_token, l.last, l.aggregate, &options)
        .await?;
    Ok(Json(json!({ "liked": liked, "hits": hits })))
}

async fn train(
    auth: Auth,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    let config: TrainingConfig = parse("training", body)?;
    let status = state.engine.train(app, config).await?;
    Ok((StatusCode::ACCEPTED, to_json(&status)?))
}

async fn training(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    match state.engine.training_status(app).await? {
        Some(status) => to_json(&status),
        None => Err(ApiError::not_found("this app has no training")),
    }
}

async fn evaluate(
    auth: Auth,
    State(state): State<AppState>,
    JsonBody(mut body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    let mut take = |field: &str| body.as_object_mut().and_then(|m| m.remove(field));
    let count = |field: &str, v: Option<Value>| -> Result<Option<usize>, ApiError> {
        v.map(|v| {
            v.as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| ApiError::bad_request(format!("{field} must be a positive integer")))
        })
        .transpose()
    };
    let holdout = count("holdout", take("holdout"))?;
    let fraction = take("holdoutFraction")
        .map(|v| {
            v.as_f64()
                .ok_or_else(|| ApiError::bad_request("holdoutFraction must be a number"))
        })
        .transpose()?;
    let holdout = match (holdout, fraction) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "give holdout (a count) or holdoutFraction, not both",
            ));
        }
        (_, Some(f)) => Holdout::Fraction(f),
        (n, None) => Holdout::Count(n.unwrap_or(1)),
    };
    let k = count("k", take("k"))?.unwrap_or(10);
    let queues: BTreeMap<String, Vec<Source>> = match take("queues") {
        Some(q) => serde_json::from_value(q).map_err(|e| {
            ApiError::bad_request(format!("queues must map names to lists of sources ({e})"))
        })?,
        None => BTreeMap::new(),
    };
    let learned = match take("ranker") {
        Some(r) => serde_json::from_value(r).map_err(|e| {
            ApiError::bad_request(format!(
                "ranker must be the learned ranker's settings ({e})"
            ))
        })?,
        None => Default::default(),
    };
    let config: TrainingConfig = parse("training", body)?;
    let request = EvaluationRequest {
        holdout,
        k,
        queues: queues.into_iter().collect(),
        learned,
    };
    to_json(&state.engine.evaluate_als(app, &config, request).await?)
}
