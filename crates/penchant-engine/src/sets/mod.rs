//! Named key sets per app (pixiv's partitioned Bloom filters).
//!
//! A set is reserved with a capacity and a target false-positive rate; it is split into
//! partitions of a fixed size (8 KB by default), the partition of a key chosen by its hash. Each
//! partition is one cell — row [`keys::partition`] `app 0 · set 0 · generation (8, BE) · partition (4, BE)` of
//! table `set_partitions`, column `p:f` (the filter's bytes) beside `p:v` (its version) — so a
//! lookup reads one small cell, never the set. Partitions are cached per node within a byte
//! budget for a short time; a bulk lookup groups its keys by partition and reads the missing
//! partitions in one request. A partition never written is empty.
//!
//! Adds update a partition under optimistic concurrency: read the cell and its version, set the
//! bits, write if the version is unchanged (a conditional mutation), else retry. A rebuild reads a
//! whole key list, builds the next generation beside the current one, and switches the set to it
//! only if its estimated false-positive rate is within the set's `maxErrorRate` (the seed's
//! safety check); otherwise the set keeps its generation and the rebuild reports why. The set's
//! description (table `sets`, row [`keys::set`] `app 0 · set`) holds its shape, its generation, its key
//! count and its last rebuild.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use parking_lot::Mutex;
use penchant_bloom::{BloomFilter, PartitionedFilter, key_hash, partition_of};
use penchant_store::{
    Mutation, ReadModifyWriteRule, ReadRows, Row, RowFilter, RowMutation, RowSet, Store,
};

use crate::cache::{self, TtlCache};
use crate::clock::Clock;
use crate::keys;
use crate::writes::VERSION;
use crate::{EngineError, Result};

mod partitions;
mod rebuild;

use partitions::{Cached, read_partition};
pub use penchant_model::sets::{
    DEFAULT_PARTITION_BYTES, MAX_KEYS_PER_CALL, MAX_PARTITION_BYTES, Rebuild, RebuildState,
    SetConfig, SetDescription, SetInfo,
};
use penchant_model::sets::{DESCRIPTION, GENERATION, REBUILD, Shape, check_name};
pub use penchant_model::tables::{PARTITIONS, PARTITIONS_TABLE, SETS, SETS_TABLE};
use penchant_model::tables::{PARTITIONS_FAMILY as PART_FAMILY, SETS_FAMILY as FAMILY};

/// Keys added (an 8-byte counter).
const KEYS: &[u8] = b"keys";
const FILTER: &[u8] = b"f";
/// Partitions written per batch by a rebuild.
const WRITE_BATCH: usize = 256;
/// Attempts of an optimistic update before giving up.
const ATTEMPTS: usize = 32;

fn invalid(e: impl std::fmt::Display) -> EngineError {
    EngineError::Invalid(e.to_string())
}

/// A generation number no other generation of the set has had: random (below 2^53, so that
/// JSON readers keep it exact). Two rebuilds at once write apart; a set deleted and reserved
/// again does not meet the partitions other nodes cached of the old one.
fn new_generation() -> u64 {
    rand::random_range(1..1u64 << 53)
}

/// The key sets of every app.
#[derive(Debug)]
pub struct Sets {
    store: Arc<dyn Store>,
    ttl: Duration,
    /// (app, set) → the description.
    descriptions: TtlCache<(String, String), Arc<SetDescription>>,
    clock: Clock,
    partitions: quick_cache::sync::Cache<(Bytes, u64), Cached, PartitionWeight>,
    remembering: Mutex<()>,
}

/// Weighs cached partitions by their bytes.
#[derive(Debug, Clone)]
pub struct PartitionWeight;

impl quick_cache::Weighter<(Bytes, u64), Cached> for PartitionWeight {
    fn weight(&self, key: &(Bytes, u64), value: &Cached) -> u64 {
        (key.0.len() + value.2.size_bytes() + 64) as u64
    }
}

impl Sets {
    /// How the set description cache has served.
    pub fn cache_stats(&self) -> crate::cache::CacheStats {
        self.descriptions.stats()
    }

    /// Sets over `store`, caching partitions up to `cache_bytes` for `ttl` (how long this node
    /// may miss another node's adds).
    pub fn new(store: Arc<dyn Store>, cache_bytes: u64, ttl: Duration, clock: Clock) -> Self {
        let items = (cache_bytes / DEFAULT_PARTITION_BYTES).max(16) as usize;
        Self {
            store,
            ttl,
            descriptions: TtlCache::new(cache::DEFAULT_CAPACITY, ttl, clock.clone()),
            clock,
            partitions: quick_cache::sync::Cache::with_weighter(
                items,
                cache_bytes.max(1),
                PartitionWeight,
            ),
            remembering: Mutex::new(()),
        }
    }

    /// Cache a partition as read or written, unless a newer version is cached: concurrent
    /// requests of this node may finish in any order.
    fn remember(&self, key: (Bytes, u64), version: u64, filter: Arc<BloomFilter>) {
        let _one_at_a_time = self.remembering.lock();
        if self
            .partitions
            .get(&key)
            .is_some_and(|(_, cached, _)| cached > version)
        {
            return;
        }
        self.partitions
            .insert(key, (Instant::now(), version, filter));
    }

    /// Reserve a set (`BF.RESERVE`).
    pub async fn reserve(&self, app: &str, name: &str, config: SetConfig) -> Result<SetInfo> {
        check_name(name)?;
        config.check()?;
        // Stored explicit, so that a later change of the default does not change a set.
        let config = SetConfig {
            max_error_rate: Some(config.max_error_rate()),
            ..config
        };
        let shape =
            PartitionedFilter::new(config.capacity, config.error_rate, config.partition_bytes)
                .map_err(invalid)?;
        let partitions = shape.partitions().len() as u64;
        if partitions > u64::from(u32::MAX) {
            return Err(EngineError::Invalid(
                "capacity needs too many partitions".into(),
            ));
        }
        let stored = Shape {
            name: name.to_owned(),
            partitions,
            probes: shape.partitions()[0].probes(),
            config,
            created_at: self.clock.now_ms(),
        };
        let json = serde_json::to_vec(&stored).map_err(|e| crate::internal("serialization", e))?;
        let generation = new_generation().to_string();
        let exists = self
            .store
            .check_and_mutate_row(
                SETS_TABLE,
                keys::set(app, name),
                None,
                vec![],
                vec![
                    Mutation::set_now(FAMILY, DESCRIPTION, json),
                    Mutation::set_now(FAMILY, GENERATION, generation),
                ],
            )
            .await?;
        if exists {
            return Err(EngineError::Exists(format!("set {name} already exists")));
        }
        self.info(app, name).await
    }

    /// Every set of an app.
    pub async fn list(&self, app: &str) -> Result<Vec<SetDescription>> {
        let request =
            ReadRows::new(RowSet::prefix(keys::app(app))).filter(RowFilter::Family(FAMILY.into()));
        let rows = self.store.read_all(SETS_TABLE, request).await?;
        rows.iter()
            .filter(|r| r.latest(FAMILY, DESCRIPTION).is_some())
            .map(SetDescription::from_row)
            .collect()
    }

    /// A set's description, as cached for at most the TTL.
    pub async fn describe(&self, app: &str, name: &str) -> Result<Arc<SetDescription>> {
        let key = (app.to_owned(), name.to_owned());
        if let Some(d) = self.descriptions.get(&key) {
            return Ok(d);
        }
        self.read_description(app, name).await
    }

    /// A set's description as stored now (and cached).
    async fn read_description(&self, app: &str, name: &str) -> Result<Arc<SetDescription>> {
        Ok(self.read_set(app, name).await?.0)
    }

    /// A set's description (cached) and its key count, as stored now: one read of its row.
    async fn read_set(&self, app: &str, name: &str) -> Result<(Arc<SetDescription>, u64)> {
        check_name(name)?;
        let row = self
            .store
            .read_row(
                SETS_TABLE,
                keys::set(app, name),
                Some(RowFilter::Family(FAMILY.into())),
            )
            .await?
            .filter(|r| r.latest(FAMILY, DESCRIPTION).is_some())
            .ok_or_else(|| EngineError::NotFound(format!("set {name} does not exist")))?;
        let fresh = Arc::new(SetDescription::from_row(&row)?);
        self.descriptions
            .insert((app.to_owned(), name.to_owned()), fresh.clone());
        let keys = row
            .latest(FAMILY, KEYS)
            .and_then(|c| Some(i64::from_be_bytes(c.value[..].try_into().ok()?)))
            .unwrap_or(0)
            .max(0) as u64;
        Ok((fresh, keys))
    }

    async fn save_rebuild(&self, app: &str, name: &str, rebuild: &Rebuild) -> Result<()> {
        let json = serde_json::to_vec(rebuild).map_err(|e| crate::internal("serialization", e))?;
        self.store
            .mutate_row(
                SETS_TABLE,
                keys::set(app, name),
                vec![Mutation::set_now(FAMILY, REBUILD, json)],
            )
            .await?;
        Ok(())
    }

    /// Delete a set and its partitions.
    pub async fn delete(&self, app: &str, name: &str) -> Result<()> {
        self.read_description(app, name).await?;
        self.store
            .mutate_row(
                SETS_TABLE,
                keys::set(app, name),
                vec![Mutation::DeleteFromRow],
            )
            .await?;
        self.descriptions.remove(&(app.to_owned(), name.to_owned()));
        self.store
            .delete_prefix(PARTITIONS_TABLE, keys::set_partitions(app, name))
            .await?;
        Ok(())
    }

    /// A set's description, key count, size, fill and estimated false-positive rate
    /// (`BF.INFO`). Reads every partition of the current generation.
    pub async fn info(&self, app: &str, name: &str) -> Result<SetInfo> {
        let (d, keys) = self.read_set(app, name).await?;
        let request = ReadRows::new(RowSet::prefix(keys::generation(app, name, d.generation)))
            .filter(RowFilter::column(PART_FAMILY, FILTER));
        let mut stream = self.store.read_rows(PARTITIONS_TABLE, request).await?;
        let (mut fill, mut fp) = (0.0, 0.0);
        let empty = d.empty_partition()?;
        while let Some(row) = stream.next().await.transpose()? {
            let (_, f) = read_partition(Some(&row), &empty)?;
            fill += f.fill_ratio();
            fp += f.estimated_fp_rate();
        }
        let n = d.partitions as f64;
        Ok(SetInfo {
            keys,
            size_bytes: d.partitions * d.config.partition_bytes,
            fill_ratio: fill / n,
            estimated_error_rate: fp / n,
            description: Arc::unwrap_or_clone(d),
        })
    }
}
