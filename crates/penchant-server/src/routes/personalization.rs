//! Algolia's Personalization API (ACL `recommendation`) and the Insights user-token deletion:
//!
//! - `GET/POST /1/strategies/personalization`: the strategy; a change starts a recompute of
//!   every profile of the app, whose progress `GET /1/strategies/personalization/job` shows
//!   (Penchant's own route);
//! - `GET /1/profiles/personalization/{userToken}`: `{userToken, lastEventAt, scores}`;
//! - `DELETE /1/profiles/{userToken}`: `{userToken, deletedUntil}`: earlier events stop counting;
//! - `DELETE /1/usertokens/{userToken}` (ACL `deleteObject`): 204, every trace of the user gone;
//! - `POST /1/indexes/{index}/rerank` (ACL `search`, Penchant's own): hits re-ranked for a user;
//! - `GET /1/profiles/personalization/{userToken}/optionalFilters` (ACL `search`, Penchant's
//!   own): the profile as Algolia `optionalFilters`, for searching with another engine.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use penchant_engine::catalog::Record;
use penchant_engine::strategy::Strategy;
use penchant_engine::tenancy::Acl;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::Auth;
use crate::error::ApiError;
use crate::json::JsonBody;
use crate::{AppState, iso};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/1/strategies/personalization",
            get(get_strategy).post(set_strategy),
        )
        .route("/1/strategies/personalization/job", get(job))
        .route("/1/profiles/personalization/{user_token}", get(profile))
        .route("/1/profiles/{user_token}", delete(delete_profile))
        .route("/1/usertokens/{user_token}", delete(delete_user))
        .route("/1/indexes/{index}/rerank", post(rerank))
        .route(
            "/1/profiles/personalization/{user_token}/optionalFilters",
            get(optional_filters),
        )
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RerankBody {
    user_token: String,
    hits: Vec<Value>,
    /// Overrides the strategy's impact for this call.
    personalization_impact: Option<u32>,
}

/// The largest number of hits one call re-ranks.
const MAX_HITS: usize = 1000;

async fn rerank(
    auth: Auth,
    State(state): State<AppState>,
    Path(index): Path<String>,
    JsonBody(body): JsonBody<RerankBody>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let bad = |m: &str| ApiError::new(StatusCode::BAD_REQUEST, m);
    if body.hits.len() > MAX_HITS {
        return Err(bad("hits can contain at most 1000 hits"));
    }
    if body.personalization_impact.is_some_and(|i| i > 100) {
        return Err(bad("personalizationImpact must be between 0 and 100"));
    }
    let mut hits: Vec<Record> = Vec::with_capacity(body.hits.len());
    for hit in body.hits {
        match hit {
            Value::Object(map) if map.get("objectID").is_some_and(Value::is_string) => {
                hits.push(map)
            }
            _ => return Err(bad("every hit must be an object with a string objectID")),
        }
    }
    // Hits given by objectID alone are resolved from the catalog; others are used as given.
    let wanted: Vec<String> = hits
        .iter()
        .filter(|h| h.len() == 1)
        .filter_map(|h| h["objectID"].as_str().map(str::to_owned))
        .collect();
    let catalog = state
        .engine
        .catalog()
        .get_many(app, &index, &wanted)
        .await?;
    let records: Vec<Record> = hits
        .iter()
        .map(
            |h| match h["objectID"].as_str().and_then(|id| catalog.get(id)) {
                Some(record) if h.len() == 1 => record.clone(),
                _ => h.clone(),
            },
        )
        .collect();
    let strategy = state.engine.strategies().get(app).await?;
    let impact = body
        .personalization_impact
        .or(strategy.as_ref().map(|s| s.strategy.personalization_impact))
        .unwrap_or(0);
    let scores = match state.engine.profiles().get(app, &body.user_token).await? {
        Some(p) => p.scores,
        None => Default::default(),
    };
    let ranked = penchant_engine::rerank::rerank(&records, &scores, impact);
    let out: Vec<Value> = ranked
        .into_iter()
        .map(|(i, p)| {
            let mut hit = hits[i].clone();
            hit.insert("_rankingInfo".into(), json!({ "personalization": p }));
            Value::Object(hit)
        })
        .collect();
    Ok(Json(json!({
        "userToken": body.user_token,
        "personalizationImpact": impact,
        "hits": out,
    })))
}

async fn optional_filters(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let scores = match state.engine.profiles().get(app, &user).await? {
        Some(p) => p.scores,
        None => Default::default(),
    };
    Ok(Json(json!({
        "userToken": user,
        "optionalFilters": penchant_engine::rerank::optional_filters(&scores),
    })))
}

async fn get_strategy(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Recommendation)?.app_id;
    match state.engine.strategies().fresh(app).await? {
        Some(s) => Ok(Json(serde_json::to_value(&s.strategy).unwrap_or_default())),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "No personalization strategy is set for this application",
        )),
    }
}

async fn set_strategy(
    auth: Auth,
    State(state): State<AppState>,
    JsonBody(strategy): JsonBody<Strategy>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Recommendation)?.app_id;
    state.engine.set_strategy(app, strategy).await?;
    Ok(Json(json!({
        "status": 200,
        "message": "Strategy was successfully updated",
    })))
}

async fn job(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Recommendation)?.app_id;
    match state.engine.jobs().status(app).await? {
        Some(status) => Ok(Json(serde_json::to_value(status).unwrap_or_default())),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "No recompute job has run for this application",
        )),
    }
}

async fn profile(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Recommendation)?.app_id;
    let profile = state.engine.profiles().get(app, &user).await?;
    let profile = profile.ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("User token {user} not found"),
        )
    })?;
    Ok(Json(json!({
        "userToken": profile.user_token,
        "lastEventAt": profile.last_event_at.map(iso),
        "scores": profile.scores,
    })))
}

async fn delete_profile(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Recommendation)?.app_id;
    let until = penchant_store::validate::now_micros() / 1000;
    state
        .engine
        .profiles()
        .delete_profile(app, &user, until)
        .await?;
    Ok(Json(
        json!({ "userToken": user, "deletedUntil": iso(until) }),
    ))
}

async fn delete_user(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
) -> Result<StatusCode, ApiError> {
    let app = &auth.require(Acl::DeleteObject)?.app_id;
    state.engine.profiles().delete_user(app, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}
