//! What every request carries beside its content: a correlation id, the verdict of its key's
//! rate limit, and its body's encoding — one middleware, [`around`], the outermost layer (each
//! layer costs every request: three tower-http layers for these cost a profile read 7 µs of
//! CPU, 25%, where this costs it little).
//!
//! A body sent with `Content-Encoding: gzip` (the clients' `compression` option) is inflated
//! before any route sees it — up to [`MAX_INFLATED_BYTES`], the largest any route takes; each
//! route's own limit then applies to the inflated body. Another encoding is a 415.
//!
//! The id is the request's `x-request-id`, else the `request-id` the Algolia clients send (one
//! per helper call, so a whole `replaceAllObjects` shares it), else 16 random hex digits. It is
//! set on the request (the request's span reads it), returned as `x-request-id`, and kept in a
//! task-local so that an error logged at any level names it ([`request_id`]).

use std::cell::Cell;
use std::io::Read;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::ratelimit::Verdict;

/// The largest body a gzip request may inflate to (the vector upload's limit).
pub const MAX_INFLATED_BYTES: usize = 256 << 20;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The request a task serves: its id, and its key's rate-limit verdict once authenticated.
#[derive(Debug)]
struct Context {
    id: HeaderValue,
    rate: Cell<Option<Verdict>>,
}

tokio::task_local! {
    static CONTEXT: Context;
}

/// The id of the request this task serves, if any.
pub fn request_id() -> Option<String> {
    CONTEXT
        .try_with(|c| c.id.to_str().unwrap_or_default().to_owned())
        .ok()
}

/// Record the rate-limit verdict of the request this task serves (for its response's headers).
pub fn set_rate(verdict: Verdict) {
    let _ = CONTEXT.try_with(|c| c.rate.set(Some(verdict)));
}

fn id_of(request: &Request) -> HeaderValue {
    let given = |name: &str| {
        request
            .headers()
            .get(name)
            .filter(|v| (1..=128).contains(&v.len()) && v.to_str().is_ok())
    };
    match given(REQUEST_ID.as_str()).or_else(|| given("request-id")) {
        Some(v) => v.clone(),
        None => HeaderValue::try_from(format!("{:016x}", rand::random::<u64>()))
            .expect("hex digits are a header value"),
    }
}

/// Middleware: the request's id and rate-limit slot in, `x-request-id` and the rate-limit
/// headers out.
pub async fn around(mut request: Request, next: Next) -> Response {
    let id = id_of(&request);
    request.headers_mut().insert(REQUEST_ID, id.clone());
    let context = Context {
        id: id.clone(),
        rate: Cell::new(None),
    };
    let (mut response, rate) = CONTEXT
        .scope(context, async move {
            if request.headers().contains_key(header::CONTENT_ENCODING) {
                request = match inflate(request).await {
                    Ok(request) => request,
                    Err(e) => return (e.into_response(), None),
                };
            }
            let response = next.run(request).await;
            (response, CONTEXT.with(|c| c.rate.get()))
        })
        .await;
    response.headers_mut().insert(REQUEST_ID, id);
    if let Some(verdict) = rate {
        rate_headers(&mut response, verdict);
    }
    response
}

/// `x-ratelimit-limit`, `x-ratelimit-remaining`, `x-ratelimit-reset`, and `Retry-After` on a
/// refusal.
fn rate_headers(response: &mut Response, v: Verdict) {
    let headers = response.headers_mut();
    let mut put = |name: &'static str, value: u64| {
        headers.insert(HeaderName::from_static(name), HeaderValue::from(value));
    };
    put("x-ratelimit-limit", u64::from(v.limit));
    put("x-ratelimit-remaining", u64::from(v.remaining));
    put("x-ratelimit-reset", v.reset);
    if !v.allowed {
        let now = penchant_store::validate::now_micros() as u64 / 1_000_000;
        put("retry-after", v.reset.saturating_sub(now).max(1));
    }
}

/// A request whose body is gzip-compressed, with its body inflated (`identity` passes).
async fn inflate(request: Request) -> Result<Request, ApiError> {
    let (mut parts, body) = request.into_parts();
    let encoding = parts
        .headers
        .remove(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok().map(|v| v.trim().to_ascii_lowercase()))
        .unwrap_or_default();
    match encoding.as_str() {
        "identity" | "" => return Ok(Request::from_parts(parts, body)),
        "gzip" | "x-gzip" => {}
        other => {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Content-Encoding {other} is not supported; send gzip or identity"),
            ));
        }
    }
    let compressed = axum::body::to_bytes(body, MAX_INFLATED_BYTES)
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("Request body rejected: {e}"),
            )
        })?;
    let inflated = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&compressed[..])
            .take(MAX_INFLATED_BYTES as u64 + 1)
            .read_to_end(&mut out)
            .map(|_| out)
    })
    .await
    .map_err(ApiError::internal)?
    .map_err(|e| ApiError::bad_request(format!("Request body rejected: not valid gzip: {e}")))?;
    if inflated.len() > MAX_INFLATED_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Request body rejected: it inflates past {MAX_INFLATED_BYTES} bytes"),
        ));
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok(Request::from_parts(parts, Body::from(inflated)))
}
