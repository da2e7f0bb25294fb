//! A server on the in-memory store, and a client that sends Algolia's credential headers.

use std::sync::Arc;
use std::time::Duration;

use penchant_engine::tenancy::TenancyConfig;
use penchant_engine::{Engine, EngineConfig};
use penchant_server::{AppState, router, serve};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

pub const ROOT: &str = "root-key";

pub struct Server {
    pub base: String,
    pub http: Client,
    /// The store behind the server, to check what it wrote.
    pub store: Arc<dyn penchant_store::Store>,
    /// The engine behind it, to run what a node runs in the background (schedules' rounds).
    pub engine: Engine,
}

impl Server {
    pub async fn start() -> Self {
        Self::start_on(Arc::new(penchant_store::MemStore::new())).await
    }

    /// A server on this store.
    pub async fn start_on(store: Arc<dyn penchant_store::Store>) -> Self {
        Self::start_with(store, penchant_engine::clock::Clock::system()).await
    }

    /// A server whose engine reads this clock (a manual one: moved by the test).
    pub async fn start_with_clock(clock: penchant_engine::clock::Clock) -> Self {
        Self::start_with(Arc::new(penchant_store::MemStore::new()), clock).await
    }

    async fn start_with(
        store: Arc<dyn penchant_store::Store>,
        clock: penchant_engine::clock::Clock,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let config = EngineConfig {
            tenancy: TenancyConfig {
                admin_key: Some(ROOT.into()),
                cache_ttl: Duration::ZERO,
            },
            strategy_cache_ttl: Duration::ZERO,
            recompute_parallelism: 2,
            set_cache_bytes: 1 << 20,
            bloom_cache_ttl: Duration::from_secs(60),
            clock,
            ..EngineConfig::default()
        };
        let engine = Engine::open(store.clone(), config).await.unwrap();
        let app = router(AppState::new(engine.clone(), "memory"));
        tokio::spawn(serve(listener, app, std::future::pending()));
        Self {
            base,
            http: Client::new(),
            store,
            engine,
        }
    }

    /// A request with Algolia's credential headers (when given), returning status and JSON.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        creds: Option<(&str, &str)>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some((app, key)) = creds {
            req = req
                .header("X-Algolia-Application-Id", app)
                .header("X-Algolia-API-Key", key);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// A request that must answer 200 OK: its JSON.
    pub async fn ok(
        &self,
        method: Method,
        path: &str,
        creds: Option<(&str, &str)>,
        body: Option<Value>,
    ) -> Value {
        let (status, body) = self.call(method, path, creds, body).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    /// The personalization strategy's recompute once it is done.
    pub async fn strategy_job_done(&self, creds: Option<(&str, &str)>) -> Value {
        for _ in 0..1000 {
            let (_, job) = self
                .call(
                    Method::GET,
                    "/1/strategies/personalization/job",
                    creds,
                    None,
                )
                .await;
            if job["state"] == "done" {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the recompute did not finish");
    }

    /// Create an app with the global admin key; returns its admin key.
    pub async fn app(&self, app: &str) -> String {
        let (status, body) = self
            .call(
                Method::POST,
                "/1/apps",
                Some(("", ROOT)),
                Some(json!({"appID": app})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["adminAPIKey"].as_str().unwrap().to_owned()
    }

    /// A key of `app` with these ACLs.
    pub async fn key(&self, app: &str, admin: &str, acl: &[&str]) -> String {
        let (status, body) = self
            .call(
                Method::POST,
                "/1/keys",
                Some((app, admin)),
                Some(json!({"acl": acl})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["key"].as_str().unwrap().to_owned()
    }
}

/// A server with the app `SHOP`, and its admin key.
pub async fn shop() -> (Server, String) {
    let s = Server::start().await;
    let admin = s.app("SHOP").await;
    (s, admin)
}

/// An app's credentials, or none.
pub type Creds<'a> = Option<(&'a str, &'a str)>;

/// Now, in ms since the epoch.
pub fn now_ms() -> i64 {
    penchant_store::validate::now_micros() / 1000
}

/// A status and a message the caller should see.
#[track_caller]
pub fn assert_error(got: (StatusCode, Value), status: StatusCode, needle: &str) {
    let (code, body) = got;
    assert_eq!(code, status, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(needle),
        "«{message}» should say «{needle}»"
    );
}
