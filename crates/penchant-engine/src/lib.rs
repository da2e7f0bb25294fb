//! Penchant's engine: everything between the HTTP layer and the store.
//!
//! The engine reads and writes rows through [`penchant_store::Store`] only, so it runs unchanged
//! on every backend. Its modules follow the data flow of the product brief; most are filled in by
//! the issues that build each system.

pub mod aggregates;
pub mod catalog;
pub mod events;
pub mod jobs;
pub mod layout;
pub mod profiles;
pub mod recommend;
pub mod rerank;
pub mod seen;
pub mod sets;
pub mod strategy;
pub mod tenancy;
pub mod vectors;

use std::sync::Arc;

use penchant_store::{Store, StoreError};

use crate::aggregates::Aggregates;
use crate::catalog::Catalog;
use crate::events::Events;
use crate::jobs::Jobs;
use crate::profiles::Profiles;
use crate::seen::Seen;
use crate::sets::Sets;
use crate::strategy::{Strategies, Strategy, Versioned};
use crate::tenancy::{Tenancy, TenancyConfig};

/// What can go wrong in the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
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
}

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
    jobs: Arc<Jobs>,
    sets: Arc<Sets>,
    seen: Arc<Seen>,
}

impl Engine {
    /// Open the engine over a store, creating the tables it needs if they are missing (several
    /// nodes may do so at once).
    pub async fn open(store: Arc<dyn Store>, config: EngineConfig) -> Result<Self> {
        let tables = tenancy::tables()
            .into_iter()
            .chain(catalog::tables())
            .chain(events::tables())
            .chain(strategy::tables())
            .chain(profiles::tables())
            .chain(aggregates::tables())
            .chain(jobs::tables())
            .chain(sets::tables())
            .chain(seen::tables());
        for (name, families) in tables {
            match store.create_table(name, families).await {
                Ok(()) | Err(StoreError::TableExists(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let tenancy = Arc::new(Tenancy::new(store.clone(), &config.tenancy));
        let catalog = Catalog::new(store.clone());
        let events = Events::new(store.clone(), catalog.clone());
        let strategies = Arc::new(Strategies::new(store.clone(), config.strategy_cache_ttl));
        let profiles = Profiles::new(store.clone(), strategies.clone(), tenancy.clone());
        let aggregates = Aggregates::new(store.clone());
        let jobs = Arc::new(Jobs::new(
            store.clone(),
            profiles.clone(),
            strategies.clone(),
            config.recompute_parallelism,
        ));
        let sets = Arc::new(Sets::new(
            store.clone(),
            config.set_cache_bytes,
            config.bloom_cache_ttl,
        ));
        let seen = Arc::new(Seen::new(store.clone(), config.bloom_cache_ttl));
        Ok(Self {
            sets,
            seen,
            store,
            tenancy,
            catalog,
            events,
            aggregates,
            strategies,
            profiles,
            jobs,
        })
    }

    /// Store valid events, then rebuild the per-day aggregates they touch and refresh their
    /// users' profiles from them (the streaming path), while their items are marked seen: a
    /// profile read after this returns reflects the events.
    pub async fn push_events(&self, app: &str, events: &[events::Event]) -> Result<()> {
        self.events.ingest(app, events).await?;
        // Profiles are computed from the aggregates: those are rebuilt first.
        let aggregates_then_profiles = async {
            self.aggregates.rebuild_for(app, events).await?;
            self.refresh_users(app, events).await
        };
        futures::try_join!(aggregates_then_profiles, self.mark_seen(app, events))?;
        Ok(())
    }

    async fn refresh_users(&self, app: &str, events: &[events::Event]) -> Result<()> {
        let mut users: Vec<&str> = events.iter().map(events::Event::user).collect();
        users.sort_unstable();
        users.dedup();
        // Collected first: a lazy iterator of borrowing futures is not `Send` enough for the
        // server's handlers.
        let refreshes: Vec<_> = users
            .into_iter()
            .map(|user| self.profiles.refresh(app, user))
            .collect();
        concurrently(refreshes).await
    }

    /// Mark the objectIDs of the app's seen-marking events as seen by their users.
    async fn mark_seen(&self, app: &str, events: &[events::Event]) -> Result<()> {
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
        let adds: Vec<_> = by_user
            .iter()
            .map(|(user, ids)| self.seen.add(app, user, ids))
            .collect();
        concurrently(adds).await
    }

    /// Delete the events (and per-day aggregates) of every app that are older than the app's
    /// retention window: they stopped counting already; the store's own 90-day rule would
    /// remove them only later. Returns how many event rows and aggregate rows it deleted.
    pub async fn purge_expired(&self) -> Result<(u64, u64)> {
        let mut deleted = (0, 0);
        for app in self.tenancy.list_apps().await? {
            if app.retention_days >= tenancy::MAX_RETENTION_DAYS {
                continue;
            }
            let window = self.tenancy.retention(&app.app_id).await?;
            let cutoff = penchant_store::validate::now_micros() - window.as_micros() as i64;
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
        use futures::TryStreamExt;
        use penchant_store::{ReadRows, RowFilter, RowMutation, RowSet, TimeRange};
        let store = penchant_store::for_workload(&self.store, penchant_store::Workload::Batch);
        // Rows with a cell in the window, then the others: keys only.
        let newer = RowFilter::TimestampRange(TimeRange::new(cutoff, i64::MAX));
        let old_only = RowFilter::Condition {
            predicate: Box::new(newer),
            on_match: Box::new(RowFilter::BlockAll),
            on_no_match: Box::new(RowFilter::StripValue.and(RowFilter::CellsPerRowLimit(1))),
        };
        let prefix = bytes::Bytes::from(layout::app_prefix(app));
        let request = ReadRows::new(RowSet::prefix(prefix)).filter(old_only);
        let mut rows = store.read_rows(table, request).await?;
        let mut batch = Vec::new();
        let mut deleted = 0;
        loop {
            let row = rows.try_next().await?;
            if let Some(row) = &row {
                batch.push(RowMutation::new(
                    row.key.clone(),
                    vec![penchant_store::Mutation::DeleteFromRow],
                ));
            }
            if batch.len() >= 1000 || (row.is_none() && !batch.is_empty()) {
                deleted += batch.len() as u64;
                for status in store.mutate_rows(table, std::mem::take(&mut batch)).await? {
                    status?;
                }
            }
            if row.is_none() {
                return Ok(deleted);
            }
        }
    }

    /// Save an app's strategy and start recomputing every profile of the app under it.
    pub async fn set_strategy(&self, app: &str, strategy: Strategy) -> Result<Arc<Versioned>> {
        let versioned = self.strategies.set(app, strategy).await?;
        self.jobs.start(app, versioned.clone()).await?;
        Ok(versioned)
    }

    /// Resume the recompute jobs a stopped node left unfinished (at start).
    pub async fn resume_jobs(&self) -> Result<usize> {
        Ok(self.jobs.resume_all().await?.len())
    }

    /// Named key sets.
    pub fn sets(&self) -> &Sets {
        &self.sets
    }

    /// Users' seen filters.
    pub fn seen(&self) -> &Seen {
        &self.seen
    }

    /// Strategies.
    pub fn strategies(&self) -> &Strategies {
        &self.strategies
    }

    /// Profiles.
    pub fn profiles(&self) -> &Profiles {
        &self.profiles
    }

    /// Background jobs of this node.
    pub fn jobs(&self) -> &Jobs {
        &self.jobs
    }

    /// Insights events.
    pub fn events(&self) -> &Events {
        &self.events
    }

    /// Records of the apps' indexes.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Apps and API keys.
    pub fn tenancy(&self) -> &Tenancy {
        &self.tenancy
    }

    /// The store the engine writes to.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Make every acknowledged write durable (on shutdown).
    pub async fn flush(&self) -> Result<()> {
        Ok(self.store.flush().await?)
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
        assert_eq!(engine.store().list_tables().await.unwrap().len(), 11);
    }
}
