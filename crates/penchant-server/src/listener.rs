//! The HTTP listener: accepts connections and serves HTTP/1.1 on each with hyper, within
//! [`HttpLimits`].
//!
//! Each connection is in one of three phases: reading a request's head (from its accept, or
//! from the first byte after an idle wait), busy (a request is being served, until its
//! response's body is written), or idle (waiting for the next request on a kept-alive
//! connection). A connection that stays longer than [`HttpLimits::header_read_timeout`] reading
//! a head (a client sending its headers a byte at a time, or nothing), or longer than
//! [`HttpLimits::idle_timeout`] idle, is closed. While busy, a request's body must keep coming
//! ([`HttpLimits::body_read_timeout`], [`MIN_BODY_RATE`]: else the route answers 408 and the
//! connection closes), and the client must keep reading what is written to it
//! ([`HttpLimits::write_timeout`]: else the connection is closed). At most
//! [`HttpLimits::max_connections`] are served at once; more wait in the kernel's accept queue.
//! A failed accept (out of file descriptors) is retried after a second, not at once.
//!
//! On shutdown the listener stops accepting; idle connections, and those still reading a head,
//! close at once; busy ones close once their response is written.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt as _;

/// The limits of the listener's connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpLimits {
    /// How long a client may take to send a request's head (request line and headers), from
    /// its connection or from its first byte after an idle wait. Zero: no limit.
    pub header_read_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request. Zero: no limit.
    pub idle_timeout: Duration,
    /// How long the server waits for the next bytes of a request's body, and for all of it this
    /// long plus a second per [`MIN_BODY_RATE`] bytes received (the time the route spends
    /// between reads is not counted): a body that stalls or trickles fails with
    /// [`BodyTimeout`], which routes answer with a 408. Zero: no limit.
    pub body_read_timeout: Duration,
    /// How long a write to the client may wait for it to read (a full socket buffer); then the
    /// connection is closed, whatever it was writing. Zero: no limit.
    pub write_timeout: Duration,
    /// The most connections served at once.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_read_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            max_connections: 10_000,
        }
    }
}

/// The slowest a request body may come, in bytes a second, past [`HttpLimits::body_read_timeout`]:
/// a 2 MB body may take the timeout plus 32 s of the server's waiting for it. A client that
/// sends a byte now and then would otherwise hold a connection for as long as it likes.
pub const MIN_BODY_RATE: u64 = 64 << 10;

/// Serve `app` (usually [`crate::router`]) within the default [`HttpLimits`] until `shutdown`
/// resolves; see [`serve_with`].
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, app, shutdown, HttpLimits::default()).await
}

/// Serve `app` until `shutdown` resolves, then stop accepting connections and let in-flight
/// requests finish (idle connections close at once). The caller flushes the engine afterwards.
/// Handlers see each connection's peer address (`ConnectInfo<SocketAddr>`: rate limits count
/// per client IP).
pub async fn serve_with(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: HttpLimits,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (stop_tx, stop_rx) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                let connection = Connection {
                    app: app.clone(),
                    limits: limits.clone(),
                    stop: stop_rx.clone(),
                    _slot: slot,
                };
                tokio::spawn(connection.serve(stream, peer));
            }
            // The client went away before it was accepted.
            Err(e) if is_connection_error(&e) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept a connection; retrying in a second");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = &mut shutdown => break,
                }
            }
        }
    }
    drop(listener);
    drop(stop_rx);
    // Every connection's task holds a receiver: closed once they have all ended.
    let _ = stop_tx.send(());
    stop_tx.closed().await;
    Ok(())
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

const HEAD: u8 = 0;
const BUSY: u8 = 1;
const IDLE: u8 = 2;

/// A connection's phase and when it began, shared by its socket, its service and its task.
#[derive(Debug)]
struct Phase {
    phase: AtomicU8,
    /// When the phase began, in ms since `base`.
    since: AtomicU64,
    base: Instant,
    changed: Notify,
}

impl Phase {
    fn new() -> Self {
        Self {
            phase: AtomicU8::new(HEAD),
            since: AtomicU64::new(0),
            base: Instant::now(),
            changed: Notify::new(),
        }
    }

    fn set(&self, phase: u8) {
        self.since
            .store(self.base.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.phase.store(phase, Ordering::Release);
        self.changed.notify_one();
    }

    fn get(&self) -> u8 {
        self.phase.load(Ordering::Acquire)
    }

    /// When the connection is to be closed if its phase does not change.
    fn deadline(&self, limits: &HttpLimits) -> Option<Instant> {
        let limit = match self.get() {
            HEAD => limits.header_read_timeout,
            IDLE => limits.idle_timeout,
            _ => return None,
        };
        let since = Duration::from_millis(self.since.load(Ordering::Relaxed));
        (!limit.is_zero()).then(|| self.base + since + limit)
    }
}

/// A connection's task.
struct Connection {
    app: Router,
    limits: HttpLimits,
    stop: watch::Receiver<()>,
    _slot: OwnedSemaphorePermit,
}

impl Connection {
    async fn serve(mut self, stream: TcpStream, peer: SocketAddr) {
        let phase = Arc::new(Phase::new());
        let io = TokioIo::new(Watched {
            inner: stream,
            phase: phase.clone(),
            write_timeout: self.limits.write_timeout,
            write_wait: None,
        });
        let body_read_timeout = self.limits.body_read_timeout;
        let app = self.app.clone();
        let service_phase = phase.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            service_phase.set(BUSY);
            request.extensions_mut().insert(ConnectInfo(peer));
            let idle = IdleOnDrop(service_phase.clone());
            let request = request.map(|body| Body::new(TimedBody::new(body, body_read_timeout)));
            let served = app.clone().oneshot(request);
            async move {
                let response = served.await?;
                Ok::<_, Infallible>(response.map(|body| Body::new(Written { body, _idle: idle })))
            }
        });
        // The timeouts are this task's: hyper's own header timeout would count idle waits too.
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder.header_read_timeout(None);
        let mut conn = pin!(builder.serve_connection(io, service));
        let mut stopping = false;
        loop {
            let deadline = phase.deadline(&self.limits);
            let expiry = async move {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                served = conn.as_mut() => {
                    if let Err(e) = served {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    return;
                }
                () = phase.changed.notified() => {}
                () = expiry => {
                    if phase.deadline(&self.limits).is_some_and(|at| at <= Instant::now()) {
                        tracing::debug!(%peer, phase = phase.get(), "closing a connection: timed out");
                        return;
                    }
                }
                _ = self.stop.changed(), if !stopping => {
                    stopping = true;
                    // A head not read yet has no answer owed: closed at once.
                    if phase.get() == HEAD {
                        return;
                    }
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// A connection's socket, which marks the end of an idle wait when bytes come in, and fails a
/// write that has waited longer than [`HttpLimits::write_timeout`] for the client to read (hyper
/// then drops the connection).
struct Watched {
    inner: TcpStream,
    phase: Arc<Phase>,
    write_timeout: Duration,
    /// While a write waits: when it times out (made once, reset for each wait).
    write_wait: Option<(bool, Pin<Box<Sleep>>)>,
}

impl Watched {
    /// A write's outcome: one that is still pending past the write timeout fails.
    fn timed<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        if polled.is_ready() {
            if let Some((waiting, _)) = &mut self.write_wait {
                *waiting = false;
            }
            return polled;
        }
        if self.write_timeout.is_zero() {
            return Poll::Pending;
        }
        let at = Instant::now() + self.write_timeout;
        let (waiting, expiry) = self
            .write_wait
            .get_or_insert_with(|| (false, Box::pin(tokio::time::sleep_until(at))));
        if !*waiting {
            *waiting = true;
            expiry.as_mut().reset(at);
        }
        ready!(expiry.as_mut().poll(cx));
        Poll::Ready(Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client did not read its response",
        )))
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        if buf.filled().len() > before && self.phase.get() == IDLE {
            self.phase.set(HEAD);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.timed(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.timed(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Marks the connection idle when dropped: with the response's body, once hyper has written
/// it (or when the request is abandoned).
struct IdleOnDrop(Arc<Phase>);

impl Drop for IdleOnDrop {
    fn drop(&mut self) {
        self.0.set(IDLE);
    }
}

/// A response's body, with the mark of the end of its request.
struct Written {
    body: Body,
    _idle: IdleOnDrop,
}

impl HttpBody for Written {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Why a request body was cut short: it stopped coming, or came too slowly
/// ([`HttpLimits::body_read_timeout`]). Routes answer it with a 408 ([`crate::json::body_error`]).
#[derive(Debug, Clone, Copy)]
pub struct BodyTimeout {
    /// Bytes of the body received.
    pub received: u64,
    /// The time the server waited for them.
    pub waited: Duration,
}

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Request body rejected: it did not come in time ({} bytes in {:.1} s of waiting)",
            self.received,
            self.waited.as_secs_f64()
        )
    }
}

impl std::error::Error for BodyTimeout {}

/// A request's body, read within [`HttpLimits::body_read_timeout`]: only the time the route
/// waits for the client counts (from a poll that finds nothing to the frame that ends it), so a
/// route that reads slowly (an import writing as it goes) is not the client's fault.
/// (tower-http's `TimeoutBody` bounds each wait only: a byte a few seconds apart would pass.)
struct TimedBody {
    inner: Incoming,
    timeout: Duration,
    received: u64,
    /// The time spent waiting before the current wait.
    waited: Duration,
    /// When the current wait began.
    waiting_since: Option<Instant>,
    expiry: Option<Pin<Box<Sleep>>>,
}

impl TimedBody {
    fn new(inner: Incoming, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            received: 0,
            waited: Duration::ZERO,
            waiting_since: None,
            expiry: None,
        }
    }
}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            if let Some(since) = this.waiting_since.take() {
                this.waited += since.elapsed();
            }
            if let Some(data) = frame.as_ref().and_then(|f| f.as_ref().ok()?.data_ref()) {
                this.received += data.len() as u64;
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if this.timeout.is_zero() {
            return Poll::Pending;
        }
        let since = *this.waiting_since.get_or_insert_with(Instant::now);
        // All of the body may take the timeout plus a second per MIN_BODY_RATE bytes received.
        let allowed = this.timeout + Duration::from_millis(this.received * 1000 / MIN_BODY_RATE);
        let left = allowed.saturating_sub(this.waited);
        let at = since + left.min(this.timeout);
        let expiry = this
            .expiry
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if expiry.deadline() != at {
            expiry.as_mut().reset(at);
        }
        ready!(expiry.as_mut().poll(cx));
        let timeout = BodyTimeout {
            received: this.received,
            waited: this.waited + since.elapsed(),
        };
        Poll::Ready(Some(Err(Box::new(timeout))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
