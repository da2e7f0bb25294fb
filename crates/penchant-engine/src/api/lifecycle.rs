//! The engine's life: opening it over a store, its counters for `/metrics`, its background
//! work (jobs taken over, periodic tasks), and its shutdown.

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
use crate::tenancy::Tenancy;
use crate::vectors::Vectors;
use crate::vectors::training::Trainings;
use crate::{
    Engine, EngineConfig, EngineStats, Result, abtests, aggregates, api, events, ingest, jobs,
    keys, locks, pending, recommend, residency, schedules, stats, tables, tenancy,
};
use penchant_store::Store;
use std::sync::Arc;

/// How old an ingestion intent is before the regular repair takes it for interrupted.
const REPAIR_AFTER: std::time::Duration = std::time::Duration::from_secs(60);
/// How often a node alone on its store looks for apps whose users lack states (written before
/// states existed, or imported) and gives them states ([`profiles::Profiles::build_states`]).
const STATES_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

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
        let atomic_ingestion = config.exclusive_store && store.atomic_writes();
        profiles = profiles.with_aggregates(aggregates.clone());
        let user_locks = Arc::<locks::UserLocks>::default();
        if atomic_ingestion {
            profiles = profiles.with_states(user_locks.clone());
        }
        let supervisor = Arc::new(Supervisor::default());
        let leases = Leases::new(store.clone(), clock.clone(), config.lease_ttl);
        let runtime = jobs::Runtime::new(
            store.clone(),
            leases.clone(),
            supervisor.clone(),
            clock.clone(),
        )
        .with_hook(config.job_hook.clone());
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
            seen.clone(),
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
        let abtests = Arc::new(abtests::AbTests::new(
            store.clone(),
            config.strategy_cache_ttl,
            clock.clone(),
        ));
        let traffic = Arc::new(stats::Traffic::new(store.clone()));
        let ingest = Arc::new(ingest::Ingest {
            store: store.clone(),
            tenancy: tenancy.clone(),
            catalog: catalog.clone(),
            events: events.clone(),
            aggregates: aggregates.clone(),
            profiles: profiles.clone(),
            seen: seen.clone(),
            pending: pending::Pending::new(store.clone(), clock.clone()),
            leases: leases.clone(),
            supervisor: supervisor.clone(),
            clock: clock.clone(),
            traffic: traffic.clone(),
            trends: recommend.trends.clone(),
            abtests: abtests.clone(),
            user_locks,
            atomic: atomic_ingestion,
            attempts: Arc::default(),
            waiting_counts: Arc::default(),
            refresh_latency: Arc::default(),
        });
        Ok(Self {
            residency,
            migrations,
            vectors,
            trainings,
            recommend,
            supervisor,
            leases,
            ingest,
            exclusive_store: config.exclusive_store,
            schedule_cache: api::schedule_cache(config.strategy_cache_ttl, clock.clone()),
            backup_dir: config.backup_dir.clone(),
            abtests,
            clock,
            traffic,
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

    /// The engine's counters and gauges now (for `/metrics`).
    pub fn stats(&self) -> EngineStats {
        let mut caches = vec![
            ("strategies", self.strategies.cache_stats()),
            ("seen_settings", self.seen.cache_stats()),
            ("set_descriptions", self.sets.cache_stats()),
            ("vector_spaces", self.vectors.cache_stats()),
            ("trending", self.recommend.cache_stats()),
            ("abtests", self.abtests.cache_stats()),
        ];
        caches.extend(self.tenancy.cache_stats());
        let (jobs_running, recomputed_users, recomputed_events) = self.recomputes.progress();
        EngineStats {
            caches,
            jobs_running,
            recomputed_users,
            recomputed_events,
            profile_refresh: self.ingest.profile_refresh(),
            waiting_events: self.ingest.waiting_events(),
            store: self.store.gauges(),
        }
    }

    /// Resume the recompute jobs that no node runs (a stopped or dead node's, once its lease
    /// has expired), from their checkpoints. Returns how many this node resumed.
    pub async fn take_over_jobs(&self) -> Result<usize> {
        Ok(self.recomputes.take_over().await?
            + self.trainings.take_over().await?
            + self.take_over_builds().await?
            + self.take_over_rankers().await?
            + self.migrations.take_over().await?
            + self.residency.take_over().await?)
    }

    /// Start the node's background work, owned by the engine until [`Engine::shutdown`]: at
    /// once, finish interrupted ingestions and resume orphaned jobs; then, regularly, look for
    /// orphaned jobs (every half lease), repair ingestions interrupted over a minute ago, start
    /// the apps' scheduled jobs that are due ([`schedules`], every minute), and purge expired
    /// events (every `purge_interval`, if set). With several nodes, leases make one node do
    /// each.
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
        let engine = self.clone();
        self.runtime.every(
            "saving the trending counts",
            recommend::trending::FLUSH_EVERY,
            false,
            move || {
                let engine = engine.clone();
                async move { engine.recommend.trends.flush().await }
            },
        );
        let engine = self.clone();
        self.runtime.every(
            "saving the A/B tests' counts",
            abtests::results::FLUSH_EVERY,
            false,
            move || {
                let engine = engine.clone();
                async move { engine.abtests.results.flush().await }
            },
        );
        if self.profiles.states().is_some() {
            let engine = self.clone();
            self.runtime
                .every("giving users states", STATES_EVERY, true, move || {
                    let engine = engine.clone();
                    async move {
                        for app in engine.tenancy.list_apps().await? {
                            engine.profiles.build_states(&app.app_id).await?;
                        }
                        Ok(())
                    }
                });
        }
        let engine = self.clone();
        self.runtime.every(
            "the schedules' round",
            schedules::ROUND_EVERY,
            false,
            move || {
                let engine = engine.clone();
                async move { engine.run_schedules().await.map(drop) }
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

    /// Whether the data plane answers: one small read (for `/health`).
    pub async fn check_store(&self) -> Result<()> {
        let probe =
            penchant_store::ReadRows::new(penchant_store::RowSet::keys([keys::app("health")]))
                .limit(1);
        self.store.read_all(tenancy::APPS_TABLE, probe).await?;
        Ok(())
    }

    /// Make every acknowledged write durable (on shutdown), the counts kept in memory included.
    pub async fn flush(&self) -> Result<()> {
        if let Err(e) = self.flush_tallies().await {
            tracing::warn!(error = %e, "cannot save the counts kept in memory");
        }
        Ok(self.store.flush().await?)
    }

    /// Add the counts this node keeps in memory (traffic, A/B tests, trending) to the store;
    /// each is tried, the first error returned.
    pub(crate) async fn flush_tallies(&self) -> Result<()> {
        let (traffic, abtests, trends) = futures::join!(
            self.traffic.flush(),
            self.abtests.results.flush(),
            self.recommend.trends.flush()
        );
        traffic.and(abtests).and(trends)
    }
}
