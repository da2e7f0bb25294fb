//! Penchant's benchmarks: each suite prints tables, each workload beside a reference run in the
//! same process, and can write them as JSON (`--json`); `all` runs every suite at one scale
//! (`--scale small|medium|large`).
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
//! - [`mixed`]: ingestion and profile reads at once (1M users at scale large): the first half
//!   of the users' batches at full speed with event-to-profile latency, the second half at half
//!   that rate beside profile reads, reads right after the ingestion, the wait for compactions,
//!   reads at rest and `/health`; the server's CPU per event and per read (the process's CPU
//!   less the client threads'), the store operations per batch, event and read (counted at the
//!   `Store` trait), resident memory and bytes per user; beside Redis doing the same work with
//!   its AOF fsynced.
//! - [`als`]: implicit-feedback ALS on MovieLens 100k and a planted synthetic set: time per
//!   iteration and precision/NDCG@10, beside the Python `implicit` library on the same split,
//!   factors and threads, and a popularity baseline.
//! - [`topk`]: exact top-30 search latency (p50/p99) over 10k to 1M vectors of 100
//!   dimensions, single and 5-query, beside a naive scan and full sort; then an HNSW graph's
//!   latency and recall@30 beside `hnsw_rs` and the exact scan.
//! - [`recommend`]: one user's queue rebuilt from 10k candidates (p50/p99), the Recommend API
//!   over loopback for each model beside Redis `ZRANGE`, and `recommended-for-you` against
//!   trending on a time-ordered MovieLens holdout.
//! - [`residency`]: an app moved between two placement targets online, beside a plain copy of
//!   its rows; profile reads during the move beside reads of an app that stays.
//! - [`schema`]: the seed's experiment: a full profile build from narrow events, wide events and
//!   per-day aggregates, per application profile (a few heavy users to many light ones), on the
//!   embedded store and a Bigtable emulator; the share of facets weighed; bytes per event.
//!
//! `redis` holds the Redis references' `redis-server` launcher and minimal RESP client;
//! [`report`] what every suite shares: the scale, the `--scale`/`--json` flags, tables, the
//! run's report, progress bars.
//!
//! The HTTP workloads run Penchant in this process ([`InProcess`]: the engine on the suite's
//! store behind the server's real router, on a loopback port). The benchmarks live in this crate
//! so that the server binary links none of what only they need (raw RocksDB, `fastbloom`,
//! `hdrhistogram`, the Redis client, the Bigtable emulator launcher). The `penchant-bench` binary
//! parses `penchant-bench <suite> [flags]` ([`Suite`]); `penchant bench <suite> [flags]` runs it
//! when it lies next to the `penchant` executable. `penchant-bench all` runs every suite.
//!
//! # A suite
//!
//! A suite is a module with an arguments struct that flattens [`CommonArgs`] (`--scale`,
//! `--json`) beside its own flags, and implements [`Bench`]: its [`Bench::run`] builds
//! [`Table`]s and hands each to the [`Report`] as soon as it is done (the report prints it and
//! keeps it for the JSON document), shows its long phases with [`report::bar`] or
//! [`report::spinner`], takes its sizes from the scale ([`Scale::pick`]) unless a flag gives
//! them, and returns [`Missing`] when a reference it cannot do without is not there (a
//! reference only some rows need skips those rows, with a note). Adding one:
//!
//! 1. `src/<suite>.rs`: `pub struct <Suite>BenchArgs { #[command(flatten)] pub common:
//!    CommonArgs, ... }` and `impl Bench for <Suite>BenchArgs`;
//! 2. a variant of [`Suite`] and its arm in [`Suite::run`];
//! 3. a line in [`ALL`], if `all` should run it.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use penchant_engine::{Engine, EngineConfig};
use penchant_store::Store;

pub mod als;
pub mod bloom;
mod counting;
mod cpu;
mod http;
pub mod ingest;
pub mod mixed;
pub mod personalization;
mod ranker;
pub mod recommend;
mod redis;
pub mod report;
pub mod residency;
pub mod schema;
pub mod soak;
pub mod store;
pub mod topk;

use report::Outcome;
pub use report::{Cell, CommonArgs, Missing, Report, Scale, Table};

/// A suite's arguments, and how the suite runs.
pub trait Bench: clap::Args {
    /// The suite's name, as on the command line.
    const NAME: &'static str;

    /// Flags `all` adds to the suite's defaults: `all` uses references where found and
    /// installs none.
    const IN_ALL: &'static [&'static str] = &[];

    /// The flags every suite takes.
    fn common(&self) -> &CommonArgs;

    /// Run the suite, handing each table to `report` when it is done; progress goes to stderr.
    fn run(self, report: &mut Report) -> anyhow::Result<()>;
}

/// A benchmark suite and its flags: `penchant-bench <suite> [flags]`.
#[derive(Debug, clap::Subcommand)]
pub enum Suite {
    /// The store: durable writes, scans, point reads, each beside raw RocksDB.
    ///
    /// Scale: rows written by each workload and point reads: small 2,000, medium 20,000, large
    /// 200,000 rows and 100,000 reads.
    Store(store::StoreBenchArgs),
    /// Bloom filters: lookups beside the `fastbloom` crate, and a bulk seen-filter check.
    ///
    /// Scale: small runs the 16 KB filter only, 100,000 lookups; medium and large also the
    /// 128 MB filter, 4,000,000 lookups.
    Bloom(bloom::BloomBenchArgs),
    /// Personalization on MovieLens 100k: ingestion over HTTP, event-to-profile latency, full
    /// recompute.
    ///
    /// Scale: single-event pushes timed: small 100, medium and large 1,000 (the data is
    /// MovieLens 100k at every scale).
    Personalization(personalization::PersonalizationBenchArgs),
    /// A shop's traffic: many light users and a few heavy ones, ingestion, event-to-profile
    /// latency, profile reads, bytes per user, each beside Redis with an fsynced AOF.
    ///
    /// Scale: light users (2 events each) small 2,000, medium 50,000, large 1,000,000; the heavy
    /// user's histories up to 1,000, 50,000, 100,000 events; profile reads for 1, 5, 5 s.
    Ingest(ingest::IngestBenchArgs),
    /// Ingestion and profile reads at once: max-rate ingestion with event-to-profile latency,
    /// reads beside ingestion at half that rate, right after it and at rest, `/health`; server
    /// CPU per event and per read, store operations per batch and per read, memory; each beside
    /// Redis with an fsynced AOF.
    ///
    /// Scale: users (2 events each) small 10,000, medium 200,000, large 1,000,000; each read
    /// phase 1, 5, 5 s.
    Mixed(mixed::MixedBenchArgs),
    /// Implicit-feedback ALS on MovieLens 100k and synthetic data: seconds per iteration,
    /// precision and NDCG@10, beside the Python `implicit` library on the same split.
    ///
    /// Scale: the synthetic set, small 2k users x 500 items x 20k events (one fit each),
    /// medium 20k x 5k x 500k, large 100k x 20k x 5M.
    Als(als::AlsBenchArgs),
    /// Exact top-k search over 10k-1M vectors of 100 dimensions: p50/p99 latency beside a
    /// naive scan and sort; then HNSW beside `hnsw_rs`.
    ///
    /// Scale: exact search over small 10k items, medium 10k and 100k, large also 1M; HNSW over
    /// 10k, 100k, and 100k and 1M items.
    Topk(topk::TopkBenchArgs),
    /// Recommendations: one user's queue rebuilt (10k candidates), the Recommend API over
    /// loopback beside Redis ZRANGE, and recommended-for-you against trending on MovieLens.
    ///
    /// Scale: candidates (the shop's items) small 1,000, medium 10,000, large 100,000; queue
    /// rebuilds 20, 200, 200; requests per API workload 200, 4,000, 4,000.
    Recommend(recommend::RecommendBenchArgs),
    /// The seed's narrow and wide event layouts: a full profile build from each, and from the
    /// per-day aggregates, per application profile (a few heavy users to many light ones), on
    /// the embedded store and a Bigtable emulator; the share of facets weighed; bytes per event.
    ///
    /// Scale: events per application profile small 10,000, medium 200,000, large 2,000,000.
    Schema(schema::SchemaBenchArgs),
    /// Residency: an app moved between two placement targets online (rows/s, MB/s) beside a
    /// plain copy of its rows, and profile reads during the move beside reads of an app that
    /// stays, on two RocksDB folders and two Bigtable emulators.
    ///
    /// Scale: users of the moved app (3 events each) small 500, medium 20,000, large 200,000.
    Residency(residency::ResidencyBenchArgs),
    /// A shop's day with faults against a real `penchant serve`: events, reads and a strategy
    /// change from one tenant, attacks from another, `kill -9` every 30 s, clients retrying
    /// (some while their first attempt is in flight); then a check that every acknowledged
    /// event counts exactly once, every profile equals a recompute, and no tenant saw another's
    /// data (docs/RELIABILITY.md). Not in `all`: it runs for `--duration` (10 minutes).
    Soak(soak::SoakBenchArgs),
    /// Every suite in turn (store, bloom, personalization, ingest, mixed, als, topk, recommend,
    /// schema, residency), each with its default flags at the scale.
    ///
    /// References are used where found, never installed (als runs with --no-install): a suite
    /// whose data is missing (MovieLens) is reported skipped, rows whose reference is missing
    /// (redis-server, the Python `implicit` environment of scripts/bench-python.sh) say so; any
    /// other failure makes the run exit non-zero once every suite has run.
    All(CommonArgs),
}

impl Suite {
    /// Run the suite (or every suite); its tables go to stdout, progress to stderr.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Suite::Store(args) => one(args),
            Suite::Bloom(args) => one(args),
            Suite::Personalization(args) => one(args),
            Suite::Ingest(args) => one(args),
            Suite::Mixed(args) => one(args),
            Suite::Als(args) => one(args),
            Suite::Topk(args) => one(args),
            Suite::Recommend(args) => one(args),
            Suite::Schema(args) => one(args),
            Suite::Residency(args) => one(args),
            Suite::Soak(args) => one(args),
            Suite::All(common) => all(&common),
        }
    }
}

/// The suites `penchant-bench all` runs, in order, each with its default flags at the scale
/// and its [`Bench::IN_ALL`].
pub const ALL: &[fn(&mut Report) -> Outcome] = &[
    in_all::<store::StoreBenchArgs>,
    in_all::<bloom::BloomBenchArgs>,
    in_all::<personalization::PersonalizationBenchArgs>,
    in_all::<ingest::IngestBenchArgs>,
    in_all::<mixed::MixedBenchArgs>,
    in_all::<als::AlsBenchArgs>,
    in_all::<topk::TopkBenchArgs>,
    in_all::<recommend::RecommendBenchArgs>,
    in_all::<schema::SchemaBenchArgs>,
    in_all::<residency::ResidencyBenchArgs>,
];

/// Run one suite on its own: its report written where `--json` says, its failure (or the
/// missing reference that skipped it) the error.
fn one<B: Bench>(args: B) -> anyhow::Result<()> {
    let common = args.common().clone();
    let mut report = Report::new(common.scale);
    let outcome = run_into(args, &mut report);
    if let Some(path) = &common.json {
        report.write_json(path)?;
    }
    match outcome {
        Outcome::Ok => Ok(()),
        Outcome::Skipped(why) | Outcome::Failed(why) => Err(anyhow::anyhow!(why)),
    }
}

/// `penchant-bench all`: every suite of [`ALL`], whatever happened to the ones before; an error
/// at the end naming the suites that failed.
fn all(common: &CommonArgs) -> anyhow::Result<()> {
    let mut report = Report::new(common.scale);
    let mut failed = Vec::new();
    let mut skipped = 0;
    for suite in ALL {
        match suite(&mut report) {
            Outcome::Ok => {}
            Outcome::Skipped(_) => skipped += 1,
            Outcome::Failed(why) => {
                eprintln!("error: {why}");
                failed.extend(report.last_suite());
            }
        }
    }
    if let Some(path) = &common.json {
        report.write_json(path)?;
    }
    eprintln!(
        "all: {} suites, {} skipped, {} failed",
        ALL.len(),
        skipped,
        failed.len()
    );
    if !failed.is_empty() {
        anyhow::bail!("failed: {} (their errors are above)", failed.join(", "));
    }
    Ok(())
}

/// One suite of `all`: its [`defaults`] at the report's scale.
fn in_all<B: Bench>(report: &mut Report) -> Outcome {
    match defaults::<B>(report.scale()) {
        Ok(args) => run_into(args, report),
        Err(e) => {
            report.begin(B::NAME);
            let outcome = Outcome::Failed(format!("{}: default flags: {e}", B::NAME));
            report.end(std::time::Duration::ZERO, outcome.clone());
            outcome
        }
    }
}

/// A suite's arguments as `all` runs it: its default flags at `scale`, and its
/// [`Bench::IN_ALL`].
fn defaults<B: Bench>(scale: Scale) -> Result<B, clap::Error> {
    let argv = [B::NAME, "--scale", scale.name()]
        .into_iter()
        .chain(B::IN_ALL.iter().copied());
    let matches = B::augment_args(clap::Command::new(B::NAME)).try_get_matches_from(argv)?;
    B::from_arg_matches(&matches)
}

/// Run a suite into `report`, timed; a suite skipped for a missing reference gets a table
/// saying why; an error or a panic is its failure.
fn run_into<B: Bench>(args: B, report: &mut Report) -> Outcome {
    report.begin(B::NAME);
    let started = Instant::now();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| args.run(report)));
    let outcome = match result {
        Ok(Ok(())) => Outcome::Ok,
        Ok(Err(e)) => match e.chain().find_map(|c| c.downcast_ref::<Missing>()) {
            Some(missing) => {
                let mut table = Table::new(format!("{}: skipped", B::NAME), &[]);
                table.note(format!("skipped: {missing}"));
                report.table(table);
                Outcome::Skipped(format!("{}: skipped: {missing}", B::NAME))
            }
            None => Outcome::Failed(format!("{}: {e:#}", B::NAME)),
        },
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            Outcome::Failed(format!("{} panicked: {message}", B::NAME))
        }
    };
    let elapsed = started.elapsed();
    eprintln!("{}: done in {:.1} s", B::NAME, elapsed.as_secs_f64());
    report.end(elapsed, outcome.clone());
    outcome
}

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
    /// The server on a store it is alone on, as `penchant serve` runs on the embedded one.
    pub async fn start(store: Arc<dyn Store>, app: &str) -> anyhow::Result<Self> {
        Self::start_node(store, app, true).await
    }

    /// The server as one node of several on the store when `alone` is false (as on Bigtable:
    /// nothing cached that another node could change, aggregates read again after a refresh).
    pub async fn start_node(store: Arc<dyn Store>, app: &str, alone: bool) -> anyhow::Result<Self> {
        let config = EngineConfig {
            exclusive_store: alone,
            ..EngineConfig::serving()
        };
        let engine = Engine::open(store, config).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suite_of_all_parses_its_defaults_at_every_scale() {
        fn check<B: Bench + std::fmt::Debug>() {
            for scale in [Scale::Small, Scale::Medium, Scale::Large] {
                let args = defaults::<B>(scale)
                    .unwrap_or_else(|e| panic!("{} at {scale:?}: {e}", B::NAME));
                assert_eq!(args.common().scale, scale, "{args:?}");
                assert_eq!(args.common().json, None, "{args:?}");
            }
        }
        check::<store::StoreBenchArgs>();
        check::<bloom::BloomBenchArgs>();
        check::<personalization::PersonalizationBenchArgs>();
        check::<ingest::IngestBenchArgs>();
        check::<mixed::MixedBenchArgs>();
        check::<als::AlsBenchArgs>();
        check::<topk::TopkBenchArgs>();
        check::<recommend::RecommendBenchArgs>();
        check::<schema::SchemaBenchArgs>();
        check::<residency::ResidencyBenchArgs>();
    }
}
