//! Named key sets per app (pixiv's partitioned Bloom filters).
//!
//! A set is reserved with a capacity and a target false-positive rate; it is split into
//! partitions of a fixed size (8 KB by default), the partition of a key chosen by its hash. Each
//! partition is one cell — row `app 0x00 | set 0x00 | generation (8, BE) | partition (4, BE)` of
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
//! description (table `sets`, row `app 0x00 | set`) holds its shape, its generation, its key
//! count and its last rebuild.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use parking_lot::Mutex;
use penchant_bloom::{BloomFilter, PartitionedFilter, key_hash, partition_of};
use penchant_store::{
    GcRule, Mutation, ReadModifyWriteRule, ReadRows, Row, RowFilter, RowMutation, RowSet, Store,
};
use serde::{Deserialize, Serialize};

use crate::layout::app_prefix;
use crate::{EngineError, Result};

pub const SETS_TABLE: &str = "sets";
pub const PARTITIONS_TABLE: &str = "set_partitions";
const FAMILY: &str = "m";
/// The set's shape ([`Shape`], JSON), fixed at its reservation.
const DESCRIPTION: &[u8] = b"set";
/// The generation lookups read (decimal): switched by a rebuild with a conditional write.
const GENERATION: &[u8] = b"gen";
/// The last rebuild ([`Rebuild`], JSON).
const REBUILD: &[u8] = b"rebuild";
/// Keys added (an 8-byte counter).
const KEYS: &[u8] = b"keys";
const PART_FAMILY: &str = "p";
const FILTER: &[u8] = b"f";
const VERSION: &[u8] = b"v";
/// The default partition size.
pub const DEFAULT_PARTITION_BYTES: u64 = 8 << 10;
/// The largest partition (one store cell).
pub const MAX_PARTITION_BYTES: u64 = 16 << 20;
/// Most keys in one add or lookup request.
pub const MAX_KEYS_PER_CALL: usize = 100_000;
/// Partitions written per batch by a rebuild.
const WRITE_BATCH: usize = 256;
/// Attempts of an optimistic update before giving up.
const ATTEMPTS: usize = 32;

/// The tables this module needs.
pub fn tables() -> Vec<(&'static str, BTreeMap<String, GcRule>)> {
    vec![
        (
            SETS_TABLE,
            BTreeMap::from([(FAMILY.to_owned(), GcRule::MaxVersions(1))]),
        ),
        (
            PARTITIONS_TABLE,
            BTreeMap::from([(PART_FAMILY.to_owned(), GcRule::MaxVersions(1))]),
        ),
    ]
}

/// What a set is reserved with (RedisBloom's `BF.RESERVE`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetConfig {
    /// Keys the set is designed for.
    pub capacity: u64,
    /// The false-positive rate at capacity, in (0, 1).
    pub error_rate: f64,
    /// Bytes per partition: a multiple of 64, up to 16 MiB.
    #[serde(default = "default_partition_bytes")]
    pub partition_bytes: u64,
    /// A rebuild whose estimated false-positive rate passes this keeps the old generation.
    /// Default: twice `errorRate` (at most 0.5).
    #[serde(default)]
    pub max_error_rate: Option<f64>,
}

fn default_partition_bytes() -> u64 {
    DEFAULT_PARTITION_BYTES
}

impl SetConfig {
    fn max_error_rate(&self) -> f64 {
        self.max_error_rate
            .unwrap_or_else(|| (2.0 * self.error_rate).min(0.5).max(self.error_rate))
    }

    fn check(&self) -> Result<()> {
        let bad = |m: &str| Err(EngineError::Invalid(m.to_owned()));
        if self.capacity == 0 {
            return bad("capacity must be at least 1");
        }
        if !(self.error_rate > 0.0 && self.error_rate < 1.0) {
            return bad("errorRate must be between 0 and 1 (exclusive)");
        }
        if self.partition_bytes == 0
            || !self.partition_bytes.is_multiple_of(64)
            || self.partition_bytes > MAX_PARTITION_BYTES
        {
            return bad("partitionBytes must be a multiple of 64 between 64 and 16777216");
        }
        if let Some(max) = self.max_error_rate
            && !(max >= self.error_rate && max < 1.0)
        {
            return bad("maxErrorRate must be at least errorRate and below 1");
        }
        Ok(())
    }
}

/// How a rebuild went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RebuildState {
    Running,
    Done,
    Refused,
    Failed,
}

/// The last rebuild of a set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rebuild {
    pub state: RebuildState,
    /// The generation it built.
    pub generation: u64,
    /// Keys read from the list (duplicates included).
    pub keys: u64,
    pub estimated_error_rate: Option<f64>,
    pub message: Option<String>,
    /// Unix ms.
    pub started_at: i64,
    pub finished_at: Option<i64>,
}

/// A set's description, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetDescription {
    pub name: String,
    pub config: SetConfig,
    pub partitions: u64,
    pub probes: u32,
    /// The generation lookups read.
    pub generation: u64,
    /// Unix ms.
    pub created_at: i64,
    pub last_rebuild: Option<Rebuild>,
}

impl SetDescription {
    fn blocks(&self) -> u64 {
        self.config.partition_bytes / penchant_bloom::BLOCK_BYTES as u64
    }

    fn empty_partition(&self) -> Result<BloomFilter> {
        BloomFilter::with_shape(self.blocks(), self.probes).map_err(invalid)
    }
}

/// What a set's reservation fixes, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Shape {
    name: String,
    config: SetConfig,
    partitions: u64,
    probes: u32,
    created_at: i64,
}

impl SetDescription {
    /// From a set's row (family `m`).
    fn from_row(row: &Row) -> Result<Self> {
        let cell = |q: &[u8]| row.latest(FAMILY, q).map(|c| &c.value[..]);
        let shape: Shape = serde_json::from_slice(cell(DESCRIPTION).unwrap_or_default())
            .map_err(|e| EngineError::Invalid(format!("corrupt set: {e}")))?;
        let generation = cell(GENERATION)
            .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
            .ok_or_else(|| EngineError::Invalid("corrupt set: no generation".into()))?;
        let last_rebuild = cell(REBUILD)
            .map(serde_json::from_slice)
            .transpose()
            .map_err(invalid)?;
        Ok(Self {
            name: shape.name,
            config: shape.config,
            partitions: shape.partitions,
            probes: shape.probes,
            generation,
            created_at: shape.created_at,
            last_rebuild,
        })
    }
}

/// What `BF.INFO` tells of a set.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetInfo {
    #[serde(flatten)]
    pub description: SetDescription,
    /// Keys added (each counted once, as far as the filter tells).
    pub keys: u64,
    pub size_bytes: u64,
    /// Set bits over all bits.
    pub fill_ratio: f64,
    /// The mean over partitions of each one's estimated false-positive rate.
    pub estimated_error_rate: f64,
}

fn invalid(e: impl std::fmt::Display) -> EngineError {
    EngineError::Invalid(e.to_string())
}

fn now_ms() -> i64 {
    penchant_store::validate::now_micros() / 1000
}

/// Set names: 1 to 64 of `A-Z a-z 0-9 _ - .`.
fn check_name(name: &str) -> Result<()> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(EngineError::Invalid(
            "set names are 1 to 64 characters among A-Z a-z 0-9 _ - .".into(),
        ))
    }
}

/// A generation number no other generation of the set has had: random (below 2^53, so that
/// JSON readers keep it exact). Two rebuilds at once write apart; a set deleted and reserved
/// again does not meet the partitions other nodes cached of the old one.
fn new_generation() -> u64 {
    rand::random_range(1..1u64 << 53)
}

fn set_row(app: &str, name: &str) -> Bytes {
    let mut key = app_prefix(app);
    key.extend_from_slice(name.as_bytes());
    Bytes::from(key)
}

fn generation_prefix(app: &str, name: &str, generation: u64) -> Vec<u8> {
    let mut key = app_prefix(app);
    key.extend_from_slice(name.as_bytes());
    key.push(0);
    key.extend_from_slice(&generation.to_be_bytes());
    key
}

fn partition_row(app: &str, name: &str, generation: u64, partition: u32) -> Bytes {
    let mut key = generation_prefix(app, name, generation);
    key.extend_from_slice(&partition.to_be_bytes());
    Bytes::from(key)
}

/// A cached description: when it was read, the description.
type Described = (Instant, Arc<SetDescription>);

/// A cached partition: when it was read, its version, the filter.
type Cached = (Instant, u64, Arc<BloomFilter>);

/// A filter cell and its version, as read (version 0: never written).
fn read_partition(row: Option<&Row>, empty: &BloomFilter) -> Result<(u64, BloomFilter)> {
    let Some(row) = row else {
        return Ok((0, empty.clone()));
    };
    let version = row
        .latest(PART_FAMILY, VERSION)
        .and_then(|c| std::str::from_utf8(&c.value).ok()?.parse().ok())
        .unwrap_or(0);
    let filter = match row.latest(PART_FAMILY, FILTER) {
        Some(c) => BloomFilter::from_bytes(&c.value)
            .map_err(|e| EngineError::Invalid(format!("corrupt partition: {e}")))?,
        None => empty.clone(),
    };
    Ok((version, filter))
}

/// Replace a cell-and-version pair if its version is still `version` (0: no cell yet).
/// Returns whether it wrote.
pub(crate) async fn write_if_version(
    store: &dyn Store,
    table: &str,
    row: Bytes,
    family: &str,
    version: u64,
    mut cells: Vec<Mutation>,
) -> Result<bool> {
    cells.push(Mutation::set_now(
        family,
        Bytes::from_static(VERSION),
        (version + 1).to_string(),
    ));
    let column = RowFilter::column(family, Bytes::from_static(VERSION));
    Ok(if version == 0 {
        !store
            .check_and_mutate_row(table, row, Some(column), vec![], cells)
            .await?
    } else {
        let same = column.and(RowFilter::ValueRegex(version.to_string()));
        store
            .check_and_mutate_row(table, row, Some(same), cells, vec![])
            .await?
    })
}

/// The key sets of every app.
#[derive(Debug)]
pub struct Sets {
    store: Arc<dyn Store>,
    ttl: Duration,
    /// (app, set) → when it was read, the description.
    descriptions: Mutex<HashMap<(String, String), Described>>,
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
    /// Sets over `store`, caching partitions up to `cache_bytes` for `ttl` (how long this node
    /// may miss another node's adds).
    pub fn new(store: Arc<dyn Store>, cache_bytes: u64, ttl: Duration) -> Self {
        let items = (cache_bytes / DEFAULT_PARTITION_BYTES).max(16) as usize;
        Self {
            store,
            ttl,
            descriptions: Mutex::new(HashMap::new()),
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
            created_at: now_ms(),
        };
        let json = serde_json::to_vec(&stored).map_err(invalid)?;
        let generation = new_generation().to_string();
        let exists = self
            .store
            .check_and_mutate_row(
                SETS_TABLE,
                set_row(app, name),
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
        let request = ReadRows::new(RowSet::prefix(Bytes::from(app_prefix(app))))
            .filter(RowFilter::Family(FAMILY.into()));
        let rows = self.store.read_all(SETS_TABLE, request).await?;
        rows.iter()
            .filter(|r| r.latest(FAMILY, DESCRIPTION).is_some())
            .map(SetDescription::from_row)
            .collect()
    }

    /// A set's description, as cached for at most the TTL.
    pub async fn describe(&self, app: &str, name: &str) -> Result<Arc<SetDescription>> {
        let key = (app.to_owned(), name.to_owned());
        if let Some((at, d)) = self.descriptions.lock().get(&key)
            && at.elapsed() < self.ttl
        {
            return Ok(d.clone());
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
                set_row(app, name),
                Some(RowFilter::Family(FAMILY.into())),
            )
            .await?
            .filter(|r| r.latest(FAMILY, DESCRIPTION).is_some())
            .ok_or_else(|| EngineError::NotFound(format!("set {name} does not exist")))?;
        let fresh = Arc::new(SetDescription::from_row(&row)?);
        self.descriptions.lock().insert(
            (app.to_owned(), name.to_owned()),
            (Instant::now(), fresh.clone()),
        );
        let keys = row
            .latest(FAMILY, KEYS)
            .and_then(|c| Some(i64::from_be_bytes(c.value[..].try_into().ok()?)))
            .unwrap_or(0)
            .max(0) as u64;
        Ok((fresh, keys))
    }

    async fn save_rebuild(&self, app: &str, name: &str, rebuild: &Rebuild) -> Result<()> {
        let json = serde_json::to_vec(rebuild).map_err(invalid)?;
        self.store
            .mutate_row(
                SETS_TABLE,
                set_row(app, name),
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
                set_row(app, name),
                vec![Mutation::DeleteFromRow],
            )
            .await?;
        self.descriptions
            .lock()
            .remove(&(app.to_owned(), name.to_owned()));
        let mut prefix = set_row(app, name).to_vec();
        prefix.push(0);
        self.store.drop_row_range(PARTITIONS_TABLE, &prefix).await?;
        Ok(())
    }

    /// Keys grouped by partition: partition → indexes into `keys`.
    fn group<K: AsRef<[u8]>>(d: &SetDescription, keys: &[K]) -> Result<BTreeMap<u32, Vec<usize>>> {
        if keys.len() > MAX_KEYS_PER_CALL {
            return Err(EngineError::Invalid(format!(
                "at most {MAX_KEYS_PER_CALL} keys per call"
            )));
        }
        let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            let p = partition_of(key_hash(k.as_ref()), d.partitions as usize) as u32;
            groups.entry(p).or_default().push(i);
        }
        Ok(groups)
    }

    /// Whether each key may be in the set (`BF.MEXISTS`).
    pub async fn exists<K: AsRef<[u8]>>(
        &self,
        app: &str,
        name: &str,
        keys: &[K],
    ) -> Result<Vec<bool>> {
        let mut d = self.describe(app, name).await?;
        let groups = Self::group(&d, keys)?;
        loop {
            match self.lookup(app, &d, &groups, keys).await? {
                Some(found) => return Ok(found),
                // A partition was missing and the set had switched generations: again, with
                // the generation it has now.
                None => d = self.read_description(app, name).await?,
            }
        }
    }

    /// Look keys up in the generation `d` names; `None` when a partition is missing from it
    /// and the set has moved to another generation since `d` was read (this node's copy was
    /// stale, and the old generation is deleted).
    async fn lookup<K: AsRef<[u8]>>(
        &self,
        app: &str,
        d: &SetDescription,
        groups: &BTreeMap<u32, Vec<usize>>,
        keys: &[K],
    ) -> Result<Option<Vec<bool>>> {
        let name = &d.name;
        let mut filters: HashMap<u32, Arc<BloomFilter>> = HashMap::new();
        let mut missing = Vec::new();
        for &p in groups.keys() {
            let row = partition_row(app, name, d.generation, p);
            match self.partitions.get(&(row.clone(), d.generation)) {
                Some((at, _, f)) if at.elapsed() < self.ttl => {
                    filters.insert(p, f);
                }
                _ => missing.push((p, row)),
            }
        }
        if !missing.is_empty() {
            let request = ReadRows::new(RowSet::keys(missing.iter().map(|(_, r)| r.clone())));
            let rows = self.store.read_all(PARTITIONS_TABLE, request).await?;
            let by_key: HashMap<&Bytes, &Row> = rows.iter().map(|r| (&r.key, r)).collect();
            // A partition never written is empty — unless the generation is gone.
            if by_key.len() < missing.len()
                && self.read_description(app, name).await?.generation != d.generation
            {
                return Ok(None);
            }
            let empty = d.empty_partition()?;
            for (p, row) in missing {
                let (version, filter) = read_partition(by_key.get(&row).copied(), &empty)?;
                let filter = Arc::new(filter);
                self.remember((row, d.generation), version, filter.clone());
                filters.insert(p, filter);
            }
        }
        let mut out = vec![false; keys.len()];
        for (p, indexes) in groups {
            let filter = &filters[p];
            for &i in indexes {
                out[i] = filter.contains(keys[i].as_ref());
            }
        }
        Ok(Some(out))
    }

    /// Add keys (`BF.MADD`); each answer tells whether the key was new (as far as the filter
    /// can tell). Partitions are updated concurrently, each under optimistic concurrency, in the
    /// generation the set has now (read fresh, not from the cache).
    pub async fn add<K: AsRef<[u8]> + Sync>(
        &self,
        app: &str,
        name: &str,
        keys: &[K],
    ) -> Result<Vec<bool>> {
        let d = self.read_description(app, name).await?;
        let groups = Self::group(&d, keys)?;
        let updates = groups.into_iter().map(|(p, indexes)| {
            let d = d.clone();
            async move {
                let added = self.add_to_partition(app, &d, p, keys, &indexes).await?;
                Ok::<_, EngineError>((indexes, added))
            }
        });
        let mut out = vec![false; keys.len()];
        let mut new_keys = 0i64;
        for result in futures::future::join_all(updates).await {
            let (indexes, added) = result?;
            for (i, a) in indexes.into_iter().zip(added) {
                out[i] = a;
                new_keys += i64::from(a);
            }
        }
        if new_keys > 0 {
            self.store
                .read_modify_write_row(
                    SETS_TABLE,
                    set_row(app, name),
                    vec![ReadModifyWriteRule::increment(FAMILY, KEYS, new_keys)],
                )
                .await?;
        }
        Ok(out)
    }

    async fn add_to_partition<K: AsRef<[u8]>>(
        &self,
        app: &str,
        d: &SetDescription,
        p: u32,
        keys: &[K],
        indexes: &[usize],
    ) -> Result<Vec<bool>> {
        let row = partition_row(app, &d.name, d.generation, p);
        let empty = d.empty_partition()?;
        for _ in 0..ATTEMPTS {
            let stored = self
                .store
                .read_row(PARTITIONS_TABLE, row.clone(), None)
                .await?;
            let (version, mut filter) = read_partition(stored.as_ref(), &empty)?;
            let added: Vec<bool> = indexes
                .iter()
                .map(|&i| filter.insert(keys[i].as_ref()))
                .collect();
            if !added.contains(&true) {
                return Ok(added);
            }
            let cells = vec![Mutation::set_now(
                PART_FAMILY,
                Bytes::from_static(FILTER),
                filter.to_bytes(),
            )];
            if write_if_version(
                &*self.store,
                PARTITIONS_TABLE,
                row.clone(),
                PART_FAMILY,
                version,
                cells,
            )
            .await?
            {
                self.remember((row, d.generation), version + 1, Arc::new(filter));
                return Ok(added);
            }
        }
        Err(EngineError::Store(penchant_store::StoreError::Unavailable(
            "too many concurrent updates of one partition; retry".into(),
        )))
    }

    /// A set's description, key count, size, fill and estimated false-positive rate
    /// (`BF.INFO`). Reads every partition of the current generation.
    pub async fn info(&self, app: &str, name: &str) -> Result<SetInfo> {
        let (d, keys) = self.read_set(app, name).await?;
        let request = ReadRows::new(RowSet::prefix(Bytes::from(generation_prefix(
            app,
            name,
            d.generation,
        ))))
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

    /// Rebuild a set from a list of keys, one per line (`\n` or `\r\n`; empty lines skipped):
    /// build the next generation, and switch to it unless its estimated false-positive rate
    /// passes the set's `maxErrorRate` — then the set keeps its generation and the error says
    /// why. Adds made during a rebuild go to the old generation: the list must hold them.
    pub async fn rebuild<S, E>(&self, app: &str, name: &str, mut lines: S) -> Result<Rebuild>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let d = self.read_description(app, name).await?;
        let generation = new_generation();
        let mut rebuild = Rebuild {
            state: RebuildState::Running,
            generation,
            keys: 0,
            estimated_error_rate: None,
            message: None,
            started_at: now_ms(),
            finished_at: None,
        };
        self.save_rebuild(app, name, &rebuild).await?;
        let shape = d.empty_partition()?;
        let mut filter = PartitionedFilter::from_partitions(vec![shape; d.partitions as usize])
            .map_err(invalid)?;
        let mut distinct = 0u64;
        let mut rest: Vec<u8> = Vec::new();
        let mut take = |line: &[u8], filter: &mut PartitionedFilter, keys: &mut u64| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if !line.is_empty() {
                *keys += 1;
                if filter.insert(line).is_some() {
                    distinct += 1;
                }
            }
        };
        let mut failure = None;
        while let Some(chunk) = lines.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    failure = Some(format!("reading the key list failed: {e}"));
                    break;
                }
            };
            rest.extend_from_slice(&chunk);
            let mut start = 0;
            while let Some(end) = rest[start..].iter().position(|b| *b == b'\n') {
                take(&rest[start..start + end], &mut filter, &mut rebuild.keys);
                start += end + 1;
            }
            rest.drain(..start);
        }
        if failure.is_none() {
            take(&rest, &mut filter, &mut rebuild.keys);
        }
        let estimated = filter.estimated_fp_rate();
        rebuild.estimated_error_rate = Some(estimated);
        let max = d.config.max_error_rate();
        let refused = (estimated > max).then(|| {
            format!(
                "rebuild refused: the new generation's estimated false-positive rate {:.4}% is above the set's maxErrorRate {:.4}% ({} keys for a capacity of {}); generation {} is kept",
                estimated * 100.0,
                max * 100.0,
                rebuild.keys,
                d.config.capacity,
                d.generation
            )
        });
        let outcome = match (failure, refused) {
            (Some(message), _) => Err((RebuildState::Failed, message)),
            (None, Some(message)) => Err((RebuildState::Refused, message)),
            (None, None) => self
                .write_generation(app, name, generation, &filter)
                .await
                .map_err(|e| (RebuildState::Failed, e.to_string())),
        };
        let outcome = match outcome {
            Ok(()) => self
                .switch(app, name, d.generation, generation, distinct, &mut rebuild)
                .await
                .map_err(|e| (RebuildState::Failed, e.to_string()))
                .and_then(|switched| {
                    switched.then_some(()).ok_or((
                        RebuildState::Failed,
                        "another rebuild switched the set first; this one is dropped".into(),
                    ))
                }),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => {
                // Nodes whose copy of the description is stale find the old partitions gone,
                // read the description again and follow (see `lookup`).
                self.store
                    .drop_row_range(
                        PARTITIONS_TABLE,
                        &generation_prefix(app, name, d.generation),
                    )
                    .await?;
                Ok(rebuild)
            }
            Err((state, message)) => {
                rebuild.state = state;
                rebuild.message = Some(message.clone());
                rebuild.finished_at = Some(now_ms());
                self.save_rebuild(app, name, &rebuild).await?;
                // The generation built, whole or in part, is not reachable; clear it.
                self.store
                    .drop_row_range(PARTITIONS_TABLE, &generation_prefix(app, name, generation))
                    .await?;
                Err(match state {
                    RebuildState::Refused => EngineError::Refused(message),
                    _ => EngineError::Invalid(message),
                })
            }
        }
    }

    /// Switch a set from generation `old` to `new` with its key count and the finished
    /// rebuild, in one conditional write: only if the set is still at `old` (two rebuilds at
    /// once: the first to finish wins). Returns whether it switched.
    async fn switch(
        &self,
        app: &str,
        name: &str,
        old: u64,
        new: u64,
        keys: u64,
        rebuild: &mut Rebuild,
    ) -> Result<bool> {
        rebuild.state = RebuildState::Done;
        rebuild.finished_at = Some(now_ms());
        let json = serde_json::to_vec(&*rebuild).map_err(invalid)?;
        let at_old =
            RowFilter::column(FAMILY, GENERATION).and(RowFilter::ValueRegex(old.to_string()));
        let switched = self
            .store
            .check_and_mutate_row(
                SETS_TABLE,
                set_row(app, name),
                Some(at_old),
                vec![
                    Mutation::set_now(FAMILY, GENERATION, new.to_string()),
                    Mutation::set_now(FAMILY, KEYS, (keys as i64).to_be_bytes().to_vec()),
                    Mutation::set_now(FAMILY, REBUILD, json),
                ],
                vec![],
            )
            .await?;
        if switched {
            self.read_description(app, name).await?;
        }
        Ok(switched)
    }

    /// Write a generation's non-empty partitions, in batches.
    async fn write_generation(
        &self,
        app: &str,
        name: &str,
        generation: u64,
        filter: &PartitionedFilter,
    ) -> Result<()> {
        let rows: Vec<RowMutation> = filter
            .partitions()
            .iter()
            .enumerate()
            .filter(|(_, p)| p.fill_ratio() > 0.0)
            .map(|(i, p)| {
                RowMutation::new(
                    partition_row(app, name, generation, i as u32),
                    vec![
                        Mutation::set_now(PART_FAMILY, Bytes::from_static(FILTER), p.to_bytes()),
                        Mutation::set_now(PART_FAMILY, Bytes::from_static(VERSION), "1"),
                    ],
                )
            })
            .collect();
        for batch in rows.chunks(WRITE_BATCH) {
            for status in self
                .store
                .mutate_rows(PARTITIONS_TABLE, batch.to_vec())
                .await?
            {
                status?;
            }
        }
        Ok(())
    }
}
