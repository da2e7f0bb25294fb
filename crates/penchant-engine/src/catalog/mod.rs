//! Catalog: the records of an app's indexes, and the facet values their attributes give.
//!
//! A record is a JSON object with an `objectID`, stored whole in one cell of table `catalog`
//! under `app | index 0x00 | objectID`. Writes are applied when the request returns (Algolia's
//! tasks are therefore always `published`). Facet values come from every attribute: strings,
//! numbers and booleans, arrays of them, and nested objects by dotted path (`categories.lvl0`).
//! Attribute names are at most [`MAX_ATTRIBUTE_PATH_BYTES`] by dotted path (each is part of a
//! store qualifier); strings longer than [`MAX_FACET_VALUE_BYTES`] are not facet values.
//!
//! A request's writes are all or nothing: they are checked, and played on the records they
//! read, before the first is written.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{Mutation, RowMutation, RowSet, Store};
use rand::Rng;
use serde_json::Value;

use crate::keys;
use crate::{EngineError, Result};

mod indexes;

pub use self::indexes::{
    INDEXES, INDEXES_TABLE, IndexInfo, MAX_BROWSE_HITS, Page, Scope, Settings, check_settings,
    facet_attribute,
};
use penchant_model::tables::CATALOG_FAMILY as FAMILY;
pub use penchant_model::tables::{CATALOG, CATALOG_TABLE};

const COLUMN: &[u8] = b"o";
pub use penchant_model::catalog::{
    MAX_ATTRIBUTE_PATH_BYTES, MAX_FACET_VALUE_BYTES, MAX_INDEX_NAME_BYTES, MAX_OBJECT_ID_BYTES,
    MAX_RECORD_BYTES, OPERATIONS, PartialUpdate, Record, apply_partial, check_index_name,
    check_object_id, facet_values,
};
use penchant_model::catalog::{check_record, encode, object_id_of};

fn invalid(msg: impl Into<String>) -> EngineError {
    EngineError::Invalid(msg.into())
}

fn index_prefix(app: &str, index: &str) -> Bytes {
    keys::index(app, index)
}

fn row_key(app: &str, index: &str, object_id: &str) -> Bytes {
    keys::record(app, index, object_id)
}

/// One write to an index.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Add or replace a record (an objectID is generated when the record has none).
    Put(Record),
    /// Change some attributes of a record (with Algolia's `_operation`s); `create` makes it if
    /// it does not exist.
    Partial { record: Record, create: bool },
    /// Delete a record.
    Delete(String),
    /// Delete every record of the index.
    Clear,
}

/// Indexes' settings by (app, index), `None` for an index that does not exist.
type SettingsCache = crate::cache::TtlCache<(String, String), Option<Arc<Settings>>>;

/// The catalog of every app.
#[derive(Debug, Clone)]
pub struct Catalog {
    store: Arc<dyn Store>,
    /// Indexes' settings as this node last read them (for serving records).
    settings: Arc<SettingsCache>,
    /// Items' facet values as this node last read them, for counting events; `None` unless
    /// every catalog write goes through this node ([`Catalog::cache_facets`]).
    facets: Option<Arc<FacetsCache>>,
}

/// The facet values of one item.
pub type ItemFacets = Arc<[(String, String)]>;

/// Items' facet values (`None`: no such record), each stamped with its app's catalog
/// generation when it was read: a catalog write bumps the generation (after writing), so an
/// entry read before it is never used after it.
#[derive(Debug)]
struct FacetsCache {
    items: quick_cache::sync::Cache<(String, String, String), (u64, Option<ItemFacets>)>,
    generations: parking_lot::RwLock<std::collections::HashMap<String, u64>>,
}

impl FacetsCache {
    fn generation(&self, app: &str) -> u64 {
        self.generations.read().get(app).copied().unwrap_or(0)
    }

    fn bump(&self, app: &str) {
        *self.generations.write().entry(app.to_owned()).or_default() += 1;
    }
}

/// Items whose facet values a node keeps ([`Catalog::cache_facets`]).
const FACETS_CACHED: usize = 200_000;

fn generated_id() -> String {
    let mut rng = rand::rng();
    (0..16)
        .map(|_| char::from(b"0123456789abcdef"[rng.random_range(0..16)]))
        .collect()
}

impl Catalog {
    /// The catalog over `store`; settings read to serve records are trusted for `settings_ttl`
    /// (a change through another node shows within it).
    pub fn new(
        store: Arc<dyn Store>,
        settings_ttl: std::time::Duration,
        clock: crate::clock::Clock,
    ) -> Self {
        Self {
            store,
            settings: Arc::new(SettingsCache::new(10_000, settings_ttl, clock)),
            facets: None,
        }
    }

    /// Keep items' facet values in memory for counting events: only where every write to the
    /// catalog goes through this node (the embedded store, which one process holds), since a
    /// write elsewhere would not reach the cache.
    pub fn cache_facets(mut self) -> Self {
        self.facets = Some(Arc::new(FacetsCache {
            items: quick_cache::sync::Cache::new(FACETS_CACHED),
            generations: Default::default(),
        }));
        self
    }

    /// A write to an app's catalog: once it is done (or failed, maybe half-done), the facets
    /// cached before it are not used again.
    pub(crate) async fn changing<T, E: Into<crate::EngineError>>(
        &self,
        app: &str,
        write: impl std::future::Future<Output = std::result::Result<T, E>>,
    ) -> Result<T> {
        let written = write.await;
        if let Some(cache) = &self.facets {
            cache.bump(app);
        }
        written.map_err(Into::into)
    }

    /// The facet values ([`facet_values`]) of some items of one index, as their records are
    /// now; items without a record are left out.
    pub async fn facets_many(
        &self,
        app: &str,
        index: &str,
        object_ids: &[String],
    ) -> Result<BTreeMap<String, ItemFacets>> {
        let Some(cache) = &self.facets else {
            let records = self.get_many(app, index, object_ids).await?;
            return Ok(records
                .into_iter()
                .map(|(id, record)| (id, facet_values(&record).into()))
                .collect());
        };
        let generation = cache.generation(app);
        let mut out = BTreeMap::new();
        let mut missing = Vec::new();
        for id in object_ids {
            let key = (app.to_owned(), index.to_owned(), id.clone());
            match cache.items.get(&key) {
                Some((g, facets)) if g == generation => {
                    if let Some(facets) = facets {
                        out.insert(id.clone(), facets);
                    }
                }
                _ => missing.push(id.clone()),
            }
        }
        if missing.is_empty() {
            return Ok(out);
        }
        let mut records = self.get_many(app, index, &missing).await?;
        for id in missing {
            let facets: Option<ItemFacets> = records.remove(&id).map(|r| facet_values(&r).into());
            if let Some(facets) = &facets {
                out.insert(id.clone(), facets.clone());
            }
            if check_object_id(&id).is_ok() {
                let key = (app.to_owned(), index.to_owned(), id);
                cache.items.insert(key, (generation, facets));
            }
        }
        Ok(out)
    }

    /// One record.
    pub async fn get(&self, app: &str, index: &str, object_id: &str) -> Result<Option<Record>> {
        check_index_name(index)?;
        if check_object_id(object_id).is_err() {
            return Ok(None);
        }
        let row = self
            .store
            .read_row(CATALOG_TABLE, row_key(app, index, object_id), None)
            .await?;
        row.and_then(|r| r.latest(FAMILY, COLUMN).map(|c| c.value.clone()))
            .map(|v| serde_json::from_slice(&v).map_err(|e| invalid(e.to_string())))
            .transpose()
    }

    /// The objectIDs of every record of an index (keys only).
    pub async fn object_ids(&self, app: &str, index: &str) -> Result<Vec<String>> {
        check_index_name(index)?;
        let prefix = index_prefix(app, index);
        self.ids(app, index, RowSet::prefix(prefix), None).await
    }

    /// Which of these objectIDs have a record in the index (keys only, one read).
    pub async fn present(
        &self,
        app: &str,
        index: &str,
        object_ids: &[String],
    ) -> Result<std::collections::HashSet<String>> {
        check_index_name(index)?;
        let keys: Vec<Bytes> = object_ids
            .iter()
            .filter(|id| check_object_id(id).is_ok())
            .map(|id| row_key(app, index, id))
            .collect();
        if keys.is_empty() {
            return Ok(Default::default());
        }
        let ids = self.ids(app, index, RowSet::keys(keys), None).await?;
        Ok(ids.into_iter().collect())
    }

    /// The objectIDs of an index's first `n` records, in key order (keys only).
    pub async fn first_ids(&self, app: &str, index: &str, n: usize) -> Result<Vec<String>> {
        check_index_name(index)?;
        let prefix = index_prefix(app, index);
        self.ids(app, index, RowSet::prefix(prefix), Some(n as u64))
            .await
    }

    /// The objectIDs of the records of `index` among `rows`, reading keys only.
    async fn ids(
        &self,
        app: &str,
        index: &str,
        rows: RowSet,
        limit: Option<u64>,
    ) -> Result<Vec<String>> {
        let keys_only = penchant_store::RowFilter::StripValue
            .and(penchant_store::RowFilter::CellsPerRowLimit(1));
        let mut request = penchant_store::ReadRows::new(rows).filter(keys_only);
        if let Some(limit) = limit {
            request = request.limit(limit);
        }
        let prefix = index_prefix(app, index);
        let rows = self.store.read_all(CATALOG_TABLE, request).await?;
        Ok(rows
            .iter()
            .filter_map(|r| std::str::from_utf8(r.key.strip_prefix(&prefix[..])?).ok())
            .map(str::to_owned)
            .collect())
    }

    /// Several records of one index at once (missing ones are left out).
    pub async fn get_many(
        &self,
        app: &str,
        index: &str,
        object_ids: &[String],
    ) -> Result<BTreeMap<String, Record>> {
        check_index_name(index)?;
        let keys: Vec<Bytes> = object_ids
            .iter()
            .filter(|id| check_object_id(id).is_ok())
            .map(|id| row_key(app, index, id))
            .collect();
        if keys.is_empty() {
            return Ok(BTreeMap::new());
        }
        let rows = self
            .store
            .read_all(
                CATALOG_TABLE,
                penchant_store::ReadRows::new(RowSet::keys(keys)),
            )
            .await?;
        let mut out = BTreeMap::new();
        for row in rows {
            if let Some(c) = row.latest(FAMILY, COLUMN) {
                let record: Record =
                    serde_json::from_slice(&c.value).map_err(|e| invalid(e.to_string()))?;
                if let Some(id) = object_id_of(&record)? {
                    out.insert(id, record);
                }
            }
        }
        Ok(out)
    }

    /// Apply writes to an app's indexes, in order; returns the objectID of each write (empty
    /// for `Clear`). All or nothing: every write is checked (partial updates' operations
    /// included) and the whole request played on the records it reads before anything is
    /// written, so a bad write anywhere, or a partial update that fails on its record (an
    /// overflow), writes nothing.
    pub async fn apply(&self, app: &str, writes: Vec<(String, Write)>) -> Result<Vec<String>> {
        enum Planned {
            Put(Record, Bytes),
            Partial(PartialUpdate, bool),
            Delete,
            Clear,
        }
        // Check and parse every write, reading nothing.
        let mut planned: Vec<(String, String, Planned)> = Vec::with_capacity(writes.len());
        for (index, write) in writes {
            check_index_name(&index)?;
            let (id, plan) = match write {
                Write::Put(mut record) => {
                    let id = object_id_of(&record)?.unwrap_or_else(generated_id);
                    record.insert("objectID".into(), Value::String(id.clone()));
                    let bytes = check_record(&record)?;
                    (id, Planned::Put(record, bytes))
                }
                Write::Partial { record, create } => {
                    let id = object_id_of(&record)?
                        .ok_or_else(|| invalid("Missing objectID in a partial update"))?;
                    (id, Planned::Partial(PartialUpdate::parse(&record)?, create))
                }
                Write::Delete(id) => {
                    check_object_id(&id)?;
                    (id, Planned::Delete)
                }
                Write::Clear => (String::new(), Planned::Clear),
            };
            planned.push((index, id, plan));
        }
        // The records partial updates start from, as stored.
        let mut targets: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (index, id, plan) in &planned {
            if let Planned::Partial(..) = plan {
                targets.entry(index).or_default().push(id.clone());
            }
        }
        let mut stored: BTreeMap<(String, String), Record> = BTreeMap::new();
        for (index, ids) in targets {
            for (id, record) in self.get_many(app, index, &ids).await? {
                stored.insert((index.to_owned(), id), record);
            }
        }
        // Play the request: the final state of each record it touches (`None`: deleted), and
        // the indexes it clears.
        let mut state: BTreeMap<(String, String), Option<(Record, Bytes)>> = BTreeMap::new();
        let mut cleared: Vec<String> = Vec::new();
        let mut ids = Vec::with_capacity(planned.len());
        let written: std::collections::BTreeSet<String> =
            planned.iter().map(|(index, _, _)| index.clone()).collect();
        for (index, id, plan) in planned {
            let key = (index, id);
            match plan {
                Planned::Put(record, bytes) => {
                    state.insert(key.clone(), Some((record, bytes)));
                }
                Planned::Partial(update, create) => {
                    let current = match state.get(&key) {
                        Some(s) => s.as_ref().map(|(r, _)| r.clone()),
                        None if cleared.contains(&key.0) => None,
                        None => stored.get(&key).cloned(),
                    };
                    let base = match (current, create) {
                        (Some(r), _) => Some(r),
                        (None, true) => Some(Record::new()),
                        (None, false) => None,
                    };
                    if let Some(mut updated) = base.map(|b| update.apply(b)).transpose()?.flatten()
                    {
                        updated.insert("objectID".into(), Value::String(key.1.clone()));
                        let bytes = check_record(&updated)?;
                        state.insert(key.clone(), Some((updated, bytes)));
                    }
                }
                Planned::Delete => {
                    state.insert(key.clone(), None);
                }
                Planned::Clear => {
                    state.retain(|(index, _), _| *index != key.0);
                    if !cleared.contains(&key.0) {
                        cleared.push(key.0.clone());
                    }
                }
            }
            ids.push(key.1);
        }
        // Write it: the indexes' rows (they exist from now on), the cleared indexes, then each
        // record's final state.
        let touched: std::collections::BTreeSet<&str> =
            written.iter().map(String::as_str).collect();
        self.touch(app, &touched).await?;
        for index in &cleared {
            let prefix = index_prefix(app, index);
            self.changing(app, self.store.delete_prefix(CATALOG_TABLE, prefix))
                .await?;
        }
        let batch: Vec<RowMutation> = state
            .into_iter()
            .map(|((index, id), record)| {
                let mutation = match record {
                    Some((_, bytes)) => Mutation::set_now(FAMILY, COLUMN, bytes),
                    None => Mutation::DeleteFromRow,
                };
                RowMutation::new(row_key(app, &index, &id), vec![mutation])
            })
            .collect();
        self.flush(app, batch).await?;
        Ok(ids)
    }

    async fn flush(&self, app: &str, batch: Vec<RowMutation>) -> Result<()> {
        let written = async {
            for chunk in batch.chunks(1000) {
                for status in self
                    .store
                    .mutate_rows(CATALOG_TABLE, chunk.to_vec())
                    .await?
                {
                    status?;
                }
            }
            Ok::<_, penchant_store::StoreError>(())
        };
        self.changing(app, written).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(v: Value) -> Record {
        v.as_object().unwrap().clone()
    }

    #[tokio::test]
    async fn a_request_is_all_or_nothing() {
        let store: Arc<dyn Store> = Arc::new(penchant_store::MemStore::new());
        crate::tables::create(&*store, &[CATALOG, INDEXES])
            .await
            .unwrap();
        let c = Catalog::new(
            store,
            std::time::Duration::ZERO,
            crate::clock::Clock::default(),
        );
        let put = |v: Value| Write::Put(record(v));
        let partial = |v: Value| Write::Partial {
            record: record(v),
            create: true,
        };
        let items = |w: Write| ("items".to_owned(), w);
        c.apply(
            "APP",
            vec![
                items(put(json!({"objectID": "x", "n": 1.0e308}))),
                items(put(json!({"objectID": "d"}))),
                ("other".into(), put(json!({"objectID": "o"}))),
            ],
        )
        .await
        .unwrap();
        let big = json!({"objectID": "x", "n": {"_operation": "Increment", "value": 1.0e308}});
        // A bad operation, or an overflow that only the stored record shows, after writes and
        // a clear of another index: nothing is written.
        for last in [
            partial(json!({"objectID": "y", "n": {"_operation": "Nope"}})),
            partial(big.clone()),
        ] {
            let r = c
                .apply(
                    "APP",
                    vec![
                        items(put(json!({"objectID": "new"}))),
                        ("other".into(), Write::Clear),
                        items(Write::Delete("d".into())),
                        items(partial(
                            json!({"objectID": "x", "n": {"_operation": "Increment", "value": 1}}),
                        )),
                        items(last),
                    ],
                )
                .await;
            assert!(matches!(r, Err(EngineError::Invalid(_))), "{r:?}");
            assert!(c.get("APP", "items", "new").await.unwrap().is_none());
            assert!(c.get("APP", "items", "d").await.unwrap().is_some());
            assert_eq!(
                c.get("APP", "items", "x").await.unwrap().unwrap()["n"],
                1.0e308
            );
            assert!(c.get("APP", "other", "o").await.unwrap().is_some());
        }
        // Partial updates see the request's earlier writes, and a clear.
        let ids = c
            .apply(
                "APP",
                vec![
                    items(put(json!({"objectID": "new", "n": 1}))),
                    items(partial(
                        json!({"objectID": "new", "n": {"_operation": "Increment", "value": 2}}),
                    )),
                    ("other".into(), Write::Clear),
                    ("other".into(), partial(json!({"objectID": "o", "k": 1}))),
                    items(Write::Delete("x".into())),
                    items(partial(
                        json!({"objectID": "x", "n": {"_operation": "IncrementSet", "value": 0}}),
                    )),
                ],
            )
            .await
            .unwrap();
        assert_eq!(ids, ["new", "new", "", "o", "x", "x"]);
        assert_eq!(c.get("APP", "items", "new").await.unwrap().unwrap()["n"], 3);
        assert_eq!(
            Value::Object(c.get("APP", "other", "o").await.unwrap().unwrap()),
            json!({"objectID": "o", "k": 1})
        );
        assert!(
            c.get("APP", "items", "x").await.unwrap().is_none(),
            "not created"
        );
    }

    #[tokio::test]
    async fn writes_and_reads() {
        let store: Arc<dyn Store> = Arc::new(penchant_store::MemStore::new());
        crate::tables::create(&*store, &[CATALOG, INDEXES])
            .await
            .unwrap();
        let c = Catalog::new(
            store,
            std::time::Duration::ZERO,
            crate::clock::Clock::default(),
        );
        let ids = c
            .apply(
                "APP",
                vec![
                    (
                        "items".into(),
                        Write::Put(record(json!({"objectID": "a", "brand": "X"}))),
                    ),
                    ("items".into(), Write::Put(record(json!({"brand": "Y"})))),
                    (
                        "items".into(),
                        Write::Partial {
                            record: record(json!({"objectID": "a", "size": 2})),
                            create: false,
                        },
                    ),
                    (
                        "items".into(),
                        Write::Partial {
                            record: record(json!({"objectID": "zz", "size": 2})),
                            create: false,
                        },
                    ),
                ],
            )
            .await
            .unwrap();
        assert_eq!(ids[0], "a");
        assert_eq!(ids[1].len(), 16, "generated objectID");
        let a = c.get("APP", "items", "a").await.unwrap().unwrap();
        assert_eq!(
            Value::Object(a),
            json!({"objectID": "a", "brand": "X", "size": 2})
        );
        assert!(
            c.get("APP", "items", "zz").await.unwrap().is_none(),
            "no create"
        );
        assert!(
            c.get("OTHER", "items", "a").await.unwrap().is_none(),
            "per app"
        );
        // A bad write anywhere in the list applies nothing.
        let r = c
            .apply(
                "APP",
                vec![
                    ("items".into(), Write::Delete("a".into())),
                    (
                        "items".into(),
                        Write::Put(record(json!({"objectID": ["bad"]}))),
                    ),
                ],
            )
            .await;
        assert!(matches!(r, Err(EngineError::Invalid(_))));
        assert!(c.get("APP", "items", "a").await.unwrap().is_some());
        let many = c
            .get_many("APP", "items", &["a".into(), ids[1].clone(), "nope".into()])
            .await
            .unwrap();
        assert_eq!(many.len(), 2);
        c.apply("APP", vec![("items".into(), Write::Clear)])
            .await
            .unwrap();
        assert!(c.get("APP", "items", "a").await.unwrap().is_none());
    }
}
