//! What an app receives (Penchant's own, ACL `analytics`; the dashboard's overview):
//!
//! - `GET /1/stats/events?hours=6`: events per minute by type over the last 1–48 hours, as
//!   received: `{start, step, counts: {click: [...], conversion: [...], view: [...]}}`, one count
//!   per minute, oldest first, the last being the current minute;
//! - `GET /1/stats/profiles`: `{count, exact}`, the users with a stored profile, counted up to
//!   100,000 (`exact: false` beyond: "at least").

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use penchant_engine::stats::MAX_HOURS;
use penchant_engine::tenancy::Acl;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Auth;
use crate::error::{ApiError, to_json};

/// Where counting profiles stops.
pub const PROFILES_COUNTED: usize = 100_000;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/1/stats/events", get(events))
        .route("/1/stats/profiles", get(profiles))
}

/// The query string (credentials may be in it too, as `search-insights` sends them).
#[derive(Debug, Deserialize)]
struct Window {
    hours: Option<String>,
}

async fn events(
    auth: Auth,
    State(state): State<AppState>,
    Query(window): Query<Window>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Analytics)?.app_id;
    let hours = match window.hours.as_deref() {
        None => 6,
        Some(h) => h
            .parse::<u32>()
            .ok()
            .filter(|h| (1..=MAX_HOURS).contains(h))
            .ok_or_else(|| {
                ApiError::bad_request(format!("hours must be an integer from 1 to {MAX_HOURS}"))
            })?,
    };
    to_json(&state.engine.events_per_minute(app, hours).await?)
}

async fn profiles(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Analytics)?.app_id;
    let (count, exact) = state.engine.count_profiles(app, PROFILES_COUNTED).await?;
    Ok(Json(json!({ "count": count, "exact": exact })))
}
