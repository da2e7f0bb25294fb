//! `GET /openapi.json`: the OpenAPI 3.1 description of every route (`docs/openapi.json`, built
//! into the binary). No credentials, like `/health`: it describes the API, it holds no data.
//! The server's tests check it against the routes the router has.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::AppState;

/// The document, as `docs/openapi.json` has it.
pub const DOCUMENT: &str = include_str!("../../../../docs/openapi.json");

pub fn routes() -> Router<AppState> {
    Router::new().route("/openapi.json", get(document))
}

async fn document() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT)
}
