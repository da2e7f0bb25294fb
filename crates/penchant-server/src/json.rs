//! A JSON body extractor whose errors are Algolia-shaped JSON, not axum's plain text.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON request body (whatever its content type: `sendBeacon` sends `text/plain`).
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("Request body rejected: {e}"),
            )
        })?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("Invalid JSON: {e}")))
    }
}
