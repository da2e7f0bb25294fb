//! The one place where errors become HTTP responses.
//!
//! Bodies follow Algolia's shape: `{"status": <code>, "message": "<what was wrong>"}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use penchant_engine::EngineError;
use penchant_store::StoreError;
use serde_json::json;

/// An error a handler returns.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Store(e) => e.into(),
            EngineError::Invalid(m) => ApiError::new(StatusCode::BAD_REQUEST, m),
            EngineError::NotFound(m) => ApiError::new(StatusCode::NOT_FOUND, m),
            EngineError::Exists(m) => ApiError::new(StatusCode::CONFLICT, m),
            EngineError::Refused(m) => ApiError::new(StatusCode::CONFLICT, m),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let status = match &e {
            StoreError::TableNotFound(_) | StoreError::FamilyNotFound { .. } => {
                StatusCode::NOT_FOUND
            }
            StoreError::TableExists(_) | StoreError::FamilyExists { .. } => StatusCode::CONFLICT,
            StoreError::InvalidArgument(_) => StatusCode::BAD_REQUEST,
            StoreError::FailedPrecondition(_) => StatusCode::UNPROCESSABLE_ENTITY,
            StoreError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            StoreError::Backend(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status.is_server_error() {
            tracing::error!(error = %e, "store error");
        }
        ApiError::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"status": self.status.as_u16(), "message": self.message});
        (self.status, Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_map_to_statuses() {
        let e: ApiError = StoreError::InvalidArgument("row key must not be empty".into()).into();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains("row key must not be empty"));
        let e: ApiError = StoreError::TableNotFound("t".into()).into();
        assert_eq!(e.status, StatusCode::NOT_FOUND);
        let e: ApiError = StoreError::Unavailable("down".into()).into();
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
    }
}
