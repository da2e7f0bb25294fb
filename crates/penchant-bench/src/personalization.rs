//! `penchant bench personalization`: MovieLens 100k as Insights events, through a real HTTP
//! server on the embedded store (durable writes).
//!
//! Items become catalog records (`genres`, `year`); ratings become events (4-5 stars: a
//! conversion "Movie Loved", else a view "Movie Viewed"), timestamps spread over the last 20
//! days. It measures ingestion over loopback HTTP in batches of 1000 (each batch refreshes the
//! profiles of its users before the 200), the latency of a single event until its profile
//! reflects it (the push returns after the refresh), and a full recompute (a strategy change)
//! from raw events and from the per-day aggregates, beside a plain scan of the same events: the
//! reference, run in the same process. Throughputs count raw events either way.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use hdrhistogram::Histogram;
use penchant_engine::profiles::Source;
use penchant_store::{ReadRows, RowSet, Store};
use penchant_store_rocksdb::{RocksOptions, RocksStore};
use rand::Rng;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

use crate::report::{bar, movielens_file, spinner};
use crate::{Bench, Cell, CommonArgs, InProcess, Report, Table, rate};

/// `penchant-bench personalization`'s flags.
#[derive(Debug, clap::Args)]
pub struct PersonalizationBenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// MovieLens 100k in RecBole's format (ml-100k.inter, ml-100k.item).
    #[arg(long, default_value = "../shared/data/ml-100k")]
    movielens: PathBuf,
    /// Concurrent HTTP clients sending batches.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Single-event pushes for the latency measurement [default by scale: small 100, medium
    /// and large 1,000].
    #[arg(long)]
    pushes: Option<usize>,
    /// Acknowledge writes without fsync.
    #[arg(long)]
    no_sync: bool,
    /// Ranges of users a full recompute runs at once (as a job does).
    #[arg(long, default_value_t = 2)]
    parallelism: usize,
}

impl Bench for PersonalizationBenchArgs {
    const NAME: &'static str = "personalization";

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn run(self, report: &mut Report) -> anyhow::Result<()> {
        let data = load(&self.movielens)?;
        let dir = tempfile::tempdir()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let table = runtime.block_on(bench(self, data, dir.path()))?;
        report.table(table);
        Ok(())
    }
}

const APP: &str = "BENCH";
const BATCH: usize = 1000;

pub(crate) struct MovieLens {
    pub(crate) items: Vec<Value>,
    /// (user, item, rating, unix seconds), in time order.
    pub(crate) ratings: Vec<(String, String, u8, i64)>,
}

/// MovieLens 100k from `dir`, or [`Missing`](crate::Missing) when `dir` has no ratings file.
pub(crate) fn load(dir: &std::path::Path) -> anyhow::Result<MovieLens> {
    movielens_file(dir, false)?;
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
    };
    let items = read("ml-100k.item")?
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            Some(json!({
                "objectID": f.first()?,
                "title": f.get(1)?,
                "year": f.get(2)?,
                "genres": f.get(3)?.split(' ').collect::<Vec<_>>(),
            }))
        })
        .collect();
    let mut ratings: Vec<(String, String, u8, i64)> = read("ml-100k.inter")?
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            Some((
                format!("user{}", f.first()?),
                (*f.get(1)?).to_owned(),
                f.get(2)?.parse::<f64>().ok()? as u8,
                f.get(3)?.parse::<f64>().ok()? as i64,
            ))
        })
        .collect();
    ratings.sort_by_key(|r| r.3);
    if ratings.is_empty() {
        bail!("no ratings in {}", dir.display());
    }
    Ok(MovieLens { items, ratings })
}

fn strategy(genre_weight: u32) -> Value {
    json!({
        "eventsScoring": [
            {"eventName": "Movie Viewed", "eventType": "view", "score": 10},
            {"eventName": "Movie Loved", "eventType": "conversion", "score": 50},
        ],
        "facetsScoring": [
            {"facetName": "genres", "score": genre_weight},
            {"facetName": "year", "score": 10},
        ],
        "personalizationImpact": 50,
    })
}

/// Every workload, on a store in `dir`: the table.
async fn bench(
    args: PersonalizationBenchArgs,
    data: MovieLens,
    dir: &std::path::Path,
) -> anyhow::Result<Table> {
    let pushes = args
        .pushes
        .unwrap_or(args.common.scale.pick(100, 1000, 1000));
    let options = RocksOptions {
        sync_writes: !args.no_sync,
        ..RocksOptions::default()
    };
    let store: Arc<dyn Store> = Arc::new(RocksStore::open(dir, options)?);
    let client = Arc::new(InProcess::start(store.clone(), APP).await?);
    let engine = client.engine.clone();
    let progress = spinner(format!(
        "personalization: indexing {} movies",
        rate(data.items.len() as f64)
    ));
    for chunk in data.items.chunks(BATCH) {
        let requests: Vec<Value> = chunk
            .iter()
            .map(|r| json!({"action": "addObject", "body": r}))
            .collect();
        client
            .post::<IgnoredAny>("/1/indexes/movies/batch", &json!({"requests": requests}))
            .await?;
    }
    client
        .post::<IgnoredAny>("/1/strategies/personalization", &strategy(100))
        .await?;
    drop(progress);

    // 1. Ingestion: batches of 1000 events, concurrent clients.
    let now = penchant_store::validate::now_micros() / 1000;
    let (first, last) = (data.ratings[0].3, data.ratings[data.ratings.len() - 1].3);
    let span = (last - first).max(1);
    let twenty_days = 20 * 86_400_000i64;
    let events: Vec<Value> = data
        .ratings
        .iter()
        .map(|(user, item, rating, ts)| {
            let (kind, name) = if *rating >= 4 {
                ("conversion", "Movie Loved")
            } else {
                ("view", "Movie Viewed")
            };
            json!({
                "eventType": kind, "eventName": name, "index": "movies", "userToken": user,
                "objectIDs": [item], "timestamp": now - twenty_days + (ts - first) * twenty_days / span,
            })
        })
        .collect();
    let batches: Vec<Value> = events
        .chunks(BATCH)
        .map(|c| json!({ "events": c }))
        .collect();
    let queue = Arc::new(std::sync::Mutex::new(batches.into_iter()));
    let progress = bar(
        "personalization: ingesting events over HTTP",
        events.len() as u64,
    );
    let start = Instant::now();
    let tasks: Vec<_> = (0..args.clients)
        .map(|_| {
            let (queue, client, progress) = (queue.clone(), client.clone(), progress.clone());
            tokio::spawn(async move {
                loop {
                    let next = queue
                        .lock()
                        .map_err(|_| anyhow::anyhow!("poisoned"))?
                        .next();
                    let Some(batch) = next else {
                        return anyhow::Ok(());
                    };
                    client.post::<IgnoredAny>("/1/events", &batch).await?;
                    progress.inc(batch["events"].as_array().map_or(0, Vec::len) as u64);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    let ingest = events.len() as f64 / start.elapsed().as_secs_f64();
    drop(progress);

    // 2. Event → profile latency: one event per request; the 200 comes after the refresh.
    let mut rng = rand::rng();
    let mut hist = Histogram::<u64>::new(3)?;
    let progress = bar(
        "personalization: event -> profile latency, single pushes",
        pushes as u64,
    );
    for _ in 0..pushes {
        let (user, item, _, _) = &data.ratings[rng.random_range(0..data.ratings.len())];
        let event = json!({"events": [{"eventType": "view", "eventName": "Movie Viewed",
            "index": "movies", "userToken": user, "objectIDs": [item]}]});
        let t = Instant::now();
        client.post::<IgnoredAny>("/1/events", &event).await?;
        hist.record(t.elapsed().as_micros() as u64)?;
        progress.inc(1);
    }
    drop(progress);
    let (user, _, _, _) = &data.ratings[0];
    let profile = engine
        .profiles()
        .get(APP, user)
        .await?
        .context("a profile after the pushes")?;
    anyhow::ensure!(
        profile.scores.contains_key("genres"),
        "profile without genres"
    );

    // 3. Full recompute under a new strategy, beside a plain scan of the same events.
    let progress = spinner("personalization: full recomputes and the plain scan");
    let parsed: penchant_engine::strategy::Strategy = serde_json::from_value(strategy(90))?;
    let versioned = engine.strategies().set(APP, parsed).await?;
    let start = Instant::now();
    let stats = engine
        .recomputes()
        .recompute_now(APP, &versioned, Source::Raw, args.parallelism)
        .await?;
    let recompute = stats.events as f64 / start.elapsed().as_secs_f64();
    // Again from the aggregates, under yet another strategy (else every profile is current).
    let parsed: penchant_engine::strategy::Strategy = serde_json::from_value(strategy(80))?;
    let versioned = engine.strategies().set(APP, parsed).await?;
    let start = Instant::now();
    let agg_stats = engine
        .recomputes()
        .recompute_now(APP, &versioned, Source::Aggregates, args.parallelism)
        .await?;
    let from_aggregates = stats.events as f64 / start.elapsed().as_secs_f64();
    let start = Instant::now();
    let mut scanned = 0u64;
    let prefix = penchant_engine::keys::app(APP);
    let mut stream = store
        .read_rows("events", ReadRows::new(RowSet::prefix(prefix)))
        .await?;
    while let Some(row) = stream.next().await {
        std::hint::black_box(row?);
        scanned += 1;
    }
    let scan = scanned as f64 / start.elapsed().as_secs_f64();

    drop(progress);

    let ms = |q: f64| Duration::from_micros(hist.value_at_quantile(q)).as_secs_f64() * 1e3;
    let mut table = Table::new(
        format!(
            "personalization: MovieLens over HTTP, {} ratings, {} items, {} clients, {} WAL",
            rate(data.ratings.len() as f64),
            rate(data.items.len() as f64),
            args.clients,
            if args.no_sync { "unsynced" } else { "fsynced" }
        ),
        &["workload", "value", "unit"],
    );
    let rows = [
        (
            format!(
                "ingestion, HTTP, batches of {BATCH}, {} clients",
                args.clients
            ),
            Cell::int(ingest),
            "events/s".to_owned(),
        ),
        (
            "event -> profile latency p50 (1 event per request)".into(),
            Cell::fixed(ms(0.5), 2),
            format!("ms ({pushes} pushes)"),
        ),
        (
            "event -> profile latency p99".into(),
            Cell::fixed(ms(0.99), 2),
            "ms".into(),
        ),
        (
            "full recompute from raw events".into(),
            Cell::int(recompute),
            format!("events/s ({} users)", stats.users + stats.skipped),
        ),
        (
            "plain scan of the same events".into(),
            Cell::int(scan),
            format!(
                "events/s (reference; recompute/scan = {:.2})",
                recompute / scan
            ),
        ),
        (
            "full recompute from per-day aggregates".into(),
            Cell::int(from_aggregates),
            format!(
                "events/s ({} aggregate rows, {} users)",
                agg_stats.events,
                agg_stats.users + agg_stats.skipped
            ),
        ),
    ];
    for (workload, value, unit) in rows {
        table.row(vec![workload.into(), value, unit.into()]);
    }
    Ok(table)
}
