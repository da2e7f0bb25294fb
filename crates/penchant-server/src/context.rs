//! What every request carries beside its content: a correlation id, the verdict of its key's
//! rate limit, and its body's encoding — one middleware, [`around`], the outermost layer (each
//! layer costs every request: three tower-http layers for these cost a profile read 7 µs of
//! CPU, 25%, where this costs it little).
//!
//! A body sent with `Content-Encoding: gzip` (the clients' `compression` option) is inflated as
//! the route reads it, a piece at a time ([`Inflate`]): nothing is inflated before the route's
//! extractors have authenticated the request (a body is always the last one read), and the
//! route's own body limit applies to the inflated bytes, so no more than it is ever held. Any
//! gzip body stops at [`MAX_INFLATED_BYTES`] inflated or [`MAX_INFLATED_BYTES`] compressed (a
//! 413), whatever the route. Another encoding is a 415.
//!
//! The id is the request's `x-request-id`, else the `request-id` the Algolia clients send (one
//! per helper call, so a whole `replaceAllObjects` shares it), else 16 random hex digits. It is
//! set on the request (the request's span reads it), returned as `x-request-id`, and kept in a
//! task-local so that an error logged at any level names it ([`request_id`]).

use std::cell::Cell;
use std::io::Write as _;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll, ready};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::ratelimit::Verdict;

/// The largest body a gzip request may inflate to, and the largest it may be compressed (the
/// vector upload's limit, the largest of any route that buffers its body).
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

/// The target of the request lines: `log.level = "info,penchant::requests=warn"` keeps them
/// out.
pub const REQUESTS_TARGET: &str = "penchant::requests";

/// The app a request names (header or query parameter), for its log line.
fn app_of(request: &Request) -> String {
    const APP: &str = "x-algolia-application-id";
    if let Some(app) = request.headers().get(APP).and_then(|v| v.to_str().ok()) {
        return app.to_owned();
    }
    let query = request.uri().query().unwrap_or_default();
    serde_urlencoded::from_str::<Vec<(String, String)>>(query)
        .unwrap_or_default()
        .into_iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(APP))
        .map(|(_, v)| v)
        .unwrap_or_default()
}

/// Middleware: the request's id and rate-limit slot in, `x-request-id` and the rate-limit
/// headers out, and the request's line at info (method, route template, status, duration, app,
/// request id; never a key, nor the path, which may hold one).
pub async fn around(mut request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let logged = tracing::enabled!(target: REQUESTS_TARGET, tracing::Level::INFO)
        .then(|| (request.method().clone(), app_of(&request)));
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
    if let Some((method, app)) = logged {
        let route = response
            .extensions()
            .get::<crate::metrics::RouteTemplate>()
            .map_or("unmatched", |r| r.0.as_str());
        tracing::info!(
            target: REQUESTS_TARGET,
            %method,
            route,
            status = response.status().as_u16(),
            ms = started.elapsed().as_secs_f64() * 1000.0,
            app,
            request_id = id.to_str().unwrap_or_default(),
            "request"
        );
    }
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

/// A request whose body is gzip-compressed, with its body inflating as it is read (`identity`
/// passes).
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
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok(Request::from_parts(
        parts,
        Body::new(Inflate::new(body, MAX_INFLATED_BYTES)),
    ))
}

/// Why a gzip body could not be read.
#[derive(Debug)]
pub enum InflateError {
    /// Past the limit, inflated or compressed.
    TooLarge(&'static str, usize),
    /// Not gzip, or cut short.
    Invalid(std::io::Error),
    /// The connection's own error.
    Read(axum::Error),
}

impl std::fmt::Display for InflateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InflateError::TooLarge(what, limit) => write!(
                f,
                "Request body rejected: the gzip body is larger than {limit} bytes {what}"
            ),
            InflateError::Invalid(e) => write!(f, "Request body rejected: not valid gzip: {e}"),
            InflateError::Read(e) => write!(f, "Request body rejected: {e}"),
        }
    }
}

impl std::error::Error for InflateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            InflateError::Invalid(e) => Some(e),
            InflateError::Read(e) => Some(e),
            InflateError::TooLarge(..) => None,
        }
    }
}

/// A gzip body, inflated a piece at a time as it is polled: each piece of compressed input
/// inflates into at most the decoder's 32 KiB buffer, so the body never holds more than a
/// piece, whatever the ratio; it fails once `limit` bytes are passed inflated or compressed.
pub struct Inflate {
    compressed: Body,
    decoder: flate2::write::GzDecoder<Vec<u8>>,
    /// Compressed bytes not fed to the decoder yet.
    pending: Bytes,
    read: usize,
    inflated: usize,
    limit: usize,
    done: bool,
}

impl std::fmt::Debug for Inflate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflate")
            .field("read", &self.read)
            .field("inflated", &self.inflated)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

/// Output gathered before it is handed on as one frame.
const FRAME_BYTES: usize = 64 << 10;

impl Inflate {
    pub fn new(compressed: Body, limit: usize) -> Self {
        Self {
            compressed,
            decoder: flate2::write::GzDecoder::new(Vec::new()),
            pending: Bytes::new(),
            read: 0,
            inflated: 0,
            limit,
            done: false,
        }
    }

    /// What the decoder wrote so far, counted against the limit.
    fn take(&mut self) -> Result<Option<Bytes>, InflateError> {
        let out = std::mem::take(self.decoder.get_mut());
        self.inflated += out.len();
        if self.inflated > self.limit {
            return Err(InflateError::TooLarge("inflated", self.limit));
        }
        Ok((!out.is_empty()).then(|| Bytes::from(out)))
    }
}

impl HttpBody for Inflate {
    type Data = Bytes;
    type Error = InflateError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, InflateError>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            // Feed what is pending until a frame's worth is out.
            while !this.pending.is_empty() && this.decoder.get_ref().len() < FRAME_BYTES {
                let used = this
                    .decoder
                    .write(&this.pending)
                    .map_err(InflateError::Invalid)?;
                if used == 0 {
                    return Poll::Ready(Some(Err(InflateError::Invalid(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "data after the end of the gzip stream",
                    )))));
                }
                let _ = this.pending.split_to(used);
            }
            if !this.pending.is_empty() || this.decoder.get_ref().len() >= FRAME_BYTES {
                if let Some(out) = this.take()? {
                    return Poll::Ready(Some(Ok(http_body::Frame::data(out))));
                }
                continue;
            }
            match ready!(Pin::new(&mut this.compressed).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        this.read += data.len();
                        if this.read > this.limit {
                            return Poll::Ready(Some(Err(InflateError::TooLarge(
                                "compressed",
                                this.limit,
                            ))));
                        }
                        this.pending = data;
                    }
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(InflateError::Read(e)))),
                None => {
                    this.decoder.try_finish().map_err(InflateError::Invalid)?;
                    this.done = true;
                    return Poll::Ready(this.take()?.map(|out| Ok(http_body::Frame::data(out))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
