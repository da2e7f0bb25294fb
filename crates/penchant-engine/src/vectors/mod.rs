//! Vector spaces: latent and content embeddings of users and items — Coffee Meets Bagel's "100
//! floats per user" learned by ALS ([`training`]), or image and text embeddings an app uploads.
//!
//! A space is named per app, with a fixed dimension and a metric. Storage follows the Google
//! seed's model: the column family is the data type (`v`, vectors), a vector is a cell of its
//! object's row, timestamped by its write (a training stamps all its cells with one time), and
//! two versions are kept: reads take the latest, the previous one stays for a rollback.
//!
//! | table | row | cells |
//! |---|---|---|
//! | `spaces` | `app 0 · space` | `m:space` the description (JSON); `m:gen` a counter every write to the space's items moves |
//! | `item_vectors` | `app 0 · space 0 · objectID` | `v:v` |
//! | `user_vectors` | `app 0 · user 0` | `v:<space>`, one column per space |
//!
//! A space's items are one key range, loaded in one scan; a user's vectors sit under the user's
//! prefix beside the rest of the user's rows and go with them when the user is deleted. Values
//! are the f32s, little-endian, as given (cosine scores divide by the norms). Reads keep only
//! cells written since the space was created, so a space deleted and created again never shows
//! vectors of the old one that an interrupted deletion left behind.
//!
//! Serving: each node keeps a space's item vectors as one contiguous matrix
//! ([`penchant_vectors::Matrix`]), loaded on first use within a memory budget and loaded again
//! when the space's counter has moved — at once on the node that wrote, within the description
//! cache's TTL on the others. Search is exact — one pass of SIMD dot products over the rows —
//! until a space has [`IndexSettings::min_rows`] items: then the node also builds an HNSW graph
//! of the matrix ([`penchant_vectors::Hnsw`]) on a blocking thread, and once it is ready, searches
//! over all items ask the graph for [`IndexSettings::ef`] candidates and score those exactly
//! (same scores as the scan; `exact: true` in a request still scans). Searches among given
//! candidates always score them all.

pub mod training;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use penchant_store::{
    Mutation, ReadModifyWriteRule, ReadRows, RowFilter, RowMutation, RowSet, Store, TimeRange,
};
pub use penchant_vectors::{Aggregate, Hnsw, HnswConfig, Matrix, Metric};
use serde::Serialize;

use crate::cache::{self, TtlCache};
use crate::clock::Clock;
use crate::events::{self, Event, EventType, Target};
use crate::{EngineError, Result, internal, keys};
pub use penchant_model::tables::{
    ITEM_VECTORS, ITEM_VECTORS_TABLE, SPACES, SPACES_TABLE, USER_VECTORS, USER_VECTORS_TABLE,
};
use penchant_model::tables::{SPACES_FAMILY as META, VECTORS_FAMILY as FAMILY};

const DESCRIPTION: &[u8] = b"space";
const GENERATION: &[u8] = b"gen";
const ITEM_COLUMN: &[u8] = b"v";
pub use penchant_model::vectors::{
    Hit, Kind, MAX_COMPONENT, MAX_DIMENSION, MAX_K, MAX_LIKED, MAX_SPACE_NAME_BYTES, MAX_SPACES,
    MAX_VECTORS_PER_CALL, Query, SearchOptions, Space, SpaceConfig, check_id, check_space_name,
    decode, encode, json_f32, parse_binary,
};
/// Floats above which a search runs on a blocking thread rather than the runtime's.
const INLINE_FLOATS: usize = 1 << 20;

/// The read filter of one column of `space`'s vectors written since it was created: the latest.
fn cells(space: &Space, qualifier: &[u8]) -> RowFilter {
    RowFilter::column(FAMILY, Bytes::copy_from_slice(qualifier))
        .and(RowFilter::TimestampRange(TimeRange::new(
            space.created_at.saturating_mul(1000),
            i64::MAX,
        )))
        .and(RowFilter::CellsPerColumnLimit(1))
}

/// When a space's searches go through an approximate index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexSettings {
    /// Items from which a node builds an HNSW graph of a loaded space (0: never, always exact).
    pub min_rows: usize,
    /// Candidates a search asks the graph for (at least the hits wanted), scored exactly.
    pub ef: usize,
}

impl IndexSettings {
    /// What `penchant serve` runs with: exact search up to 100,000 items (a scan of 100k × 100
    /// floats takes about 2.5 ms on one core), 128 candidates (recall@30 of 97.5% at a million
    /// clustered vectors in `penchant-bench topk`, 100% at 100,000).
    pub const SERVING: Self = Self {
        min_rows: 100_000,
        ef: 128,
    };
}

/// A space's item vectors in memory: one contiguous matrix, its rows' ids, the Gramian `YᵀY`
/// that folding in a new user needs (computed once, on first use), and the graph of a large
/// space once built.
#[derive(Debug)]
pub struct Loaded {
    generation: u64,
    created_at: i64,
    metric: Metric,
    pub ids: Vec<String>,
    rows: HashMap<String, u32>,
    pub matrix: Matrix,
    gramian: OnceLock<Vec<f32>>,
    graph: OnceLock<Hnsw>,
    /// Whether a graph is being built or will be (counted in the memory budget from the start).
    indexed: bool,
}

impl Loaded {
    /// No vectors yet, for the space as described.
    fn empty(space: &Space) -> Self {
        Self {
            generation: space.generation,
            created_at: space.created_at,
            metric: space.metric,
            ids: Vec::new(),
            rows: HashMap::new(),
            matrix: Matrix::new(space.dimension),
            gramian: OnceLock::new(),
            graph: OnceLock::new(),
            indexed: false,
        }
    }

    /// Appends `id`'s vector.
    fn push(&mut self, id: &str, vector: &[f32]) {
        self.rows.insert(id.to_owned(), self.ids.len() as u32);
        self.ids.push(id.to_owned());
        self.matrix.push(vector);
    }

    /// The row of an item, if it has a vector.
    pub fn row_of(&self, id: &str) -> Option<usize> {
        self.rows.get(id).map(|r| *r as usize)
    }

    /// `YᵀY` of the item vectors.
    pub fn gramian(&self) -> &[f32] {
        self.gramian
            .get_or_init(|| penchant_vectors::als::gramian(&self.matrix))
    }

    /// The approximate index, once built.
    pub fn graph(&self) -> Option<&Hnsw> {
        self.graph.get()
    }

    fn bytes(&self) -> u64 {
        let ids: usize = self.ids.iter().map(|id| 2 * id.len() + 64).sum();
        // A graph's links: a count and 2m slots per row on the bottom layer, about 1/m of
        // that above.
        let m = HnswConfig::default().m;
        let graph = if self.indexed {
            self.matrix.len() * (2 * m + 1) * 4 * (m + 1) / m
        } else {
            0
        };
        (self.matrix.bytes() + ids + graph) as u64
    }
}

/// How a node serves a space's searches at the moment (node-local: each node loads and
/// indexes on its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Serving {
    /// Whether the node holds the space's current item vectors in memory.
    pub loaded: bool,
    /// Item vectors held.
    pub items: usize,
    /// How a search over all items runs.
    pub search: SearchPath,
}

/// How a search over all items runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchPath {
    /// A scan of every item.
    Exact,
    /// A scan, while the graph is being built.
    Building,
    /// Through the HNSW graph.
    Hnsw,
}

/// Weighs loaded matrices by their bytes.
#[derive(Debug, Clone)]
pub struct LoadedWeight;

impl quick_cache::Weighter<(String, String), Arc<Loaded>> for LoadedWeight {
    fn weight(&self, _key: &(String, String), value: &Arc<Loaded>) -> u64 {
        value.bytes().max(1)
    }
}

/// The vector spaces of every app.
#[derive(Debug)]
pub struct Vectors {
    store: Arc<dyn Store>,
    clock: Clock,
    budget: u64,
    index: IndexSettings,
    descriptions: TtlCache<(String, String), Arc<Space>>,
    matrices: quick_cache::sync::Cache<(String, String), Arc<Loaded>, LoadedWeight>,
    /// One load at a time: a space's first searches wait for one scan, not one each.
    loading: tokio::sync::Mutex<()>,
}

impl Vectors {
    /// Spaces over `store`, keeping loaded matrices within `budget` bytes and trusting cached
    /// descriptions for `ttl` (how long another node's writes may go unseen).
    pub fn new(
        store: Arc<dyn Store>,
        budget: u64,
        index: IndexSettings,
        ttl: Duration,
        clock: Clock,
    ) -> Self {
        Self {
            store,
            budget,
            index,
            descriptions: TtlCache::new(cache::DEFAULT_CAPACITY, ttl, clock.clone()),
            matrices: quick_cache::sync::Cache::with_weighter(64, budget.max(1), LoadedWeight),
            loading: tokio::sync::Mutex::new(()),
            clock,
        }
    }

    /// How the description cache has served.
    pub fn cache_stats(&self) -> cache::CacheStats {
        self.descriptions.stats()
    }

    /// Create a space.
    pub async fn create(&self, app: &str, name: &str, config: SpaceConfig) -> Result<Space> {
        check_space_name(name)?;
        config.check()?;
        if self.list(app).await?.len() >= MAX_SPACES {
            return Err(EngineError::Refused(format!(
                "an app has at most {MAX_SPACES} spaces"
            )));
        }
        let space = Space {
            name: name.to_owned(),
            dimension: config.dimension,
            metric: config.metric,
            index: config.index,
            created_at: self.clock.now_ms(),
            training: None,
            previous_training: None,
            generation: 0,
        };
        let json = serde_json::to_vec(&space).map_err(|e| internal("serialization", e))?;
        let exists = self
            .store
            .check_and_mutate_row(
                SPACES_TABLE,
                keys::space(app, name),
                Some(RowFilter::column(META, DESCRIPTION)),
                vec![],
                vec![
                    Mutation::set_now(META, DESCRIPTION, json),
                    Mutation::delete_column(META, GENERATION),
                ],
            )
            .await?;
        if exists {
            return Err(EngineError::Exists(format!("space '{name}' exists")));
        }
        self.forget(app, name);
        Ok(space)
    }

    /// Every space of an app, by name.
    pub async fn list(&self, app: &str) -> Result<Vec<Space>> {
        let request = ReadRows::new(RowSet::prefix(keys::app(app)));
        let rows = self.store.read_all(SPACES_TABLE, request).await?;
        rows.iter()
            .filter_map(|row| parse_space(row).transpose())
            .collect()
    }

    /// A space, as stored now.
    pub async fn fresh(&self, app: &str, name: &str) -> Result<Arc<Space>> {
        check_space_name(name)?;
        let row = self
            .store
            .read_row(SPACES_TABLE, keys::space(app, name), None)
            .await?;
        let space = row
            .as_ref()
            .map(parse_space)
            .transpose()?
            .flatten()
            .ok_or_else(|| EngineError::NotFound(format!("space '{name}' does not exist")))?;
        let space = Arc::new(space);
        self.descriptions
            .insert((app.to_owned(), name.to_owned()), space.clone());
        Ok(space)
    }

    /// A space, as cached (at most the TTL old).
    pub async fn space(&self, app: &str, name: &str) -> Result<Arc<Space>> {
        match self.descriptions.get(&(app.to_owned(), name.to_owned())) {
            Some(space) => Ok(space),
            None => self.fresh(app, name).await,
        }
    }

    fn forget(&self, app: &str, name: &str) {
        let key = (app.to_owned(), name.to_owned());
        self.descriptions.remove(&key);
        self.matrices.remove(&key);
    }

    /// Delete a space and its vectors.
    pub async fn delete(&self, app: &str, name: &str) -> Result<()> {
        self.fresh(app, name).await?;
        // The description first: from now on the space does not exist, and a space created
        // again under the name reads no cell written before it.
        self.store
            .mutate_row(
                SPACES_TABLE,
                keys::space(app, name),
                vec![Mutation::DeleteFromRow],
            )
            .await?;
        self.forget(app, name);
        self.store
            .delete_prefix(ITEM_VECTORS_TABLE, keys::space_items(app, name))
            .await?;
        let column = RowFilter::column(FAMILY, Bytes::copy_from_slice(name.as_bytes()))
            .and(RowFilter::StripValue)
            .and(RowFilter::CellsPerRowLimit(1));
        let request = ReadRows::new(RowSet::prefix(keys::app(app))).filter(column);
        let users = self.store.read_all(USER_VECTORS_TABLE, request).await?;
        let deletes = users
            .into_iter()
            .map(|row| {
                let delete =
                    Mutation::delete_column(FAMILY, Bytes::copy_from_slice(name.as_bytes()));
                RowMutation::new(row.key, vec![delete])
            })
            .collect();
        self.store.mutate_all(USER_VECTORS_TABLE, deletes).await?;
        Ok(())
    }

    /// Go back to the space's previous training: delete every cell the last training wrote
    /// (its one timestamp), so that reads find the previous training's vectors again, then
    /// describe the space with the previous training. Vectors written since by uploads or
    /// fold-ins stay. Idempotent until it completes: an error leaves it to be run again.
    pub async fn rollback(&self, app: &str, name: &str) -> Result<Arc<Space>> {
        let space = self.fresh(app, name).await?;
        let (Some(last), Some(_)) = (&space.training, &space.previous_training) else {
            return Err(EngineError::Refused(format!(
                "space '{name}' has no previous training to roll back to"
            )));
        };
        // Timestamps are whole milliseconds (as Bigtable keeps them): one ms is one stamp.
        let range = TimeRange::new(last.stamp, last.stamp + 1000);
        let store = penchant_store::for_workload(&self.store, penchant_store::Workload::Batch);
        for (table, prefix, qualifier) in [
            (
                ITEM_VECTORS_TABLE,
                keys::space_items(app, name),
                ITEM_COLUMN,
            ),
            (USER_VECTORS_TABLE, keys::app(app), name.as_bytes()),
        ] {
            let qualifier = Bytes::copy_from_slice(qualifier);
            let cells = RowFilter::column(FAMILY, qualifier.clone())
                .and(RowFilter::TimestampRange(range))
                .and(RowFilter::StripValue);
            let rows = store
                .read_all(table, ReadRows::new(RowSet::prefix(prefix)).filter(cells))
                .await?;
            let deletes = rows
                .into_iter()
                .map(|row| {
                    let delete = Mutation::DeleteFromColumn {
                        family: FAMILY.to_owned(),
                        qualifier: qualifier.clone(),
                        range,
                    };
                    RowMutation::new(row.key, vec![delete])
                })
                .collect();
            store.mutate_all(table, deletes).await?;
        }
        let mut rolled = (*space).clone();
        rolled.training = rolled.previous_training.take();
        self.describe(app, &rolled).await?;
        self.touch(app, name).await?;
        self.fresh(app, name).await
    }

    /// Write vectors of users or items, all checked first: one bad vector writes none. Returns
    /// how many were written.
    pub async fn put(
        &self,
        app: &str,
        name: &str,
        kind: Kind,
        vectors: &[(String, Vec<f32>)],
    ) -> Result<usize> {
        let space = self.fresh(app, name).await?;
        if vectors.len() > MAX_VECTORS_PER_CALL {
            return Err(EngineError::Invalid(format!(
                "at most {MAX_VECTORS_PER_CALL} vectors per request"
            )));
        }
        for (id, vector) in vectors {
            check_id(kind, id)?;
            space.check(kind, id, vector)?;
        }
        let stamp = self.clock.now_ms() * 1000;
        self.write(
            app,
            &space,
            kind,
            vectors.iter().map(|(id, v)| (id.as_str(), &v[..])),
            stamp,
        )
        .await?;
        Ok(vectors.len())
    }

    /// Write checked vectors, every cell stamped `stamp` (µs).
    pub(crate) async fn write<'a>(
        &self,
        app: &str,
        space: &Space,
        kind: Kind,
        vectors: impl Iterator<Item = (&'a str, &'a [f32])>,
        stamp: i64,
    ) -> Result<()> {
        let (table, mut rows) = (table_of(kind), Vec::new());
        for (id, vector) in vectors {
            let (key, qualifier) = cell_of(app, &space.name, kind, id);
            let set = Mutation::set(FAMILY, qualifier, stamp, encode(vector));
            rows.push(RowMutation::new(key, vec![set]));
            if rows.len() >= 10_000 {
                self.store
                    .mutate_all(table, std::mem::take(&mut rows))
                    .await?;
            }
        }
        self.store.mutate_all(table, rows).await?;
        if kind == Kind::Item {
            self.touch(app, &space.name).await?;
        }
        Ok(())
    }

    /// Move a space's counter: nodes load its items again.
    async fn touch(&self, app: &str, name: &str) -> Result<()> {
        let rule = ReadModifyWriteRule::increment(META, GENERATION, 1);
        self.store
            .read_modify_write_row(SPACES_TABLE, keys::space(app, name), vec![rule])
            .await?;
        self.forget(app, name);
        Ok(())
    }

    /// Save a space's description as changed (a training's record), keeping its counter.
    pub(crate) async fn describe(&self, app: &str, space: &Space) -> Result<()> {
        let json = serde_json::to_vec(space).map_err(|e| internal("serialization", e))?;
        self.store
            .mutate_row(
                SPACES_TABLE,
                keys::space(app, &space.name),
                vec![Mutation::set_now(META, DESCRIPTION, json)],
            )
            .await?;
        self.forget(app, &space.name);
        Ok(())
    }

    /// One user's or item's vector.
    pub async fn get(
        &self,
        app: &str,
        name: &str,
        kind: Kind,
        id: &str,
    ) -> Result<Option<Vec<f32>>> {
        check_id(kind, id)?;
        let space = self.space(app, name).await?;
        let (key, qualifier) = cell_of(app, name, kind, id);
        let row = self
            .store
            .read_row(table_of(kind), key, Some(cells(&space, &qualifier)))
            .await?;
        let Some(cell) = row.as_ref().and_then(|r| r.latest(FAMILY, &qualifier)) else {
            return Ok(None);
        };
        decode(&cell.value, space.dimension)
            .map(Some)
            .ok_or_else(|| internal("corrupt vector", format!("{} '{id}'", kind.noun())))
    }

    /// Delete one user's or item's vector (both stored versions).
    pub async fn remove(&self, app: &str, name: &str, kind: Kind, id: &str) -> Result<()> {
        check_id(kind, id)?;
        let space = self.fresh(app, name).await?;
        let (key, qualifier) = cell_of(app, &space.name, kind, id);
        self.store
            .mutate_row(
                table_of(kind),
                key,
                vec![Mutation::delete_column(FAMILY, qualifier)],
            )
            .await?;
        if kind == Kind::Item {
            self.touch(app, name).await?;
        }
        Ok(())
    }

    /// Delete the vectors of items deleted from `index`, in every space whose items are its
    /// records (or any index's).
    pub async fn forget_items(&self, app: &str, index: &str, ids: &[String]) -> Result<()> {
        self.forget_in(app, index, ids, true).await
    }

    /// Delete the vectors of items deleted from `index` in the spaces whose items are its
    /// records only (an index moved away: its items live on under another name).
    pub async fn forget_bound_items(&self, app: &str, index: &str, ids: &[String]) -> Result<()> {
        self.forget_in(app, index, ids, false).await
    }

    async fn forget_in(&self, app: &str, index: &str, ids: &[String], any: bool) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        for space in self.list(app).await? {
            let bound = match space.index.as_deref() {
                Some(i) => i == index,
                None => any,
            };
            if !bound {
                continue;
            }
            let deletes = ids
                .iter()
                .map(|id| {
                    let key = keys::item_vector(app, &space.name, id);
                    RowMutation::new(key, vec![Mutation::DeleteFromRow])
                })
                .collect();
            self.store.mutate_all(ITEM_VECTORS_TABLE, deletes).await?;
            self.touch(app, &space.name).await?;
        }
        Ok(())
    }

    /// How this node serves `space` now (nothing is loaded by asking).
    pub fn serving(&self, app: &str, space: &Space) -> Serving {
        let key = (app.to_owned(), space.name.clone());
        match self
            .matrices
            .peek(&key)
            .filter(|l| l.generation == space.generation && l.created_at == space.created_at)
        {
            None => Serving {
                loaded: false,
                items: 0,
                search: SearchPath::Exact,
            },
            Some(loaded) => Serving {
                loaded: true,
                items: loaded.matrix.len(),
                search: match (loaded.indexed, loaded.graph().is_some()) {
                    (false, _) => SearchPath::Exact,
                    (true, false) => SearchPath::Building,
                    (true, true) => SearchPath::Hnsw,
                },
            },
        }
    }

    /// A space's item vectors in memory, loaded if this node has none or an outdated copy.
    pub async fn load(&self, app: &str, space: &Space) -> Result<Arc<Loaded>> {
        let key = (app.to_owned(), space.name.clone());
        let current =
            |l: &Loaded| l.generation == space.generation && l.created_at == space.created_at;
        if let Some(loaded) = self.matrices.get(&key).filter(|l| current(l)) {
            return Ok(loaded);
        }
        let _one_load = self.loading.lock().await;
        if let Some(loaded) = self.matrices.get(&key).filter(|l| current(l)) {
            return Ok(loaded);
        }
        let request = ReadRows::new(RowSet::prefix(keys::space_items(app, &space.name)))
            .filter(cells(space, ITEM_COLUMN));
        let mut rows = self.store.read_rows(ITEM_VECTORS_TABLE, request).await?;
        let mut loaded = Loaded::empty(space);
        while let Some(row) = rows.try_next().await? {
            let Some(id) = keys::item_of(app, &space.name, &row.key) else {
                continue;
            };
            let Some(cell) = row.latest(FAMILY, ITEM_COLUMN) else {
                continue;
            };
            let vector = decode(&cell.value, space.dimension)
                .ok_or_else(|| internal("corrupt vector", format!("item '{id}'")))?;
            loaded.push(id, &vector);
            if loaded.matrix.bytes() as u64 > self.budget {
                return Err(EngineError::Refused(format!(
                    "space '{}' holds more item vectors than the memory budget for vectors \
                     ({} bytes, `engine.vector_memory_bytes`) can keep",
                    space.name, self.budget
                )));
            }
        }
        loaded.indexed = self.index.min_rows > 0 && loaded.matrix.len() >= self.index.min_rows;
        let loaded = Arc::new(loaded);
        self.matrices.insert(key, loaded.clone());
        if loaded.indexed {
            // Searches scan until the graph is ready. Once the cache has let go of this copy
            // (replaced by a newer one, or evicted) and no search holds it, the build stops:
            // frequent writes to a large space must not pile up builds of outdated matrices.
            let building = loaded.clone();
            tokio::task::spawn_blocking(move || {
                let still_served = |_| Arc::strong_count(&building) > 1;
                let matrix = &building.matrix;
                let config = HnswConfig::default();
                if let Some(graph) =
                    Hnsw::build_while(matrix, building.metric, config, still_served)
                {
                    let _ = building.graph.set(graph);
                }
            });
        }
        Ok(loaded)
    }

    /// Every user vector of a space, as a matrix (not cached, no memory budget: for batch
    /// work such as folding in new items).
    pub(crate) async fn load_users(&self, app: &str, space: &Space) -> Result<Loaded> {
        let store = penchant_store::for_workload(&self.store, penchant_store::Workload::Batch);
        let request = ReadRows::new(RowSet::prefix(keys::app(app)))
            .filter(cells(space, space.name.as_bytes()));
        let mut rows = store.read_rows(USER_VECTORS_TABLE, request).await?;
        let mut loaded = Loaded::empty(space);
        while let Some(row) = rows.try_next().await? {
            let Some(user) = keys::user_of(app, &row.key) else {
                continue;
            };
            let Some(cell) = row.latest(FAMILY, space.name.as_bytes()) else {
                continue;
            };
            let vector = decode(&cell.value, space.dimension)
                .ok_or_else(|| internal("corrupt vector", format!("user '{user}'")))?;
            loaded.push(user, &vector);
        }
        Ok(loaded)
    }

    /// The items closest to a query, best first.
    pub async fn search(
        &self,
        app: &str,
        name: &str,
        query: Query,
        options: &SearchOptions,
    ) -> Result<Vec<Hit>> {
        let space = self.space(app, name).await?;
        check_k(options.k)?;
        let loaded = self.load(app, &space).await?;
        let (vector, itself) = match query {
            Query::Vector(v) => {
                space.check(Kind::Item, "(the query)", &v)?;
                (v, None)
            }
            Query::Item(id) => {
                let row = loaded.row_of(&id).ok_or_else(|| {
                    EngineError::NotFound(format!("item '{id}' has no vector in space '{name}'"))
                })?;
                (loaded.matrix.row(row).to_vec(), Some(row))
            }
            Query::User(user) => {
                let vector = self
                    .get(app, name, Kind::User, &user)
                    .await?
                    .ok_or_else(|| {
                        EngineError::NotFound(format!(
                            "user '{user}' has no vector in space '{name}'"
                        ))
                    })?;
                (vector, None)
            }
        };
        let metric = options.metric.unwrap_or(space.metric);
        let queries = [vector];
        let hits = rank(
            loaded,
            metric,
            queries.to_vec(),
            Aggregate::Mean,
            options,
            self.index.ef,
            itself.into_iter().collect(),
        )
        .await;
        Ok(hits)
    }

    /// The items closest to the last `last` items `user` liked (clicked or converted, newest
    /// first, among items with a vector), each scored by the mean or the max of its scores
    /// against them; the liked items themselves are not hits. Returns the liked items used and
    /// the hits. Events before `since` (ms) do not count.
    #[allow(clippy::too_many_arguments)]
    pub async fn similar_to_liked(
        &self,
        app: &str,
        name: &str,
        user: &str,
        last: usize,
        aggregate: Aggregate,
        options: &SearchOptions,
        since: i64,
        negative: &[String],
    ) -> Result<(Vec<String>, Vec<Hit>)> {
        keys::check_user_token(user)?;
        if !(1..=MAX_LIKED).contains(&last) {
            return Err(EngineError::Invalid(format!(
                "last must be between 1 and {MAX_LIKED}"
            )));
        }
        let space = self.space(app, name).await?;
        check_k(options.k)?;
        let loaded = self.load(app, &space).await?;
        let liked_types = [EventType::Click, EventType::Conversion];
        let liked = recent_items(
            &self.store,
            app,
            user,
            since,
            last,
            |event| {
                liked_types.contains(&event.event_type) && !negative.contains(&event.event_name)
            },
            |id| loaded.row_of(id).is_some(),
        )
        .await?;
        let rows: Vec<usize> = liked.iter().filter_map(|id| loaded.row_of(id)).collect();
        if rows.is_empty() {
            return Ok((liked, Vec::new()));
        }
        let queries = rows
            .iter()
            .map(|r| loaded.matrix.row(*r).to_vec())
            .collect();
        let metric = options.metric.unwrap_or(space.metric);
        let hits = rank(
            loaded,
            metric,
            queries,
            aggregate,
            options,
            self.index.ef,
            rows,
        )
        .await;
        Ok((liked, hits))
    }
}

fn check_k(k: usize) -> Result<()> {
    if (1..=MAX_K).contains(&k) {
        Ok(())
    } else {
        Err(EngineError::Invalid(format!(
            "k must be between 1 and {MAX_K}"
        )))
    }
}

/// Rank a loaded space's items against queries: on the runtime's thread for small spaces, on a
/// blocking thread for large ones; through the space's graph (`ef` candidates) where it has one
/// and the search is over all items by the space's metric.
async fn rank(
    loaded: Arc<Loaded>,
    metric: Metric,
    queries: Vec<Vec<f32>>,
    aggregate: Aggregate,
    options: &SearchOptions,
    ef: usize,
    mut skip: Vec<usize>,
) -> Vec<Hit> {
    skip.extend(options.exclude.iter().filter_map(|id| loaded.row_of(id)));
    let skip: HashSet<usize> = skip.into_iter().collect();
    let candidates: Option<Vec<usize>> = options.candidates.as_ref().map(|ids| {
        let mut rows: Vec<usize> = ids
            .iter()
            .filter_map(|id| loaded.row_of(id))
            .filter(|r| !skip.contains(r))
            .collect();
        rows.sort_unstable();
        rows.dedup();
        rows
    });
    let k = options.k;
    let exact = options.exact || metric != loaded.metric;
    let floats = loaded.matrix.len() * loaded.matrix.dim();
    let work = move || {
        let refs: Vec<&[f32]> = queries.iter().map(Vec::as_slice).collect();
        let candidates = match (candidates, loaded.graph()) {
            (None, Some(graph)) if !exact => Some(approximate_candidates(
                graph,
                &loaded.matrix,
                &refs,
                aggregate,
                ef.max(k),
                &skip,
            )),
            (candidates, _) => candidates,
        };
        let top = match &candidates {
            Some(rows) if refs.len() == 1 => loaded.matrix.top_k_among(metric, refs[0], k, rows),
            Some(rows) => {
                let allowed: HashSet<usize> = rows.iter().copied().collect();
                loaded
                    .matrix
                    .top_k_multi(metric, &refs, aggregate, k, |i| !allowed.contains(&i))
            }
            None if refs.len() == 1 => loaded
                .matrix
                .top_k(metric, refs[0], k, |i| skip.contains(&i)),
            None => loaded
                .matrix
                .top_k_multi(metric, &refs, aggregate, k, |i| skip.contains(&i)),
        };
        // Bounded components keep scores finite; a score that is not (a vector stored before
        // components were bounded) ranks below every other, out of the hits: JSON has no
        // infinity, and it would show as `null`.
        top.into_iter()
            .filter(|(_, score)| score.is_finite())
            .map(|(row, score)| Hit {
                object_id: loaded.ids[row].clone(),
                score,
            })
            .collect::<Vec<_>>()
    };
    if floats <= INLINE_FLOATS {
        work()
    } else {
        tokio::task::spawn_blocking(work).await.unwrap_or_default()
    }
}

/// The rows a graph finds for `queries`, sorted: for the mean of dot or cosine scores, those
/// of the one averaged query the exact search scores by; otherwise those of each query.
fn approximate_candidates(
    graph: &Hnsw,
    matrix: &Matrix,
    queries: &[&[f32]],
    aggregate: Aggregate,
    ef: usize,
    skip: &HashSet<usize>,
) -> Vec<usize> {
    let skipped = |row: usize| skip.contains(&row);
    let mut rows: Vec<usize> =
        if queries.len() > 1 && aggregate == Aggregate::Mean && graph.metric() != Metric::Euclidean
        {
            let mean = Matrix::mean_query(graph.metric(), queries);
            graph.search(matrix, &mean, ef, skipped)
        } else {
            queries
                .iter()
                .flat_map(|q| graph.search(matrix, q, ef, skipped))
                .collect()
        }
        .into_iter()
        .map(|(row, _)| row)
        .collect();
    rows.sort_unstable();
    rows.dedup();
    rows
}

fn table_of(kind: Kind) -> &'static str {
    match kind {
        Kind::User => USER_VECTORS_TABLE,
        Kind::Item => ITEM_VECTORS_TABLE,
    }
}

/// The row and qualifier of a user's or item's vector in a space.
fn cell_of(app: &str, space: &str, kind: Kind, id: &str) -> (Bytes, Bytes) {
    match kind {
        Kind::User => (
            keys::user_vectors(app, id),
            Bytes::copy_from_slice(space.as_bytes()),
        ),
        Kind::Item => (
            keys::item_vector(app, space, id),
            Bytes::from_static(ITEM_COLUMN),
        ),
    }
}

fn parse_space(row: &penchant_store::Row) -> Result<Option<Space>> {
    let Some(cell) = row.latest(META, DESCRIPTION) else {
        return Ok(None);
    };
    let mut space: Space =
        serde_json::from_slice(&cell.value).map_err(|e| internal("corrupt space", e))?;
    space.generation = row
        .latest(META, GENERATION)
        .and_then(|c| <[u8; 8]>::try_from(&c.value[..]).ok())
        .map_or(0, u64::from_be_bytes);
    Ok(Some(space))
}

/// A user's items from the newest events back, distinct, up to `limit`: events `accept` takes,
/// items `known` takes, events since `since` (ms). Reads the user's days newest first (the
/// days come from the keys of the user's aggregate rows), so a user with a long history costs
/// the reads of their latest days only.
pub(crate) async fn recent_items(
    store: &Arc<dyn Store>,
    app: &str,
    user: &str,
    since: i64,
    limit: usize,
    accept: impl Fn(&Event) -> bool,
    known: impl Fn(&str) -> bool,
) -> Result<Vec<String>> {
    let keys_only = RowFilter::StripValue.and(RowFilter::CellsPerRowLimit(1));
    let request = ReadRows::new(RowSet::prefix(keys::user(app, user))).filter(keys_only);
    let days = store
        .read_all(crate::aggregates::AGGREGATES_TABLE, request)
        .await?;
    let first_day = crate::aggregates::day_of(since);
    let mut out: Vec<String> = Vec::new();
    for day in days.iter().rev().filter_map(|row| keys::day_of(&row.key)) {
        if day < first_day || out.len() >= limit {
            break;
        }
        let request = ReadRows::new(crate::aggregates::raw_day(app, user, day))
            .filter(RowFilter::column(events::FAMILY, events::EVENT_COLUMN));
        let rows = store.read_all(events::EVENTS_TABLE, request).await?;
        for row in rows.iter().rev() {
            let Some(cell) = row.latest(events::FAMILY, events::EVENT_COLUMN) else {
                continue;
            };
            let event: Event =
                serde_json::from_slice(&cell.value).map_err(|e| internal("corrupt event", e))?;
            if event.timestamp < since || !accept(&event) {
                continue;
            }
            if let Target::ObjectIds(ids) = &event.target {
                for id in ids {
                    if out.len() < limit && known(id) && !out.contains(id) {
                        out.push(id.clone());
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_queries_find_their_candidates_through_the_graph() {
        // Points on a circle; the exact mean-of-cosines and max-of-cosines top 5 of three
        // queries are among the graph's candidates.
        let data: Vec<f32> = (0..720)
            .flat_map(|i| {
                let t = (i as f32).to_radians() / 2.0;
                [t.cos(), t.sin()]
            })
            .collect();
        let matrix = Matrix::from_rows(2, data);
        let graph = Hnsw::build(&matrix, Metric::Cosine, HnswConfig::default());
        let queries: [&[f32]; 3] = [&[1.0, 0.2], &[0.9, 0.5], &[1.0, -0.1]];
        let skip = HashSet::from([10usize, 11]);
        for aggregate in [Aggregate::Mean, Aggregate::Max] {
            let exact = matrix.top_k_multi(Metric::Cosine, &queries, aggregate, 5, |i| {
                skip.contains(&i)
            });
            let rows = approximate_candidates(&graph, &matrix, &queries, aggregate, 20, &skip);
            assert!(
                rows.windows(2).all(|w| w[0] < w[1]),
                "sorted, no duplicates"
            );
            assert!(rows.iter().all(|r| !skip.contains(r)));
            for (row, _) in &exact {
                assert!(rows.contains(row), "{aggregate:?}: {row} not in {rows:?}");
            }
        }
    }
}
