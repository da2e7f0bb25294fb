//! Penchant's engine: everything between the HTTP layer and the store.
//!
//! The engine reads and writes rows through [`penchant_store::Store`] only, so it runs unchanged
//! on every backend. Its modules follow the data flow of the product brief; most are filled in by
//! the issues that build each system.

pub mod aggregates;
mod api;
pub mod cache;
pub mod catalog;
pub mod clock;
pub mod events;
pub mod jobs;
pub mod keys;
pub mod latency;
pub mod leases;
pub mod pending;
pub mod profiles;
pub mod recommend;
pub mod rerank;
pub mod residency;
pub mod seen;
pub mod sets;
pub mod stats;
pub mod strategy;
pub mod supervisor;
pub mod tables;
pub mod tenancy;
pub mod vectors;

use std::sync::Arc;

/// How fresh a read of a user's rows must be (see [`Engine::profile`]).
pub use penchant_store::Consistency;
use penchant_store::{Store, StoreError};

use crate::aggregates::Aggregates;
use crate::catalog::Catalog;
use crate::catalog::Record;
use crate::events::Events;
use crate::leases::Leases;
use crate::profiles::Profile;
use crate::profiles::Profiles;
use crate::profiles::job::{RecomputeStatus, Recomputes};
use crate::seen::Seen;
use crate::sets::Sets;
use crate::strategy::{Strategies, Strategy, Versioned};
use crate::supervisor::Supervisor;
use crate::tenancy::{Tenancy, TenancyConfig};
use crate::vectors::Vectors;
use crate::vectors::training::Trainings;

/// What can go wrong in the engine: the caller's mistakes, each with a message saying what was
/// wrong, and the engine's own failures, whose detail is for the log only.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The request is malformed (the message says how).
    #[error("{0}")]
    Invalid(String),
    /// What the request names does not exist.
    #[error("{0}")]
    NotFound(String),
    /// What the request creates exists already.
    #[error("{0}")]
    Exists(String),
    /// The operation ran and was refused, leaving things as they were (the message says why).
    #[error("{0}")]
    Refused(String),
    /// The store cannot serve now (down, or too much contention): retrying later may work.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A strong read cannot be served now: the home cluster of the user's rows is unreachable
    /// (the message is its error), and a strong read is never answered by another cluster.
    #[error("unavailable: {prefix}: {0}", prefix = penchant_store::STRONG_READ_UNAVAILABLE)]
    StrongReadUnavailable(String),
    /// Penchant failed: corrupt stored data, a store error, a failed serialization. Not the
    /// caller's fault; the message names what failed, for the log.
    #[error("internal: {0}")]
    Internal(String),
}

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => EngineError::Unavailable(m),
            StoreError::StrongReadUnavailable(m) => EngineError::StrongReadUnavailable(m),
            other => EngineError::Internal(format!("store: {other}")),
        }
    }
}

/// An internal error about `what` (e.g. "corrupt profile").
pub(crate) fn internal(what: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Internal(format!("{what}: {e}"))
}

/// The engine's result type.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// The engine's settings.
#[derive(Debug, Clone, Default)]
pub struct EngineConfig {
    pub tenancy: TenancyConfig,
    /// How long a node trusts its cached copy of an app's strategy.
    pub strategy_cache_ttl: std::time::Duration,
    /// Ranges a profile recompute runs in parallel (0 counts as 1).
    pub recompute_parallelism: usize,
    /// Bytes of set partitions a node caches.
    pub set_cache_bytes: u64,
    /// How long a node trusts cached set partitions and descriptions, and seen-filter settings.
    pub bloom_cache_ttl: std::time::Duration,
    /// The engine's clock (the system's; tests set one by hand).
    pub clock: clock::Clock,
    /// How long a node's lease on background work (a job, the purge) lasts without renewal:
    /// how long a job waits for another node when the node running it dies.
    pub lease_ttl: std::time::Duration,
    /// Bytes of item vectors a node keeps in memory for searches (0: no limit).
    pub vector_memory_bytes: u64,
    /// When vector searches go through an approximate index (default: never).
    pub vector_index: vectors::IndexSettings,
    /// The store the engine's store routes through, when it has several targets: placements
    /// and moves act on it ([`residency`]). `None`: one store, nothing moves.
    pub placement: Option<penchant_store::PlacedStore>,
    /// How often a node reloads every placement (a change reaches every node within it).
    pub placement_refresh: std::time::Duration,
    /// Whether this node is the only one on its store (the embedded backend: RocksDB locks its
    /// folder). Then, at start, every ingestion left half-way is its dead predecessor's and is
    /// finished at once; otherwise only those over a minute old are. And every catalog write
    /// goes through this node, which then keeps items' facet values in memory for counting
    /// events ([`Catalog::cache_facets`]).
    pub exclusive_store: bool,
}

impl EngineConfig {
    /// The settings `penchant serve` runs with unless its config file says otherwise (the
    /// derived `Default` caches nothing and leaves leases at zero, which tests rely on).
    pub fn serving() -> Self {
        use std::time::Duration;
        Self {
            tenancy: TenancyConfig {
                admin_key: None,
                cache_ttl: Duration::from_secs(5),
            },
            strategy_cache_ttl: Duration::from_secs(5),
            recompute_parallelism: 4,
            set_cache_bytes: 64 << 20,
            bloom_cache_ttl: Duration::from_secs(1),
            clock: clock::Clock::default(),
            lease_ttl: Duration::from_secs(10),
            vector_memory_bytes: 1 << 30,
            vector_index: vectors::IndexSettings::SERVING,
            placement: None,
            placement_refresh: Duration::from_secs(5),
            exclusive_store: false,
        }
    }
}

/// The global leases of background work.
const PURGE_LEASE: &str = "purge";
const REPAIR_LEASE: &str = "repair";
/// How old an ingestion intent is before the regular repair takes it for interrupted.
const REPAIR_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// Users whose work an ingested batch does at once (their writes share the store's commits).
const USERS_AT_ONCE: usize = 32;

/// Run per-user work, [`USERS_AT_ONCE`] at a time; the first error wins.
pub(crate) async fn concurrently<T>(
    work: Vec<impl std::future::Future<Output = Result<T>>>,
) -> Result<()> {
    use futures::{StreamExt, TryStreamExt};
    futures::stream::iter(work)
        .buffer_unordered(USERS_AT_ONCE)
        .try_for_each(|_| async { Ok(()) })
        .await
}

/// What `/metrics` reports of the engine, read at each scrape.
#[derive(Debug, Clone, Default)]
pub struct EngineStats {
    /// Each of the node's caches, by name, and how it served.
    pub caches: Vec<(&'static str, cache::CacheStats)>,
    /// Recompute jobs running on this node.
    pub jobs_running: u64,
    /// Users (recomputed or skipped as fresh) and raw events this node's jobs went through
    /// since it started.
    pub recomputed_users: u64,
    pub recomputed_events: u64,
    /// How long the streaming refresh of an ingested batch's profiles took.
    pub profile_refresh: latency::LatencySnapshot,
    /// The store backend's own gauges.
    pub store: Vec<penchant_store::Gauge>,
}

/// The engine: one per process, shared by every request.
#[derive(Debug, Clone)]
pub struct Engine {
    store: Arc<dyn Store>,
    tenancy: Arc<Tenancy>,
    catalog: Catalog,
    events: Events,
    aggregates: Aggregates,
    strategies: Arc<Strategies>,
    profiles: Profiles,
    recomputes: Arc<Recomputes>,
    /// The node's background work: jobs of every kind and periodic tasks.
    runtime: jobs::Runtime,
    sets: Arc<Sets>,
    seen: Arc<Seen>,
    pending: pending::Pending,
    leases: Leases,
    supervisor: Arc<Supervisor>,
    clock: clock::Clock,
    refresh_latency: Arc<latency::Latencies>,
    vectors: Arc<Vectors>,
    trainings: Arc<Trainings>,
    recommend: Arc<recommend::Recommend>,
    migrations: Arc<events::migration::Migrations>,
    /// Events per minute not yet added to the store.
    traffic: Arc<stats::Traffic>,
    residency: Arc<residency::Residency>,
    placement_refresh: std::time::Duration,
    /// Ingestion and rebuilds of a user's days kept apart on this node.
    user_locks: Arc<pending::UserLocks>,
    /// Whether this node is the only one on its store.
    exclusive_store: bool,
}

impl Engine {
    /// Open the engine over a store, creating the tables it needs if they are missing (several
    /// nodes may do so at once).
    pub async fn open(store: Arc<dyn Store>, config: EngineConfig) -> Result<Self> {
        tables::create(&*store, &tables::ALL).await?;
        let clock = config.clock.clone();
        let tenancy = Arc::new(Tenancy::new(store.clone(), &config.tenancy, clock.clone()));
        let mut catalog = Catalog::new(store.clone(), config.strategy_cache_ttl, clock.clone());
        if config.exclusive_store {
            catalog = catalog.cache_facets();
        }
        let events = Events::new(store.clone(), catalog.clone());
        let strategies = Arc::new(Strategies::new(
            store.clone(),
            config.strategy_cache_ttl,
            clock.clone(),
        ));
        let mut profiles = Profiles::new(
            store.clone(),
            strategies.clone(),
            tenancy.clone(),
            clock.clone(),
        );
        let local_changes = config
            .exclusive_store
            .then(Arc::<aggregates::LocalChanges>::default);
        if let Some(local) = &local_changes {
            profiles = profiles.with_local_changes(local.clone());
        }
        let mut aggregates = Aggregates::new(store.clone());
        if let Some(local) = local_changes {
            aggregates = aggregates.with_local_changes(local);
        }
        let supervisor = Arc::new(Supervisor::default());
        let leases = Leases::new(store.clone(), clock.clone(), config.lease_ttl);
        let runtime = jobs::Runtime::new(
            store.clone(),
            leases.clone(),
            supervisor.clone(),
            clock.clone(),
        );
        let recomputes = Arc::new(Recomputes::new(
            &runtime,
            store.clone(),
            profiles.clone(),
            strategies.clone(),
            config.recompute_parallelism,
            clock.clone(),
        ));
        let sets = Arc::new(Sets::new(
            store.clone(),
            config.set_cache_bytes,
            config.bloom_cache_ttl,
            clock.clone(),
        ));
        let seen = Arc::new(Seen::new(
            store.clone(),
            config.bloom_cache_ttl,
            clock.clone(),
        ));
        let budget = match config.vector_memory_bytes {
            0 => u64::MAX,
            bytes => bytes,
        };
        let vectors = Arc::new(Vectors::new(
            store.clone(),
            budget,
            config.vector_index,
            config.bloom_cache_ttl,
            clock.clone(),
        ));
        let trainings = Arc::new(Trainings::new(
            &runtime,
            store.clone(),
            vectors.clone(),
            strategies.clone(),
            tenancy.clone(),
            clock.clone(),
        ));
        let recommend = Arc::new(recommend::Recommend::new(
            store.clone(),
            config.strategy_cache_ttl,
            clock.clone(),
            &runtime,
        ));
        let migrations = Arc::new(events::migration::Migrations::new(
            &runtime,
            store.clone(),
            tenancy.clone(),
            clock.clone(),
            config.tenancy.cache_ttl,
        ));
        let residency = Arc::new(residency::Residency::new(
            store.clone(),
            config.placement.clone(),
            &runtime,
            clock.clone(),
            config.placement_refresh,
        ));
        residency.load().await?;
        Ok(Self {
            residency,
            migrations,
            vectors,
            trainings,
            recommend,
            supervisor,
            leases,
            pending: pending::Pending::new(store.clone(), clock.clone()),
            user_locks: Arc::default(),
            exclusive_store: config.exclusive_store,
            clock,
            refresh_latency: Arc::default(),
            traffic: Arc::new(stats::Traffic::new(store.clone())),
            placement_refresh: config
                .placement_refresh
                .max(std::time::Duration::from_millis(10)),
            sets,
            seen,
            store,
            tenancy,
            catalog,
            events,
            aggregates,
            strategies,
            profiles,
            recomputes,
            runtime,
        })
    }

    /// Store valid events, then add them to their days' aggregates and refresh their users'
    /// profiles from them (the streaming path), while their items are marked seen: a profile
    /// read after this returns reflects the events. Each step is one write for the whole batch,
    /// whichever users it holds. An intent recorded before the events ([`pending`]) lets
    /// [`Engine::repair`] finish the work if this stops half-way; a retried request (its events
    /// stored already) rebuilds their days itself, so an acknowledged event always counts.
    pub async fn push_events(&self, app: &str, events: &[events::Event]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let layouts = self.tenancy.events_of(app).await?.written();
        let batch = self.pending.record(app, events).await?;
        // From the raw write until the deltas are written, no rebuild of these users runs here.
        let users = self
            .user_locks
            .shared(app, events.iter().map(events::Event::user))
            .await;
        let ingested = self.events.ingest(app, events, &layouts).await?;
        let counted: Vec<&events::Event> = ingested.stored.iter().map(|s| s.event).collect();
        let aggregates_then_profiles = async {
            let added = self.aggregates.add(app, &ingested.stored).await;
            drop(users);
            added?;
            self.rebuild_days(app, &ingested.retried).await?;
            recommend::trending::count(&self.store, app, &counted).await?;
            let started = std::time::Instant::now();
            self.refresh_users(app, events).await?;
            self.refresh_latency.observe(started.elapsed());
            Ok(())
        };
        self.traffic.add(app, &counted, self.clock.now_ms());
        futures::try_join!(aggregates_then_profiles, self.mark_events_seen(app, events))?;
        // Forgetting the intent need not delay the answer: if it is lost, the repair redoes work
        // that is already done, which changes nothing.
        let (pending, app) = (self.pending.clone(), app.to_owned());
        self.supervisor.spawn(async move {
            if let Err(e) = pending.done(&app, batch).await {
                tracing::warn!(%app, error = %e, "cannot forget an ingestion's intent");
            }
        });
        Ok(())
    }

    /// Rebuild the days of these events' users from their raw events, each alone on this node
    /// ([`pending::UserLocks`]).
    async fn rebuild_days(&self, app: &str, events: &[&events::Event]) -> Result<()> {
        let days: std::collections::BTreeSet<(&str, i64)> = events
            .iter()
            .map(|e| (e.user(), aggregates::day_of(e.timestamp)))
            .collect();
        if days.is_empty() {
            return Ok(());
        }
        let layout = self.tenancy.events_of(app).await?.layout;
        for (user, day) in days {
            let _alone = self.user_locks.exclusive(app, user).await;
            self.aggregates.rebuild_day(app, user, day, layout).await?;
        }
        Ok(())
    }

    /// The engine's counters and gauges now (for `/metrics`).
    pub fn stats(&self) -> EngineStats {
        let mut caches = vec![
            ("strategies", self.strategies.cache_stats()),
            ("seen_settings", self.seen.cache_stats()),
            ("set_descriptions", self.sets.cache_stats()),
            ("vector_spaces", self.vectors.cache_stats()),
            ("trending", self.recommend.cache_stats()),
        ];
        caches.extend(self.tenancy.cache_stats());
        let (jobs_running, recomputed_users, recomputed_events) = self.recomputes.progress();
        EngineStats {
            caches,
            jobs_running,
            recomputed_users,
            recomputed_events,
            profile_refresh: self.refresh_latency.snapshot(),
            store: self.store.gauges(),
        }
    }

    /// Finish the work of event batches that stopped half-way more than `age` ago (a crash
    /// between storing events and acknowledging them): rebuild their days' aggregates from the
    /// raw events (which of their deltas were written is unknown), refresh their users'
    /// profiles, mark their items seen. Returns how many (batch, user) intents it finished; one
    /// that fails is left for the next repair.
    pub async fn repair(&self, age: std::time::Duration) -> Result<usize> {
        let apps: Vec<String> = self
            .tenancy
            .list_apps()
            .await?
            .into_iter()
            .map(|a| a.app_id)
            .collect();
        let intents = self.pending.left_behind(&apps, age).await?;
        let mut finished = 0;
        for intent in &intents {
            match self.finish(intent).await {
                Ok(()) => finished += 1,
                Err(e) => tracing::warn!(app = %intent.app, user = %intent.user, error = %e,
                    "cannot finish an interrupted ingestion; the next repair will"),
            }
        }
        Ok(finished)
    }

    /// Finish one user's share of an interrupted batch.
    async fn finish(&self, intent: &pending::Intent) -> Result<()> {
        let mut stored = Vec::new();
        let layout = self.tenancy.events_of(&intent.app).await?.layout;
        for day in &intent.days {
            {
                let _alone = self.user_locks.exclusive(&intent.app, &intent.user).await;
                self.aggregates
                    .rebuild_day(&intent.app, &intent.user, *day, layout)
                    .await?;
            }
            let request =
                penchant_store::ReadRows::new(aggregates::raw_day(&intent.app, &intent.user, *day))
                    .filter(penchant_store::RowFilter::column(
                        events::FAMILY,
                        events::EVENT_COLUMN,
                    ));
            for row in self.store.read_all(events::EVENTS_TABLE, request).await? {
                if let Some(cell) = row.latest(events::FAMILY, events::EVENT_COLUMN) {
                    stored.push(
                        serde_json::from_slice::<events::Event>(&cell.value)
                            .map_err(|e| internal("corrupt event", e))?,
                    );
                }
            }
        }
        if !stored.is_empty() {
            tracing::info!(app = %intent.app, user = %intent.user, events = stored.len(),
                "finishing an interrupted ingestion");
            futures::try_join!(
                self.refresh_users(&intent.app, &stored),
                self.mark_events_seen(&intent.app, &stored)
            )?;
        }
        self.pending.resolve(intent).await
    }

    async fn refresh_users(&self, app: &str, events: &[events::Event]) -> Result<()> {
        let users: Vec<&str> = events.iter().map(events::Event::user).collect();
        self.profiles.refresh_many(app, &users).await?;
        Ok(())
    }

    /// Mark the objectIDs of the app's seen-marking events as seen by their users.
    async fn mark_events_seen(&self, app: &str, events: &[events::Event]) -> Result<()> {
        let settings = self.seen.settings(app).await?;
        let mut by_user: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
        for event in events {
            if let events::Target::ObjectIds(ids) = &event.target
                && settings.event_types.contains(&event.event_type)
            {
                by_user
                    .entry(event.user())
                    .or_default()
                    .extend(ids.iter().map(String::as_str));
            }
        }
        self.seen.add_many(app, &by_user).await
    }

    /// Delete the events (and per-day aggregates) of every app that are older than the app's
    /// retention window: they stopped counting already; the store's own 90-day rule would
    /// remove them only later. Returns how many event rows and aggregate rows it deleted, or
    /// `None` when another node holds the purge's lease (it is purging).
    pub async fn purge_expired(&self) -> Result<Option<(u64, u64)>> {
        self.leases.run("", PURGE_LEASE, self.purge_all()).await
    }

    async fn purge_all(&self) -> Result<(u64, u64)> {
        let mut deleted = (0, 0);
        for app in self.tenancy.list_apps().await? {
            if app.retention_days >= tenancy::MAX_RETENTION_DAYS {
                continue;
            }
            let window = self.tenancy.retention(&app.app_id).await?;
            let cutoff = self.clock.now_micros() - window.as_micros() as i64;
            deleted.0 += self
                .purge_before(events::EVENTS_TABLE, &app.app_id, cutoff)
                .await?;
            let agg = aggregates::AGGREGATES_TABLE;
            deleted.1 += self.purge_before(agg, &app.app_id, cutoff).await?;
        }
        Ok(deleted)
    }

    /// Delete an app's rows of `table` whose cells are all older than `cutoff` (µs). Events
    /// and aggregates stamp every cell of a row with the same time (the event's; the day's
    /// latest), so a row with a cell newer than the cutoff is kept whole.
    async fn purge_before(&self, table: &str, app: &str, cutoff: i64) -> Result<u64> {
        use penchant_store::{ReadRows, RowFilter, RowSet, TimeRange};
        let store = penchant_store::for_workload(&self.store, penchant_store::Workload::Batch);
        // Rows with a cell in the window, then the others: keys only.
        let newer = RowFilter::TimestampRange(TimeRange::new(cutoff, i64::MAX));
        let old_only = RowFilter::Condition {
            predicate: Box::new(newer),
            on_match: Box::new(RowFilter::BlockAll),
            on_no_match: Box::new(RowFilter::StripValue.and(RowFilter::CellsPerRowLimit(1))),
        };
        let request = ReadRows::new(RowSet::prefix(keys::app(app))).filter(old_only);
        Ok(store.delete_read(table, request).await?)
    }

    /// Save an app's strategy and start recomputing every profile of the app under it.
    pub async fn set_strategy(&self, app: &str, strategy: Strategy) -> Result<Arc<Versioned>> {
        let versioned = self.strategies.set(app, strategy).await?;
        self.recomputes.start(app, versioned.clone()).await?;
        Ok(versioned)
    }

    /// Resume the recompute jobs that no node runs (a stopped or dead node's, once its lease
    /// has expired), from their checkpoints. Returns how many this node resumed.
    pub async fn take_over_jobs(&self) -> Result<usize> {
        Ok(self.recomputes.take_over().await?
            + self.trainings.take_over().await?
            + self.take_over_builds().await?
            + self.migrations.take_over().await?
            + self.residency.take_over().await?)
    }

    /// Start the node's background work, owned by the engine until [`Engine::shutdown`]: at
    /// once, finish interrupted ingestions and resume orphaned jobs; then, regularly, look for
    /// orphaned jobs (every half lease), repair ingestions interrupted over a minute ago, and
    /// purge expired events (every `purge_interval`, if set). With several nodes, leases make
    /// one node do each.
    pub fn start_background(&self, purge_interval: Option<std::time::Duration>) {
        use std::sync::atomic::{AtomicBool, Ordering};
        // Alone on its store, a node that starts finishes every batch left at once: they are
        // its dead predecessor's. With other nodes, a batch is taken for interrupted only after
        // a minute, lest a batch in flight on another node be redone.
        let (engine, first) = (
            self.clone(),
            Arc::new(AtomicBool::new(self.exclusive_store)),
        );
        let every = self.leases.ttl() / 2;
        self.runtime
            .every("repair and take-over", every, true, move || {
                let (engine, first) = (engine.clone(), first.clone());
                async move {
                    let age = match first.load(Ordering::Relaxed) {
                        true => std::time::Duration::ZERO,
                        false => REPAIR_AFTER,
                    };
                    match engine.repair_once(age).await {
                        // Until a round ran (the dead predecessor's lease may hold it off a while).
                        Ok(ran) => {
                            if ran {
                                first.store(false, Ordering::Relaxed);
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot repair interrupted ingestions")
                        }
                    }
                    engine.take_over_jobs().await.map(drop)
                }
            });
        let engine = self.clone();
        self.runtime.every(
            "reloading the placements",
            self.placement_refresh,
            false,
            move || {
                let engine = engine.clone();
                async move { engine.residency.load().await }
            },
        );
        let engine = self.clone();
        self.runtime.every(
            "saving the traffic counts",
            stats::FLUSH_EVERY,
            false,
            move || {
                let engine = engine.clone();
                async move { engine.traffic.flush().await }
            },
        );
        let Some(interval) = purge_interval.filter(|i| !i.is_zero()) else {
            return;
        };
        let engine = self.clone();
        self.runtime
            .every("the retention purge", interval, false, move || {
                let engine = engine.clone();
                async move {
                    if let Some((events, days)) = engine.purge_expired().await?
                        && events + days > 0
                    {
                        tracing::info!(events, days, "purged events past their app's retention");
                    }
                    Ok(())
                }
            });
    }

    /// One repair round under the repair lease (one node at a time): whether it ran.
    pub async fn repair_once(&self, age: std::time::Duration) -> Result<bool> {
        Ok(self
            .leases
            .run("", REPAIR_LEASE, self.repair(age))
            .await?
            .is_some())
    }

    /// Stop the background work (jobs save their checkpoints and release their leases) and
    /// wait for it, then make every acknowledged write durable: what a node does on shutdown.
    pub async fn shutdown(&self) -> Result<()> {
        self.supervisor.shutdown().await;
        self.flush().await
    }

    /// Stop the background work where it stands, saving and releasing nothing — a killed node,
    /// for tests of another node taking over.
    #[doc(hidden)]
    pub fn kill_background(&self) {
        self.supervisor.abort();
    }

    /// Now, by the engine's clock, in ms since the epoch.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The app's strategy as stored now, if it has one.
    pub async fn strategy(&self, app: &str) -> Result<Option<Strategy>> {
        Ok(self
            .strategies
            .fresh(app)
            .await?
            .map(|v| v.strategy.clone()))
    }

    /// The app's latest profile recompute, as last saved by whichever node runs it.
    pub async fn recompute_status(&self, app: &str) -> Result<Option<RecomputeStatus>> {
        self.recomputes.status(app).await
    }

    /// The placement targets; the first is the default.
    pub fn placement_targets(&self) -> Vec<String> {
        self.residency.targets()
    }

    /// Where an app's rows are (or a user's, with `user`), and the app's latest move.
    pub async fn placement(
        &self,
        app: &str,
        user: Option<&str>,
    ) -> Result<(residency::Placement, Option<residency::MoveStatus>)> {
        let unit = self.unit(app, user).await?;
        let placement = self.residency.placement(&unit).await?;
        Ok((placement, self.residency.status(app).await?))
    }

    /// The users of an app placed on their own.
    pub async fn placed_users(&self, app: &str) -> Result<Vec<(String, residency::Placement)>> {
        self.unit(app, None).await?;
        self.residency.placed_users(app).await
    }

    /// Place an app (or one of its users) that has no rows yet in `target`.
    pub async fn place(
        &self,
        app: &str,
        user: Option<&str>,
        target: &str,
    ) -> Result<residency::Placement> {
        let unit = self.unit(app, user).await?;
        self.residency.place(&unit, target).await
    }

    /// Start moving an app's rows (or one user's) to `target`, in the background.
    pub async fn move_placement(
        &self,
        app: &str,
        user: Option<&str>,
        target: &str,
    ) -> Result<residency::MoveStatus> {
        let unit = self.unit(app, user).await?;
        self.residency.start(&unit, target).await
    }

    /// Create an app whose rows live in `target` from the start (its placement is written
    /// before any of its rows). Returns it with its first admin key, as `create_app` does.
    pub async fn create_app_in(
        &self,
        app_id: &str,
        name: &str,
        retention_days: u32,
        event_layout: events::Layout,
        target: &str,
    ) -> Result<(tenancy::App, String)> {
        tenancy::check_app_id(app_id)?;
        if self.tenancy.app(app_id).await?.is_some() {
            return Err(EngineError::Exists(format!(
                "app `{app_id}` exists already"
            )));
        }
        self.residency
            .place(&residency::Unit::app(app_id), target)
            .await?;
        self.create_app(Some(app_id), name, retention_days, event_layout)
            .await
    }

    /// Place the configuration's apps that have no placement yet.
    pub async fn seed_placements(&self, apps: &[(String, String)]) -> Result<()> {
        self.residency.seed(apps).await
    }

    async fn unit(&self, app: &str, user: Option<&str>) -> Result<residency::Unit> {
        if self.tenancy.app(app).await?.is_none() {
            return Err(EngineError::NotFound(format!("app `{app}` does not exist")));
        }
        Ok(match user {
            Some(user) => {
                keys::check_user_token(user)?;
                residency::Unit::user(app, user)
            }
            None => residency::Unit::app(app),
        })
    }

    /// The app's recomputes, newest first: the current or last one, then up to 20 past ones.
    pub async fn recompute_history(&self, app: &str) -> Result<Vec<RecomputeStatus>> {
        self.recomputes.history(app).await
    }

    /// A user's profile; `None` when no counted event gives it a score. A strong read reads
    /// it (and what recomputing it reads) from the user's home cluster only
    /// ([`penchant_store::AffineStore`]), failing with `Unavailable` when that cluster cannot
    /// be reached.
    pub async fn profile(
        &self,
        app: &str,
        user: &str,
        consistency: Consistency,
    ) -> Result<Option<Profile>> {
        keys::check_user_token(user)?;
        let profile = self.profiles.get_with(app, user, consistency).await?;
        Ok(profile.filter(|p| !p.scores.is_empty()))
    }

    /// Forget a user's events up to now: they no longer count. Returns the time (ms) up to
    /// which they were forgotten.
    pub async fn delete_profile(&self, app: &str, user: &str) -> Result<i64> {
        keys::check_user_token(user)?;
        let until = self.now_ms();
        self.profiles.delete_profile(app, user, until).await?;
        Ok(until)
    }

    /// Delete every trace of a user: events, aggregates, seen filter, profile, vectors and
    /// queues.
    pub async fn delete_user(&self, app: &str, user: &str) -> Result<()> {
        keys::check_user_token(user)?;
        self.profiles.delete_user(app, user).await
    }

    /// Re-rank `hits` (records of `index`; a hit holding only its `objectID` is completed from
    /// the catalog) for a user, with the strategy's impact or `impact`. Returns the impact used
    /// and, best first, each hit's position in `hits` with its personalization.
    pub async fn rerank(
        &self,
        app: &str,
        index: &str,
        hits: &[Record],
        user: &str,
        impact: Option<u32>,
    ) -> Result<(u32, Vec<(usize, rerank::Personalization)>)> {
        keys::check_user_token(user)?;
        let records = self.complete_hits(app, index, hits).await?;
        let strategy = self.strategies.get(app).await?;
        let impact = impact
            .or(strategy.as_ref().map(|s| s.strategy.personalization_impact))
            .unwrap_or(0);
        let scores = self.scores(app, user).await?;
        Ok((impact, rerank::rerank(&records, &scores, impact)))
    }

    /// What the simulator shows: `hits` re-ranked for a user under the saved strategy (as
    /// [`Engine::rerank`] does; `None` without one) and under `edited`, an unsaved strategy,
    /// with the profile each gives, and the hits completed from the catalog. Nothing is stored.
    pub async fn simulate(
        &self,
        app: &str,
        index: &str,
        hits: &[Record],
        user: &str,
        edited: &Strategy,
    ) -> Result<Simulation> {
        keys::check_user_token(user)?;
        edited.check()?;
        let records = self.complete_hits(app, index, hits).await?;
        let saved = match self.strategies.get(app).await? {
            Some(saved) => {
                let impact = saved.strategy.personalization_impact;
                let scores = self.scores(app, user).await?;
                let ranked = rerank::rerank(&records, &scores, impact);
                Some(Ranking {
                    impact,
                    scores,
                    ranked,
                })
            }
            None => None,
        };
        let scores = self.profiles.preview(app, user, edited).await?.scores;
        let impact = edited.personalization_impact;
        let ranked = rerank::rerank(&records, &scores, impact);
        Ok(Simulation {
            records,
            saved,
            edited: Ranking {
                impact,
                scores,
                ranked,
            },
        })
    }

    /// Hits as given, those holding only an `objectID` replaced by the catalog's record.
    async fn complete_hits(&self, app: &str, index: &str, hits: &[Record]) -> Result<Vec<Record>> {
        let wanted: Vec<String> = hits
            .iter()
            .filter(|h| h.len() == 1)
            .filter_map(|h| h.get("objectID")?.as_str().map(str::to_owned))
            .collect();
        let catalog = self.catalog.get_many(app, index, &wanted).await?;
        Ok(hits
            .iter()
            .map(|h| {
                let id = h.get("objectID").and_then(|v| v.as_str());
                match id.and_then(|id| catalog.get(id)) {
                    Some(record) if h.len() == 1 => record.clone(),
                    _ => h.clone(),
                }
            })
            .collect())
    }

    /// An app's events per minute by type over the last `hours` (1–48), as received.
    pub async fn events_per_minute(&self, app: &str, hours: u32) -> Result<stats::EventsPerMinute> {
        self.traffic.flush().await?;
        stats::events_per_minute(&self.store, app, hours, self.clock.now_ms()).await
    }

    /// How many users of the app have a stored profile, counted up to `cap`: `(n, exact)`.
    pub async fn count_profiles(&self, app: &str, cap: usize) -> Result<(usize, bool)> {
        self.profiles.count(app, cap).await
    }

    /// A user's latest events (at most `limit`), newest first, as stored.
    pub async fn recent_events(
        &self,
        app: &str,
        user: &str,
        limit: usize,
    ) -> Result<Vec<events::Event>> {
        keys::check_user_token(user)?;
        self.profiles.recent_events(app, user, limit).await
    }

    /// A user's profile as Algolia `optionalFilters` (`facet:value<score=n>`).
    pub async fn optional_filters(&self, app: &str, user: &str) -> Result<Vec<String>> {
        keys::check_user_token(user)?;
        Ok(rerank::optional_filters(&self.scores(app, user).await?))
    }

    async fn scores(&self, app: &str, user: &str) -> Result<profiles::Scores> {
        Ok(self
            .profiles
            .get(app, user)
            .await?
            .map(|p| p.scores)
            .unwrap_or_default())
    }

    /// Whether the data plane answers: one small read (for `/health`).
    pub async fn check_store(&self) -> Result<()> {
        let probe =
            penchant_store::ReadRows::new(penchant_store::RowSet::keys([keys::app("health")]))
                .limit(1);
        self.store.read_all(tenancy::APPS_TABLE, probe).await?;
        Ok(())
    }

    /// Make every acknowledged write durable (on shutdown), traffic counts included.
    pub async fn flush(&self) -> Result<()> {
        if let Err(e) = self.traffic.flush().await {
            tracing::warn!(error = %e, "cannot save the traffic counts");
        }
        Ok(self.store.flush().await?)
    }
}

/// The subsystems and the store, for the engine's own tests and the benchmarks. The server's
/// handlers never use these: they call the API above (a server test checks its routes).
impl Engine {
    /// Named key sets.
    #[doc(hidden)]
    pub fn sets(&self) -> &Sets {
        &self.sets
    }

    /// Users' seen filters.
    #[doc(hidden)]
    pub fn seen(&self) -> &Seen {
        &self.seen
    }

    /// Strategies.
    #[doc(hidden)]
    pub fn strategies(&self) -> &Strategies {
        &self.strategies
    }

    /// Profiles.
    #[doc(hidden)]
    pub fn profiles(&self) -> &Profiles {
        &self.profiles
    }

    /// Profile recomputes.
    #[doc(hidden)]
    pub fn recomputes(&self) -> &Recomputes {
        &self.recomputes
    }

    /// Per-day aggregates of events.
    #[doc(hidden)]
    pub fn aggregates(&self) -> &Aggregates {
        &self.aggregates
    }

    /// Insights events.
    #[doc(hidden)]
    pub fn events(&self) -> &Events {
        &self.events
    }

    /// Records of the apps' indexes.
    #[doc(hidden)]
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Apps and API keys.
    #[doc(hidden)]
    pub fn tenancy(&self) -> &Tenancy {
        &self.tenancy
    }

    /// The store the engine writes to.
    #[doc(hidden)]
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn engine_flushes_its_store() {
        let store = Arc::new(penchant_store::MemStore::new());
        let engine = Engine::open(store.clone(), EngineConfig::default())
            .await
            .unwrap();
        // Opening again (another node) finds the tables there.
        Engine::open(store, EngineConfig::default()).await.unwrap();
        engine.flush().await.unwrap();
        assert_eq!(engine.store().list_tables().await.unwrap().len(), 21);
    }
}

/// A ranking of hits for one user under one strategy (the simulator's).
#[derive(Debug, Clone)]
pub struct Ranking {
    /// The strategy's `personalizationImpact`.
    pub impact: u32,
    /// The user's profile under the strategy.
    pub scores: profiles::Scores,
    /// Best first: each hit's position in the request, with its personalization.
    pub ranked: Vec<(usize, rerank::Personalization)>,
}

/// The simulator's answer: the saved strategy's ranking (none without one) beside an edited one's.
#[derive(Debug, Clone)]
pub struct Simulation {
    /// The hits, those given by `objectID` alone completed from the catalog.
    pub records: Vec<Record>,
    pub saved: Option<Ranking>,
    pub edited: Ranking,
}
