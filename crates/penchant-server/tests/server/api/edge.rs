//! The HTTP edge, over raw sockets: gzip bodies are inflated only once the request is
//! authenticated and only as far as the route's limit; connections that stall or idle are
//! closed, and shutdown does not wait for them; a request body that stalls or trickles is a
//! 408, a response the client does not read closes its connection; rate limits count per
//! client IP, whatever user token the client sends.
//!
//! Waits here are bounds on a failure (a server that never answers), never measurements.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use penchant_engine::Engine;
use penchant_server::{AppState, HttpLimits, router, serve_with};
use reqwest::{Method, StatusCode};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use crate::common::{ROOT, Server, shop};

/// How long a test waits for what should come at once (or after a 1 s timeout) before it
/// calls it a failure.
const BOUND: Duration = Duration::from_secs(15);

/// A gzip bomb: `mib` MiB of zeros, gzipped (about 1,000 times smaller).
fn bomb(mib: usize) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..mib {
        gz.write_all(&zeros).unwrap();
    }
    gz.finish().unwrap()
}

fn addr(s: &Server) -> String {
    s.base.trim_start_matches("http://").to_owned()
}

/// A response read off a socket: its status and body, once complete or once the server
/// closed the connection; `None` if neither happened within [`BOUND`].
async fn response(stream: &mut TcpStream) -> Option<(u16, String)> {
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 8192];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            let text = String::from_utf8_lossy(&got);
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if got.len() >= end + 4 + length {
                    return;
                }
            }
        }
    };
    tokio::time::timeout(BOUND, read).await.ok()?;
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Some((status, body))
}

/// Send a POST's head announcing all of `body`, then only its first half, and wait for the
/// answer without sending the rest.
async fn half_sent(
    s: &Server,
    path: &str,
    creds: Option<(&str, &str)>,
    body: &[u8],
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr(s)).await.unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Encoding: gzip\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some((app, key)) = creds {
        head += &format!("X-Algolia-Application-Id: {app}\r\nX-Algolia-API-Key: {key}\r\n");
    }
    head += "\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body[..body.len() / 2]).await.unwrap();
    response(&mut stream)
        .await
        .expect("no answer while the body was still coming: the server waited for all of it")
}

/// Issue 29, item 4: a gzip body was inflated whole (up to 256 MiB) before the request was
/// authenticated: a 306 KB body cost 0.5 GB, without credentials. Now it is inflated only as
/// the route reads it, after its credentials are checked: the answer comes before the body
/// has all been sent.
#[tokio::test]
async fn a_gzip_bomb_is_refused_before_it_is_inflated() {
    let (s, admin) = shop().await;
    let bomb = bomb(100);
    assert!(bomb.len() < 200 << 10, "{}", bomb.len());
    let path = "/1/indexes/products/batch";
    for creds in [
        None,
        Some(("SHOP", "not-a-key")),
        Some(("NOPE", admin.as_str())),
    ] {
        let (status, body) = half_sent(&s, path, creds, &bomb).await;
        assert!(matches!(status, 401 | 403), "{creds:?}: {status} {body}");
        assert!(body.contains("Invalid credentials"), "{body}");
    }
    // With credentials: the route's limit (2 MB) applies to the inflated body.
    let (status, body) = half_sent(&s, path, Some(("SHOP", &admin)), &bomb).await;
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("Request body rejected"), "{body}");
    assert!(body.contains("length limit exceeded"), "{body}");
    let (status, body) = half_sent(&s, "/1/events", Some(("SHOP", &admin)), &bomb).await;
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("Request Entity Too Large"), "{body}");
    // All of it sent: the same.
    let resp = s
        .http
        .post(format!("{}{path}", s.base))
        .header("X-Algolia-Application-Id", "SHOP")
        .header("X-Algolia-API-Key", &admin)
        .header("Content-Encoding", "gzip")
        .body(bomb)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // A gzip body within the limit is read (and one that is not gzip is a 400).
    let batch = json!({"requests": [{"action": "addObject", "body": {"objectID": "z1"}}]});
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(batch.to_string().as_bytes()).unwrap();
    for (body, status) in [(gz.finish().unwrap(), 200), (b"{}".to_vec(), 400)] {
        let resp = s
            .http
            .post(format!("{}{path}", s.base))
            .header("X-Algolia-Application-Id", "SHOP")
            .header("X-Algolia-API-Key", &admin)
            .header("Content-Encoding", "gzip")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), status);
    }
}

/// Issue 29, item 7: rotating `X-Algolia-UserToken` lifted a key's rate limit (200 of 200
/// requests passed a limit of 10).
#[tokio::test]
async fn user_tokens_do_not_lift_a_keys_rate_limit() {
    let (s, admin) = shop().await;
    let created = s
        .ok(
            Method::POST,
            "/1/keys",
            Some(("SHOP", &admin)),
            Some(json!({"acl": ["search"], "maxQueriesPerIPPerHour": 10})),
        )
        .await;
    let key = created["key"].as_str().unwrap();
    for i in 0..20 {
        let resp = s
            .http
            .get(format!("{}/1/indexes/products/p1", s.base))
            .header("X-Algolia-Application-Id", "SHOP")
            .header("X-Algolia-API-Key", key)
            .header("X-Algolia-UserToken", format!("user-{i}"))
            .send()
            .await
            .unwrap();
        let limited = resp.status() == StatusCode::TOO_MANY_REQUESTS;
        assert_eq!(limited, i >= 10, "request {i}: {}", resp.status());
    }
}

/// A server on the in-memory store within `limits` (its global admin key [`ROOT`]), and what
/// stops it.
async fn start(
    limits: HttpLimits,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    JoinHandle<std::io::Result<()>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let store = Arc::new(penchant_store::MemStore::new());
    let config = penchant_engine::EngineConfig {
        tenancy: penchant_engine::tenancy::TenancyConfig {
            admin_key: Some(ROOT.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let engine = Engine::open(store, config).await.unwrap();
    let app = router(AppState::new(engine, "memory"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async {
        let _ = stopped.await;
    };
    let server = tokio::spawn(serve_with(listener, app, shutdown, limits));
    (addr, stop, server)
}

/// Whether the server closed the connection (a read ends or fails) within [`BOUND`].
async fn closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    let read = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(BOUND, read).await.is_ok()
}

const HEALTH: &[u8] = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n";

/// Issue 29, item 5: connections were never closed (0 of 5,000 slow connections after 70 s;
/// 1,124 idle sockets of one client made `/health` fail with "Too many open files").
#[tokio::test]
async fn stalled_and_idle_connections_are_closed() {
    let limits = HttpLimits {
        header_read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(5),
        max_connections: 100,
        ..HttpLimits::default()
    };
    let (addr, _stop, _server) = start(limits).await;
    // Half a head, then nothing; and nothing at all.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    let mut silent = TcpStream::connect(addr).await.unwrap();
    assert!(closed(&mut stalled).await, "a stalled head was kept");
    assert!(closed(&mut silent).await, "a silent connection was kept");

    // Kept alive between requests for longer than the header timeout, then closed when idle.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(HEALTH).await.unwrap();
    assert_eq!(response(&mut idle).await.map(|r| r.0), Some(200));
    tokio::time::sleep(Duration::from_secs(2)).await;
    idle.write_all(HEALTH).await.unwrap();
    assert_eq!(
        response(&mut idle).await.map(|r| r.0),
        Some(200),
        "an idle wait is not a slow head"
    );
    assert!(closed(&mut idle).await, "an idle connection was kept");
}

/// Issue 29, item 5: with stalled connections, a shutdown waited the whole grace period.
#[tokio::test]
async fn shutdown_does_not_wait_for_idle_or_stalled_connections() {
    let limits = HttpLimits {
        header_read_timeout: Duration::from_secs(600),
        idle_timeout: Duration::from_secs(600),
        max_connections: 100,
        ..HttpLimits::default()
    };
    let (addr, stop, server) = start(limits).await;
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(HEALTH).await.unwrap();
    assert_eq!(response(&mut idle).await.map(|r| r.0), Some(200));
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(b"GET /health HTTP/1.1\r\n")
        .await
        .unwrap();
    let mut silent = TcpStream::connect(addr).await.unwrap();
    // Each connection accepted before the shutdown starts.
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.send(()).unwrap();
    let served = tokio::time::timeout(BOUND, server).await;
    assert!(
        served.is_ok(),
        "the server waited for idle or stalled connections"
    );
    served.unwrap().unwrap().unwrap();
    for stream in [&mut idle, &mut stalled, &mut silent] {
        assert!(closed(stream).await);
    }
}

/// Connections past the cap wait to be accepted; they are served once others close.
#[tokio::test]
async fn connections_past_the_cap_wait_their_turn() {
    let limits = HttpLimits {
        header_read_timeout: Duration::from_secs(600),
        idle_timeout: Duration::from_secs(600),
        max_connections: 2,
        ..HttpLimits::default()
    };
    let (addr, _stop, _server) = start(limits).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(HEALTH).await.unwrap();
        assert_eq!(response(&mut s).await.map(|r| r.0), Some(200));
        held.push(s);
    }
    // The kernel completes the handshake; the server does not read it yet.
    let mut third = TcpStream::connect(addr).await.unwrap();
    third.write_all(HEALTH).await.unwrap();
    let waiting =
        tokio::time::timeout(Duration::from_millis(500), third.read(&mut [0u8; 16])).await;
    assert!(
        waiting.is_err(),
        "a third connection was served past the cap"
    );
    held.clear();
    assert_eq!(response(&mut third).await.map(|r| r.0), Some(200));
}

/// A request's head, for the global admin key, announcing a body of `length` bytes.
fn head(method: &str, path: &str, length: usize) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nX-Algolia-API-Key: {ROOT}\r\n\
         Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    )
}

/// A request body that stops coming (its head and a few bytes, then nothing), or that comes a
/// byte at a time, held its connection for as long as the client liked: now it is a 408 and the
/// connection is closed, within `body_read_timeout` (and a second per 64 KiB received).
#[tokio::test]
async fn a_stalled_or_trickled_request_body_is_a_408() {
    let limits = HttpLimits {
        body_read_timeout: Duration::from_secs(1),
        ..HttpLimits::default()
    };
    let (addr, _stop, _server) = start(limits).await;
    // Stalled: 9 of 1,000 bytes.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(head("POST", "/1/apps", 1000).as_bytes())
        .await
        .unwrap();
    stalled.write_all(b"{\"appID\":").await.unwrap();
    let (status, body) = response(&mut stalled)
        .await
        .expect("no answer to a stalled body");
    assert_eq!(status, 408, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["status"], 408);
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with("Request body rejected: it did not come in time (9 bytes in "),
        "{message}"
    );
    assert!(closed(&mut stalled).await, "the connection was kept");

    // Trickled: a byte every 200 ms is never a 1 s stall, but far slower than 64 KiB/s.
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let trickle = tokio::spawn(async move {
        writer
            .write_all(head("POST", "/1/apps", 1000).as_bytes())
            .await?;
        for _ in 0..1000 {
            writer.write_all(b" ").await?;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        std::io::Result::Ok(())
    });
    let mut got = Vec::new();
    let read = tokio::time::timeout(BOUND, reader.read_to_end(&mut got)).await;
    trickle.abort();
    assert!(read.is_ok(), "a trickled body held its connection");
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
    assert!(
        text.contains("Request body rejected: it did not come in time"),
        "{text}"
    );

    // A body that comes in time is read, the same connection's pauses between requests apart.
    let mut fine = TcpStream::connect(addr).await.unwrap();
    let app = br#"{"appID": "TIMELY"}"#;
    fine.write_all(head("POST", "/1/apps", app.len()).as_bytes())
        .await
        .unwrap();
    fine.write_all(&app[..5]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    fine.write_all(&app[5..]).await.unwrap();
    assert_eq!(response(&mut fine).await.map(|r| r.0), Some(201));
}

/// A client that asked for a large response and did not read it held its connection (and the
/// response's memory) for ever: now a write that waits longer than `write_timeout` for the
/// client closes the connection, and the client never gets the rest.
#[tokio::test]
async fn a_response_the_client_does_not_read_closes_its_connection() {
    let limits = HttpLimits {
        write_timeout: Duration::from_secs(1),
        ..HttpLimits::default()
    };
    let (addr, _stop, _server) = start(limits).await;
    let http = reqwest::Client::new();
    let base = format!("http://{addr}");
    let created: serde_json::Value = http
        .post(format!("{base}/1/apps"))
        .header("X-Algolia-API-Key", ROOT)
        .json(&json!({"appID": "BIG"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let admin = created["adminAPIKey"].as_str().unwrap().to_owned();
    // 400 records of 90 KB: an export of 36 MB, far more than the sockets' buffers hold.
    let pad = "x".repeat(90_000);
    for batch in 0..20 {
        let requests: Vec<serde_json::Value> = (0..20)
            .map(|i| json!({"action": "addObject", "body": {"objectID": format!("r{batch}-{i}"), "pad": pad}}))
            .collect();
        let resp = http
            .post(format!("{base}/1/indexes/big/batch"))
            .header("X-Algolia-Application-Id", "BIG")
            .header("X-Algolia-API-Key", &admin)
            .json(&json!({ "requests": requests }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let export = "/1/apps/BIG/export";
    let full = http
        .get(format!("{base}{export}"))
        .header("X-Algolia-API-Key", ROOT)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .len();
    assert!(full > 36_000_000, "{full}");

    // Asked for, not read (a small receive buffer: the server's writes wait at once).
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    stream
        .write_all(head("GET", export, 0).as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Read now: what the server had written before it gave up, then the end.
    let mut got = Vec::new();
    let read = async {
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    assert!(
        tokio::time::timeout(BOUND, read).await.is_ok(),
        "the connection was kept"
    );
    assert!(
        String::from_utf8_lossy(&got[..got.len().min(100)]).starts_with("HTTP/1.1 200 "),
        "{}",
        String::from_utf8_lossy(&got[..got.len().min(300)])
    );
    assert!(
        got.len() < full,
        "the whole response came ({} of {full} bytes): the server waited for the reader",
        got.len()
    );
}
