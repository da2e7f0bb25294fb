//! `penchant bench ingest`: a shop's traffic shape through a real HTTP server on the embedded
//! store: many users with a handful of events each, and a few heavy users (or bots)
//! with tens of thousands a day.
//!
//! A synthetic catalog of 10,000 items in index `products`, each with a `brand` (200 values), a
//! `category` (50) and a `color` (12); a strategy weighing views (10) and conversions (50) on
//! the three facets. Each user gets a view and a conversion of random items, timestamps spread
//! over the last 3 days, all shuffled. The suite measures, each beside a reference run in the
//! same process (a `redis-server` child where one is found, `--redis-server`):
//!
//! 1. ingestion of every light user's events in batches of 1000 from `--clients` concurrent
//!    HTTP clients; the reference is Redis doing the equivalent durable work (AOF fsynced on
//!    every write): per batch, one pipeline of `HINCRBY profile:{user} {facet}:{value}
//!    {weight}` per (event, facet) and an `RPUSH events:{user} <event JSON>` per event, from as
//!    many connections;
//! 2. the latency from an event to its profile while (1) runs: one more client pushes single
//!    events for random users (the push is answered once the user's profile is refreshed);
//! 3. a heavy user: one user preloaded with N events of today, then single events pushed for
//!    them; the push's latency should not depend on N (the reference is N = 0); and (3b) a new
//!    user's single events without a timestamp, as `search-insights` sends them (the server
//!    stamps each and remembers its arrival for retries), beside the same with timestamps;
//! 4. profile reads (`GET /1/profiles/personalization/{user}`) from 8 connections right after
//!    the ingestion, before any wait (RocksDB still flushing and compacting); then how long the
//!    compactions took to finish (the wait itself), and reads at rest from 8 and 32 keep-alive
//!    connections; each beside Redis `GET`s of a profile JSON of the same size;
//! 5. what the users cost at rest: bytes on disk per user after a flush (beside the size of
//!    Redis's AOF) and the process's resident memory (beside `redis-server`'s);
//! 6. a full recompute of every profile from the raw events after a strategy change, beside
//!    raw RocksDB iterating every key of the same store (opened read-only) in the same run.
//!
//! Penchant's rows all run before Redis starts; the scale and whether writes are fsynced head
//! the table (the machine heads the run's report). The scale sets the light users (small 2,000,
//! medium 50,000, large 1,000,000; `--users` overrides it), the heavy user's histories and how
//! long each profile-read measurement runs.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use penchant_engine::profiles::Source;
use penchant_store::Store;
use penchant_store_rocksdb::{RocksOptions, RocksStore};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde::de::IgnoredAny;
use serde_json::json;

use crate::mixed::{Pace, Until, read_loop};
use crate::redis::{Persistence, RedisServer, Reply, encode_command, find_on_path};
use crate::report::{bar, spinner};
use crate::{Bench, Cell, CommonArgs, InProcess, Report, Scale, Table, rate};

/// `penchant-bench ingest`'s flags.
#[derive(Debug, clap::Args)]
pub struct IngestBenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Users of the light-user workload, 2 events each [default by scale: small 2,000,
    /// medium 50,000, large 1,000,000].
    #[arg(long)]
    users: Option<usize>,
    /// Concurrent clients sending batches (HTTP for Penchant, connections for Redis).
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Acknowledge writes without fsync (Redis keeps `appendfsync always` either way).
    #[arg(long)]
    no_sync: bool,
    /// The `redis-server` binary for the references (default: `redis-server` on PATH;
    /// `scripts/redis-server.sh` installs one and prints its path).
    #[arg(long)]
    redis_server: Option<PathBuf>,
    /// Where the store's and Redis's temporary directories go (default: the system's
    /// temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
}

impl Bench for IngestBenchArgs {
    const NAME: &'static str = "ingest";

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn run(self, report: &mut Report) -> anyhow::Result<()> {
        run(self, report)
    }
}

/// The run's sizes: the scale's, unless a flag gave them.
#[derive(Debug)]
struct Plan {
    scale: Scale,
    users: usize,
    clients: usize,
    no_sync: bool,
    dir: Option<PathBuf>,
    /// The heavy user's histories measured (events of today before the timed pushes).
    heavy_histories: &'static [usize],
    /// Timed single-event pushes per heavy-user history.
    heavy_pushes: usize,
    /// How long each profile-read measurement runs.
    read_for: Duration,
}

impl Plan {
    fn of(args: &IngestBenchArgs) -> Self {
        let scale = args.common.scale;
        Self {
            scale,
            users: args.users.unwrap_or(scale.pick(2_000, 50_000, 1_000_000)),
            clients: args.clients,
            no_sync: args.no_sync,
            dir: args.dir.clone(),
            heavy_histories: scale.pick(
                &[0, 100, 1_000],
                &[0, 1_000, 10_000, 50_000],
                &[0, 1_000, 10_000, 100_000],
            ),
            heavy_pushes: scale.pick(50, 200, 200),
            read_for: Duration::from_secs(scale.pick(1, 5, 5)),
        }
    }
}

pub(crate) const APP: &str = "BENCH";
const INDEX: &str = "products";
const ITEMS: usize = 10_000;
/// The facets, and how many values each has.
const FACETS: [(&str, usize); 3] = [("brand", 200), ("category", 50), ("color", 12)];
/// Events per batch (the most `POST /1/events` takes).
pub(crate) const BATCH: usize = 1000;
const VIEW: (&str, &str, u32) = ("view", "Product Viewed", 10);
const CONVERSION: (&str, &str, u32) = ("conversion", "Product Purchased", 50);
/// Light users' events are spread over this many days before now.
const HISTORY_DAYS: i64 = 3;
const DAY_MS: i64 = 86_400_000;
/// Concurrent connections of the profile-read measurements.
const READ_CONNECTIONS: [usize; 2] = [8, 32];
/// Concurrent connections of the profile reads right after the ingestion.
const AFTER_CONNECTIONS: usize = 8;
/// Profiles fetched up front for their size (Redis's values are these bodies).
pub(crate) const PROFILE_SAMPLE: usize = 200;
/// Users whose profile JSON Redis holds for its reads.
pub(crate) const REDIS_PROFILES: usize = 50_000;

// ---------------------------------------------------------------------------------------------
// The workload.

/// One catalog item: its objectID and its value of each of [`FACETS`].
pub(crate) struct Item {
    pub(crate) id: String,
    pub(crate) facets: [String; 3],
}

/// One light user's event, compact: the JSON is built when its batch is sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LightEvent {
    pub(crate) user: u32,
    item: u32,
    conversion: bool,
    timestamp: i64,
}

/// The catalog and every light user's events, shuffled.
pub(crate) struct Workload {
    pub(crate) items: Vec<Item>,
    pub(crate) users: usize,
    pub(crate) events: Vec<LightEvent>,
}

/// An Insights event as `POST /1/events` takes it (and as Redis's event log stores it).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InsightsEvent<'a> {
    event_type: &'static str,
    event_name: &'static str,
    index: &'static str,
    user_token: String,
    #[serde(rename = "objectIDs")]
    object_ids: [&'a str; 1],
    /// None: left out, as `search-insights` does (the server stamps the event on arrival).
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp: Option<i64>,
}

/// The body of `POST /1/events`.
#[derive(Serialize)]
pub(crate) struct Batch<'a> {
    pub(crate) events: Vec<InsightsEvent<'a>>,
}

pub(crate) fn user_token(user: u32) -> String {
    format!("user{user}")
}

/// The current time in Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    penchant_store::validate::now_micros() / 1000
}

impl Workload {
    /// The catalog (random facet values) and two events per user (a view and a conversion of
    /// random items), shuffled; seeded, so every run sends the same traffic.
    pub(crate) fn generate(users: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(11);
        let items = (0..ITEMS)
            .map(|i| Item {
                id: format!("item{i}"),
                facets: FACETS
                    .map(|(name, values)| format!("{name}{}", rng.random_range(0..values))),
            })
            .collect();
        let now = now_ms();
        let mut events: Vec<LightEvent> = (0..users as u32)
            .flat_map(|user| [false, true].map(|conversion| (user, conversion)))
            .map(|(user, conversion)| LightEvent {
                user,
                item: rng.random_range(0..ITEMS as u32),
                conversion,
                timestamp: now - rng.random_range(0..HISTORY_DAYS * DAY_MS),
            })
            .collect();
        events.shuffle(&mut rng);
        Self {
            items,
            users,
            events,
        }
    }

    pub(crate) fn batches(&self) -> usize {
        self.events.len().div_ceil(BATCH)
    }

    /// Batch `i`'s events.
    pub(crate) fn batch(&self, i: usize) -> &[LightEvent] {
        let start = i * BATCH;
        &self.events[start..(start + BATCH).min(self.events.len())]
    }

    pub(crate) fn insights(&self, e: &LightEvent) -> InsightsEvent<'_> {
        insights_event(
            user_token(e.user),
            &self.items[e.item as usize],
            e.conversion,
            e.timestamp,
        )
    }

    /// A random item (for the single pushes).
    pub(crate) fn random_item(&self, rng: &mut impl Rng) -> &Item {
        &self.items[rng.random_range(0..self.items.len())]
    }
}

pub(crate) fn insights_event(
    user_token: String,
    item: &Item,
    conversion: bool,
    timestamp: i64,
) -> InsightsEvent<'_> {
    let (event_type, event_name, _) = if conversion { CONVERSION } else { VIEW };
    InsightsEvent {
        event_type,
        event_name,
        index: INDEX,
        user_token,
        object_ids: [&item.id],
        timestamp: Some(timestamp),
    }
}

/// The personalization strategy: views and conversions, on the three facets.
fn strategy() -> serde_json::Value {
    let event = |(event_type, event_name, score): (&str, &str, u32)| json!({"eventName": event_name, "eventType": event_type, "score": score});
    json!({
        "eventsScoring": [event(VIEW), event(CONVERSION)],
        "facetsScoring": FACETS.map(|(name, _)| json!({"facetName": name, "score": 100})),
        "personalizationImpact": 50,
    })
}

// ---------------------------------------------------------------------------------------------
// Measurements and the table.

/// A rate and the latencies behind it (microseconds).
pub(crate) struct Timed {
    pub(crate) per_s: f64,
    pub(crate) latency: Histogram<u64>,
}

/// A histogram for latencies in microseconds.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits is valid")
}

/// A latency quantile in milliseconds.
pub(crate) fn ms(hist: &Histogram<u64>, q: f64) -> f64 {
    hist.value_at_quantile(q) as f64 / 1e3
}

/// Penchant's figures.
struct PenchantRows {
    ingest: Timed,
    /// Single-event pushes during the ingestion.
    under_load: Histogram<u64>,
    /// (history, push latencies).
    heavy: Vec<(usize, Histogram<u64>)>,
    /// A new user's single pushes without a timestamp (the arrival is the server's).
    unstamped: Histogram<u64>,
    /// (connections, reads).
    reads: Vec<(usize, Timed)>,
    /// Reads right after the ingestion, before any wait for compactions ([`AFTER_CONNECTIONS`]).
    after: Timed,
    disk: DiskUse,
    rss_bytes: Option<u64>,
    recompute: Recompute,
    /// How long compactions ran after the load, before the reads.
    settled: Duration,
    /// Sampled profile bodies (`GET /1/profiles/personalization/{user}`).
    profiles: Vec<Vec<u8>>,
}

/// (6): a full recompute from raw events, beside raw RocksDB iterating the same store.
struct Recompute {
    events: u64,
    elapsed: Duration,
    /// Keys of the store's data family, and how long raw RocksDB took to iterate them all.
    raw_keys: u64,
    raw_elapsed: Duration,
}

/// Bytes of a directory's files after a flush.
pub(crate) struct DiskUse {
    pub(crate) total: u64,
    pub(crate) sst: u64,
}

/// Redis's figures.
struct RedisRows {
    ingest: f64,
    aof_bytes: u64,
    rss_bytes: Option<u64>,
    reads: Vec<(usize, Timed)>,
}

fn run(args: IngestBenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let plan = Plan::of(&args);
    anyhow::ensure!(plan.clients > 0, "--clients must be at least 1");
    anyhow::ensure!(plan.users > 0, "--users must be at least 1");
    let redis_path = args
        .redis_server
        .clone()
        .or_else(|| find_on_path("redis-server"));

    let progress = spinner(format!(
        "ingest: generating {} users' events",
        rate(plan.users as f64)
    ));
    let work = Arc::new(Workload::generate(plan.users));
    drop(progress);
    let dir = match &plan.dir {
        Some(parent) => tempfile::tempdir_in(parent)?,
        None => tempfile::tempdir()?,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let penchant = runtime.block_on(penchant_rows(&plan, &work, dir.path()))?;
    // The server, the store and their background work stop before Redis starts.
    drop(runtime);
    drop(dir);

    let redis = redis_path
        .as_deref()
        .map(|path| redis_rows(path, &plan, &work, &penchant.profiles));
    report.table(table(&plan, &work, &penchant, redis.as_ref()));
    match redis {
        Some(Err(e)) => Err(e.context("the Redis reference")),
        _ => Ok(()),
    }
}

/// A process's resident memory (`VmRSS` in `/proc/{pid}/status`), in bytes.
pub(crate) fn rss_bytes(pid: &str) -> Option<u64> {
    status_bytes(pid, "VmRSS:")
}

/// A size field of `/proc/{pid}/status` (`VmRSS:`, `VmHWM:`: the peak), in bytes.
pub(crate) fn status_bytes(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = status.lines().find_map(|l| l.strip_prefix(field))?;
    Some(
        kb.trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()?
            * 1024,
    )
}

/// The bytes of every file under `dir`, and of its SST files.
pub(crate) fn disk_use(dir: &Path) -> anyhow::Result<DiskUse> {
    let mut usage = DiskUse { total: 0, sst: 0 };
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            let sub = disk_use(&entry.path())?;
            usage.total += sub.total;
            usage.sst += sub.sst;
        } else {
            usage.total += meta.len();
            if entry.path().extension().is_some_and(|e| e == "sst") {
                usage.sst += meta.len();
            }
        }
    }
    Ok(usage)
}

/// The table: Penchant's rows beside the reference's (Redis where it ran, else none).
fn table(
    plan: &Plan,
    work: &Workload,
    p: &PenchantRows,
    redis: Option<&anyhow::Result<RedisRows>>,
) -> Table {
    let r = redis.and_then(|r| r.as_ref().ok());
    let mut table = Table::new(
        format!(
            "ingest: a shop's traffic over HTTP, scale {}: {} users x 2 events = {} events, {} \
             items, {} clients, fsync {}",
            plan.scale.name(),
            rate(work.users as f64),
            rate(work.events.len() as f64),
            rate(ITEMS as f64),
            plan.clients,
            if plan.no_sync { "off" } else { "on" },
        ),
        &[
            "workload",
            "penchant",
            "reference",
            "ratio",
            "unit (reference)",
        ],
    );
    // One row: Penchant's figure, the reference's and their ratio ("-" where none).
    let mut row = |name: &str, value: Cell, reference: Cell, ratio: Option<f64>, unit: &str| {
        table.row(vec![
            name.into(),
            value,
            reference,
            Cell::or_empty(ratio, |x| Cell::fixed(x, 2)),
            unit.into(),
        ]);
    };
    let latency = |x: f64| Cell::fixed(x, 3);

    // 1. Ingestion.
    row(
        &format!(
            "1. ingest {} users x 2 events, batches of {BATCH}, {} clients",
            rate(work.users as f64),
            plan.clients
        ),
        Cell::int(p.ingest.per_s),
        Cell::or_empty(r.map(|r| r.ingest), Cell::int),
        r.map(|r| p.ingest.per_s / r.ingest),
        "events/s (Redis: HINCRBY per facet + RPUSH, AOF fsync always)",
    );
    for (q, name) in [(0.5, "   batch POST latency p50"), (0.99, "   p99")] {
        row(
            name,
            latency(ms(&p.ingest.latency, q)),
            Cell::Empty,
            None,
            "ms",
        );
    }

    // 2. Event -> profile latency under load.
    let pushes = format!("ms ({} single-event POSTs)", p.under_load.len());
    for (name, q, unit) in [
        (
            "2. event -> profile latency under (1), p50",
            0.5,
            pushes.as_str(),
        ),
        ("   p99", 0.99, "ms"),
        ("   max", 1.0, "ms"),
    ] {
        row(name, latency(ms(&p.under_load, q)), Cell::Empty, None, unit);
    }

    // 3. Heavy user.
    let base = p.heavy.iter().find(|(n, _)| *n == 0).map(|(_, h)| h);
    for (history, hist) in &p.heavy {
        for (q, label) in [(0.5, "p50"), (0.99, "p99")] {
            let (name, unit) = if label == "p50" {
                let name = format!(
                    "3. heavy user, {} events today: push {label}",
                    rate(*history as f64)
                );
                (
                    name,
                    format!("ms ({} pushes; reference: no history)", plan.heavy_pushes),
                )
            } else {
                (format!("   {label}"), "ms".to_owned())
            };
            let reference = base.map(|b| ms(b, q));
            row(
                &name,
                latency(ms(hist, q)),
                Cell::or_empty(reference, latency),
                reference.map(|b| ms(hist, q) / b),
                &unit,
            );
        }
    }

    // 3b. The same pushes without a timestamp.
    for (q, name) in [
        (0.5, "3b. a new user's push without a timestamp, p50"),
        (0.99, "   p99"),
    ] {
        let reference = base.map(|b| ms(b, q));
        let unit = match q {
            0.5 => format!(
                "ms ({} pushes; reference: with timestamps)",
                plan.heavy_pushes
            ),
            _ => "ms".to_owned(),
        };
        row(
            name,
            latency(ms(&p.unstamped, q)),
            Cell::or_empty(reference, latency),
            reference.map(|b| ms(&p.unstamped, q) / b),
            &unit,
        );
    }

    // 4. Profile reads: right after the ingestion, the wait for compactions, then at rest.
    let avg_profile = p.profiles.iter().map(Vec::len).sum::<usize>() / p.profiles.len().max(1);
    let after = [(
        AFTER_CONNECTIONS,
        &p.after,
        " right after the ingestion (no wait)",
    )];
    let rest = p.reads.iter().map(|(c, t)| (*c, t, ""));
    for (i, (connections, reads, when)) in after.into_iter().chain(rest).enumerate() {
        if i == 1 {
            row(
                "   compactions settle wait (the reads below start after it)",
                Cell::fixed(p.settled.as_secs_f64(), 1),
                Cell::Empty,
                None,
                "s",
            );
        }
        let theirs = r.and_then(|r| r.reads.iter().find(|(c, _)| *c == connections));
        let theirs = theirs.map(|(_, t)| t);
        row(
            &format!("4. profile reads{when}, {connections} connections"),
            Cell::int(reads.per_s),
            Cell::or_empty(theirs.map(|t| t.per_s), Cell::int),
            theirs.map(|t| reads.per_s / t.per_s),
            &format!(
                "req/s for {} s (Redis GET of a {avg_profile}-byte profile JSON)",
                plan.read_for.as_secs()
            ),
        );
        for (q, name) in [(0.5, "   p50"), (0.99, "   p99")] {
            row(
                name,
                latency(ms(&reads.latency, q)),
                Cell::or_empty(theirs.map(|t| ms(&t.latency, q)), latency),
                theirs.map(|t| ms(&reads.latency, q) / ms(&t.latency, q)),
                "ms",
            );
        }
    }

    // 5. At rest.
    let per_user = |bytes: u64| bytes as f64 / work.users as f64;
    row(
        "5. bytes on disk per user (after flush)",
        Cell::fixed(per_user(p.disk.total), 0),
        Cell::or_empty(r.map(|r| per_user(r.aof_bytes)), |b| Cell::fixed(b, 0)),
        r.map(|r| p.disk.total as f64 / r.aof_bytes as f64),
        "bytes (Redis: its AOF)",
    );
    row(
        "   of which SST files",
        Cell::fixed(per_user(p.disk.sst), 0),
        Cell::Empty,
        None,
        "bytes",
    );
    let mib = |b: u64| Cell::fixed(b as f64 / f64::from(1 << 20), 0);
    row(
        "   resident memory after ingest",
        p.rss_bytes.map_or(Cell::Empty, mib),
        r.and_then(|r| r.rss_bytes).map_or(Cell::Empty, mib),
        p.rss_bytes
            .zip(r.and_then(|r| r.rss_bytes))
            .map(|(a, b)| a as f64 / b as f64),
        "MiB (this process, the workload's data included; redis-server)",
    );

    // 6. Full recompute.
    let rc = &p.recompute;
    let per_s = |d: Duration| rc.events as f64 / d.as_secs_f64();
    row(
        "6. full recompute from raw events (strategy change)",
        Cell::int(per_s(rc.elapsed)),
        Cell::int(per_s(rc.raw_elapsed)),
        Some(rc.raw_elapsed.as_secs_f64() / rc.elapsed.as_secs_f64()),
        &format!(
            "events/s (raw RocksDB iterating all {} keys of the store in the same time)",
            rate(rc.raw_keys as f64)
        ),
    );

    match redis {
        None => table.note(
            "Redis reference skipped: no redis-server on PATH; run `scripts/redis-server.sh` or \
             pass --redis-server \"$(scripts/redis-server.sh)\"",
        ),
        Some(Err(e)) => table.note(format!("Redis reference failed: {e:#}")),
        Some(Ok(_)) => {}
    }
    table
}

// ---------------------------------------------------------------------------------------------
// Penchant.

pub(crate) fn profile_path(user: u32) -> String {
    format!("/1/profiles/personalization/{}", user_token(user))
}

/// Every Penchant row, on a store in `dir`: the catalog and strategy first, then (1) and (2)
/// together, the reads right after them (4), (5), the wait for compactions and the reads at
/// rest (4), (6), and (3) last (its heavy users would count in the bytes per user).
async fn penchant_rows(
    plan: &Plan,
    work: &Arc<Workload>,
    dir: &Path,
) -> anyhow::Result<PenchantRows> {
    let options = RocksOptions {
        sync_writes: !plan.no_sync,
        ..RocksOptions::default()
    };
    let store: Arc<dyn Store> = Arc::new(RocksStore::open(dir, options)?);
    let client = Arc::new(InProcess::start(store.clone(), APP).await?);
    setup(&client, work, "ingest", true).await?;

    let (ingest, under_load) = ingest(&client, work, plan.clients).await?;
    // Reads right after the load, while RocksDB still flushes and compacts: what a client sees
    // when it reads before any settling wait.
    let progress = spinner(format!(
        "ingest: Penchant profile reads right after the ingestion, {AFTER_CONNECTIONS} \
         connections, {} s",
        plan.read_for.as_secs()
    ));
    let after = read_profiles(&client, work.users, AFTER_CONNECTIONS, plan.read_for).await?;
    drop(progress);

    store.flush().await?;
    let disk = disk_use(dir)?;
    let rss_bytes = rss_bytes("self");
    // Reads are measured at rest: after a large load RocksDB compacts for a while, and its
    // compactions would take the cores the reads are measured on.
    let progress = spinner("ingest: waiting for compactions to finish");
    let settled = settle(store.as_ref()).await;
    drop(progress);

    // Every light user has a profile; a sample of them, for their size.
    let mut profiles = Vec::new();
    let step = (work.users / PROFILE_SAMPLE).max(1);
    for user in (0..work.users).step_by(step).take(PROFILE_SAMPLE) {
        profiles.push(client.get(&profile_path(user as u32)).await?.to_vec());
    }

    let mut reads = Vec::new();
    for connections in READ_CONNECTIONS {
        let progress = spinner(format!(
            "ingest: Penchant profile reads, {connections} connections, {} s",
            plan.read_for.as_secs()
        ));
        reads.push((
            connections,
            read_profiles(&client, work.users, connections, plan.read_for).await?,
        ));
        drop(progress);
    }

    let progress = spinner("ingest: full recompute from raw events");
    let recompute = recompute(&client, dir).await?;
    drop(progress);

    let mut heavy = Vec::new();
    for &history in plan.heavy_histories {
        let progress = bar(
            format!(
                "ingest: heavy user with {} events of today, then single pushes",
                rate(history as f64)
            ),
            (history + plan.heavy_pushes) as u64,
        );
        heavy.push((
            history,
            heavy_user(&client, work, history, plan.heavy_pushes, true, &progress).await?,
        ));
    }
    let progress = bar(
        "ingest: a new user's single pushes without a timestamp",
        plan.heavy_pushes as u64,
    );
    let unstamped = heavy_user(&client, work, 0, plan.heavy_pushes, false, &progress).await?;
    drop(progress);

    Ok(PenchantRows {
        ingest,
        under_load,
        heavy,
        unstamped,
        reads,
        after,
        disk,
        rss_bytes,
        recompute,
        settled,
        profiles,
    })
}

/// The catalog (every item with its facets, in batches; unless `catalog` is false) and the
/// strategy, through the API; `suite` labels the spinner.
pub(crate) async fn setup(
    client: &InProcess,
    work: &Workload,
    suite: &str,
    catalog: bool,
) -> anyhow::Result<()> {
    let progress = spinner(format!(
        "{suite}: indexing {} items",
        rate(work.items.len() as f64)
    ));
    let items = if catalog { &work.items[..] } else { &[] };
    for chunk in items.chunks(BATCH) {
        let requests: Vec<_> = chunk
            .iter()
            .map(|item| {
                let mut body = json!({"objectID": item.id});
                for ((name, _), value) in FACETS.iter().zip(&item.facets) {
                    body[*name] = json!(value);
                }
                json!({"action": "addObject", "body": body})
            })
            .collect();
        client
            .post::<IgnoredAny>(
                &format!("/1/indexes/{INDEX}/batch"),
                &json!({ "requests": requests }),
            )
            .await?;
    }
    client
        .post::<IgnoredAny>("/1/strategies/personalization", &strategy())
        .await?;
    drop(progress);
    Ok(())
}

/// The longest the reads wait for compactions after the load.
const SETTLE_AT_MOST: Duration = Duration::from_secs(300);

/// Wait until the store runs no compaction and has none pending (or [`SETTLE_AT_MOST`]);
/// how long that took.
pub(crate) async fn settle(store: &dyn Store) -> Duration {
    let start = Instant::now();
    let gauge = |gauges: &[penchant_store::Gauge], name: &str| {
        gauges
            .iter()
            .find(|g| g.name == name)
            .map_or(0.0, |g| g.value)
    };
    while start.elapsed() < SETTLE_AT_MOST {
        let gauges = store.gauges();
        if gauge(&gauges, "rocksdb_running_compactions") == 0.0
            && gauge(&gauges, "rocksdb_pending_compaction_bytes") == 0.0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    start.elapsed()
}

/// (6): the strategy changes (conversions weigh more), and every profile is recomputed from
/// the raw events, as the job a strategy change starts does; then raw RocksDB, opened
/// read-only beside the store, iterates every key of its data family (events, aggregates,
/// profiles, seen filters: more than the recompute reads).
async fn recompute(client: &InProcess, dir: &Path) -> anyhow::Result<Recompute> {
    let mut changed = strategy();
    changed["eventsScoring"][1]["score"] = json!(80);
    let engine = &client.engine;
    let versioned = engine
        .strategies()
        .set(APP, serde_json::from_value(changed)?)
        .await?;
    let parallelism = penchant_engine::EngineConfig::serving().recompute_parallelism;
    let start = Instant::now();
    let stats = engine
        .recomputes()
        .recompute_now(APP, &versioned, Source::Raw, parallelism)
        .await?;
    let elapsed = start.elapsed();
    client.engine.store().flush().await?;
    let dir = dir.to_owned();
    let (raw_keys, raw_elapsed) = tokio::task::spawn_blocking(move || {
        let db = rocksdb::DB::open_cf_for_read_only(
            &rocksdb::Options::default(),
            &dir,
            ["data", "meta"],
            false,
        )?;
        let cf = db
            .cf_handle("data")
            .context("the store has no `data` family")?;
        let start = Instant::now();
        let mut it = db.raw_iterator_cf(cf);
        it.seek_to_first();
        let mut keys = 0u64;
        while let Some(value) = it.value() {
            std::hint::black_box(value);
            keys += 1;
            it.next();
        }
        it.status()?;
        anyhow::Ok((keys, start.elapsed()))
    })
    .await??;
    Ok(Recompute {
        events: stats.events,
        elapsed,
        raw_keys,
        raw_elapsed,
    })
}

/// (1) and (2): every light user's events in batches from `clients` tasks, while one more
/// task pushes single events for random users until they are done. The ingestion's rate and
/// batch latencies, and the single pushes' latencies.
async fn ingest(
    client: &Arc<InProcess>,
    work: &Arc<Workload>,
    clients: usize,
) -> anyhow::Result<(Timed, Histogram<u64>)> {
    let next = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicBool::new(false));
    let progress = bar(
        "ingest: Penchant ingesting events over HTTP",
        work.events.len() as u64,
    );

    let probe = {
        let (client, work, finished) = (client.clone(), work.clone(), finished.clone());
        tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(2);
            let mut hist = histogram();
            while !finished.load(Ordering::Relaxed) {
                let user = rng.random_range(0..work.users as u32);
                let item = work.random_item(&mut rng);
                let event = insights_event(user_token(user), item, false, now_ms());
                let body = Batch {
                    events: vec![event],
                };
                let t = Instant::now();
                client.post::<IgnoredAny>("/1/events", &body).await?;
                hist.record(t.elapsed().as_micros() as u64)?;
            }
            anyhow::Ok(hist)
        })
    };

    let start = Instant::now();
    let batches = work.batches();
    let senders: Vec<_> = (0..clients)
        .map(|_| {
            let (client, work) = (client.clone(), work.clone());
            let (next, progress) = (next.clone(), progress.clone());
            tokio::spawn(async move {
                let mut hist = histogram();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= batches {
                        return anyhow::Ok(hist);
                    }
                    let body = Batch {
                        events: work.batch(i).iter().map(|e| work.insights(e)).collect(),
                    };
                    let t = Instant::now();
                    client.post::<IgnoredAny>("/1/events", &body).await?;
                    hist.record(t.elapsed().as_micros() as u64)?;
                    progress.inc(body.events.len() as u64);
                }
            })
        })
        .collect();
    let mut latency = histogram();
    let mut failed = None;
    for sender in senders {
        match sender.await? {
            Ok(hist) => latency.add(&hist)?,
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    let elapsed = start.elapsed();
    finished.store(true, Ordering::Relaxed);
    let under_load = probe.await??;
    if let Some(e) = failed {
        return Err(e.context("ingestion"));
    }
    Ok((
        Timed {
            per_s: work.events.len() as f64 / elapsed.as_secs_f64(),
            latency,
        },
        under_load,
    ))
}

/// (4): `GET /1/profiles/personalization/{user}` for random light users from `connections`
/// threads, each on its own keep-alive connection with a client as thin as the Redis
/// reference's, for `read_for`.
async fn read_profiles(
    client: &Arc<InProcess>,
    users: usize,
    connections: usize,
    read_for: Duration,
) -> anyhow::Result<Timed> {
    let client = client.clone();
    tokio::task::spawn_blocking(move || {
        let until = Until::Deadline(Instant::now() + read_for);
        let path = |rng: &mut StdRng| profile_path(rng.random_range(0..users as u32));
        Ok(read_loop(&client, connections, until, 100, &path)?.timed())
    })
    .await?
}

/// (3): a new user with `history` events of today (random items, one in five a conversion, in
/// batches), then `pushes` single views pushed for them one after the other, with their
/// `timestamps` or without (the server stamps them, and remembers each one's arrival for
/// retries); their latencies.
async fn heavy_user(
    client: &InProcess,
    work: &Workload,
    history: usize,
    pushes: usize,
    timestamps: bool,
    progress: &ProgressBar,
) -> anyhow::Result<Histogram<u64>> {
    let mut rng = StdRng::seed_from_u64(history as u64);
    let user = match timestamps {
        true => format!("heavy{history}"),
        false => format!("unstamped{history}"),
    };
    let now = now_ms();
    let today = now - now.rem_euclid(DAY_MS);
    let mut left = history;
    while left > 0 {
        let n = left.min(BATCH);
        let events = (0..n)
            .map(|i| {
                let item = work.random_item(&mut rng);
                let timestamp = rng.random_range(today..=now);
                insights_event(user.clone(), item, i % 5 == 0, timestamp)
            })
            .collect();
        client
            .post::<IgnoredAny>("/1/events", &Batch { events })
            .await?;
        left -= n;
        progress.inc(n as u64);
    }
    let mut hist = histogram();
    for _ in 0..pushes {
        let item = work.random_item(&mut rng);
        let mut event = insights_event(user.clone(), item, false, now_ms());
        if !timestamps {
            event.timestamp = None;
        }
        let body = Batch {
            events: vec![event],
        };
        let t = Instant::now();
        client.post::<IgnoredAny>("/1/events", &body).await?;
        hist.record(t.elapsed().as_micros() as u64)?;
        progress.inc(1);
    }
    let profile = client
        .get(&format!("/1/profiles/personalization/{user}"))
        .await?;
    anyhow::ensure!(
        profile.len() > 2,
        "heavy user {user}: empty profile after {history} events"
    );
    Ok(hist)
}

// ---------------------------------------------------------------------------------------------
// The Redis reference.

/// Every Redis row against a `redis-server` child with its AOF fsynced on every write: the
/// ingestion, its memory and AOF size, then the profile reads of values as big as Penchant's
/// `profiles`.
fn redis_rows(
    path: &Path,
    plan: &Plan,
    work: &Workload,
    profiles: &[Vec<u8>],
) -> anyhow::Result<RedisRows> {
    anyhow::ensure!(!profiles.is_empty(), "no Penchant profile to size Redis's");
    let server = RedisServer::start(path, Persistence::AofAlways, plan.dir.as_deref())?;

    let ingest = redis_ingest(
        &server,
        work,
        0..work.batches(),
        plan.clients,
        None,
        "ingest: Redis ingesting events",
    )?;
    let aof_bytes = disk_use(server.dir())?.total
        - std::fs::metadata(server.dir().join("redis.log")).map_or(0, |m| m.len());
    let rss_bytes = redis_rss(&server)?;

    // One profile JSON per sampled user, Penchant's sampled bodies in turn.
    let sample: Vec<u32> = (0..work.users.min(REDIS_PROFILES) as u32).collect();
    redis_set_profiles(&server, &sample, profiles)?;

    let mut reads = Vec::new();
    for connections in READ_CONNECTIONS {
        let progress = spinner(format!(
            "ingest: Redis profile reads, {connections} connections, {} s",
            plan.read_for.as_secs()
        ));
        reads.push((
            connections,
            redis_reads(
                &server,
                RedisRead::Profiles(&sample),
                connections,
                Until::Deadline(Instant::now() + plan.read_for),
            )?,
        ));
        drop(progress);
    }
    Ok(RedisRows {
        ingest,
        aof_bytes,
        rss_bytes,
        reads,
    })
}

/// The reference for (1): the batches of `batches` from `clients` connections, each one
/// pipeline of `HINCRBY profile:{user} {facet}:{value} {weight}` per (event, facet) and `RPUSH
/// events:{user} <event JSON>` per event, at most at `pace` events per second when given (the
/// `mixed` suite's). Events per second.
pub(crate) fn redis_ingest(
    server: &RedisServer,
    work: &Workload,
    batches: Range<usize>,
    clients: usize,
    pace: Option<f64>,
    label: &'static str,
) -> anyhow::Result<f64> {
    let events: usize = batches.clone().map(|i| work.batch(i).len()).sum();
    let progress = bar(label, events as u64);
    let next = AtomicUsize::new(batches.start);
    let pace = pace.map(|per_s| Pace::new(per_s, batches.start));
    let start = Instant::now();
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..clients)
            .map(|_| {
                let (next, progress, end) = (&next, &progress, batches.end);
                scope.spawn(move || -> anyhow::Result<()> {
                    let mut conn = server.connect()?;
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= end {
                            return Ok(());
                        }
                        if let Some(pace) = &pace {
                            pace.wait(i);
                        }
                        let (buf, commands) = redis_batch(work, work.batch(i))?;
                        conn.pipeline(&buf, commands, |reply| match reply {
                            Reply::Integer(_) => Ok(()),
                            other => bail!("HINCRBY/RPUSH: unexpected reply {other:?}"),
                        })?;
                        progress.inc(work.batch(i).len() as u64);
                    }
                })
            })
            .collect();
        threads
            .into_iter()
            .try_for_each(|t| t.join().expect("a Redis client thread panicked"))
    })?;
    Ok(events as f64 / start.elapsed().as_secs_f64())
}

/// A profile JSON for each of `users` (`SET profile-json:{user}`), `profiles`' bodies in turn,
/// for the reference's profile reads.
pub(crate) fn redis_set_profiles(
    server: &RedisServer,
    users: &[u32],
    profiles: &[Vec<u8>],
) -> anyhow::Result<()> {
    anyhow::ensure!(!profiles.is_empty(), "no Penchant profile to size Redis's");
    let mut conn = server.connect()?;
    for (n, chunk) in users.chunks(BATCH).enumerate() {
        let mut buf = Vec::new();
        for (i, &user) in chunk.iter().enumerate() {
            let key = format!("profile-json:{}", user_token(user));
            let profile = &profiles[(n * BATCH + i) % profiles.len()];
            encode_command(&mut buf, &[b"SET", key.as_bytes(), profile]);
        }
        conn.pipeline(&buf, chunk.len(), |reply| match reply {
            Reply::Simple(ok) if ok == "OK" => Ok(()),
            other => bail!("SET: unexpected reply {other:?}"),
        })?;
    }
    Ok(())
}

/// One batch as Redis commands: the encoded pipeline and its number of commands.
fn redis_batch(work: &Workload, events: &[LightEvent]) -> anyhow::Result<(Vec<u8>, usize)> {
    let mut buf = Vec::with_capacity(events.len() * 400);
    let mut commands = 0;
    for e in events {
        let item = &work.items[e.item as usize];
        let profile = format!("profile:{}", user_token(e.user));
        let weight = if e.conversion { CONVERSION.2 } else { VIEW.2 }.to_string();
        for ((name, _), value) in FACETS.iter().zip(&item.facets) {
            let field = format!("{name}:{value}");
            encode_command(
                &mut buf,
                &[
                    b"HINCRBY",
                    profile.as_bytes(),
                    field.as_bytes(),
                    weight.as_bytes(),
                ],
            );
            commands += 1;
        }
        let log = format!("events:{}", user_token(e.user));
        let json = serde_json::to_vec(&work.insights(e))?;
        encode_command(&mut buf, &[b"RPUSH", log.as_bytes(), &json]);
        commands += 1;
    }
    Ok((buf, commands))
}

/// `redis-server`'s resident memory, from `INFO memory`.
pub(crate) fn redis_rss(server: &RedisServer) -> anyhow::Result<Option<u64>> {
    let info = match server.connect()?.command(&[b"INFO", b"memory"])? {
        Reply::Bulk(Some(info)) => String::from_utf8_lossy(&info).into_owned(),
        other => bail!("INFO memory: unexpected reply {other:?}"),
    };
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory_rss:"))
        .and_then(|n| n.trim().parse().ok()))
}

/// What the reference's readers ask Redis.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RedisRead<'a> {
    /// `GET profile-json:{user}` of random users among these ([`redis_set_profiles`]).
    Profiles(&'a [u32]),
    /// `PING`: the protocol's floor.
    Ping,
}

/// The reference for (4): `read` from `connections` threads, each on its own connection,
/// until `until`.
pub(crate) fn redis_reads(
    server: &RedisServer,
    read: RedisRead<'_>,
    connections: usize,
    until: Until<'_>,
) -> anyhow::Result<Timed> {
    let start = Instant::now();
    let latency = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..connections)
            .map(|task| {
                scope.spawn(move || -> anyhow::Result<Histogram<u64>> {
                    let mut conn = server.connect()?;
                    let mut rng = StdRng::seed_from_u64(200 + task as u64);
                    let mut hist = histogram();
                    while until.going() {
                        let t = match read {
                            RedisRead::Profiles(users) => {
                                let user = users[rng.random_range(0..users.len())];
                                let key = format!("profile-json:{}", user_token(user));
                                let t = Instant::now();
                                match conn.command(&[b"GET", key.as_bytes()])? {
                                    Reply::Bulk(Some(value)) => {
                                        std::hint::black_box(value);
                                    }
                                    other => bail!("GET {key}: unexpected reply {other:?}"),
                                }
                                t
                            }
                            RedisRead::Ping => {
                                let t = Instant::now();
                                match conn.command(&[b"PING"])? {
                                    Reply::Simple(pong) if pong == "PONG" => {}
                                    other => bail!("PING: unexpected reply {other:?}"),
                                }
                                t
                            }
                        };
                        hist.record(t.elapsed().as_micros() as u64)?;
                    }
                    Ok(hist)
                })
            })
            .collect();
        let mut latency = histogram();
        for t in threads {
            latency.add(&t.join().expect("a Redis client thread panicked")?)?;
        }
        anyhow::Ok(latency)
    })?;
    Ok(Timed {
        per_s: latency.len() as f64 / start.elapsed().as_secs_f64(),
        latency,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_gives_every_user_a_view_and_a_conversion() {
        let work = Workload::generate(1_500);
        assert_eq!(work.events.len(), 3_000);
        assert_eq!(work.batches(), 3);
        assert_eq!(work.batch(2).len(), 1_000);
        let mut per_user = vec![(0, 0); 1_500];
        for e in &work.events {
            let counts = &mut per_user[e.user as usize];
            if e.conversion {
                counts.1 += 1;
            } else {
                counts.0 += 1;
            }
        }
        assert!(per_user.iter().all(|c| *c == (1, 1)));
        // Shuffled: the first batch is not the first 500 users.
        assert!(work.batch(0).iter().any(|e| e.user >= 500));
    }

    #[test]
    fn a_redis_batch_has_three_hincrby_and_one_rpush_per_event() {
        let work = Workload::generate(10);
        let (buf, commands) = redis_batch(&work, work.batch(0)).unwrap();
        assert_eq!(commands, 20 * 4);
        let text = String::from_utf8_lossy(&buf);
        assert_eq!(text.matches("HINCRBY").count(), 60);
        assert_eq!(text.matches("RPUSH").count(), 20);
    }
}
