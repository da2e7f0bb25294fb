//! Algolia's A/B testing API v2 ([`penchant_engine::abtests`]), as its official clients send it:
//!
//! - `POST /2/abtests` (`editSettings`) `{name, variants: [{index, trafficPercentage,
//!   description?, customSearchParameters?}, ...], endAt}` → `{abTestID, index, taskID}`;
//! - `GET /2/abtests?offset&limit&indexPrefix&indexSuffix` (`analytics`) → `{abtests, count,
//!   total}`, newest first (`abtests` null when the app has none);
//! - `GET /2/abtests/{id}` (`analytics`): the test with each variant's results;
//! - `POST /2/abtests/{id}/stop`, `DELETE /2/abtests/{id}` (`editSettings`) → `{abTestID,
//!   index, taskID}`.
//!
//! Named strategies, which variants may name (`personalizationStrategy`), Penchant's own (ACL
//! `recommendation`, as the strategy): `GET /1/strategies/personalization/named`, and
//! `GET/PUT/DELETE /1/strategies/personalization/named/{name}`.

use axum::extract::{Path, Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use penchant_engine::AbTestResults;
use penchant_engine::abtests::{AbTest, Counts, NewTest, NewVariant, significance};
use penchant_engine::strategy::Strategy;
use penchant_engine::tenancy::Acl;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::auth::Auth;
use crate::error::ApiError;
use crate::json::JsonBody;
use crate::{AppState, iso};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/2/abtests", get(list).post(add))
        .route("/2/abtests/{id}", get(one).delete(delete))
        .route("/2/abtests/{id}/stop", post(stop))
        .route("/1/strategies/personalization/named", get(named_strategies))
        .route(
            "/1/strategies/personalization/named/{name}",
            get(named_strategy)
                .put(set_named_strategy)
                .delete(delete_named_strategy),
        )
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AddBody {
    name: String,
    variants: Vec<NewVariant>,
    end_at: String,
}

/// An RFC 3339 time as ms since the epoch.
fn parse_time(field: &str, value: &str) -> Result<i64, ApiError> {
    humantime::parse_rfc3339_weak(value.trim())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "{field} must be an RFC 3339 date-time, like 2026-12-24T00:00:00Z"
            ))
        })
}

/// `{abTestID, index, taskID}`: what add, stop and delete answer (there is no indexing task
/// to wait for; `taskID` is the test's ID).
fn response(test: &AbTest) -> Json<Value> {
    Json(json!({
        "abTestID": test.id,
        "index": test.index(),
        "taskID": test.id,
    }))
}

async fn add(
    auth: Auth,
    State(state): State<AppState>,
    JsonBody(body): JsonBody<AddBody>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    let new = NewTest {
        end_at: parse_time("endAt", &body.end_at)?,
        name: body.name,
        variants: body.variants,
    };
    let test = state.engine.add_abtest(app, new).await?;
    Ok(response(&test))
}

/// A test's ID from the path.
fn id(raw: &str) -> Result<u32, ApiError> {
    raw.parse()
        .map_err(|_| ApiError::bad_request(format!("`{raw}` is not an A/B test ID (an integer)")))
}

async fn one(
    auth: Auth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Analytics)?.app_id;
    let results = state.engine.abtest_results(app, id(&raw)?).await?;
    Ok(Json(test_json(&results)))
}

async fn stop(
    auth: Auth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    Ok(response(&state.engine.stop_abtest(app, id(&raw)?).await?))
}

async fn delete(
    auth: Auth,
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    Ok(response(&state.engine.delete_abtest(app, id(&raw)?).await?))
}

/// The list's query string (credentials may be in it too).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    offset: Option<String>,
    limit: Option<String>,
    index_prefix: Option<String>,
    index_suffix: Option<String>,
}

/// The most tests one page lists.
const MAX_LIMIT: usize = 100;

fn number(
    field: &str,
    raw: Option<&str>,
    default: usize,
    range: std::ops::RangeInclusive<usize>,
) -> Result<usize, ApiError> {
    let Some(raw) = raw else {
        return Ok(default);
    };
    raw.parse::<usize>()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "{field} must be an integer from {} to {}",
                range.start(),
                range.end()
            ))
        })
}

async fn list(
    auth: Auth,
    State(state): State<AppState>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Analytics)?.app_id;
    let offset = number("offset", query.offset.as_deref(), 0, 0..=usize::MAX)?;
    let limit = number("limit", query.limit.as_deref(), 10, 1..=MAX_LIMIT)?;
    let tests = state.engine.abtests(app).await?;
    let matching: Vec<&AbTest> = tests
        .iter()
        .rev()
        .filter(|t| {
            t.variants.iter().any(|v| {
                query
                    .index_prefix
                    .as_deref()
                    .is_none_or(|p| v.index.starts_with(p))
                    && query
                        .index_suffix
                        .as_deref()
                        .is_none_or(|s| v.index.ends_with(s))
            })
        })
        .collect();
    let mut page = Vec::new();
    for test in matching.iter().skip(offset).take(limit) {
        page.push(test_json(&state.engine.abtest_results(app, test.id).await?));
    }
    Ok(Json(json!({
        "abtests": if tests.is_empty() { Value::Null } else { json!(page) },
        "count": page.len(),
        "total": matching.len(),
    })))
}

/// `x / n`, when `n` is not 0.
fn rate(x: i64, n: i64) -> Option<f64> {
    (n > 0).then(|| x as f64 / n as f64)
}

/// A variant's results in Algolia's shape, with Penchant's user counts.
fn variant_json(
    i: usize,
    variant: &penchant_engine::abtests::Variant,
    c: &Counts,
    sample_size: Option<i64>,
) -> Value {
    let currencies: Map<String, Value> = c
        .revenue
        .iter()
        .map(|(currency, revenue)| {
            let (mean, variance) =
                significance::revenue_per_user(c, currency).unwrap_or((0.0, 0.0));
            let amount = json!({
                "currency": currency,
                "revenue": revenue.cents as f64 / 100.0,
                "mean": mean / 100.0,
                "standardDeviation": variance.sqrt() / 100.0,
            });
            (currency.clone(), amount)
        })
        .collect();
    let mut out = json!({
        "variantID": i + 1,
        "index": variant.index,
        "trafficPercentage": variant.traffic_percentage,
        "description": variant.description,
        "userCount": c.users,
        "trackedUserCount": c.tracked_users,
        "searchCount": c.searches,
        "trackedSearchCount": c.tracked_searches,
        "noResultCount": 0,
        "clickCount": c.clicks,
        "conversionCount": c.conversions,
        "addToCartCount": c.add_to_carts,
        "purchaseCount": c.purchases,
        "clickThroughRate": rate(c.clicks, c.tracked_searches),
        "conversionRate": rate(c.conversions, c.tracked_searches),
        "addToCartRate": rate(c.add_to_carts, c.tracked_searches),
        "purchaseRate": rate(c.purchases, c.tracked_searches),
        "averageClickPosition": rate(c.position_sum, c.positions),
        "clickedUserCount": c.clicked_users,
        "convertedUserCount": c.converted_users,
        "userConversionRate": rate(c.converted_users.min(c.users), c.users),
        "currencies": currencies,
    });
    if let Some(params) = &variant.custom_search_parameters {
        out["customSearchParameters"] = json!(params);
    }
    if let Some(n) = sample_size {
        out["estimatedSampleSize"] = json!(n);
    }
    out
}

/// A test with its results in Algolia's shape (`ABTest`), with Penchant's `usersStillNeeded`.
fn test_json(r: &AbTestResults) -> Value {
    let (t, s) = (&r.test, &r.significance);
    let variants: Vec<Value> = t
        .variants
        .iter()
        .zip(&r.counts)
        .enumerate()
        .map(|(i, (v, c))| variant_json(i, v, c, s.sample_size))
        .collect();
    json!({
        "abTestID": t.id,
        "name": t.name,
        "status": r.status.as_str(),
        "createdAt": iso(t.created_at),
        "updatedAt": iso(t.updated_at),
        "endAt": iso(t.end_at),
        "stoppedAt": t.stopped_at.map(iso),
        "clickSignificance": s.click,
        "conversionSignificance": s.conversion,
        "addToCartSignificance": s.add_to_cart,
        "purchaseSignificance": s.purchase,
        "revenueSignificance": (!s.revenue.is_empty()).then(|| json!(s.revenue)),
        "usersStillNeeded": s.users_still_needed,
        "variants": variants,
    })
}

async fn named_strategies(
    auth: Auth,
    State(state): State<AppState>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Recommendation)?.app_id;
    let all: Vec<Value> = state
        .engine
        .named_strategies(app)
        .await?
        .into_iter()
        .map(|(name, s)| json!({"name": name, "strategy": s.strategy}))
        .collect();
    Ok(Json(json!({ "strategies": all })))
}

async fn named_strategy(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Recommendation)?.app_id;
    let strategy = state.engine.named_strategy(app, &name).await?;
    Ok(Json(json!({"name": name, "strategy": strategy.strategy})))
}

async fn set_named_strategy(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(strategy): JsonBody<Strategy>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Recommendation)?.app_id;
    state
        .engine
        .set_named_strategy(app, &name, strategy)
        .await?;
    Ok(Json(json!({"name": name, "updatedAt": crate::iso_now()})))
}

async fn delete_named_strategy(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Recommendation)?.app_id;
    state.engine.delete_named_strategy(app, &name).await?;
    Ok(Json(json!({"name": name, "deletedAt": crate::iso_now()})))
}
