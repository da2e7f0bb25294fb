//! Algolia's Personalization API (ACL `recommendation`) and the Insights user-token deletion:
//!
//! - `GET/POST /1/strategies/personalization`: the strategy; a change starts a recompute of
//!   every profile of the app, whose progress `GET /1/strategies/personalization/job` shows
//!   (Penchant's own route);
//! - `GET /1/profiles/personalization/{userToken}`: `{userToken, lastEventAt, scores}`;
//! - `DELETE /1/profiles/{userToken}`: `{userToken, deletedUntil}`: earlier events stop counting;
//! - `DELETE /1/usertokens/{userToken}` (ACL `deleteObject`): 204, every trace of the user gone.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Json, Router};
use penchant_engine::strategy::Strategy;
use penchant_engine::tenancy::Acl;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Auth;
use crate::error::ApiError;
use crate::json::JsonBody;

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
}

fn iso(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
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
    match state.engine.jobs().status(app) {
        Some(status) => Ok(Json(serde_json::to_value(status).unwrap_or_default())),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "No recompute job has run on this node for this application",
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
