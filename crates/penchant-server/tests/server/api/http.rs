//! The server over a real socket, on the in-memory store.

use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use penchant_engine::Engine;
use penchant_server::{AppState, router, serve};

#[tokio::test]
async fn health_answers_json_and_shutdown_drains_in_flight_requests() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let engine = Engine::open(
        Arc::new(penchant_store::MemStore::new()),
        Default::default(),
    )
    .await
    .unwrap();
    // A slow route, to have a request in flight when shutdown starts.
    let app = router(AppState::new(engine, "memory")).route(
        "/slow",
        get(|| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            "done"
        }),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, app, async {
        let _ = stopped.await;
    }));

    let resp = reqwest::get(format!("http://{addr}/health")).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["status"], "ok");
    assert_eq!(body["store"], "memory");

    let resp = reqwest::get(format!("http://{addr}/nope")).await.unwrap();
    assert_eq!(resp.status(), 404);

    let in_flight = tokio::spawn(reqwest::get(format!("http://{addr}/slow")));
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.send(()).unwrap();
    let resp = in_flight.await.unwrap().unwrap();
    assert_eq!(resp.status(), 200, "the in-flight request finished");
    assert_eq!(resp.text().await.unwrap(), "done");
    server.await.unwrap().unwrap();
    assert!(
        reqwest::get(format!("http://{addr}/health")).await.is_err(),
        "no longer accepting after shutdown"
    );
}
