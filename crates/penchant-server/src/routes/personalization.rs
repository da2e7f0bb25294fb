//! Algolia's Personalization API (ACL `recommendation`) and the Insights user-token deletion:
//!
//! - `GET/POST /1/strategies/personalization`: the strategy; a change starts a recompute of
//!   every profile of the app, whose progress `GET /1/strategies/personalization/job` shows
//!   (Penchant's own route);
//! - `GET /1/profiles/personalization/{userToken}`: `{userToken, lastEventAt, scores}`, and
//!   `waitingEvents` when some of the user's events name items without a catalog record yet
//!   (they count once the records are written);
//! - `DELETE /1/profiles/{userToken}`: `{userToken, deletedUntil}`: earlier events stop counting;
//! - `DELETE /1/usertokens/{userToken}` (ACL `deleteObject`): 204, every trace of the user gone;
//! - `POST /1/indexes/{index}/rerank` (ACL `search`, Penchant's own): hits re-ranked for a user
//!   (`{userToken, hits, personalizationImpact?, enablePersonalization?, personalizationStrategy?,
//!   clickAnalytics?, enableABTest?}`; a user of a running A/B test on the index gets their
//!   variant, and the answer says `abTestID`, `abTestVariantID`, and `queryID` with
//!   `clickAnalytics`);
//! - `GET /1/profiles/personalization/{userToken}/optionalFilters` (ACL `search`, Penchant's
//!   own): the profile as Algolia `optionalFilters`, for searching with another engine.
//!
//! Penchant's own, for the dashboard (ACL `recommendation`):
//! - `POST /1/strategies/personalization/simulate` `{strategy, userToken?, index?, hits?}`: the
//!   strategy checked as a save checks it (same messages), and with a user, the hits (completed
//!   from the catalog) re-ranked under the saved strategy and under this one; nothing is stored;
//! - `GET /1/strategies/personalization/jobs`: the current or last recompute, then past ones;
//! - `GET /1/profiles/personalization/{userToken}/events?limit=20`: the user's latest events.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use penchant_engine::abtests::Served;
use penchant_engine::catalog::Record;
use penchant_engine::keys;
use penchant_engine::recommend::LearnedScore;
use penchant_engine::rerank::Personalization;
use penchant_engine::strategy::Strategy;
use penchant_engine::tenancy::Acl;
use penchant_engine::{Ranking, RerankOptions};
use penchant_learn::offline::FEATURES;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::Auth;
use crate::error::{ApiError, to_json};
use crate::json::JsonBody;
use crate::protocol::insights::to_insights;
use crate::routes::ReadConsistency;
use crate::{AppState, iso};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/1/strategies/personalization",
            get(get_strategy).post(set_strategy),
        )
        .route("/1/strategies/personalization/job", get(job))
        .route("/1/strategies/personalization/jobs", get(jobs))
        .route("/1/strategies/personalization/simulate", post(simulate))
        .route(
            "/1/profiles/personalization/{user_token}/events",
            get(events),
        )
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
    /// `false`: keep the hits' order.
    enable_personalization: Option<bool>,
    /// A named strategy instead of the app's.
    personalization_strategy: Option<String>,
    /// Return a `queryID` for the events that follow.
    #[serde(default)]
    click_analytics: bool,
    /// `false`: answer as if no A/B test ran on the index.
    #[serde(rename = "enableABTest", default = "yes")]
    enable_ab_test: bool,
    /// `learned`: the index's learned ranker orders the hits.
    ranker: Option<String>,
}

fn yes() -> bool {
    true
}

/// The largest number of hits one call re-ranks.
const MAX_HITS: usize = 1000;

/// Hits as records: objects with a string `objectID`, at most [`MAX_HITS`].
fn records(hits: Vec<Value>) -> Result<Vec<Record>, ApiError> {
    if hits.len() > MAX_HITS {
        return Err(ApiError::bad_request("hits can contain at most 1000 hits"));
    }
    hits.into_iter()
        .map(|hit| match hit {
            Value::Object(map) if map.get("objectID").is_some_and(Value::is_string) => Ok(map),
            _ => Err(ApiError::bad_request(
                "every hit must be an object with a string objectID",
            )),
        })
        .collect()
}

/// Re-ranked hits as the API shows them: each with its `_rankingInfo` (and what the learned
/// ranker made of it, when it ordered them).
fn ranked_hits(
    hits: &[Record],
    ranked: Vec<(usize, Personalization)>,
    learned: Option<&(i64, Vec<LearnedScore>)>,
) -> Vec<Value> {
    let n = ranked.len();
    ranked
        .into_iter()
        .enumerate()
        .map(|(rank, (i, p))| {
            let mut hit = hits[i].clone();
            let mut info = ranking_info(&p, n - rank);
            if let Some((version, scores)) = learned {
                info["learned"] = learned_info(&scores[rank], *version);
            }
            hit.insert("_rankingInfo".into(), info);
            Value::Object(hit)
        })
        .collect()
}

/// What the learned ranker made of a hit: its version, the model's score, the hit's features
/// by name, and how each moved the score (`contributions`: the part no feature moved and each
/// feature's; they sum to `score`).
pub(crate) fn learned_info(learned: &LearnedScore, version: i64) -> Value {
    let features: serde_json::Map<String, Value> = FEATURES
        .iter()
        .zip(&learned.features)
        .map(|(name, value)| ((*name).to_owned(), json!(value)))
        .collect();
    let mut info = json!({
        "rankerVersion": version,
        "score": learned.score,
        "features": features,
    });
    if let Some((bias, parts)) = &learned.contributions {
        let parts: serde_json::Map<String, Value> = FEATURES
            .iter()
            .zip(parts)
            .map(|(name, part)| ((*name).to_owned(), json!(part)))
            .collect();
        info["contributions"] = json!({"bias": bias, "features": parts});
    }
    info
}

/// A hit's `_rankingInfo` in Algolia's shape: the personalization scores, and the fields
/// Algolia's clients require of every ranking info (`RankingInfo`: text matching and geo do
/// not apply here, so zero). `userScore` is Algolia's "overall ranking as a single integer":
/// higher for better hits, here the hit's rank counted from the last (1).
pub(crate) fn ranking_info(p: &Personalization, user_score: usize) -> Value {
    json!({
        "personalization": p,
        "userScore": user_score,
        "nbTypos": 0,
        "firstMatchedWord": 0,
        "geoDistance": 0,
        "nbExactWords": 0,
    })
}

async fn rerank(
    auth: Auth,
    State(state): State<AppState>,
    Path(index): Path<String>,
    JsonBody(body): JsonBody<RerankBody>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let hits = records(body.hits)?;
    if body.personalization_impact.is_some_and(|i| i > 100) {
        return Err(ApiError::bad_request(
            "personalizationImpact must be between 0 and 100",
        ));
    }
    keys::check_user_token(&body.user_token)?;
    let options = RerankOptions {
        impact: body.personalization_impact,
        enable_personalization: body.enable_personalization,
        strategy: body.personalization_strategy,
        click_analytics: body.click_analytics,
        enable_ab_test: body.enable_ab_test,
        ranker: body.ranker,
    };
    let reranked = state
        .engine
        .rerank(app, &index, &hits, &body.user_token, options)
        .await?;
    let mut out = json!({
        "userToken": body.user_token,
        "personalizationImpact": reranked.impact,
        "hits": ranked_hits(&hits, reranked.ranked, reranked.learned.as_ref()),
        "ranker": reranked.learned.as_ref().map(|_| "learned"),
        "rankerVersion": reranked.learned.as_ref().map(|(version, _)| version),
    });
    served_fields(&mut out, &reranked.served);
    Ok(Json(out))
}

/// An answer's `abTestID` and `abTestVariantID` (1-based), for a user in a running A/B test,
/// and its `queryID` with `clickAnalytics`.
pub(crate) fn served_fields(out: &mut Value, served: &Served) {
    if let Some((test, variant)) = served.ab_test {
        out["abTestID"] = json!(test);
        out["abTestVariantID"] = json!(variant + 1);
    }
    if let Some(id) = &served.query_id {
        out["queryID"] = json!(id);
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SimulateBody {
    /// Parsed apart, so that its errors read as a save's.
    strategy: Value,
    user_token: Option<String>,
    #[serde(default)]
    index: String,
    #[serde(default)]
    hits: Vec<Value>,
}

async fn simulate(
    auth: Auth,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<SimulateBody>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Recommendation)?.app_id;
    let strategy: Strategy = serde_json::from_value(body.strategy)
        .map_err(|e| ApiError::bad_request(format!("Invalid JSON: {e}")))?;
    strategy.check()?;
    let hits = records(body.hits)?;
    let Some(user) = body.user_token else {
        return Ok(Json(json!({ "valid": true })));
    };
    keys::check_user_token(&user)?;
    let simulation = state
        .engine
        .simulate(app, &body.index, &hits, &user, &strategy)
        .await?;
    // The records, completed from the catalog, so that the simulator can show them.
    let records = &simulation.records;
    let ranking = |r: Ranking| {
        json!({
            "personalizationImpact": r.impact,
            "scores": r.scores,
            "hits": ranked_hits(records, r.ranked, None),
        })
    };
    Ok(Json(json!({
        "userToken": user,
        "saved": simulation.saved.map(ranking),
        "edited": ranking(simulation.edited),
    })))
}

async fn jobs(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Recommendation)?.app_id;
    let jobs = state.engine.recompute_history(app).await?;
    Ok(Json(json!({ "jobs": jobs })))
}

/// The query string of a user's latest events (credentials may be in it too).
#[derive(Debug, Deserialize)]
struct Recent {
    limit: Option<String>,
}

/// The most events one call returns.
const MAX_RECENT: usize = 1000;

async fn events(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
    Query(recent): Query<Recent>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Recommendation)?.app_id;
    keys::check_user_token(&user)?;
    let limit = match recent.limit.as_deref() {
        None => 20,
        Some(n) => n
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_RECENT).contains(n))
            .ok_or_else(|| {
                ApiError::bad_request(format!("limit must be an integer from 1 to {MAX_RECENT}"))
            })?,
    };
    let events = state.engine.recent_events(app, &user, limit).await?;
    let events: Vec<Value> = events.iter().map(to_insights).collect();
    Ok(Json(json!({ "userToken": user, "events": events })))
}

async fn optional_filters(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    keys::check_user_token(&user)?;
    let filters = state.engine.optional_filters(app, &user).await?;
    Ok(Json(json!({
        "userToken": user,
        "optionalFilters": filters,
    })))
}

async fn get_strategy(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Recommendation)?.app_id;
    match state.engine.strategy(app).await? {
        Some(strategy) => to_json(&strategy),
        None => Err(ApiError::not_found(
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
    match state.engine.recompute_status(app).await? {
        Some(status) => to_json(&status),
        None => Err(ApiError::not_found(
            "No recompute job has run for this application",
        )),
    }
}

async fn profile(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
    ReadConsistency(consistency): ReadConsistency,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Recommendation)?.app_id;
    keys::check_user_token(&user)?;
    let profile = state.engine.profile(app, &user, consistency).await?;
    let profile =
        profile.ok_or_else(|| ApiError::not_found(format!("User token {user} not found")))?;
    let mut body = json!({
        "userToken": profile.user_token,
        "lastEventAt": profile.last_event_at.map(iso),
        "scores": profile.scores,
    });
    if profile.waiting_events > 0 {
        body["waitingEvents"] = profile.waiting_events.into();
    }
    Ok(Json(body))
}

async fn delete_profile(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Recommendation)?.app_id;
    keys::check_user_token(&user)?;
    let until = state.engine.delete_profile(app, &user).await?;
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
    keys::check_user_token(&user)?;
    state.engine.delete_user(app, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}
