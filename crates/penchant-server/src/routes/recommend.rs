//! Algolia's Recommend API and Penchant's per-user queues.
//!
//! Recommend (`search`): `POST /1/indexes/*/recommendations` `{requests: [{indexName, model,
//! threshold, maxRecommendations?, objectID?, facetName?, facetValue?, queryParameters?,
//! fallbackParameters?, space?, queue?}]}` → `{results: [{hits, nbHits, ..., answeredBy,
//! source, modelBuiltAt, rankerVersion?, fallback}]}`, one result per request, in order
//! (`rankerVersion`: the learned ranker that ordered a `learned-queue`'s hits). `queryParameters`
//! personalize (`enablePersonalization`, `userToken`, `personalizationImpact`), boost
//! (`optionalFilters`), filter and cut (`hitsPerPage`); one it does not take is refused
//! ([`penchant_engine::recommend::Params`]).
//!
//! Queues:
//! - `GET /1/queues` (`search`): every queue's definition; `PUT /1/queues/{name}`
//!   (`editSettings`) `{indexName, size?, sources?, ranker?}`; `GET /1/queues/{name}` (`search`);
//!   `DELETE /1/queues/{name}` (`editSettings`): the definition and every user's queue;
//! - `GET /1/queues/{name}/users/{user}?n=` (`search`): peek at the next `n` items (10 by
//!   default) the user has not seen; `POST /1/queues/{name}/users/{user}/pop` `{n?}`
//!   (`search`): take them (they are marked seen);
//! - `POST /1/queues/{name}/users/{user}/rebuild` `{items?: [{objectID, score}]}`
//!   (`editSettings`): rebuild one user's queue now;
//! - `POST /1/recommend/build` (`editSettings`) → 202, the build job (co-interaction lists,
//!   then every user's queues); `GET /1/recommend/build` (`search`): its status;
//! - `POST /1/ranker/train` (`editSettings`) `{indexName, space?, ranker?}` → 202, the ranker
//!   job (learn the index's ranker, then write its learned queues); `GET /1/ranker/train`
//!   (`search`): its status; `GET /1/rankers/{indexName}` (`search`): the index's ranker (its
//!   version, what its training saw, feature importance; not its trees)
//!   ([`penchant_engine::recommend::ranker`]);
//! - `POST /1/impressions` (`search`, as Insights events) `{impressions: [{index, queryID,
//!   userToken, timestamp?, objectIDs}]}`: answers served elsewhere (a shop's own logs), for the
//!   ranker to learn from with the clicks and conversions sent with their queryIDs
//!   ([`penchant_engine::recommend::impressions`]);
//! - `GET /1/schedules` (`settings`): what keeps the models fresh — `{settings:
//!   {trainEveryHours, foldInEveryMinutes, buildEveryMinutes, rankEveryHours,
//!   queueStaleAfterMinutes}, tasks:
//!   [{task, everyMinutes, lastStartedAt, nextRunAt}]}`; `PUT /1/schedules` (`editSettings`)
//!   replaces the settings (a field left out takes its default, 0 turns a task off)
//!   ([`penchant_engine::schedules`]).

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use penchant_engine::Consistency;
use penchant_engine::recommend::ranker::RankerConfig;
use penchant_engine::recommend::{
    QueueDefinition, RecommendHit, RecommendRequest, Recommendations,
};
use penchant_engine::tenancy::Acl;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::auth::Auth;
use crate::error::{ApiError, to_json};
use crate::json::JsonBody;
use crate::routes::ReadConsistency;
use crate::routes::indexes::View;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/1/queues", get(list_queues))
        .route(
            "/1/queues/{name}",
            get(queue).put(define_queue).delete(delete_queue),
        )
        .route("/1/queues/{name}/users/{user}", get(peek))
        .route("/1/queues/{name}/users/{user}/pop", post(pop))
        .route("/1/queues/{name}/users/{user}/rebuild", post(rebuild))
        .route("/1/recommend/build", get(build_status).post(build))
        .route("/1/ranker/train", get(ranker_status).post(train_ranker))
        .route("/1/rankers/{index}", get(ranker))
        .route("/1/impressions", post(import_impressions))
        .route("/1/schedules", get(schedules).put(set_schedules))
}

/// An app's schedules: the settings, and per task when it last started and runs next.
async fn schedules_json(state: &AppState, app: &str) -> Result<Value, ApiError> {
    let (settings, tasks) = state.engine.schedules(app).await?;
    let tasks: Vec<Value> = tasks
        .into_iter()
        .map(|t| {
            json!({
                "task": t.task,
                "everyMinutes": t.every_minutes,
                "lastStartedAt": t.last_started_at.map(crate::iso),
                "nextRunAt": t.next_run_at.map(crate::iso),
            })
        })
        .collect();
    Ok(json!({ "settings": settings, "tasks": tasks }))
}

async fn schedules(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Settings)?.app_id;
    Ok(Json(schedules_json(&state, app).await?))
}

async fn set_schedules(
    auth: Auth,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    let settings: penchant_engine::schedules::Schedules = serde_json::from_value(body)
        .map_err(|e| ApiError::bad_request(format!("Invalid schedules: {e}")))?;
    state.engine.set_schedules(app, settings).await?;
    Ok(Json(schedules_json(&state, app).await?))
}

/// `POST /1/indexes/*/recommendations`, added by the indexes' router (its `*` routes).
pub async fn recommendations(
    auth: Auth,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let started = Instant::now();
    let app = &auth.require(Acl::Search)?.app_id;
    let Some(requests) = body.get("requests") else {
        return Err(ApiError::bad_request("requests is required"));
    };
    let Some(requests) = requests.as_array() else {
        return Err(ApiError::bad_request("requests must be an array"));
    };
    penchant_engine::recommend::check_request_count(requests.len())?;
    let parsed = requests
        .iter()
        .enumerate()
        .map(|(i, r)| {
            serde_json::from_value::<RecommendRequest>(r.clone())
                .map_err(|e| ApiError::bad_request(format!("requests[{i}]: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let answers = state.engine.recommendations_served(app, &parsed).await?;
    let ms = started.elapsed().as_millis() as u64;
    let mut results = Vec::with_capacity(parsed.len());
    for (request, (answer, served)) in parsed.iter().zip(answers) {
        let asked = request.query_parameters.attributes_to_retrieve.clone();
        let view = View::of(&state, &auth.0, &request.index_name, asked).await?;
        let mut out = result(request, answer, &view, ms, &served.model);
        super::personalization::served_fields(&mut out, &served);
        results.push(out);
    }
    Ok(Json(json!({ "results": results })))
}

/// One request's result, shaped like Algolia's (a search response's fields around the hits).
/// `model` is the model asked once an A/B test's variant applied.
fn result(
    request: &RecommendRequest,
    answer: Recommendations,
    view: &View,
    ms: u64,
    model: &str,
) -> Value {
    let params = &request.query_parameters;
    let ranking_info = params.get_ranking_info == Some(true);
    let n = answer.hits.len();
    let hits: Vec<Value> = answer
        .hits
        .into_iter()
        .enumerate()
        .map(|(rank, hit)| match hit {
            RecommendHit::Item {
                record,
                score,
                personalization,
                learned,
            } => {
                let mut out = view.apply(record);
                out.insert("_score".into(), json!(score));
                if ranking_info && (personalization.is_some() || learned.is_some()) {
                    // Algolia's shape (its clients require the personalization scores): zero
                    // when the hits were not personalized.
                    let p = personalization.unwrap_or_default();
                    let mut info = super::personalization::ranking_info(&p, n - rank);
                    if let (Some(l), Some(version)) = (learned, answer.ranker_version) {
                        info["learned"] = super::personalization::learned_info(&l, version);
                    }
                    out.insert("_rankingInfo".into(), info);
                }
                Value::Object(out)
            }
            RecommendHit::Facet { name, value, score } => {
                json!({"facetName": name, "facetValue": value, "_score": score})
            }
        })
        .collect();
    let max = request.max_recommendations.unwrap_or(30);
    let per_page = params.hits_per_page.map_or(max, |n| n.min(max));
    json!({
        "hits": hits,
        "nbHits": hits.len(),
        "page": 0,
        "nbPages": 1,
        "hitsPerPage": per_page,
        "exhaustiveNbHits": true,
        "exhaustive": {"nbHits": true},
        "query": "",
        "params": "",
        "index": request.index_name,
        "processingTimeMS": ms,
        "answeredBy": answer.answered_by,
        "source": answer.source,
        "modelBuiltAt": answer.built_at,
        "ranker": answer.ranker_version.map(|_| "learned"),
        "rankerVersion": answer.ranker_version,
        // Another model answered: the one asked had nothing for this request.
        "fallback": answer.answered_by != model,
    })
}

async fn list_queues(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let queues: Vec<Value> = state
        .engine
        .queue_definitions(app)
        .await?
        .into_iter()
        .map(|(name, def)| definition_json(&name, &def))
        .collect::<Result<_, _>>()?;
    Ok(Json(json!({ "queues": queues })))
}

fn definition_json(name: &str, def: &QueueDefinition) -> Result<Value, ApiError> {
    let mut out = serde_json::to_value(def).map_err(ApiError::internal)?;
    out["name"] = json!(name);
    Ok(out)
}

async fn queue(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let def = state.engine.queue_definition(app, &name).await?;
    Ok(Json(definition_json(&name, &def)?))
}

async fn define_queue(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    let def: QueueDefinition = serde_json::from_value(body)
        .map_err(|e| ApiError::bad_request(format!("Invalid queue: {e}")))?;
    state.engine.define_queue(app, &name, &def).await?;
    Ok(Json(json!({ "updatedAt": crate::iso_now(), "name": name })))
}

async fn delete_queue(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    state.engine.delete_queue(app, &name).await?;
    Ok(Json(json!({ "deletedAt": crate::iso_now() })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Count {
    #[serde(default = "ten")]
    n: usize,
}

fn ten() -> usize {
    10
}

impl Default for Count {
    fn default() -> Self {
        Self { n: ten() }
    }
}

/// A JSON object body that may be left out (an empty body reads as the default).
fn optional_body<T: serde::de::DeserializeOwned + Default>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("Invalid JSON: {e}")))
}

fn items_json(items: Vec<(Map<String, Value>, f32)>) -> Value {
    let hits: Vec<Value> = items
        .into_iter()
        .map(|(mut record, score)| {
            record.insert(
                "_score".into(),
                json!(penchant_engine::vectors::json_f32(score)),
            );
            Value::Object(record)
        })
        .collect();
    json!({ "hits": hits })
}

/// `?n=` (`?consistency=` is read by [`ReadConsistency`]; credentials may be there too, as
/// `search-insights` sends them).
#[derive(Debug, Deserialize)]
struct Peek {
    #[serde(default = "ten")]
    n: usize,
}

async fn peek(
    auth: Auth,
    State(state): State<AppState>,
    Path((name, user)): Path<(String, String)>,
    ReadConsistency(consistency): ReadConsistency,
    Query(peek): Query<Peek>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let items = state
        .engine
        .queue_items(app, &name, &user, peek.n, false, consistency)
        .await?;
    Ok(Json(items_json(items)))
}

async fn pop(
    auth: Auth,
    State(state): State<AppState>,
    Path((name, user)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let count: Count = optional_body(&body)?;
    let items = state
        .engine
        .queue_items(app, &name, &user, count.n, true, Consistency::Eventual)
        .await?;
    Ok(Json(items_json(items)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Given {
    #[serde(rename = "objectID")]
    object_id: String,
    score: f32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rebuild {
    items: Option<Vec<Given>>,
}

async fn rebuild(
    auth: Auth,
    State(state): State<AppState>,
    Path((name, user)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    let body: Rebuild = optional_body(&body)?;
    let given = body.items.map(|items| {
        items
            .into_iter()
            .map(|g| (g.object_id, g.score))
            .collect::<Vec<_>>()
    });
    if let Some(bad) = given.iter().flatten().find(|(_, score)| !score.is_finite()) {
        return Err(ApiError::bad_request(format!(
            "item '{}' has a score that is not a finite number",
            bad.0
        )));
    }
    let rebuilt = state.engine.rebuild_queue(app, &name, &user, given).await?;
    to_json(&rebuilt)
}

async fn build(
    auth: Auth,
    State(state): State<AppState>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    let status = state.engine.start_build(app).await?;
    Ok((StatusCode::ACCEPTED, to_json(&status)?))
}

async fn build_status(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    match state.engine.build_status(app).await? {
        Some(status) => to_json(&status),
        None => Err(ApiError::not_found("this app has never been built")),
    }
}

async fn train_ranker(
    auth: Auth,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    let config: RankerConfig = serde_json::from_value(body)
        .map_err(|e| ApiError::bad_request(format!("Invalid ranker training: {e}")))?;
    let status = state.engine.start_ranker(app, config).await?;
    Ok((StatusCode::ACCEPTED, to_json(&status)?))
}

async fn ranker_status(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    match state.engine.ranker_status(app).await? {
        Some(status) => to_json(&status),
        None => Err(ApiError::not_found("this app has never trained a ranker")),
    }
}

/// An index's ranker, without its trees (what a person reads: its version, its training,
/// the importance of each feature).
async fn ranker(
    auth: Auth,
    State(state): State<AppState>,
    Path(index): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let Some(stored) = state.engine.ranker(app, &index).await? else {
        return Err(ApiError::not_found(format!(
            "index '{index}' has no learned ranker: POST /1/ranker/train"
        )));
    };
    let mut out = serde_json::to_value(&stored).map_err(ApiError::internal)?;
    if let Some(fields) = out.as_object_mut() {
        fields.remove("model");
    }
    Ok(Json(out))
}

/// The most impressions one import takes, and served items one impression holds.
const MAX_IMPRESSIONS: usize = 1000;
const MAX_SERVED: usize = 1000;

/// An impression as an import gives it (Insights' names).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ImportedImpression {
    index: String,
    #[serde(rename = "queryID")]
    query_id: String,
    user_token: String,
    /// Unix ms; now if left out.
    timestamp: Option<i64>,
    #[serde(rename = "objectIDs")]
    object_ids: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImpressionImport {
    impressions: Vec<ImportedImpression>,
}

/// `POST /1/impressions`: log answers served elsewhere, durably; refused as a whole when one
/// is malformed, with the same time bounds as Insights events (a click sent with its queryID
/// must be able to follow it).
async fn import_impressions(
    auth: Auth,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    use crate::protocol::insights::{MAX_CLOCK_SKEW, MAX_EVENT_AGE};
    use penchant_engine::recommend::impressions::Impression;

    let app = &auth.require(Acl::Search)?.app_id;
    let import: ImpressionImport = serde_json::from_value(body)
        .map_err(|e| ApiError::bad_request(format!("Invalid impressions: {e}")))?;
    let n = import.impressions.len();
    if !(1..=MAX_IMPRESSIONS).contains(&n) {
        return Err(ApiError::bad_request(format!(
            "impressions must hold 1 to {MAX_IMPRESSIONS} impressions, not {n}"
        )));
    }
    let now = state.engine.now_ms();
    let mut impressions = Vec::with_capacity(n);
    for (i, imported) in import.impressions.into_iter().enumerate() {
        let at = imported.timestamp.unwrap_or(now);
        let why = if at < now - MAX_EVENT_AGE.as_millis() as i64 {
            Some("The timestamp must be at most 30 days in the past".to_owned())
        } else if at > now + MAX_CLOCK_SKEW.as_millis() as i64 {
            Some("The timestamp must not be in the future".to_owned())
        } else if !(1..=MAX_SERVED).contains(&imported.object_ids.len()) {
            Some(format!("objectIDs must hold 1 to {MAX_SERVED} items"))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(ApiError::bad_request(format!("impressions[{i}]: {why}")));
        }
        impressions.push(Impression {
            index: imported.index,
            query_id: imported.query_id,
            user: imported.user_token,
            at,
            object_ids: imported.object_ids,
        });
    }
    state.engine.log_impressions(app, &impressions).await?;
    Ok(Json(json!({"status": 200, "message": "OK"})))
}
