//! The server over a real socket, on the in-memory store.

use std::sync::Arc;

use penchant_engine::Engine;
use penchant_server::{AppState, serve};

#[tokio::test]
async fn health_answers_json_and_shutdown_drains() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let engine = Engine::new(Arc::new(penchant_store::MemStore::new()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, AppState::new(engine, "memory"), async {
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

    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    assert!(
        reqwest::get(format!("http://{addr}/health")).await.is_err(),
        "no longer accepting after shutdown"
    );
}
