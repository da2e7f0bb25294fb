//! The one place where errors become HTTP responses.
//!
//! Every error has an [`ErrorKind`]; [`ErrorKind::status`] is the one exhaustive table from kind to
//! HTTP status. Bodies follow Algolia's shape: `{"status": <code>, "message": "<what was wrong>"}`.
//! Penchant's own failures (corrupt stored data, a store error, a failed serialization) are
//! 500s whose body says only that something failed and gives an error id; the detail goes to the
//! log under the same id — never a backend's text in a response.

use axum::Json;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use penchant_engine::EngineError;
use serde_json::json;

/// What kind of error a response reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed.
    BadRequest,
    /// No valid credentials.
    Unauthorized,
    /// The credentials do not allow this.
    Forbidden,
    /// What the request names does not exist (or no route does).
    NotFound,
    /// The route exists, not with this method.
    MethodNotAllowed,
    /// What the request creates exists, or the operation was refused as things are.
    Conflict,
    /// The body did not arrive in time ([`crate::HttpLimits::body_read_timeout`]).
    RequestTimeout,
    /// The body is over the route's limit.
    PayloadTooLarge,
    /// The body's media type or encoding is not one Penchant reads.
    UnsupportedMediaType,
    /// A well-formed body that breaks a rule (Algolia's Insights answers these with 422).
    Unprocessable,
    /// The key's rate limit is reached for this hour.
    TooManyRequests,
    /// The store cannot serve now: retry later.
    Unavailable,
    /// Penchant failed.
    Internal,
}

impl ErrorKind {
    /// The HTTP status of each kind.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
            ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorKind::Forbidden => StatusCode::FORBIDDEN,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorKind::Conflict => StatusCode::CONFLICT,
            ErrorKind::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorKind::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn from_status(status: StatusCode) -> Self {
        match status {
            StatusCode::BAD_REQUEST => ErrorKind::BadRequest,
            StatusCode::UNAUTHORIZED => ErrorKind::Unauthorized,
            StatusCode::FORBIDDEN => ErrorKind::Forbidden,
            StatusCode::NOT_FOUND => ErrorKind::NotFound,
            StatusCode::METHOD_NOT_ALLOWED => ErrorKind::MethodNotAllowed,
            StatusCode::CONFLICT => ErrorKind::Conflict,
            StatusCode::REQUEST_TIMEOUT => ErrorKind::RequestTimeout,
            StatusCode::PAYLOAD_TOO_LARGE => ErrorKind::PayloadTooLarge,
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorKind::UnsupportedMediaType,
            StatusCode::UNPROCESSABLE_ENTITY => ErrorKind::Unprocessable,
            StatusCode::TOO_MANY_REQUESTS => ErrorKind::TooManyRequests,
            StatusCode::SERVICE_UNAVAILABLE => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        }
    }
}

/// An error a handler returns.
#[derive(Debug)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    /// For [`ErrorKind::Internal`] and [`ErrorKind::Unavailable`]: the id under which the
    /// detail was logged.
    pub error_id: Option<String>,
}

impl ApiError {
    /// An error of a kind, with the message the caller sees.
    pub fn kind(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            error_id: None,
        }
    }

    /// An error with the kind of an HTTP status (`StatusCode::BAD_REQUEST` → bad request).
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self::kind(ErrorKind::from_status(status), message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::kind(ErrorKind::BadRequest, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::kind(ErrorKind::NotFound, message)
    }

    /// Penchant failed: the caller sees a generic message and an id; the detail is logged with
    /// the same id.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::logged(
            ErrorKind::Internal,
            detail,
            "an internal error occurred; it is in the server's log with its errorId",
        )
    }

    /// The store cannot serve now: a generic message for the caller, the detail in the log.
    pub fn unavailable(detail: impl std::fmt::Display) -> Self {
        Self::logged(
            ErrorKind::Unavailable,
            detail,
            "the store is unavailable; retry later",
        )
    }

    fn logged(kind: ErrorKind, detail: impl std::fmt::Display, message: &str) -> Self {
        let id = format!("{:016x}", rand::random::<u64>());
        let request_id = crate::context::request_id().unwrap_or_default();
        match kind {
            ErrorKind::Internal => {
                tracing::error!(error_id = %id, %request_id, error = %detail, "internal error")
            }
            _ => tracing::warn!(error_id = %id, %request_id, error = %detail, "store unavailable"),
        }
        Self {
            kind,
            message: message.to_owned(),
            error_id: Some(id),
        }
    }

    /// The HTTP status of the error.
    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Invalid(m) => ApiError::kind(ErrorKind::BadRequest, m),
            EngineError::NotFound(m) => ApiError::kind(ErrorKind::NotFound, m),
            EngineError::Exists(m) | EngineError::Refused(m) => {
                ApiError::kind(ErrorKind::Conflict, m)
            }
            EngineError::StrongReadUnavailable(m) => {
                ApiError::logged(ErrorKind::Unavailable, m, STRONG_READ_UNAVAILABLE)
            }
            EngineError::Unavailable(m) => ApiError::unavailable(m),
            EngineError::Internal(m) => ApiError::internal(m),
        }
    }
}

/// What a strong read (`?consistency=strong`) says when the user's home cluster cannot be
/// reached: it is not answered from another cluster, which may not have the latest writes.
pub const STRONG_READ_UNAVAILABLE: &str = "strong read: the home cluster of this user's rows is \
    unreachable, and a strong read is not served from another cluster; retry later, or read with \
    consistency=eventual";

/// A JSON value a handler answers with; serialization failing is an internal error (never a
/// 200 with a `null` body).
pub fn to_json(value: &impl serde::Serialize) -> Result<Json<serde_json::Value>, ApiError> {
    serde_json::to_value(value)
        .map(Json)
        .map_err(ApiError::internal)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut body = json!({"status": status.as_u16(), "message": self.message});
        if let Some(id) = self.error_id {
            body["errorId"] = id.into();
        }
        (status, Json(body)).into_response()
    }
}

/// An Algolia route Penchant knows and does not serve: a 400 whose message says what to use
/// instead. Not a 501: the official clients take any 5xx for an unreachable host, retry, and
/// never show the message (Python's then marks the host down for minutes).
pub fn unsupported_route(message: impl Into<String>) -> ApiError {
    ApiError::kind(ErrorKind::BadRequest, message)
}

/// What Penchant says to a search request: what it does instead.
pub const DOES_NOT_SEARCH: &str = "Penchant does not search; re-rank your engine's hits with \
    POST /1/indexes/{index}/rerank, or search with your engine using the user's profile as \
    optionalFilters (GET /1/profiles/personalization/{userToken}/optionalFilters)";

/// The answer to an Algolia route Penchant does not serve, saying what to do instead; `None`
/// for a path no Algolia API has.
fn unsupported(method: &Method, path: &str) -> Option<ApiError> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let message = match parts.as_slice() {
        ["1", "indexes", _] if method == Method::GET => DOES_NOT_SEARCH,
        ["1", "indexes", "*", "queries"]
        | ["1", "indexes", _, "query"]
        | ["1", "indexes", _, "facets", _, "query"] => DOES_NOT_SEARCH,
        ["1", "indexes", _, _, "recommend", "rules", ..] => {
            "Penchant has no Recommend rules; narrow recommendations with filters, facetFilters \
             or numericFilters in queryParameters, or with a queue's sources (PUT /1/queues/{name})"
        }
        ["1", "indexes", _, "rules", ..] => {
            "Penchant has no query rules: they act on search, which Penchant does not do; \
             boosting by user affinity is POST /1/indexes/{index}/rerank"
        }
        ["1", "indexes", _, "synonyms", ..] => {
            "Penchant has no synonyms: they act on search, which Penchant does not do"
        }
        ["1", "indexes", _, "keys", ..] => {
            "Penchant has no index-level API keys; manage the app's keys with /1/keys"
        }
        ["1", "dictionaries", ..] => {
            "Penchant has no dictionaries: they act on search, which Penchant does not do"
        }
        ["1", "task", _] => {
            "Penchant has no app-level tasks (they are dictionaries' tasks); an index's task is \
             GET /1/indexes/{index}/task/{taskID}"
        }
        ["1", "keys", _] if method == Method::PUT => {
            "Penchant does not update API keys; create one with the new ACLs (POST /1/keys) \
             and delete the old one (DELETE /1/keys/{key})"
        }
        ["1", "keys", _, "restore"] => {
            "Penchant does not restore deleted API keys; create a new one with POST /1/keys"
        }
        ["1", "logs"] => {
            "Penchant has no logs API: it logs to stderr (log.format = \"json\" for JSON), and \
             its counters and latencies are at GET /metrics"
        }
        ["1", "clusters", ..] | ["1", "security", ..] => {
            "Penchant has no multi-cluster or IP-source API; see docs/BIGTABLE.md (residency) \
             for placing an app's data"
        }
        ["2", ..] => {
            "Penchant has no Analytics, A/B testing or Usage API; its counters are at GET /metrics"
        }
        _ => return None,
    };
    Some(unsupported_route(message))
}

/// The router's fallback: no route has this path.
pub async fn unknown_route(method: Method, uri: Uri) -> ApiError {
    unsupported(&method, uri.path()).unwrap_or_else(|| {
        ApiError::kind(
            ErrorKind::NotFound,
            format!(
                "no route for {method} {}: Penchant serves Algolia's Insights, Personalization \
                 and Recommend APIs, the indexing routes, and its own (GET /openapi.json and \
                 docs/API.md list them)",
                crate::loggable_path(uri.path())
            ),
        )
    })
}

/// The router's fallback for a route without this method (the `Allow` header lists those it
/// has): an Algolia route Penchant does not serve on this path (search on an index's path)
/// says so.
pub async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    unsupported(&method, uri.path()).unwrap_or_else(|| {
        ApiError::kind(
            ErrorKind::MethodNotAllowed,
            format!(
                "method {method} is not allowed on {}",
                crate::loggable_path(uri.path())
            ),
        )
    })
}

/// The longest text of a plain-text error that becomes a JSON message.
const MAX_PLAIN_ERROR_BYTES: usize = 4096;

/// Middleware: every error response in Algolia's JSON shape. Handlers' errors already are
/// ([`ApiError`]); axum's own rejections are plain text (a path segment that is not UTF-8, a
/// query string that does not parse): their text becomes the message (a server error's is not
/// shown, its status' reason is), other headers (`Allow`) are kept.
pub async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if is_json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = if status.is_server_error() {
        None
    } else {
        axum::body::to_bytes(body, MAX_PLAIN_ERROR_BYTES)
            .await
            .ok()
            .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
            .filter(|t| !t.is_empty())
    };
    let message =
        text.unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_lowercase());
    let body = json!({"status": status.as_u16(), "message": message}).to_string();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_map_to_statuses_and_hide_internals() {
        let e: ApiError = EngineError::Invalid("bad".into()).into();
        assert_eq!(
            (e.status(), e.message.as_str()),
            (StatusCode::BAD_REQUEST, "bad")
        );
        let e: ApiError =
            EngineError::Internal("store: column qualifier is 20007 bytes".into()).into();
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!e.message.contains("qualifier"), "{}", e.message);
        assert!(e.error_id.is_some());
        let e: ApiError = penchant_engine::EngineError::from(
            penchant_store::StoreError::InvalidArgument("row key must not be empty".into()),
        )
        .into();
        assert_eq!(
            e.status(),
            StatusCode::INTERNAL_SERVER_ERROR,
            "a store's refusal is ours"
        );
        assert!(!e.message.contains("row key"));
        let e: ApiError = penchant_engine::EngineError::from(
            penchant_store::StoreError::Unavailable("connection refused 10.0.0.1".into()),
        )
        .into();
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(!e.message.contains("10.0.0.1"));
    }

    /// Issue 29, item 10: a strong read refused is told apart by its type, never by its text (a
    /// reworded message turned its 503 into a 500 or a generic 503).
    #[test]
    fn a_strong_read_refused_is_a_503_whatever_its_text() {
        use penchant_store::StoreError;
        for detail in [
            "",
            "connection refused 10.0.0.1",
            "reworded: home cluster gone",
        ] {
            let e: ApiError =
                EngineError::from(StoreError::StrongReadUnavailable(detail.into())).into();
            assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE, "{detail}");
            assert_eq!(e.message, STRONG_READ_UNAVAILABLE, "{detail}");
            assert!(e.error_id.is_some());
        }
        // Another store error whose text reads like one is not one.
        let e: ApiError = EngineError::from(StoreError::Unavailable(format!(
            "{}: connection refused",
            penchant_store::STRONG_READ_UNAVAILABLE
        )))
        .into();
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_ne!(e.message, STRONG_READ_UNAVAILABLE);
        let e: ApiError = EngineError::Internal(STRONG_READ_UNAVAILABLE.into()).into();
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
