//! The HTTP listener: accepts connections and serves HTTP/1.1 on each with hyper, within
//! [`HttpLimits`].
//!
//! Each connection is in one of three phases: reading a request's head (from its accept, or
//! from the first byte after an idle wait), busy (a request is being served, until its
//! response's body is written), or idle (waiting for the next request on a kept-alive
//! connection). A connection that stays longer than [`HttpLimits::header_read_timeout`] reading
//! a head (a client sending its headers a byte at a time, or nothing), or longer than
//! [`HttpLimits::idle_timeout`] idle, is closed. At most [`HttpLimits::max_connections`] are
//! served at once; more wait in the kernel's accept queue. A failed accept (out of file
//! descriptors) is retried after a second, not at once.
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
use tokio::time::Instant;
use tower::ServiceExt as _;

/// The limits of the listener's connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpLimits {
    /// How long a client may take to send a request's head (request line and headers), from
    /// its connection or from its first byte after an idle wait. Zero: no limit.
    pub header_read_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request. Zero: no limit.
    pub idle_timeout: Duration,
    /// The most connections served at once.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
        }
    }
}

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
        });
        let app = self.app.clone();
        let service_phase = phase.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            service_phase.set(BUSY);
            request.extensions_mut().insert(ConnectInfo(peer));
            let idle = IdleOnDrop(service_phase.clone());
            let served = app.clone().oneshot(request.map(Body::new));
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

/// A connection's socket, which marks the end of an idle wait when bytes come in.
struct Watched {
    inner: TcpStream,
    phase: Arc<Phase>,
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
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
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
