//! JSON body extractors whose errors are Algolia-shaped JSON, not axum's plain text.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::{DeserializeOwned, IgnoredAny};

use crate::BodyTimeout;
use crate::context::InflateError;
use crate::error::ApiError;

/// The message for a body that is valid JSON but not an object.
pub const NOT_AN_OBJECT: &str = "the request body must be a JSON object";

/// A JSON request body that must be an object (whatever its content type: `sendBeacon` sends
/// `text/plain`).
///
/// serde reads a struct from a JSON array too, field by field in declaration order (so
/// `[["admin"], "x"]` would be a key's `{"acl": ["admin"], "description": "x"}`, past
/// `deny_unknown_fields`); a body that is not an object is refused before `T` sees it. A route
/// whose body may be an array or a scalar takes [`AnyJsonBody`].
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

/// A JSON request body of any shape: the opt-out of [`JsonBody`]'s object check, for a `T`
/// that legitimately reads arrays or scalars, or a handler that checks the shape itself (the
/// Bloom filter commands' `keys_of`, whose message names the field it expects).
#[derive(Debug)]
pub struct AnyJsonBody<T>(pub T);

/// A body as bytes: one over the route's limit is a 413, one that cannot be read (a gzip
/// body that does not inflate) a 400.
async fn body_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state).await.map_err(body_error)
}

/// The error of a body that could not be read: one that did not come in time
/// ([`crate::HttpLimits::body_read_timeout`]) a 408, over the route's limit (or a gzip body
/// over [`crate::context::MAX_INFLATED_BYTES`]) a 413, else a 400.
pub fn body_error(e: BytesRejection) -> ApiError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(error) = source {
        if let Some(timeout) = error.downcast_ref::<BodyTimeout>() {
            return ApiError::new(StatusCode::REQUEST_TIMEOUT, timeout.to_string());
        }
        source = error.source();
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(error) = source {
        if let Some(inflate) = error.downcast_ref::<InflateError>() {
            let status = match inflate {
                InflateError::TooLarge(..) => StatusCode::PAYLOAD_TOO_LARGE,
                _ => StatusCode::BAD_REQUEST,
            };
            return ApiError::new(status, inflate.to_string());
        }
        source = error.source();
    }
    let status = match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
        _ => StatusCode::BAD_REQUEST,
    };
    ApiError::new(status, format!("Request body rejected: {}", e.body_text()))
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("Invalid JSON: {e}")))
}

/// A JSON object read as `T` (what [`JsonBody`] reads a body with).
pub fn object<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        // Malformed JSON keeps serde's message (line and column); well-formed JSON of another
        // kind gets this one.
        parse::<IgnoredAny>(bytes)?;
        return Err(ApiError::new(StatusCode::BAD_REQUEST, NOT_AN_OBJECT));
    }
    parse(bytes)
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        object(&body_bytes(req, state).await?).map(JsonBody)
    }
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for AnyJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        parse(&body_bytes(req, state).await?).map(AnyJsonBody)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use serde::Deserialize;
    use serde_json::Value;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Key {
        acl: Vec<String>,
        description: String,
    }

    async fn extract<T: DeserializeOwned>(body: &str) -> Result<T, ApiError> {
        let req = Request::new(Body::from(body.to_owned()));
        JsonBody::<T>::from_request(req, &()).await.map(|b| b.0)
    }

    #[tokio::test]
    async fn bodies_must_be_objects() {
        assert!(
            extract::<Key>(r#" {"acl": ["search"], "description": "x"}"#)
                .await
                .is_ok()
        );
        for body in [
            r#"[["admin"], "x"]"#,
            "  [1024]",
            "\"x\"",
            "5",
            "null",
            "true",
        ] {
            let e = extract::<Key>(body).await.unwrap_err();
            assert_eq!(
                (e.status(), e.message.as_str()),
                (StatusCode::BAD_REQUEST, NOT_AN_OBJECT),
                "{body}"
            );
            // Even where `T` would read anything.
            let e = extract::<Value>(body).await.unwrap_err();
            assert_eq!(e.message, NOT_AN_OBJECT);
        }
        for body in ["", "[1,", "{\"acl\": "] {
            let e = extract::<Key>(body).await.unwrap_err();
            assert_eq!(e.status(), StatusCode::BAD_REQUEST);
            assert!(
                e.message.starts_with("Invalid JSON: "),
                "{body}: {}",
                e.message
            );
        }
        let req = Request::new(Body::from("[1, 2]"));
        let AnyJsonBody(v) = AnyJsonBody::<Vec<u8>>::from_request(req, &())
            .await
            .unwrap();
        assert_eq!(v, [1, 2]);
    }
}
