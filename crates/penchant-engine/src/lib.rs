//! Penchant's engine: everything between the HTTP layer and the store.
//!
//! The engine reads and writes rows through [`penchant_store::Store`] only, so it runs unchanged
//! on every backend. This file holds the [`Engine`] and its settings; every method of it is in
//! `api/`, one file per resource (its opening over a store, background work and shutdown in
//! `api/lifecycle.rs`), and drives the subsystems that are the crate's other modules — the event
//! path is [`ingest`]'s; every table is declared in `penchant_model::tables` (and created by [`tables`]), every row key
//! built in `penchant_model::keys`, and every background job runs on the runtime of [`jobs`].
//! The learned ranker's computation is `penchant_learn`'s; the engine reads its examples from the
//! store and stores what it learns ([`recommend::ranker`]).

pub mod abtests;
pub mod aggregates;
mod api;
pub mod backup;
pub mod cache;
pub mod catalog;
pub mod clock;
pub mod events;
pub mod ingest;
pub mod jobs;
pub mod latency;
pub mod leases;
pub mod locks;
pub mod pending;
pub mod portability;
pub mod profiles;
pub mod recommend;
pub mod rerank;
pub mod residency;
pub mod retention;
pub mod schedules;
pub mod seen;
pub mod sets;
pub mod stats;
pub mod strategy;
pub mod supervisor;
pub mod tables;
pub mod tenancy;
pub mod vectors;
mod writes;

pub use api::{AbTestResults, Ranking, RerankOptions, Reranked, Simulation};
pub(crate) use penchant_model::internal;
pub use penchant_model::{EngineError, Result, keys};

use std::sync::Arc;

/// How fresh a read of a user's rows must be (see [`Engine::profile`]).
pub use penchant_store::Consistency;
use penchant_store::Store;

use crate::aggregates::Aggregates;
use crate::catalog::Catalog;
use crate::events::Events;
use crate::leases::Leases;
use crate::profiles::Profiles;
use crate::profiles::job::Recomputes;
use crate::seen::Seen;
use crate::sets::Sets;
use crate::strategy::Strategies;
use crate::supervisor::Supervisor;
use crate::tenancy::{Tenancy, TenancyConfig};
use crate::vectors::Vectors;
use crate::vectors::training::Trainings;

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
    /// Told of every checkpoint a background job saves (tests hold jobs at checkpoints).
    pub job_hook: Option<Arc<dyn jobs::JobHook>>,
    /// The folder backups are written to ([`backup`]); `None`: backups are refused.
    pub backup_dir: Option<std::path::PathBuf>,
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
            job_hook: None,
            backup_dir: Some("penchant-backups".into()),
        }
    }
}

/// What `/metrics` reports of the engine, read at each scrape.
#[derive(Debug, Clone, Default)]
pub struct EngineStats {
    /// Per app: `(app, events stored waiting for their items' records, events counted later)`
    /// by this node since it started.
    pub waiting_events: Vec<(String, u64, u64)>,
    /// Each of the node's caches, by name, and how it served.
    pub caches: Vec<(&'static str, cache::CacheStats)>,
    /// Recompute jobs running on this node.
    pub jobs_running: u64,
    /// Users (recomputed or skipped as fresh) and rows (per-day aggregates, one per user and
    /// active day) this node's jobs went through since it started.
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
    /// The event path.
    ingest: Arc<ingest::Ingest>,
    leases: Leases,
    supervisor: Arc<Supervisor>,
    clock: clock::Clock,
    vectors: Arc<Vectors>,
    trainings: Arc<Trainings>,
    recommend: Arc<recommend::Recommend>,
    migrations: Arc<events::migration::Migrations>,
    /// Events per minute not yet added to the store.
    traffic: Arc<stats::Traffic>,
    residency: Arc<residency::Residency>,
    placement_refresh: std::time::Duration,
    /// Whether this node is the only one on its store.
    exclusive_store: bool,
    /// Apps' schedule settings, as this node last read them.
    schedule_cache: Arc<api::ScheduleCache>,
    backup_dir: Option<std::path::PathBuf>,
    abtests: Arc<abtests::AbTests>,
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
        assert_eq!(
            engine.store().list_tables().await.unwrap().len(),
            tables::ALL.len()
        );
    }
}
