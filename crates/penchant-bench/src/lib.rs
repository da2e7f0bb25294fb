//! Penchant's benchmarks: each suite prints a table, each workload beside a reference run in
//! the same process.
//!
//! - [`store`]: durable writes (single rows from concurrent writers, and batches), scans with and
//!   without a qualifier filter, point-read latency; beside the same cells in a raw RocksDB with
//!   the same options. `--bigtable-emulator` also runs them on the Bigtable backend against an
//!   emulator it starts.
//! - [`bloom`]: Bloom filter lookups, single and batched, beside the `fastbloom` crate; then one
//!   user's seen filter checked three ways: in process, over Penchant's HTTP API, and the seed's
//!   Redis approach against a `redis-server` child.
//! - [`personalization`]: MovieLens 100k as Insights events over HTTP: ingestion,
//!   event-to-profile latency, full recompute from raw events and from per-day aggregates,
//!   beside a plain scan of the same events.
//! - [`ingest`]: a shop's traffic over HTTP (many light users, a few heavy ones): ingestion,
//!   event-to-profile latency under load, a heavy user's push latency by history, profile
//!   reads, bytes per user; beside Redis doing the same with its AOF fsynced.
//!
//! - [`als`]: implicit-feedback ALS on MovieLens 100k and a planted synthetic set: time per
//!   iteration and precision/NDCG@10, beside the Python `implicit` library on the same split,
//!   factors and threads, and a popularity baseline.
//! - [`topk`]: exact top-30 search latency (p50/p99) over 10k to 1M vectors of 100
//!   dimensions, single and 5-query, beside a naive scan and full sort; then an HNSW graph's
//!   latency and recall@30 beside `hnsw_rs` and the exact scan.
//! - [`recommend`]: one user's queue rebuilt from 10k candidates (p50/p99), the Recommend API
//!   over loopback for each model beside Redis `ZRANGE`, and `recommended-for-you` against
//!   trending on a time-ordered MovieLens holdout.
//!
//! [`redis`] holds the Redis references' `redis-server` launcher and minimal RESP client.
//!
//! The HTTP workloads run Penchant in this process ([`InProcess`]: the engine on the suite's
//! store behind the server's real router, on a loopback port). The benchmarks live in this crate
//! so that the server binary links none of what only they need (raw RocksDB, `fastbloom`,
//! `hdrhistogram`, the Redis client, the Bigtable emulator launcher). The `penchant-bench` binary
//! parses `penchant-bench <suite> [flags]` ([`Suite`]); `penchant bench <suite> [flags]` runs it
//! when it lies next to the `penchant` executable.

pub mod als;
pub mod bloom;
mod http;
pub mod ingest;
pub mod personalization;
pub mod recommend;
mod redis;
pub mod store;
pub mod topk;

/// A benchmark suite and its flags: `penchant-bench <suite> [flags]`.
#[derive(Debug, clap::Subcommand)]
pub enum Suite {
    /// The store: durable writes, scans, point reads, each beside raw RocksDB.
    Store(store::StoreBenchArgs),
    /// Bloom filters: lookups beside the `fastbloom` crate, and a bulk seen-filter check.
    Bloom(bloom::BloomBenchArgs),
    /// Personalization on MovieLens 100k: ingestion over HTTP, event-to-profile latency, full
    /// recompute.
    Personalization(personalization::PersonalizationBenchArgs),
    /// A shop's traffic: many light users and a few heavy ones, ingestion, event-to-profile
    /// latency, profile reads, bytes per user, each beside Redis with an fsynced AOF.
    Ingest(ingest::IngestBenchArgs),
    /// Implicit-feedback ALS on MovieLens 100k and synthetic data: seconds per iteration,
    /// precision and NDCG@10, beside the Python `implicit` library on the same split.
    Als(als::AlsBenchArgs),
    /// Exact top-k search over 10k-1M vectors of 100 dimensions: p50/p99 latency beside a
    /// naive scan and sort.
    Topk(topk::TopkBenchArgs),
    /// Recommendations: one user's queue rebuilt (10k candidates), the Recommend API over
    /// loopback beside Redis ZRANGE, and recommended-for-you against trending on MovieLens.
    Recommend(recommend::RecommendBenchArgs),
}

impl Suite {
    /// Run the suite; its table goes to stdout, progress to stderr.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Suite::Store(args) => store::run(args),
            Suite::Bloom(args) => bloom::run(args),
            Suite::Personalization(args) => personalization::run(args),
            Suite::Ingest(args) => ingest::run(args),
            Suite::Als(args) => als::run(args),
            Suite::Topk(args) => topk::run(args),
            Suite::Recommend(args) => recommend::run(args),
        }
    }
}

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
    addr: std::net::SocketAddr,
    base: String,
    key: String,
}

impl InProcess {
    pub async fn start(store: Arc<dyn Store>, app: &str) -> anyhow::Result<Self> {
        let engine = Engine::open(store, EngineConfig::serving()).await?;
        let (_, key) = engine.tenancy().create_app(Some(app), "bench").await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let base = format!("http://{addr}");
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
            addr,
            base,
            key,
        })
    }

    /// A new blocking keep-alive connection sending the app's admin key, for read loops.
    pub(crate) fn raw(&self) -> anyhow::Result<http::RawHttp> {
        http::RawHttp::connect(
            self.addr,
            &[
                ("X-Algolia-Application-Id", &self.app),
                ("X-Algolia-API-Key", &self.key),
            ],
        )
    }

    /// GET a path with the app's admin key; the body, or an error with the server's status and
    /// message.
    pub async fn get(&self, path: &str) -> anyhow::Result<bytes::Bytes> {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .header("X-Algolia-Application-Id", &self.app)
            .header("X-Algolia-API-Key", &self.key)
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("GET {path}: {} {}", resp.status(), resp.text().await?);
        }
        Ok(resp.bytes().await?)
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
