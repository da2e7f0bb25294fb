//! Benchmarks that print tables: each workload beside a reference run in the same process.

pub mod bloom;
pub mod personalization;
pub mod store;

use std::sync::Arc;

use anyhow::{Context, bail};
use penchant_engine::{Engine, EngineConfig};
use penchant_store::Store;

/// Penchant's HTTP server in this process on a loopback port, with one app, and a client
/// holding the app's admin key.
#[derive(Debug)]
pub struct InProcess {
    pub engine: Engine,
    pub app: String,
    http: reqwest::Client,
    base: String,
    key: String,
}

impl InProcess {
    pub async fn start(store: Arc<dyn Store>, app: &str) -> anyhow::Result<Self> {
        let engine = Engine::open(store, EngineConfig::default()).await?;
        let (_, key) = engine.tenancy().create_app(Some(app), "bench").await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let router =
            penchant_server::router(penchant_server::AppState::new(engine.clone(), "embedded"));
        tokio::spawn(penchant_server::serve(
            listener,
            router,
            std::future::pending(),
        ));
        Ok(Self {
            engine,
            app: app.to_owned(),
            http: reqwest::Client::new(),
            base,
            key,
        })
    }

    /// POST a JSON body; the JSON answer, or an error with the server's status and message.
    pub async fn post<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &impl serde::Serialize,
    ) -> anyhow::Result<T> {
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .header("X-Algolia-Application-Id", &self.app)
            .header("X-Algolia-API-Key", &self.key)
            .json(body)
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("POST {path}: {} {}", resp.status(), resp.text().await?);
        }
        resp.json()
            .await
            .with_context(|| format!("POST {path}: unexpected response"))
    }
}

/// Format a rate with thousands separators.
pub fn rate(n: f64) -> String {
    let n = n.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
