//! `penchant bench mixed`: ingestion and profile reads at once, on the embedded store with
//! writes fsynced, beside Redis doing the equivalent work (`HINCRBY`/`RPUSH` writers, `GET`
//! readers) with its AOF fsynced, in the same run.
//!
//! The traffic is the `ingest` suite's light users ([`crate::ingest`]: a catalog of 10,000
//! items with three facets, a view and a conversion per user, shuffled, in batches of 1000),
//! 1,000,000 users at scale large. Penchant's server runs in this process on its own tokio
//! runtime; every client is a plain OS thread on a blocking keep-alive connection
//! ([`crate::http::RawHttp`]). The phases:
//!
//! 1. the catalog and the strategy;
//! 2. **max rate**: the first half of the batches at full speed from `--clients` writers, while
//!    a probe pushes a single event for a random user already sent every 5 ms (the push is
//!    answered once the user's profile is refreshed: event → profile visible);
//! 3. **mixed**: the second half paced at half the rate of (2) (a schedule shared by the
//!    writers: batch `i` goes out when the events before it are due), while `--readers`
//!    connections `GET /1/profiles/personalization/{user}` of random users of the first half;
//! 4. **right after**: reads for `--read-for` seconds as soon as the last batch is
//!    acknowledged, no waiting for RocksDB's flushes and compactions (the backlog they begin
//!    with is printed: RocksDB's estimate of the compaction bytes pending, the level-0 files);
//! 5. **settle**: the wait until RocksDB runs and owes no compaction;
//! 6. **idle**: reads again, then `GET /health` the same way (the HTTP floor: routing, auth-free
//!    JSON, one small store read); then bytes on disk per user after a flush, the process's
//!    resident memory, and single-event pushes one after the other with nothing else running
//!    (their store operations and CPU are taken out of (2)'s per-batch figures).
//!
//! Redis (a `redis-server` child, `appendfsync always`, started once Penchant's store is closed)
//! runs the same phases: (2) at full speed, (3) paced at the events per second Penchant was
//! paced at, with readers `GET`ting a profile JSON as big as Penchant's (set first for a sample
//! of the first half's users), (4) and (6), and `PING` beside `/health`.
//!
//! # Server CPU
//!
//! The server's CPU time over a phase is this process's (`/proc/self/stat`, user + system, every
//! thread including those that exited, to the 10 ms clock tick) minus the CPU time of the
//! bench's own client threads, each measured by the thread itself at its start and end
//! (`/proc/thread-self/schedstat`, to the nanosecond). The main thread only waits while a phase
//! runs. What is left is the server's: its tokio workers, blocking pool and RocksDB's
//! background flushes and compactions. It is printed per event and per `GET`, beside
//! `redis-server`'s CPU time (`/proc/{pid}/stat`) per operation.
//!
//! # Store operations
//!
//! The store is wrapped in a [`CountingStore`]: calls by kind, rows read, rows mutated and
//! mutations, per batch, per event and per `GET`. They are counted at the `Store` trait, so they
//! hold for any backend (on Bigtable, a call is one RPC).
//!
//! The scale sets the users (small 10,000, medium 200,000, large 1,000,000; `--users`
//! overrides it) and how long each read phase runs (1, 5, 5 s; `--read-for`). The goals the
//! table checks are stated for 1,000,000 users.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use penchant_store::Store;
use penchant_store_rocksdb::{RocksOptions, RocksStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::counting::{CountingStore, Ops, Tables, tables_since};
use crate::cpu::{pid_cpu, process_cpu, thread_cpu};
use crate::http::RawHttp;
use crate::ingest::{
    self, APP, BATCH, Batch, DiskUse, PROFILE_SAMPLE, REDIS_PROFILES, RedisRead, Timed, Workload,
    histogram, insights_event, ms, now_ms, profile_path, user_token,
};
use crate::redis::{Persistence, RedisServer, find_on_path};
use crate::report::{bar, spinner};
use crate::{Bench, Cell, CommonArgs, InProcess, Report, Scale, Table, rate};

/// `penchant-bench mixed`'s flags.
#[derive(Debug, clap::Args)]
pub struct MixedBenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Users, 2 events each [default by scale: small 10,000, medium 200,000, large 1,000,000].
    #[arg(long)]
    users: Option<usize>,
    /// Concurrent clients sending batches (HTTP for Penchant, connections for Redis).
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Concurrent connections reading profiles.
    #[arg(long, default_value_t = 8)]
    readers: usize,
    /// Seconds each read phase runs (right after the ingestion, idle, /health) [default by
    /// scale: small 1, medium and large 5].
    #[arg(long, value_name = "SECONDS")]
    read_for: Option<u64>,
    /// Acknowledge writes without fsync (Redis keeps `appendfsync always` either way).
    #[arg(long)]
    no_sync: bool,
    /// Run the server as one node of several on its store, as on Bigtable (no facets cached,
    /// aggregates read again after each refresh): the store operations a shared store sees.
    #[arg(long)]
    shared_store: bool,
    /// Send the events to a shop without a catalog (one whose catalog sync comes later): every
    /// event's items wait for their records (the late-catalog marks, one catalog read a batch).
    #[arg(long)]
    no_catalog: bool,
    /// The store's block cache, in MiB (`store.block_cache_mib`; default: the store's).
    #[arg(long, value_name = "MIB")]
    block_cache_mib: Option<usize>,
    /// The `redis-server` binary for the reference (default: `redis-server` on PATH;
    /// `scripts/redis-server.sh` installs one and prints its path).
    #[arg(long)]
    redis_server: Option<PathBuf>,
    /// Where the store's and Redis's temporary directories go (default: the system's
    /// temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
}

impl Bench for MixedBenchArgs {
    const NAME: &'static str = "mixed";

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
    readers: usize,
    read_for: Duration,
    no_sync: bool,
    shared_store: bool,
    no_catalog: bool,
    block_cache_mib: Option<usize>,
    dir: Option<PathBuf>,
}

impl Plan {
    fn of(args: &MixedBenchArgs) -> Self {
        let scale = args.common.scale;
        Self {
            scale,
            users: args.users.unwrap_or(scale.pick(10_000, 200_000, 1_000_000)),
            clients: args.clients,
            readers: args.readers,
            read_for: Duration::from_secs(args.read_for.unwrap_or(scale.pick(1, 5, 5))),
            no_sync: args.no_sync,
            shared_store: args.shared_store,
            no_catalog: args.no_catalog,
            block_cache_mib: args.block_cache_mib,
            dir: args.dir.clone(),
        }
    }
}

// The goals, for 1,000,000 users.
const GOAL_USERS: usize = 1_000_000;
const INGEST_GOAL: f64 = 50_000.0;
const VISIBLE_P99_GOAL_MS: f64 = 10.0;
const CPU_PER_EVENT_GOAL_US: f64 = 20.0;
const MIXED_READS_GOAL: f64 = 20_000.0;
const MIXED_P99_GOAL_MS: f64 = 5.0;
/// Reads right after the ingestion: within this factor of idle (rate and p99).
const AFTER_WITHIN: f64 = 2.0;
const IDLE_VS_REDIS_GOAL: f64 = 0.5;
const IDLE_P99_GOAL_MS: f64 = 1.0;
const CPU_PER_GET_GOAL_US: f64 = 15.0;
const RSS_GOAL_MIB: f64 = 512.0;

/// The probe pushes at most one event this often.
const PROBE_EVERY: Duration = Duration::from_millis(5);
/// Single-event pushes timed one after the other at the end, alone.
const PUSHES_ALONE: usize = 100;

// ---------------------------------------------------------------------------------------------
// Client threads: each measures its own CPU time.

/// Until when client threads go on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Until<'a> {
    Deadline(Instant),
    /// Until the flag is set.
    Set(&'a AtomicBool),
}

impl Until<'_> {
    pub(crate) fn going(&self) -> bool {
        match self {
            Until::Deadline(deadline) => Instant::now() < *deadline,
            Until::Set(flag) => !flag.load(Ordering::Relaxed),
        }
    }
}

/// What client threads did: their requests' latencies (microseconds), how long they ran, and
/// the CPU time they used themselves.
#[derive(Debug)]
pub(crate) struct Load {
    pub(crate) latency: Histogram<u64>,
    pub(crate) elapsed: Duration,
    pub(crate) cpu: Duration,
}

impl Load {
    pub(crate) fn per_s(&self) -> f64 {
        self.latency.len() as f64 / self.elapsed.as_secs_f64()
    }

    pub(crate) fn timed(self) -> Timed {
        Timed {
            per_s: self.per_s(),
            latency: self.latency,
        }
    }
}

/// A client thread's latencies and its own CPU time.
type Measured = anyhow::Result<(Histogram<u64>, Duration)>;

/// Run `body` on a thread of `scope`, measuring the thread's CPU time around it.
fn measured<'scope, F>(
    scope: &'scope Scope<'scope, '_>,
    body: F,
) -> ScopedJoinHandle<'scope, Measured>
where
    F: FnOnce() -> anyhow::Result<Histogram<u64>> + Send + 'scope,
{
    scope.spawn(move || {
        let cpu = thread_cpu();
        let latency = body()?;
        Ok((latency, thread_cpu().saturating_sub(cpu)))
    })
}

/// Join every thread: their latencies merged and their CPU times summed, or the first error.
fn gather(threads: Vec<ScopedJoinHandle<'_, Measured>>) -> Measured {
    let mut latency = histogram();
    let mut cpu = Duration::ZERO;
    let mut failed = None;
    for thread in threads {
        match thread.join().expect("a client thread panicked") {
            Ok((hist, used)) => {
                latency.add(&hist)?;
                cpu += used;
            }
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok((latency, cpu)),
    }
}

/// A user's request path, from a thread's random numbers.
type PathOf<'a> = &'a (dyn Fn(&mut StdRng) -> String + Sync);

/// `connections` threads of `scope`, each `GET`ting `path` on its own keep-alive connection
/// until `until` (thread `i` seeds its random numbers with `seed + i`).
fn spawn_readers<'scope, 'env>(
    scope: &'scope Scope<'scope, 'env>,
    client: &'env InProcess,
    connections: usize,
    until: Until<'env>,
    seed: u64,
    path: PathOf<'env>,
) -> Vec<ScopedJoinHandle<'scope, Measured>> {
    (0..connections)
        .map(|i| {
            measured(scope, move || {
                let mut conn = client.raw()?;
                let mut rng = StdRng::seed_from_u64(seed + i as u64);
                let mut hist = histogram();
                while until.going() {
                    let path = path(&mut rng);
                    let t = Instant::now();
                    std::hint::black_box(conn.get(&path)?);
                    hist.record(t.elapsed().as_micros() as u64)?;
                }
                Ok(hist)
            })
        })
        .collect()
}

/// `GET`s of `path` from `connections` threads until `until`: their [`Load`].
pub(crate) fn read_loop(
    client: &InProcess,
    connections: usize,
    until: Until<'_>,
    seed: u64,
    path: PathOf<'_>,
) -> anyhow::Result<Load> {
    let start = Instant::now();
    let (latency, cpu) = std::thread::scope(|scope| {
        gather(spawn_readers(scope, client, connections, until, seed, path))
    })?;
    Ok(Load {
        latency,
        elapsed: start.elapsed(),
        cpu,
    })
}

/// A schedule of batches at `per_s` events per second from `start`: the writers share it, so
/// that together they send at that rate whatever their number.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    start: Instant,
    per_s: f64,
    /// The schedule's first batch (due at `start`).
    first: usize,
}

impl Pace {
    /// A schedule starting now at batch `first`.
    pub(crate) fn new(per_s: f64, first: usize) -> Self {
        Self {
            start: Instant::now(),
            per_s,
            first,
        }
    }

    /// When batch `i` is due: once the events of the batches before it, at the rate.
    pub(crate) fn due(&self, i: usize) -> Instant {
        self.start + pace_offset(i.saturating_sub(self.first) * BATCH, self.per_s)
    }

    /// Sleep until batch `i` is due (not at all if it is late).
    pub(crate) fn wait(&self, i: usize) {
        let wait = self.due(i).saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

/// When `events_before` events are due at `per_s` events per second (no rate: at once).
fn pace_offset(events_before: usize, per_s: f64) -> Duration {
    if per_s.is_finite() && per_s > 0.0 {
        Duration::from_secs_f64(events_before as f64 / per_s)
    } else {
        Duration::ZERO
    }
}

/// The batches writers send, shared by them: the next batch to claim, the end, the schedule,
/// which batches are acknowledged.
struct Writes<'a> {
    work: &'a Workload,
    next: &'a AtomicUsize,
    end: usize,
    pace: Option<Pace>,
    done: &'a [AtomicBool],
    progress: &'a ProgressBar,
}

/// `clients` threads of `scope` sending `writes`' batches, each on its own connection; their
/// latencies are the batches'.
fn spawn_writers<'scope, 'env>(
    scope: &'scope Scope<'scope, 'env>,
    client: &'env InProcess,
    clients: usize,
    writes: &'env Writes<'env>,
) -> Vec<ScopedJoinHandle<'scope, Measured>> {
    (0..clients)
        .map(|_| {
            measured(scope, move || {
                let w = writes;
                let mut conn = client.raw()?;
                let mut hist = histogram();
                let mut body = Vec::new();
                loop {
                    let i = w.next.fetch_add(1, Ordering::Relaxed);
                    if i >= w.end {
                        return Ok(hist);
                    }
                    if let Some(pace) = &w.pace {
                        pace.wait(i);
                    }
                    let events = w.work.batch(i);
                    body.clear();
                    let batch = Batch {
                        events: events.iter().map(|e| w.work.insights(e)).collect(),
                    };
                    serde_json::to_writer(&mut body, &batch)?;
                    let t = Instant::now();
                    conn.post("/1/events", &body)?;
                    hist.record(t.elapsed().as_micros() as u64)?;
                    w.done[i].store(true, Ordering::Release);
                    w.progress.inc(events.len() as u64);
                }
            })
        })
        .collect()
}

/// A user of a random acknowledged batch among the first `claimed` (a few tries; `None` if
/// none of those tried is acknowledged yet).
fn sent_user(
    work: &Workload,
    done: &[AtomicBool],
    claimed: usize,
    rng: &mut impl Rng,
) -> Option<u32> {
    let claimed = claimed.min(done.len());
    if claimed == 0 {
        return None;
    }
    for _ in 0..32 {
        let i = rng.random_range(0..claimed);
        if done[i].load(Ordering::Acquire) {
            let events = work.batch(i);
            return Some(events[rng.random_range(0..events.len())].user);
        }
    }
    None
}

/// Push one view of a random item for `user`, alone in its batch; its latency (the answer
/// comes once the user's profile is refreshed).
fn push(
    conn: &mut RawHttp,
    work: &Workload,
    user: u32,
    rng: &mut StdRng,
) -> anyhow::Result<Duration> {
    let event = insights_event(user_token(user), work.random_item(rng), false, now_ms());
    let body = serde_json::to_vec(&Batch {
        events: vec![event],
    })?;
    let t = Instant::now();
    conn.post("/1/events", &body)?;
    Ok(t.elapsed())
}

/// (2)'s probe: a single event for a random user already sent, every [`PROBE_EVERY`], until
/// `until`; the pushes' latencies.
fn probe(
    client: &InProcess,
    work: &Workload,
    next: &AtomicUsize,
    done: &[AtomicBool],
    until: Until<'_>,
) -> anyhow::Result<Histogram<u64>> {
    let mut conn = client.raw()?;
    let mut rng = StdRng::seed_from_u64(2);
    let mut hist = histogram();
    while until.going() {
        let started = Instant::now();
        let claimed = next.load(Ordering::Relaxed);
        if let Some(user) = sent_user(work, done, claimed, &mut rng) {
            let latency = push(&mut conn, work, user, &mut rng)?;
            hist.record(latency.as_micros() as u64)?;
        }
        std::thread::sleep(PROBE_EVERY.saturating_sub(started.elapsed()));
    }
    Ok(hist)
}

// ---------------------------------------------------------------------------------------------
// Penchant.

/// The server's share of one phase: its CPU time (the process's less the clients'), the store
/// operations, how long it ran.
#[derive(Debug, Default)]
struct Phase {
    server_cpu: Option<Duration>,
    ops: Ops,
    /// The store operations by table.
    tables: Tables,
    elapsed: Duration,
}

impl Phase {
    /// Server CPU microseconds per unit of work.
    fn cpu_us(&self, per: f64) -> Option<f64> {
        self.server_cpu
            .filter(|_| per > 0.0)
            .map(|cpu| cpu.as_secs_f64() * 1e6 / per)
    }
}

/// Run a phase: `run` returns its result and its client threads' CPU time.
fn phase<T>(
    store: &CountingStore,
    run: impl FnOnce() -> anyhow::Result<(T, Duration)>,
) -> anyhow::Result<(T, Phase)> {
    let (cpu, ops, tables) = (process_cpu(), store.snapshot(), store.tables());
    let start = Instant::now();
    let (result, clients) = run()?;
    let elapsed = start.elapsed();
    let server_cpu = cpu
        .zip(process_cpu())
        .map(|(before, after)| after.saturating_sub(before).saturating_sub(clients));
    let phase = Phase {
        server_cpu,
        ops: store.snapshot().since(&ops),
        tables: tables_since(&store.tables(), &tables, 1.0),
        elapsed,
    };
    Ok((result, phase))
}

/// Reads (or `/health`s) and the server's share of them.
#[derive(Debug)]
struct Reads {
    load: Load,
    phase: Phase,
}

impl Reads {
    fn requests(&self) -> f64 {
        self.load.latency.len() as f64
    }
}

/// Penchant's figures.
struct PenchantRows {
    /// (2): batches sent, their events, the rate, batch latencies, the probe's latencies.
    max_batches: usize,
    max_events: usize,
    max_per_s: f64,
    max_latency: Histogram<u64>,
    probe: Histogram<u64>,
    max: Phase,
    /// (3): the rate paced at and reached, the events, the reads beside them.
    paced_target: f64,
    paced_per_s: f64,
    paced_batches: usize,
    paced_events: usize,
    paced_reads: Load,
    paced: Phase,
    after: Reads,
    /// The store's compaction backlog as (4) began: SST files in level 0, bytes pending.
    backlog: (f64, f64),
    settled: Duration,
    idle: Reads,
    health: Reads,
    /// Single-event pushes alone, at the end.
    alone: Reads,
    disk: DiskUse,
    rss_bytes: Option<u64>,
    peak_rss_bytes: Option<u64>,
    /// Sampled profile bodies, for Redis's values.
    profiles: Vec<Vec<u8>>,
}

impl PenchantRows {
    /// The store operations and server CPU of one single-event push, measured alone.
    fn per_push(&self) -> (Ops, Option<Duration>) {
        let n = self.alone.requests();
        let cpu = self
            .alone
            .phase
            .cpu_us(n)
            .map(|us| Duration::from_secs_f64(us / 1e6));
        (self.alone.phase.ops.per(n), cpu)
    }

    /// (2)'s store operations of the batches alone: the probe's pushes taken out at their cost
    /// alone.
    fn max_batch_ops(&self) -> Ops {
        let (push, _) = self.per_push();
        self.max.ops.minus(&push, self.probe.len() as f64)
    }

    /// (2)'s server CPU microseconds per event of the batches, the probe's pushes taken out at
    /// their cost alone.
    fn max_batch_cpu_us(&self) -> Option<f64> {
        let (_, push) = self.per_push();
        let cpu = self.max.server_cpu?;
        let probe = push? * self.probe.len() as u32;
        Some(cpu.saturating_sub(probe).as_secs_f64() * 1e6 / self.max_events as f64)
    }
}

/// The users with an event among the first `batches` batches, each once, in order of their
/// first event.
fn users_of_batches(work: &Workload, batches: usize) -> Vec<u32> {
    let mut seen = vec![false; work.users];
    let end = (batches * BATCH).min(work.events.len());
    let mut users = Vec::new();
    for e in &work.events[..end] {
        if !std::mem::replace(&mut seen[e.user as usize], true) {
            users.push(e.user);
        }
    }
    users
}

/// Events in batches `range`.
fn events_in(work: &Workload, range: std::ops::Range<usize>) -> usize {
    range.map(|i| work.batch(i).len()).sum()
}

/// Every Penchant phase on a store in `dir`, the server on its own runtime.
fn penchant_rows(
    plan: &Plan,
    work: &Workload,
    first_half: &[u32],
    dir: &Path,
) -> anyhow::Result<PenchantRows> {
    let options = RocksOptions {
        sync_writes: !plan.no_sync,
        block_cache_bytes: plan
            .block_cache_mib
            .map_or(RocksOptions::default().block_cache_bytes, |mib| mib << 20),
        ..RocksOptions::default()
    };
    let store = Arc::new(CountingStore::new(Arc::new(RocksStore::open(
        dir, options,
    )?)));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let client = runtime.block_on(async {
        let client = InProcess::start_node(store.clone(), APP, !plan.shared_store).await?;
        ingest::setup(&client, work, "mixed", !plan.no_catalog).await?;
        anyhow::Ok(client)
    })?;
    let rows = phases(plan, work, first_half, &client, &store, &runtime, dir);
    // The server and the store's background work stop with the runtime.
    drop(client);
    drop(runtime);
    rows
}

/// Phases (2) to (6) against the server `client` talks to.
fn phases(
    plan: &Plan,
    work: &Workload,
    first_half: &[u32],
    client: &InProcess,
    store: &CountingStore,
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
) -> anyhow::Result<PenchantRows> {
    let batches = work.batches();
    let half = batches / 2;
    let done: Vec<AtomicBool> = (0..batches).map(|_| AtomicBool::new(false)).collect();
    let next = AtomicUsize::new(0);

    // (2) Max rate, and the probe.
    let max_events = events_in(work, 0..half);
    let progress = bar(
        "mixed: Penchant ingesting the first half at full speed",
        max_events as u64,
    );
    let finished = AtomicBool::new(false);
    let writes = Writes {
        work,
        next: &next,
        end: half,
        pace: None,
        done: &done,
        progress: &progress,
    };
    let ((max_latency, probe_latency, max_elapsed), max) = phase(store, || {
        std::thread::scope(|scope| {
            let start = Instant::now();
            let writers = spawn_writers(scope, client, plan.clients, &writes);
            let probe = measured(scope, || {
                probe(client, work, &next, &done, Until::Set(&finished))
            });
            let written = gather(writers);
            let elapsed = start.elapsed();
            finished.store(true, Ordering::Relaxed);
            let probed = gather(vec![probe]);
            let ((batches, w), (probes, p)) = (written?, probed?);
            Ok(((batches, probes, elapsed), w + p))
        })
    })
    .context("Penchant: the ingestion at max rate")?;
    drop(progress);
    let max_per_s = max_events as f64 / max_elapsed.as_secs_f64();

    // (3) The second half at half that rate, and reads of the first half's users.
    let paced_target = max_per_s / 2.0;
    let paced_events = events_in(work, half..batches);
    let progress = bar(
        format!(
            "mixed: Penchant ingesting the second half at {} events/s, with reads",
            rate(paced_target)
        ),
        paced_events as u64,
    );
    // Each writer of (2) claimed one batch past the end before it stopped.
    next.store(half, Ordering::Relaxed);
    let finished = AtomicBool::new(false);
    let writes = Writes {
        work,
        next: &next,
        end: batches,
        pace: Some(Pace::new(paced_target, half)),
        done: &done,
        progress: &progress,
    };
    let first_path =
        |rng: &mut StdRng| profile_path(first_half[rng.random_range(0..first_half.len())]);
    let ((paced_elapsed, paced_reads), paced) = phase(store, || {
        std::thread::scope(|scope| {
            let start = Instant::now();
            let writers = spawn_writers(scope, client, plan.clients, &writes);
            let until = Until::Set(&finished);
            let readers = spawn_readers(scope, client, plan.readers, until, 300, &first_path);
            let written = gather(writers);
            let elapsed = start.elapsed();
            finished.store(true, Ordering::Relaxed);
            let read = gather(readers);
            let read_elapsed = start.elapsed();
            let ((_, w), (latency, r)) = (written?, read?);
            let reads = Load {
                latency,
                elapsed: read_elapsed,
                cpu: r,
            };
            Ok(((elapsed, reads), w + r))
        })
    })
    .context("Penchant: the paced ingestion beside reads")?;
    drop(progress);

    // (4) Right after: no waiting.
    let any_path = |rng: &mut StdRng| profile_path(rng.random_range(0..work.users as u32));
    let reads = |label: &str, seed: u64, path: PathOf<'_>| -> anyhow::Result<Reads> {
        let progress = spinner(format!(
            "mixed: Penchant {label}, {} connections, {} s",
            plan.readers,
            plan.read_for.as_secs()
        ));
        let until = Until::Deadline(Instant::now() + plan.read_for);
        let (load, phase) = phase(store, || {
            let load = read_loop(client, plan.readers, until, seed, path)?;
            let cpu = load.cpu;
            Ok((load, cpu))
        })
        .with_context(|| format!("Penchant: {label}"))?;
        drop(progress);
        Ok(Reads { load, phase })
    };
    let backlog = {
        let gauges = store.gauges();
        let gauge = |name| {
            gauges
                .iter()
                .find(|g| g.name == name)
                .map_or(0.0, |g| g.value)
        };
        (
            gauge("rocksdb_l0_files"),
            gauge("rocksdb_pending_compaction_bytes"),
        )
    };
    let after = reads("profile reads right after the ingestion", 400, &any_path)?;

    // (5) Settle.
    let progress = spinner("mixed: waiting for compactions to finish");
    let settled = runtime.block_on(ingest::settle(store));
    drop(progress);

    // (6) Idle, and the HTTP floor.
    let idle = reads("profile reads at rest", 500, &any_path)?;
    let health = reads("GET /health", 600, &|_: &mut StdRng| "/health".to_owned())?;

    runtime.block_on(store.flush())?;
    let disk = ingest::disk_use(dir)?;
    let rss_bytes = ingest::rss_bytes("self");
    let peak_rss_bytes = ingest::status_bytes("self", "VmHWM:");

    // Single pushes alone, for their cost per push (taken out of (2)'s batches).
    let (alone, alone_phase) = phase(store, || {
        let start = Instant::now();
        let (latency, cpu) = std::thread::scope(|scope| {
            gather(vec![measured(scope, || {
                let mut conn = client.raw()?;
                let mut rng = StdRng::seed_from_u64(3);
                let mut hist = histogram();
                for _ in 0..PUSHES_ALONE {
                    let user = rng.random_range(0..work.users as u32);
                    let latency = push(&mut conn, work, user, &mut rng)?;
                    hist.record(latency.as_micros() as u64)?;
                }
                Ok(hist)
            })])
        })?;
        let elapsed = start.elapsed();
        Ok((
            Load {
                latency,
                elapsed,
                cpu,
            },
            cpu,
        ))
    })
    .context("Penchant: single-event pushes alone")?;

    // A sample of profiles, for Redis's values.
    let mut conn = client.raw()?;
    let step = (work.users / PROFILE_SAMPLE).max(1);
    let mut profiles = Vec::new();
    for user in (0..work.users).step_by(step).take(PROFILE_SAMPLE) {
        profiles.push(conn.get(&profile_path(user as u32))?.to_vec());
    }

    Ok(PenchantRows {
        max_batches: half,
        max_events,
        max_per_s,
        max_latency,
        probe: probe_latency,
        max,
        paced_target,
        paced_per_s: paced_events as f64 / paced_elapsed.as_secs_f64(),
        paced_batches: batches - half,
        paced_events,
        paced_reads,
        paced,
        after,
        backlog,
        settled,
        idle,
        health,
        alone: Reads {
            load: alone,
            phase: alone_phase,
        },
        disk,
        rss_bytes,
        peak_rss_bytes,
        profiles,
    })
}

// ---------------------------------------------------------------------------------------------
// Redis.

/// Redis's figures; CPU times are `redis-server`'s.
struct RedisRows {
    max_per_s: f64,
    max_cpu: Option<Duration>,
    paced_per_s: f64,
    paced_reads: Timed,
    paced_cpu: Option<Duration>,
    after: (Timed, Option<Duration>),
    idle: (Timed, Option<Duration>),
    ping: (Timed, Option<Duration>),
    rss_bytes: Option<u64>,
}

/// Run `f`, and the CPU time `redis-server` used meanwhile.
fn with_cpu<T>(
    server: &RedisServer,
    f: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<(T, Option<Duration>)> {
    let pid = server.pid().to_string();
    let before = pid_cpu(&pid);
    let result = f()?;
    let cpu = before
        .zip(pid_cpu(&pid))
        .map(|(before, after)| after.saturating_sub(before));
    Ok((result, cpu))
}

/// Redis's phases against a `redis-server` child with its AOF fsynced on every write: profile
/// JSONs set for `sample` first, (2) at full speed, (3) paced at `paced_per_s` with readers,
/// (4), (6) and `PING`.
fn redis_rows(
    path: &Path,
    plan: &Plan,
    work: &Workload,
    sample: &[u32],
    paced_per_s: f64,
    profiles: &[Vec<u8>],
) -> anyhow::Result<RedisRows> {
    let server = RedisServer::start(path, Persistence::AofAlways, plan.dir.as_deref())?;
    ingest::redis_set_profiles(&server, sample, profiles)?;
    let batches = work.batches();
    let half = batches / 2;

    let (max_per_s, max_cpu) = with_cpu(&server, || {
        ingest::redis_ingest(
            &server,
            work,
            0..half,
            plan.clients,
            None,
            "mixed: Redis ingesting the first half at full speed",
        )
    })?;

    let finished = AtomicBool::new(false);
    let ((paced_per_s, paced_reads), paced_cpu) = with_cpu(&server, || {
        std::thread::scope(|scope| {
            let writers = scope.spawn(|| {
                let written = ingest::redis_ingest(
                    &server,
                    work,
                    half..batches,
                    plan.clients,
                    Some(paced_per_s),
                    "mixed: Redis ingesting the second half paced, with reads",
                );
                finished.store(true, Ordering::Relaxed);
                written
            });
            let read = ingest::redis_reads(
                &server,
                RedisRead::Profiles(sample),
                plan.readers,
                Until::Set(&finished),
            );
            let written = writers.join().expect("the Redis writers panicked");
            anyhow::Ok((written?, read?))
        })
    })?;

    let reads = |label: &str, read: RedisRead<'_>| {
        let progress = spinner(format!(
            "mixed: Redis {label}, {} connections, {} s",
            plan.readers,
            plan.read_for.as_secs()
        ));
        let until = Until::Deadline(Instant::now() + plan.read_for);
        let timed = with_cpu(&server, || {
            ingest::redis_reads(&server, read, plan.readers, until)
        });
        drop(progress);
        timed
    };
    let after = reads("profile reads right after", RedisRead::Profiles(sample))?;
    let idle = reads("profile reads at rest", RedisRead::Profiles(sample))?;
    let ping = reads("PING", RedisRead::Ping)?;
    let rss_bytes = ingest::redis_rss(&server)?;
    Ok(RedisRows {
        max_per_s,
        max_cpu,
        paced_per_s,
        paced_reads,
        paced_cpu,
        after,
        idle,
        ping,
        rss_bytes,
    })
}

// ---------------------------------------------------------------------------------------------
// The run and its tables.

fn run(args: MixedBenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let plan = Plan::of(&args);
    anyhow::ensure!(plan.clients > 0, "--clients must be at least 1");
    anyhow::ensure!(plan.readers > 0, "--readers must be at least 1");
    anyhow::ensure!(
        plan.users >= BATCH,
        "--users must be at least {BATCH} (two batches of {BATCH} events, one per half)"
    );
    let redis_path = args
        .redis_server
        .clone()
        .or_else(|| find_on_path("redis-server"));

    let progress = spinner(format!(
        "mixed: generating {} users' events",
        rate(plan.users as f64)
    ));
    let work = Workload::generate(plan.users);
    let first_half = users_of_batches(&work, work.batches() / 2);
    drop(progress);
    let dir = match &plan.dir {
        Some(parent) => tempfile::tempdir_in(parent)?,
        None => tempfile::tempdir()?,
    };
    let penchant = penchant_rows(&plan, &work, &first_half, dir.path())?;
    drop(dir);

    let sample = &first_half[..first_half.len().min(REDIS_PROFILES)];
    let redis = redis_path.as_deref().map(|path| {
        redis_rows(
            path,
            &plan,
            &work,
            sample,
            penchant.paced_target,
            &penchant.profiles,
        )
    });
    let workload_bytes = workload_bytes(&work, &first_half);
    report.table(table(
        &plan,
        &work,
        workload_bytes,
        sample.len(),
        &penchant,
        redis.as_ref(),
    ));
    report.table(store_table(&penchant));
    report.table(tables_table(&penchant));
    match redis {
        Some(Err(e)) => Err(e.context("the Redis reference")),
        _ => Ok(()),
    }
}

/// About how many bytes the bench's own data holds in this process (the events, the catalog,
/// the first half's users): counted in its resident memory, not the server's.
fn workload_bytes(work: &Workload, first_half: &[u32]) -> u64 {
    let events = work.events.capacity() * size_of::<ingest::LightEvent>();
    let items: usize = work
        .items
        .iter()
        .map(|i| {
            size_of::<ingest::Item>() + i.id.len() + i.facets.iter().map(String::len).sum::<usize>()
        })
        .sum();
    (events + items + size_of_val(first_half)) as u64
}

/// A goal beside a figure: its text, and whether the figure meets it.
struct Goal {
    text: String,
    met: Option<bool>,
}

impl Goal {
    fn none() -> Self {
        Self {
            text: String::new(),
            met: None,
        }
    }

    fn check(text: impl Into<String>, met: Option<bool>) -> Self {
        Self {
            text: text.into(),
            met,
        }
    }

    fn at_least(value: Option<f64>, bound: f64, text: impl Into<String>) -> Self {
        Self::check(text, value.map(|v| v >= bound))
    }

    fn at_most(value: Option<f64>, bound: f64, text: impl Into<String>) -> Self {
        Self::check(text, value.map(|v| v <= bound))
    }

    fn below(value: Option<f64>, bound: f64, text: impl Into<String>) -> Self {
        Self::check(text, value.map(|v| v < bound))
    }
}

/// CPU microseconds per operation.
fn us_per(cpu: Option<Duration>, ops: f64) -> Option<f64> {
    cpu.filter(|_| ops > 0.0)
        .map(|c| c.as_secs_f64() * 1e6 / ops)
}

/// The main table's rows: a figure, its goal, Redis's figure and their ratio.
struct Rows {
    table: Table,
}

/// How a figure is shown.
type Shown = fn(f64) -> Cell;

const INT: Shown = Cell::int;
const MILLIS: Shown = |x| Cell::fixed(x, 3);
const MICROS: Shown = |x| Cell::fixed(x, 1);
const FIXED0: Shown = |x| Cell::fixed(x, 0);

/// A latency quantile in milliseconds, if any was recorded.
fn quantile(hist: &Histogram<u64>, q: f64) -> Option<f64> {
    (!hist.is_empty()).then(|| ms(hist, q))
}

impl Rows {
    fn add(
        &mut self,
        name: &str,
        value: Option<f64>,
        shown: Shown,
        goal: Goal,
        reference: Option<f64>,
        unit: &str,
    ) {
        let ratio = value
            .zip(reference)
            .filter(|(_, r)| *r > 0.0)
            .map(|(v, r)| v / r);
        let met = match goal.met {
            Some(true) => "yes",
            Some(false) => "no",
            None => "",
        };
        self.table.row(vec![
            name.into(),
            Cell::or_empty(value, shown),
            goal.text.into(),
            met.into(),
            Cell::or_empty(reference, shown),
            Cell::or_empty(ratio, |x| Cell::times(x, 2)),
            unit.into(),
        ]);
    }

    /// Two rows, `{what} p50` (its unit `unit`) and `{what} p99` with the goal `p99_goal` makes
    /// of it, in milliseconds, beside Redis's.
    fn latencies(
        &mut self,
        what: &str,
        ours: &Histogram<u64>,
        theirs: Option<&Histogram<u64>>,
        p99_goal: impl FnOnce(Option<f64>) -> Goal,
        unit: &str,
    ) {
        let theirs = |q| theirs.and_then(|h| quantile(h, q));
        let p50 = quantile(ours, 0.5);
        let name = format!("   {what}p50");
        self.add(&name, p50, MILLIS, Goal::none(), theirs(0.5), unit);
        let p99 = quantile(ours, 0.99);
        let name = format!("   {what}p99");
        self.add(&name, p99, MILLIS, p99_goal(p99), theirs(0.99), "ms");
    }
}

/// The main table: each figure beside its goal and Redis's.
fn table(
    plan: &Plan,
    work: &Workload,
    workload_bytes: u64,
    redis_sample: usize,
    p: &PenchantRows,
    redis: Option<&anyhow::Result<RedisRows>>,
) -> Table {
    let r = redis.and_then(|r| r.as_ref().ok());
    let mut rows = Rows {
        table: Table::new(
            format!(
                "mixed: ingestion and profile reads at once over HTTP, scale {}: {} users x 2 \
                 events = {} events in batches of {BATCH}, {} writers, {} readers, fsync {}, \
                 block cache {} MiB{}{}",
                plan.scale.name(),
                rate(work.users as f64),
                rate(work.events.len() as f64),
                plan.clients,
                plan.readers,
                if plan.no_sync { "off" } else { "on" },
                plan.block_cache_mib
                    .unwrap_or(RocksOptions::default().block_cache_bytes >> 20),
                if plan.shared_store {
                    ", the server as one node of several on its store"
                } else {
                    ""
                },
                if plan.no_catalog {
                    ", no catalog (every event waits for its records)"
                } else {
                    ""
                },
            ),
            &[
                "workload", "penchant", "goal", "met", "redis", "ratio", "unit",
            ],
        ),
    };
    let no_goal = |_: Option<f64>| Goal::none();

    // (2) Max rate.
    let events = p.max_events as f64;
    rows.add(
        &format!("2. ingest at max rate: first half, {} events", rate(events)),
        Some(p.max_per_s),
        INT,
        Goal::at_least(
            Some(p.max_per_s),
            INGEST_GOAL,
            format!("≥ {}", rate(INGEST_GOAL)),
        ),
        r.map(|r| r.max_per_s),
        "events/s (Redis: HINCRBY per facet + RPUSH per event, AOF fsync always)",
    );
    rows.latencies("batch POST ", &p.max_latency, None, no_goal, "ms");
    rows.latencies(
        "event -> profile visible ",
        &p.probe,
        None,
        |v| Goal::below(v, VISIBLE_P99_GOAL_MS, format!("< {VISIBLE_P99_GOAL_MS}")),
        &format!("ms ({} single-event POSTs beside)", p.probe.len()),
    );
    let cpu_event = p.max.cpu_us(events + p.probe.len() as f64);
    rows.add(
        "   server CPU per event",
        cpu_event,
        MICROS,
        Goal::at_most(
            cpu_event,
            CPU_PER_EVENT_GOAL_US,
            format!("≤ {CPU_PER_EVENT_GOAL_US}"),
        ),
        r.and_then(|r| us_per(r.max_cpu, events)),
        "µs (process CPU less the client threads', over every event; Redis: redis-server's)",
    );
    rows.add(
        "   of which the batches' events",
        p.max_batch_cpu_us(),
        MICROS,
        Goal::none(),
        None,
        "µs (the probe's pushes taken out at their cost alone)",
    );

    // (3) Mixed.
    rows.add(
        "3. ingest paced at half the max rate: second half",
        Some(p.paced_per_s),
        INT,
        Goal::none(),
        r.map(|r| r.paced_per_s),
        &format!(
            "events/s reached, paced at {} (Redis paced at the same)",
            rate(p.paced_target)
        ),
    );
    let mixed_reads = p.paced_reads.per_s();
    rows.add(
        &format!("   profile reads meanwhile, {} connections", plan.readers),
        Some(mixed_reads),
        INT,
        Goal::at_least(
            Some(mixed_reads),
            MIXED_READS_GOAL,
            format!("≥ {}", rate(MIXED_READS_GOAL)),
        ),
        r.map(|r| r.paced_reads.per_s),
        "req/s, users of the first half (Redis: GET of a profile JSON as big)",
    );
    rows.latencies(
        "",
        &p.paced_reads.latency,
        r.map(|r| &r.paced_reads.latency),
        |v| Goal::below(v, MIXED_P99_GOAL_MS, format!("< {MIXED_P99_GOAL_MS}")),
        "ms",
    );
    let cores = |cpu: Option<Duration>, elapsed: Duration| {
        cpu.map(|c| c.as_secs_f64() / elapsed.as_secs_f64())
    };
    let paced = p.paced_events as f64;
    let redis_cores =
        r.and_then(|r| cores(r.paced_cpu, Duration::from_secs_f64(paced / r.paced_per_s)));
    rows.add(
        "   server CPU busy over the phase",
        cores(p.paced.server_cpu, p.paced.elapsed),
        |x| Cell::fixed(x, 2),
        Goal::none(),
        redis_cores,
        "cores",
    );
    // The phase's CPU less its events at (2)'s cost per event, per read.
    let per_get = |cpu: Option<Duration>, per_event: Option<f64>, reads: &Histogram<u64>| {
        let left = cpu?.as_secs_f64() * 1e6 - per_event? * paced;
        (!reads.is_empty()).then(|| left.max(0.0) / reads.len() as f64)
    };
    rows.add(
        "   server CPU per GET",
        per_get(
            p.paced.server_cpu,
            p.max_batch_cpu_us(),
            &p.paced_reads.latency,
        ),
        MICROS,
        Goal::none(),
        r.and_then(|r| {
            per_get(
                r.paced_cpu,
                us_per(r.max_cpu, events),
                &r.paced_reads.latency,
            )
        }),
        "µs (the phase's CPU less its events at (2)'s cost per event)",
    );

    // (4) Right after, beside idle.
    let idle_per_s = p.idle.load.per_s();
    let idle_p99 = quantile(&p.idle.load.latency, 0.99);
    let after_per_s = p.after.load.per_s();
    rows.add(
        &format!(
            "4. profile reads right after the ingestion (no wait), {} connections",
            plan.readers
        ),
        Some(after_per_s),
        INT,
        Goal::at_least(
            Some(after_per_s),
            idle_per_s / AFTER_WITHIN,
            format!("≥ idle / {AFTER_WITHIN}"),
        ),
        r.map(|r| r.after.0.per_s),
        &format!("req/s for {} s, every user", plan.read_for.as_secs()),
    );
    rows.latencies(
        "",
        &p.after.load.latency,
        r.map(|r| &r.after.0.latency),
        |v| {
            Goal::check(
                format!("≤ idle x {AFTER_WITHIN}"),
                v.zip(idle_p99).map(|(a, i)| a <= i * AFTER_WITHIN),
            )
        },
        "ms",
    );
    rows.add(
        "   server CPU per GET",
        p.after.phase.cpu_us(p.after.requests()),
        MICROS,
        Goal::none(),
        r.and_then(|r| us_per(r.after.1, r.after.0.latency.len() as f64)),
        "µs (RocksDB's flushes and compactions included)",
    );
    let (l0_files, pending) = p.backlog;
    rows.add(
        "   compactions pending as (4) began",
        Some(pending / f64::from(1 << 20)),
        INT,
        Goal::none(),
        None,
        &format!("MiB (RocksDB's estimate; {l0_files} SST files in level 0)"),
    );

    // (5) Settle.
    rows.add(
        "5. compactions settle wait",
        Some(p.settled.as_secs_f64()),
        |x| Cell::fixed(x, 1),
        Goal::none(),
        None,
        "s",
    );

    // (6) Idle.
    let redis_idle = r.map(|r| r.idle.0.per_s);
    rows.add(
        &format!("6. profile reads at rest, {} connections", plan.readers),
        Some(idle_per_s),
        INT,
        Goal::at_least(
            redis_idle.map(|ri| idle_per_s / ri),
            IDLE_VS_REDIS_GOAL,
            format!("≥ {IDLE_VS_REDIS_GOAL}x Redis"),
        ),
        redis_idle,
        &format!("req/s for {} s, every user", plan.read_for.as_secs()),
    );
    rows.latencies(
        "",
        &p.idle.load.latency,
        r.map(|r| &r.idle.0.latency),
        |v| Goal::below(v, IDLE_P99_GOAL_MS, format!("< {IDLE_P99_GOAL_MS}")),
        "ms",
    );
    let cpu_get = p.idle.phase.cpu_us(p.idle.requests());
    rows.add(
        "   server CPU per GET",
        cpu_get,
        MICROS,
        Goal::at_most(
            cpu_get,
            CPU_PER_GET_GOAL_US,
            format!("≤ {CPU_PER_GET_GOAL_US}"),
        ),
        r.and_then(|r| us_per(r.idle.1, r.idle.0.latency.len() as f64)),
        "µs (HTTP included)",
    );
    rows.add(
        "   GET /health: the HTTP floor",
        Some(p.health.load.per_s()),
        INT,
        Goal::none(),
        r.map(|r| r.ping.0.per_s),
        "req/s (one small store read included; Redis: PING)",
    );
    rows.add(
        "   server CPU per /health",
        p.health.phase.cpu_us(p.health.requests()),
        MICROS,
        Goal::none(),
        r.and_then(|r| us_per(r.ping.1, r.ping.0.latency.len() as f64)),
        "µs (Redis: per PING)",
    );
    rows.latencies(
        "single-event push alone ",
        &p.alone.load.latency,
        None,
        no_goal,
        &format!(
            "ms ({} pushes one after the other)",
            p.alone.load.latency.len()
        ),
    );

    // At rest.
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let rss = p.rss_bytes.map(mib);
    let server_rss = rss.map(|r| r - mib(workload_bytes));
    rows.add(
        "resident memory, less the bench's workload data",
        server_rss,
        FIXED0,
        Goal::below(server_rss, RSS_GOAL_MIB, format!("< {RSS_GOAL_MIB}")),
        r.and_then(|r| r.rss_bytes).map(mib),
        "MiB (Redis: redis-server's, its profile JSONs included)",
    );
    let peak = p
        .peak_rss_bytes
        .map_or("-".to_owned(), |b| format!("{:.0}", mib(b)));
    rows.add(
        "   resident memory of the process",
        rss,
        FIXED0,
        Goal::none(),
        None,
        &format!(
            "MiB (peak {peak}; the workload's data about {:.0} MiB of it)",
            mib(workload_bytes)
        ),
    );
    let per_user = |bytes: u64| bytes as f64 / work.users as f64;
    rows.add(
        "bytes on disk per user (after flush)",
        Some(per_user(p.disk.total)),
        FIXED0,
        Goal::none(),
        None,
        &format!("bytes (SST files {:.0})", per_user(p.disk.sst)),
    );

    let mut table = rows.table;
    table.note(format!(
        "The goals are stated for {} users; server CPU = this process's CPU time less its \
         client threads' own (the server's workers, blocking pool and RocksDB's background \
         work). The probe pushed one event every {} ms during (2).",
        rate(GOAL_USERS as f64),
        PROBE_EVERY.as_millis()
    ));
    match redis {
        None => table.note(
            "Redis reference skipped: no redis-server on PATH; run `scripts/redis-server.sh` or \
             pass --redis-server \"$(scripts/redis-server.sh)\"",
        ),
        Some(Err(e)) => table.note(format!("Redis reference failed: {e:#}")),
        Some(Ok(_)) => table.note(format!(
            "Redis's readers GET profile JSONs (as big as Penchant's) set for {} users of the \
             first half; Penchant's read the first half's users in (3), every user after.",
            rate(redis_sample as f64)
        )),
    }
    table
}

/// The store operations per unit of work, at the `Store` trait.
fn store_table(p: &PenchantRows) -> Table {
    let mut table = Table::new(
        "mixed: store operations (at the Store trait: calls, rows read and mutated)",
        &[
            "per",
            "calls",
            "rows read",
            "cells read",
            "rows mutated",
            "mutations",
            "calls by kind",
        ],
    );
    // Per batch and per request with 2 decimals, per event with 3.
    let mut row = |name: &str, ops: Ops| {
        let digits = if name.ends_with("per event") { 3 } else { 2 };
        let n = |x: f64| Cell::fixed(x, digits);
        table.row(vec![
            name.into(),
            n(ops.calls()),
            n(ops.rows_read),
            n(ops.cells_read),
            n(ops.rows_mutated),
            n(ops.mutations),
            ops.breakdown(digits).into(),
        ]);
    };
    let batches = p.max_batch_ops();
    row(
        &format!("batch of {BATCH} events, at max rate"),
        batches.per(p.max_batches as f64),
    );
    row("   per event", batches.per(p.max_events as f64));
    let (push, _) = p.per_push();
    row("single-event push, alone", push);
    let get = p.idle.phase.ops.per(p.idle.requests());
    let paced = p.paced.ops.minus(&get, p.paced_reads.latency.len() as f64);
    row(
        &format!("batch of {BATCH} events, paced beside reads"),
        paced.per(p.paced_batches as f64),
    );
    row("   per event", paced.per(p.paced_events as f64));
    row(
        "profile GET right after the ingestion",
        p.after.phase.ops.per(p.after.requests()),
    );
    row("profile GET at rest", get);
    row("GET /health", p.health.phase.ops.per(p.health.requests()));
    table.note(
        "Counted at the Store trait, whatever the backend: on Bigtable each call is one RPC (a \
         read_rows streams many rows in one call), so these convert to Bigtable nodes. The \
         batches at max rate have the probe's single pushes taken out at their cost alone; the \
         paced batches, the reads beside them at their cost at rest. Rows read are rows the \
         read streams yielded; rows mutated count each mutate_rows entry and one per \
         single-row call; mutations are the cells set or deleted.",
    );
    table
}

/// The store operations of the batches at max rate, by table.
fn tables_table(p: &PenchantRows) -> Table {
    let mut table = Table::new(
        "mixed: store operations of the batches at max rate, by table",
        &[
            "table",
            "calls per batch",
            "rows read per event",
            "rows mutated per event",
            "mutations per event",
        ],
    );
    let batches = p.max_batches as f64 / p.max_events.max(1) as f64;
    for (name, ops) in tables_since(&p.max.tables, &Tables::new(), p.max_events as f64) {
        table.row(vec![
            name.into(),
            Cell::fixed(ops.calls / batches.max(f64::MIN_POSITIVE), 2),
            Cell::fixed(ops.rows_read, 3),
            Cell::fixed(ops.rows_mutated, 3),
            Cell::fixed(ops.mutations, 3),
        ]);
    }
    table.note(
        "The table a call names (an atomic write across tables counts as a call of each table \
         it writes); the probe's single pushes are included (a few thousand events beside the \
         phase's).",
    );
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pace_spreads_batches_over_time() {
        assert_eq!(pace_offset(0, 1000.0), Duration::ZERO);
        assert_eq!(pace_offset(1000, 1000.0), Duration::from_secs(1));
        assert_eq!(pace_offset(500, 2000.0), Duration::from_millis(250));
        // No rate: at once.
        assert_eq!(pace_offset(1000, 0.0), Duration::ZERO);
        assert_eq!(pace_offset(1000, f64::NAN), Duration::ZERO);
        let pace = Pace::new(10_000.0, 4);
        assert_eq!(pace.due(4), pace.start);
        assert_eq!(pace.due(2), pace.start);
        assert_eq!(pace.due(6) - pace.start, Duration::from_millis(200));
    }

    #[test]
    fn the_probe_picks_users_of_acknowledged_batches() {
        let work = Workload::generate(2_000); // 4 batches
        let done: Vec<AtomicBool> = (0..4).map(|i| AtomicBool::new(i == 2)).collect();
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(sent_user(&work, &done, 0, &mut rng), None);
        let batch2: Vec<u32> = work.batch(2).iter().map(|e| e.user).collect();
        for _ in 0..50 {
            if let Some(user) = sent_user(&work, &done, 4, &mut rng) {
                assert!(batch2.contains(&user));
            }
        }
        // Only batches claimed so far are tried.
        assert_eq!(sent_user(&work, &done, 2, &mut rng), None);
    }

    #[test]
    fn the_first_half_holds_each_user_once() {
        let work = Workload::generate(3_000); // 6 batches
        let users = users_of_batches(&work, 3);
        let mut sorted = users.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), users.len());
        let expected: std::collections::BTreeSet<u32> =
            work.events[..3_000].iter().map(|e| e.user).collect();
        assert_eq!(sorted, expected.into_iter().collect::<Vec<_>>());
        assert!(users_of_batches(&work, 0).is_empty());
        assert_eq!(users_of_batches(&work, 100).len(), 3_000);
    }

    #[test]
    fn a_goal_is_met_or_not() {
        assert_eq!(Goal::at_least(Some(5.0), 5.0, "").met, Some(true));
        assert_eq!(Goal::below(Some(5.0), 5.0, "").met, Some(false));
        assert_eq!(Goal::at_most(Some(5.0), 5.0, "").met, Some(true));
        assert_eq!(Goal::at_most(None, 5.0, "").met, None);
    }
}
