//! `penchant bench recommend`: the recommendation half, in four tables.
//!
//! 1. **Queue rebuild** (the seed: 3–4 s per user): one user's queue rebuilt from the user's
//!    vector against `candidates` item vectors of `dimension` floats (cosine), minus the
//!    user's seen items (a seen filter holding `seen` items), the survivors' existence checked
//!    in the catalog, the queue of 1,000 written; p50/p99 over `rebuilds` users, beside the
//!    same exact top-1000 scan alone (the floor: what the rebuild adds is the store's work).
//! 2. **Recommend API over loopback** at fixed concurrency: `recommended-for-you` reading
//!    users' queues and every other model (a shop of `candidates` items, its lists built by
//!    the build job from synthetic conversions), beside Redis `ZRANGE` of a sorted set of the
//!    same size as a queue (the seed's store), through the same number of blocking clients.
//!    Penchant returns 10 catalog records with scores; Redis returns 10 ids with scores.
//! 3. **Quality on MovieLens 100k**, time-ordered: the ratings before the 80% time quantile
//!    are events (all "watched" conversions, their times compressed into the last 59 days so
//!    that they lie in the retention window); ALS is trained on them; each user with ratings
//!    on both sides gets `recommended-for-you` (10 items, never one seen) and the trending
//!    items they have not seen, both scored against what they rated after the split.
//! 4. **Blends on MovieLens**, offline: the engine's evaluation (`POST /1/als/evaluate`) of
//!    popularity, each model a queue blends and a few blends, on each user's latest 20% of the
//!    same events (precision, recall and NDCG at 10): which queue definition to pick.
//! 5. **The learned ranker from logged impressions** on a synthetic shop ([`crate::ranker`]):
//!    the ranker job's time end to end, and its boosting beside LightGBM's on the same examples.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use penchant_engine::catalog::Write;
use penchant_engine::events::{Event, EventType, Target};
use penchant_engine::recommend::{QueueDefinition, RecommendHit, RecommendRequest, Source};
use penchant_engine::vectors::training::{EvaluationRequest, Holdout, TrainingConfig};
use penchant_engine::vectors::{Kind, Metric, SpaceConfig};
use penchant_engine::{Engine, EngineConfig};
use penchant_store::Store;
use penchant_store_rocksdb::{RocksOptions, RocksStore};
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::redis::{Persistence, RedisServer, Reply, find_on_path};
use crate::report::{bar, spinner};
use crate::{Bench, Cell, CommonArgs, InProcess, Missing, Report, Table, rate};

/// `penchant-bench recommend`'s flags.
#[derive(Debug, clap::Args)]
pub struct RecommendBenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Item vectors a rebuild scores (and the shop's catalog size) [default by scale: small
    /// 1,000, medium 10,000, large 100,000].
    #[arg(long)]
    candidates: Option<usize>,
    /// Floats per vector.
    #[arg(long, default_value_t = 100)]
    dimension: usize,
    /// Users whose queues are rebuilt (one at a time) [default by scale: small 20, medium and
    /// large 200].
    #[arg(long)]
    rebuilds: Option<usize>,
    /// Items in each rebuilt user's seen filter [default by scale: small 100, medium and large
    /// 1,000].
    #[arg(long)]
    seen: Option<usize>,
    /// Requests per API workload [default by scale: small 200, medium and large 4,000].
    #[arg(long)]
    requests: Option<usize>,
    /// Concurrent blocking clients for the API workloads (Penchant and Redis alike).
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// MovieLens 100k in RecBole's format (ml-100k.inter, ml-100k.item); `none` (or a folder
    /// without it) skips the quality table.
    #[arg(long, default_value = "../shared/data/ml-100k")]
    movielens: PathBuf,
    /// ALS factors, regularization and alpha for the quality table.
    #[arg(long, default_value_t = 64)]
    factors: usize,
    #[arg(long, default_value_t = 0.01)]
    regularization: f32,
    #[arg(long, default_value_t = 1.0)]
    alpha: f32,
    /// The quality table's queue: the weight of trending beside ALS (1).
    #[arg(long, default_value_t = 2.0)]
    trending_weight: f32,
    /// Acknowledge writes without fsync (the rebuild's queue write included).
    #[arg(long)]
    no_sync: bool,
    /// `redis-server` for the reference (default: the one on PATH).
    #[arg(long)]
    redis_server: Option<PathBuf>,
    /// Impressions the learned ranker's table logs and learns from [default by scale: small
    /// 20,000, medium 200,000, large 1,000,000].
    #[arg(long)]
    impressions: Option<usize>,
    /// Users of the learned ranker's synthetic shop [default by scale: small 2,000, medium
    /// 20,000, large 100,000].
    #[arg(long)]
    ranker_users: Option<usize>,
    /// Items of the learned ranker's synthetic shop [default by scale: small 1,000, medium
    /// 5,000, large 10,000]: the request's features grow with them.
    #[arg(long)]
    ranker_items: Option<usize>,
    /// Run the learned ranker's table (5) alone: no rebuild, API or quality table.
    #[arg(long)]
    ranker_only: bool,
    /// A Python with LightGBM installed, the reference of the ranker's boosting (default:
    /// `scripts/bench-python.sh` makes one).
    #[arg(long, env = "PENCHANT_BENCH_PYTHON")]
    python: Option<PathBuf>,
    /// Use the virtual environment of `scripts/bench-python.sh` only if it is already made
    /// (else skip LightGBM) instead of making it; `all` runs so.
    #[arg(long)]
    no_install: bool,
}

const APP: &str = "BENCH";
const INDEX: &str = "products";
const QUEUE_SIZE: usize = 1000;
/// MovieLens ratings before this share of time are events; the rest is what users did next.
const SPLIT_PERCENT: usize = 80;

impl Bench for RecommendBenchArgs {
    const NAME: &'static str = "recommend";
    const IN_ALL: &'static [&'static str] = &["--no-install"];

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn run(self, report: &mut Report) -> anyhow::Result<()> {
        let plan = Plan::of(&self);
        let dir = tempfile::tempdir()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        if !self.ranker_only {
            runtime.block_on(rebuild_and_api(&self, &plan, dir.path(), report))?;
        }
        if self.movielens.as_os_str() != "none" && !self.ranker_only {
            let tables = match crate::personalization::load(&self.movielens) {
                Ok(data) => runtime.block_on(quality(&self, data))?,
                Err(e) => match e.downcast_ref::<Missing>() {
                    Some(why) => {
                        let mut table = Table::new(QUALITY, &[]);
                        table.note(format!("skipped: {why}"));
                        vec![table]
                    }
                    None => return Err(e),
                },
            };
            for table in tables {
                report.table(table);
            }
        }
        let python = crate::als::bench_python(
            self.python.as_deref(),
            self.no_install,
            "recommend: finding LightGBM's Python",
        );
        let table = runtime.block_on(crate::ranker::impressions(
            self.common.scale,
            (self.ranker_users, self.ranker_items, self.impressions),
            self.no_sync,
            python,
        ))?;
        report.table(table);
        Ok(())
    }
}

/// The sizes of the rebuild and API tables: the scale's, unless a flag gave them.
struct Plan {
    candidates: usize,
    rebuilds: usize,
    seen: usize,
    requests: usize,
}

impl Plan {
    fn of(args: &RecommendBenchArgs) -> Self {
        let scale = args.common.scale;
        Self {
            candidates: args
                .candidates
                .unwrap_or(scale.pick(1_000, 10_000, 100_000)),
            rebuilds: args.rebuilds.unwrap_or(scale.pick(20, 200, 200)),
            seen: args.seen.unwrap_or(scale.pick(100, 1000, 1000)),
            requests: args.requests.unwrap_or(scale.pick(200, 4000, 4000)),
        }
    }
}

/// The quality table's title.
const QUALITY: &str = "recommend: MovieLens 100k, time-ordered holdout";

fn histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits is valid")
}

/// A quantile of a histogram of microseconds, in ms.
fn ms(hist: &Histogram<u64>, q: f64) -> f64 {
    hist.value_at_quantile(q) as f64 / 1e3
}

fn random_vector(rng: &mut impl Rng, dimension: usize) -> Vec<f32> {
    (0..dimension)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect()
}

/// Tables (1) and (2), on a store in `dir`.
async fn rebuild_and_api(
    args: &RecommendBenchArgs,
    plan: &Plan,
    dir: &std::path::Path,
    report: &mut Report,
) -> anyhow::Result<()> {
    let options = RocksOptions {
        sync_writes: !args.no_sync,
        ..RocksOptions::default()
    };
    let store: Arc<dyn Store> = Arc::new(RocksStore::open(dir, options)?);
    let shop = Arc::new(InProcess::start(store, APP).await?);
    let engine = shop.engine.clone();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let n = plan.candidates;
    let progress = spinner(format!(
        "recommend: a shop of {} items with {}-d vectors, users' vectors and seen items",
        rate(n as f64),
        args.dimension
    ));

    // The catalog, the items' vectors, users' vectors.
    let writes: Vec<(String, Write)> = (0..n)
        .map(|i| {
            let record = json!({"objectID": format!("i{i}"), "brand": format!("b{}", i % 20),
                                "price": i % 100});
            (
                INDEX.to_owned(),
                Write::Put(record.as_object().cloned().unwrap_or_default()),
            )
        })
        .collect();
    for chunk in writes.chunks(1000) {
        engine.write_records(APP, chunk.to_vec()).await?;
    }
    let space = SpaceConfig {
        dimension: args.dimension,
        metric: Metric::Cosine,
        index: Some(INDEX.into()),
    };
    engine.create_space(APP, "als", space).await?;
    let items: Vec<(String, Vec<f32>)> = (0..n)
        .map(|i| (format!("i{i}"), random_vector(&mut rng, args.dimension)))
        .collect();
    for chunk in items.chunks(10_000) {
        engine.put_vectors(APP, "als", Kind::Item, chunk).await?;
    }
    let users: Vec<String> = (0..plan.rebuilds).map(|u| format!("user{u}")).collect();
    let vectors: Vec<(String, Vec<f32>)> = users
        .iter()
        .map(|u| (u.clone(), random_vector(&mut rng, args.dimension)))
        .collect();
    engine.put_vectors(APP, "als", Kind::User, &vectors).await?;
    for user in &users {
        let seen: Vec<String> = (0..plan.seen)
            .map(|_| format!("i{}", rng.random_range(0..n)))
            .collect();
        engine.mark_seen(APP, user, &seen).await?;
    }
    let def = QueueDefinition {
        index_name: INDEX.into(),
        size: QUEUE_SIZE,
        sources: vec![Source::Als {
            space: "als".into(),
            weight: 1.0,
        }],
        ranker: Default::default(),
    };
    engine.define_queue(APP, "for-you", &def).await?;

    // 1. Rebuilds, one user at a time, beside the scan alone.
    let options = penchant_engine::vectors::SearchOptions {
        k: QUEUE_SIZE,
        exact: true,
        ..Default::default()
    };
    // Warm: the space is loaded once per node.
    engine
        .rebuild_queue(APP, "for-you", &users[0], None)
        .await?;
    drop(progress);
    let (mut rebuild, mut scan) = (histogram(), histogram());
    let mut kept = 0;
    let progress = bar("recommend: queue rebuilds", users.len() as u64);
    for (user, vector) in users.iter().zip(&vectors) {
        let started = Instant::now();
        let query = penchant_engine::vectors::Query::Vector(vector.1.clone());
        engine.search_vectors(APP, "als", query, &options).await?;
        scan.record(started.elapsed().as_micros() as u64)?;
        let started = Instant::now();
        let rebuilt = engine.rebuild_queue(APP, "for-you", user, None).await?;
        rebuild.record(started.elapsed().as_micros() as u64)?;
        kept += rebuilt.items;
        progress.inc(1);
    }
    drop(progress);
    let mut table = Table::new(
        format!(
            "recommend: queue rebuild, {} users, {} candidates x {} floats (cosine), seen filter \
             of {} items, queue of {QUEUE_SIZE} (mean {} kept after seen/catalog checks)",
            users.len(),
            rate(n as f64),
            args.dimension,
            rate(plan.seen as f64),
            kept / users.len().max(1),
        ),
        &["work", "p50 ms", "p99 ms"],
    );
    for (work, hist) in [
        ("exact top-1000 scan alone (the floor)", &scan),
        (
            if args.no_sync {
                "rebuild: scan + seen filter + queue write (unsynced)"
            } else {
                "rebuild: scan + seen filter + queue write (fsynced)"
            },
            &rebuild,
        ),
    ] {
        table.row(vec![
            work.into(),
            Cell::fixed(ms(hist, 0.5), 3),
            Cell::fixed(ms(hist, 0.99), 3),
        ]);
    }
    table.note("the seed: 3-4 s per rebuild");
    report.table(table);

    // 2. The API: lists from synthetic conversions (popular items convert more), then reads.
    let mut events = Vec::new();
    let now = engine.now_ms() - 3_600_000;
    for u in 0..2000 {
        let user = format!("shopper{u}");
        for e in 0..5 {
            // Squared uniform: low ids are popular.
            let item = ((rng.random::<f64>().powi(2)) * n as f64) as usize;
            events.push(event(&user, &format!("i{item}"), now + e));
        }
    }
    let progress = spinner("recommend: synthetic conversions, then the models' build job");
    for chunk in events.chunks(1000) {
        engine.push_events(APP, chunk).await?;
    }
    engine.start_build(APP).await?;
    loop {
        let status = engine.build_status(APP).await?.context("no build status")?;
        if status.state != penchant_engine::jobs::JobState::Running {
            anyhow::ensure!(status.error.is_none(), "build failed: {:?}", status.error);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(progress);
    let popular = "i0";
    let bodies: Vec<(&str, Value)> = vec![
        (
            "recommended-for-you (the user's queue)",
            json!({"indexName": INDEX, "model": "recommended-for-you", "threshold": 0,
                   "maxRecommendations": 10, "queryParameters": {"userToken": "user1"}}),
        ),
        (
            "trending-items",
            json!({"indexName": INDEX, "model": "trending-items", "threshold": 0,
                   "maxRecommendations": 10}),
        ),
        (
            "trending-items, filtered (brand:b3)",
            json!({"indexName": INDEX, "model": "trending-items", "threshold": 0,
                   "maxRecommendations": 10, "queryParameters": {"filters": "brand:b3"}}),
        ),
        (
            "trending-facets (brand)",
            json!({"indexName": INDEX, "model": "trending-facets", "threshold": 0,
                   "maxRecommendations": 10, "facetName": "brand"}),
        ),
        (
            "bought-together",
            json!({"indexName": INDEX, "model": "bought-together", "threshold": 0,
                   "maxRecommendations": 10, "objectID": popular}),
        ),
        (
            "related-products (co-interaction + vectors)",
            json!({"indexName": INDEX, "model": "related-products", "threshold": 0,
                   "maxRecommendations": 10, "objectID": popular}),
        ),
        (
            "looking-similar (vectors)",
            json!({"indexName": INDEX, "model": "looking-similar", "threshold": 0,
                   "maxRecommendations": 10, "objectID": popular}),
        ),
    ];
    let mut table = Table::new(
        format!(
            "recommend: the Recommend API over loopback, {} requests per workload, {} blocking \
             clients, 10 hits each",
            rate(plan.requests as f64),
            args.concurrency
        ),
        &["workload", "req/s", "p50 ms", "p99 ms"],
    );
    let mut queue_rps = None;
    let measure = |name: &str, body: &Value| -> anyhow::Result<(f64, Histogram<u64>)> {
        let body = serde_json::to_vec(&json!({ "requests": [body] }))?;
        let check: Value =
            serde_json::from_slice(shop.raw()?.post("/1/indexes/*/recommendations", &body)?)?;
        let hits = check["results"][0]["hits"].as_array().map_or(0, Vec::len);
        anyhow::ensure!(hits > 0, "{name}: no hits: {check}");
        let shop = shop.clone();
        let progress = bar(format!("recommend: {name}"), plan.requests as u64);
        let measured = concurrently(plan.requests, args.concurrency, &progress, move || {
            let mut conn = shop.raw()?;
            let body = body.clone();
            Ok(move || -> anyhow::Result<()> {
                conn.post("/1/indexes/*/recommendations", &body)?;
                Ok(())
            })
        })?;
        drop(progress);
        Ok(measured)
    };
    for (name, body) in &bodies {
        let (rps, hist) = measure(name, body)?;
        if queue_rps.is_none() {
            queue_rps = Some((rps, ms(&hist, 0.5)));
        }
        table.row(vec![
            (*name).into(),
            Cell::int(rps),
            Cell::fixed(ms(&hist, 0.5), 3),
            Cell::fixed(ms(&hist, 0.99), 3),
        ]);
    }
    // Trending items again, ordered for the user by a learned ranker (the ranker job trained
    // from the shoppers' history): what request-time ranking adds, beside the row above.
    let progress = spinner("recommend: the ranker job, for trending-items by the learned ranker");
    let config = serde_json::from_value(json!({"indexName": INDEX}))?;
    let job = crate::ranker::ranker_job(&engine, APP, config).await;
    drop(progress);
    match job {
        Ok((_, _, stored)) => {
            let body = json!({"indexName": INDEX, "model": "trending-items", "threshold": 0,
                              "maxRecommendations": 10, "ranker": "learned",
                              "queryParameters": {"userToken": "shopper1"}});
            let name = "trending-items, ordered by the learned ranker (at least 100 candidates)";
            let (rps, hist) = measure(name, &body)?;
            table.row(vec![
                format!("{name}, {} trees", stored.learned.trees).into(),
                Cell::int(rps),
                Cell::fixed(ms(&hist, 0.5), 3),
                Cell::fixed(ms(&hist, 0.99), 3),
            ]);
        }
        Err(e) => table.note(format!(
            "trending-items by the learned ranker skipped: {e:#}"
        )),
    }
    // The first workload twice more, back to back: outside any test, then with its user in a
    // running A/B test whose two variants read the same queue — what the test adds (the
    // user's variant, a query ID, the tallies), measured beside its reference.
    let mut plain = bodies[0].1.clone();
    plain["queryParameters"]["clickAnalytics"] = json!(true);
    let (outside, hist) = measure("outside an A/B test", &plain)?;
    table.row(vec![
        "recommended-for-you again, no A/B test (clickAnalytics)".into(),
        Cell::int(outside),
        Cell::fixed(ms(&hist, 0.5), 3),
        Cell::fixed(ms(&hist, 0.99), 3),
    ]);
    let variant = |queue: &str| penchant_engine::abtests::NewVariant {
        index: INDEX.into(),
        traffic_percentage: 50,
        description: None,
        custom_search_parameters: Some(json!({ "queue": queue })),
    };
    let end_at = engine.now_ms() + 86_400_000;
    let queue = penchant_engine::recommend::DEFAULT_QUEUE;
    let test = penchant_engine::abtests::NewTest {
        name: "bench".into(),
        variants: vec![variant(queue), variant(queue)],
        end_at,
    };
    engine.add_abtest(APP, test).await?;
    let (rps, hist) = measure("in an A/B test", &plain)?;
    table.row(vec![
        "recommended-for-you, the user in a running A/B test (clickAnalytics)".into(),
        Cell::int(rps),
        Cell::fixed(ms(&hist, 0.5), 3),
        Cell::fixed(ms(&hist, 0.99), 3),
    ]);
    table.note(format!(
        "in an A/B test / outside one: {:.2}x the throughput of the same queue read",
        rps / outside
    ));
    let redis_path = args
        .redis_server
        .clone()
        .or_else(|| find_on_path("redis-server"));
    let name = "Redis ZRANGE 0 9 WITHSCORES (1,000-member set)";
    match redis_path {
        None => {
            table.row(vec![
                name.into(),
                "skipped".into(),
                Cell::Empty,
                Cell::Empty,
            ]);
            table.note(
                "Redis skipped: no redis-server on PATH; run `scripts/redis-server.sh` or pass \
                 --redis-server \"$(scripts/redis-server.sh)\"",
            );
        }
        Some(path) => {
            let server = RedisServer::start(&path, Persistence::None, None)?;
            let mut conn = server.connect()?;
            for i in 0..QUEUE_SIZE {
                let (score, member) = ((QUEUE_SIZE - i).to_string(), format!("i{i}"));
                conn.command(&[b"ZADD", b"queue:user1", score.as_bytes(), member.as_bytes()])?;
            }
            let server = Arc::new(server);
            let progress = bar("recommend: Redis ZRANGE", plan.requests as u64);
            let (rps, hist) =
                concurrently(plan.requests, args.concurrency, &progress, move || {
                    let mut conn = server.connect()?;
                    Ok(move || -> anyhow::Result<()> {
                        let reply =
                            conn.command(&[b"ZRANGE", b"queue:user1", b"0", b"9", b"WITHSCORES"])?;
                        match reply {
                            Reply::Array(items) if items.len() == 20 => Ok(()),
                            other => bail!("ZRANGE: {other:?}"),
                        }
                    })
                })?;
            drop(progress);
            table.row(vec![
                name.into(),
                Cell::int(rps),
                Cell::fixed(ms(&hist, 0.5), 3),
                Cell::fixed(ms(&hist, 0.99), 3),
            ]);
            if let Some((queue, p50)) = queue_rps {
                table.note(format!(
                    "queue read / Redis ZRANGE: {:.2}x the throughput, p50 {:.3} ms vs {:.3} ms \
                     (the seed: 2-4 ms per queue read)",
                    queue / rps,
                    p50,
                    ms(&hist, 0.5)
                ));
            }
        }
    }
    report.table(table);
    Ok(())
}

fn event(user: &str, item: &str, timestamp: i64) -> Event {
    Event {
        event_type: EventType::Conversion,
        event_subtype: None,
        event_name: "Purchased".into(),
        index: INDEX.into(),
        user_token: user.into(),
        authenticated_user_token: None,
        timestamp,
        target: Target::ObjectIds(vec![item.into()]),
        query_id: None,
        positions: None,
        object_data: None,
        value: None,
        currency: None,
    }
}

/// Run `requests` calls over `clients` threads, each with its own connection made by
/// `connect`, advancing `progress` as they go; returns requests/s and a histogram of µs.
fn concurrently<F, C>(
    requests: usize,
    clients: usize,
    progress: &ProgressBar,
    connect: C,
) -> anyhow::Result<(f64, Histogram<u64>)>
where
    C: Fn() -> anyhow::Result<F> + Send + Sync,
    F: FnMut() -> anyhow::Result<()>,
{
    let per_client = requests.div_ceil(clients.max(1));
    let started = Instant::now();
    let hists = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..clients.max(1))
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<Histogram<u64>> {
                    let mut call = connect()?;
                    let mut hist = histogram();
                    for n in 1..=per_client {
                        let t = Instant::now();
                        call()?;
                        hist.record(t.elapsed().as_micros() as u64)?;
                        // Every 16 calls, so that the bar costs the loop nothing measurable.
                        if n % 16 == 0 || n == per_client {
                            progress.inc(((n - 1) % 16 + 1) as u64);
                        }
                    }
                    Ok(hist)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("client thread panicked"))
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let elapsed = started.elapsed().as_secs_f64();
    let mut all = histogram();
    for h in &hists {
        all.add(h)?;
    }
    Ok(((per_client * hists.len()) as f64 / elapsed, all))
}

/// Hit rate and recall at 10 of one model over the test users.
#[derive(Debug, Default)]
struct Score {
    users: usize,
    hit: usize,
    recall: f64,
}

impl Score {
    fn add(&mut self, recommended: &[String], truth: &HashSet<String>) {
        let found = recommended.iter().filter(|id| truth.contains(*id)).count();
        self.users += 1;
        self.hit += usize::from(found > 0);
        self.recall += found as f64 / truth.len().min(10) as f64;
    }
}

/// Tables (3) and (4) on MovieLens.
async fn quality(
    args: &RecommendBenchArgs,
    data: crate::personalization::MovieLens,
) -> anyhow::Result<Vec<Table>> {
    let split_at = data.ratings[data.ratings.len() * SPLIT_PERCENT / 100].3;
    let first = data.ratings[0].3;
    let day_ms = 86_400_000i64;
    let now = penchant_store::validate::now_micros() / 1000;
    // Train events land in [now - 60 days, now - 1 day]; the engine's clock stands at the split.
    let split_ms = now - day_ms;
    let scale = (59 * day_ms) as f64 / ((split_at - first).max(1) * 1000) as f64;
    let config = EngineConfig {
        clock: penchant_engine::clock::Clock::manual(split_ms * 1000),
        ..EngineConfig::default()
    };
    let store: Arc<dyn Store> = Arc::new(penchant_store::MemStore::new());
    let engine = Engine::open(store, config).await?;
    engine.tenancy().create_app(Some(APP), "quality").await?;
    let seen = penchant_engine::seen::SeenSettings {
        event_types: vec![EventType::Conversion],
        ..serde_json::from_value(json!({}))?
    };
    engine.set_seen_settings(APP, seen).await?;
    let records: Vec<(String, Write)> = data
        .items
        .iter()
        .filter_map(|r| Some(("movies".to_owned(), Write::Put(r.as_object()?.clone()))))
        .collect();
    for chunk in records.chunks(1000) {
        engine.write_records(APP, chunk.to_vec()).await?;
    }
    let (train, test): (Vec<_>, Vec<_>) = data.ratings.iter().partition(|r| r.3 < split_at);
    let events: Vec<Event> = train
        .iter()
        .map(|(user, item, _, ts)| {
            let at = split_ms - 59 * day_ms + ((ts - first) as f64 * 1000.0 * scale) as i64;
            let mut e = event(user, item, at.min(split_ms - 1));
            e.index = "movies".into();
            e
        })
        .collect();
    let progress = spinner(format!(
        "recommend: MovieLens, {} train events, then ALS",
        rate(events.len() as f64)
    ));
    for chunk in events.chunks(1000) {
        engine.push_events(APP, chunk).await?;
    }
    let training: TrainingConfig = serde_json::from_value(json!({
        "index": "movies", "factors": args.factors, "regularization": args.regularization,
        "alpha": args.alpha,
    }))?;
    engine.train(APP, training.clone()).await?;
    loop {
        let status = engine.training_status(APP).await?.context("no training")?;
        if status.state != penchant_engine::jobs::JobState::Running {
            anyhow::ensure!(
                status.error.is_none(),
                "training failed: {:?}",
                status.error
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(progress);
    let trained: HashSet<&str> = train.iter().map(|r| r.0.as_str()).collect();
    let mut truth: HashMap<&str, HashSet<String>> = HashMap::new();
    for (user, item, _, _) in &test {
        if trained.contains(user.as_str()) {
            truth.entry(user).or_default().insert(item.clone());
        }
    }
    let ids = |hits: &[RecommendHit]| -> Vec<String> {
        hits.iter()
            .filter_map(|h| match h {
                RecommendHit::Item { record, .. } => {
                    record.get("objectID")?.as_str().map(str::to_owned)
                }
                RecommendHit::Facet { .. } => None,
            })
            .collect()
    };
    let request = |model: &str, user: &str, max: i64| -> anyhow::Result<RecommendRequest> {
        Ok(serde_json::from_value(json!({
            "indexName": "movies", "model": model, "threshold": 0, "maxRecommendations": max,
            "queryParameters": {"userToken": user},
        }))?)
    };
    let def = QueueDefinition {
        index_name: "movies".into(),
        size: 100,
        sources: vec![
            Source::Als {
                space: "als".into(),
                weight: 1.0,
            },
            Source::Trending {
                weight: args.trending_weight,
            },
        ],
        ranker: Default::default(),
    };
    engine.define_queue(APP, "blend", &def).await?;
    // Table (4) first, while the app's only queue is `blend`.
    let blends = blends(&engine, &training, args.trending_weight).await?;
    // The co-interaction lists (the `related` source), then a queue per blend of table (4).
    engine.start_build(APP).await?;
    while engine
        .build_status(APP)
        .await?
        .is_some_and(|b| b.state == penchant_engine::jobs::JobState::Running)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut queues = vec![(
        "blend".to_owned(),
        format!(
            "recommended-for-you, queue: als + trending x{}",
            args.trending_weight
        ),
    )];
    for (i, (name, sources)) in BLENDS.iter().enumerate() {
        let def = QueueDefinition {
            sources: serde_json::from_str(sources)?,
            ..def.clone()
        };
        engine.define_queue(APP, &format!("b{i}"), &def).await?;
        queues.push((
            format!("b{i}"),
            format!("recommended-for-you, queue: {name}"),
        ));
    }
    // The learned ranker's queue, written by the ranker job (learned from the same train
    // events, each user's latest 20% held out as what came next).
    let learned = QueueDefinition {
        sources: serde_json::from_str(BLENDS[4].1)?,
        ranker: penchant_engine::recommend::Ranker::Learned,
        ..def.clone()
    };
    engine.define_queue(APP, "learned", &learned).await?;
    let progress = spinner("recommend: MovieLens, the ranker job".to_owned());
    let config = serde_json::from_value(json!({"indexName": "movies"}))?;
    let (ranker_seconds, ranked, stored) = crate::ranker::ranker_job(&engine, APP, config).await?;
    drop(progress);
    queues.push((
        "learned".to_owned(),
        format!(
            "recommended-for-you, queue: learned ranker over {}",
            BLENDS[4].0
        ),
    ));
    let mut for_you: Vec<Score> = queues.iter().map(|_| Score::default()).collect();
    let (mut vectors, mut trending) = (Score::default(), Score::default());
    let mut users: Vec<&&str> = truth.keys().collect();
    users.sort();
    let progress = bar("recommend: MovieLens test users", users.len() as u64);
    for user in users {
        let user: &str = user;
        let truth = &truth[user];
        let mut asked = Vec::new();
        for (queue, _) in &queues {
            // The learned queue is the ranker job's to write.
            if queue != "learned" {
                engine.rebuild_queue(APP, queue, user, None).await?;
            }
            let mut from_queue = request("recommended-for-you", user, 10)?;
            from_queue.queue = Some(queue.clone());
            asked.push(from_queue);
        }
        asked.push(request("recommended-for-you", user, 10)?);
        asked.push(request("trending-items", user, 30)?);
        let answers = engine.recommendations(APP, &asked).await?;
        for ((answer, score), (queue, _)) in answers.iter().zip(&mut for_you).zip(&queues) {
            let wanted = if queue == "learned" {
                "learned-queue"
            } else {
                "queue"
            };
            anyhow::ensure!(answer.source == wanted, "{queue}: {:?}", answer.source);
            score.add(&ids(&answer.hits), truth);
        }
        let n = queues.len();
        vectors.add(&ids(&answers[n].hits), truth);
        let popular = ids(&answers[n + 1].hits);
        let unseen = engine
            .unseen(APP, user, &popular, penchant_engine::Consistency::Eventual)
            .await?;
        let unseen: Vec<String> = unseen.into_iter().take(10).cloned().collect();
        trending.add(&unseen, truth);
        progress.inc(1);
    }
    drop(progress);
    let mut table = Table::new(
        format!(
            "{QUALITY}: train before the {SPLIT_PERCENT}% time quantile, test after; {} users on \
             both sides; 10 items each, never one the user rated before the split",
            rate(vectors.users as f64)
        ),
        &["model", "hit rate@10", "recall@10"],
    );
    let rows = queues
        .iter()
        .map(|(_, name)| name.as_str())
        .zip(&for_you)
        .chain([
            ("recommended-for-you, no queue (ALS vectors)", &vectors),
            ("trending-items, unseen (the zero-day model)", &trending),
        ]);
    for (name, score) in rows {
        table.row(vec![
            name.into(),
            Cell::fixed(score.hit as f64 / score.users.max(1) as f64, 4),
            Cell::fixed(score.recall / score.users.max(1) as f64, 4),
        ]);
    }
    table.note(format!(
        "the ranker job (learn on {} events, then write {} users' learned queues): {:.1} s; \
         {} trees, {} + {} training and validation queries, learning {:.1} s",
        rate(stored.events as f64),
        rate(ranked.users as f64),
        ranker_seconds,
        stored.learned.trees,
        stored.learned.train_queries,
        stored.learned.validation_queries,
        stored.learned.train_seconds
    ));
    Ok(vec![table, blends])
}

/// Blends a queue can be defined with, each scored offline (`POST /1/als/evaluate`).
const BLENDS: &[(&str, &str)] = &[
    (
        "als + trending x0.5",
        r#"[{"source":"als"},{"source":"trending","weight":0.5}]"#,
    ),
    (
        "als + similar-to-liked 5",
        r#"[{"source":"als"},{"source":"similar-to-liked","last":5}]"#,
    ),
    (
        "als + similar-to-liked 5 + trending x0.5",
        r#"[{"source":"als"},{"source":"similar-to-liked","last":5},{"source":"trending","weight":0.5}]"#,
    ),
    (
        "als + related 10",
        r#"[{"source":"als"},{"source":"related","last":10}]"#,
    ),
    (
        "als + similar-to-liked 5 + related 10",
        r#"[{"source":"als"},{"source":"similar-to-liked","last":5},{"source":"related","last":10}]"#,
    ),
    (
        "als + similar-to-liked 5 + related 10 + trending x1",
        r#"[{"source":"als"},{"source":"similar-to-liked","last":5},{"source":"related","last":10},{"source":"trending"}]"#,
    ),
    (
        "als + similar-to-liked 5 + related 10 + trending x2",
        r#"[{"source":"als"},{"source":"similar-to-liked","last":5},{"source":"related","last":10},{"source":"trending","weight":2}]"#,
    ),
];

/// Table (4): popularity, each model and each of [`BLENDS`] on each user's latest 20% of the
/// training events (the engine's offline evaluation).
async fn blends(
    engine: &Engine,
    training: &TrainingConfig,
    trending_weight: f32,
) -> anyhow::Result<Table> {
    let mut queues = Vec::new();
    for (name, sources) in BLENDS {
        queues.push(((*name).to_owned(), serde_json::from_str(sources)?));
    }
    let request = EvaluationRequest {
        holdout: Holdout::Fraction(0.2),
        k: 10,
        queues,
        learned: Default::default(),
    };
    let progress = spinner("recommend: MovieLens, blends evaluated offline");
    let eval = engine.evaluate_als(APP, training, request).await?;
    drop(progress);
    let mut table = Table::new(
        format!(
            "{QUALITY}: blends, each user's latest 20% of events held out ({} test users), 10 \
             items each, none the user had",
            eval.test_users
        ),
        &["model or blend", "precision@10", "recall@10", "ndcg@10"],
    );
    for row in &eval.rows {
        // The app's own queue, evaluated as defined.
        let name = match row.name.as_str() {
            "queue blend" => format!("als + trending x{trending_weight} (the app's queue)"),
            name => name.to_owned(),
        };
        table.row(vec![
            name.into(),
            Cell::fixed(row.metrics.precision, 4),
            Cell::fixed(row.metrics.recall, 4),
            Cell::fixed(row.metrics.ndcg, 4),
        ]);
    }
    let best_hand = eval
        .rows
        .iter()
        .filter(|r| r.name != "learned")
        .map(|r| r.metrics.ndcg)
        .fold(0.0, f64::max);
    if let (Some(learned), Some(row)) = (
        &eval.learned,
        eval.rows.iter().find(|r| r.name == "learned"),
    ) {
        let importance: Vec<String> = learned
            .importance
            .iter()
            .take(6)
            .map(|(f, share)| format!("{f} {:.0}%", share * 100.0))
            .collect();
        table.note(format!(
            "learned: LambdaMART boosted from the blend als + similar-to-liked + related over \
             the candidates of every source ({} per source), {} trees from {} examples (a user's \
             next events at one of {} cuts; {} validating), {:.1} s; NDCG@10 {:+.1}% over the \
             best other row; feature importance: {}",
            learned.per_source,
            learned.trees,
            learned.train_queries,
            learned.cuts,
            learned.validation_queries,
            learned.train_seconds,
            (row.metrics.ndcg / best_hand - 1.0) * 100.0,
            importance.join(", ")
        ));
        // Scoring 1,000 candidates with the model, beside the hand blend's sum of three
        // features over the same rows (the cost the model adds to a request).
        let width = penchant_learn::offline::FEATURES.len();
        let rows: Vec<f32> = (0..1000 * width)
            .map(|n| ((n * 7919) % 1000) as f32 / 1000.0)
            .collect();
        let time = |score: &dyn Fn(&[f32]) -> f64| {
            let started = std::time::Instant::now();
            let mut sum = 0.0;
            for _ in 0..100 {
                sum += rows.chunks_exact(width).map(score).sum::<f64>();
            }
            std::hint::black_box(sum);
            started.elapsed().as_secs_f64() / 100.0 * 1e6
        };
        let model = time(&|r| learned.model.score(r));
        let blend = time(&|r| f64::from(r[1] + r[2] + r[3]));
        // As the ranking scores them: all the rows at once, side by side through each tree.
        let forest = learned.model.forest();
        let started = std::time::Instant::now();
        for _ in 0..100 {
            std::hint::black_box(forest.score_rows(&rows));
        }
        let side_by_side = started.elapsed().as_secs_f64() / 100.0 * 1e6;
        table.note(format!(
            "scoring 1,000 candidates: the learned model {side_by_side:.0} µs ({} trees, the rows \
             side by side; {model:.0} µs one row at a time), the hand blend's sum {blend:.1} µs",
            learned.trees
        ));
    }
    Ok(table)
}
