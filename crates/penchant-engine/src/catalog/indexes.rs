//! Indexes as Algolia has them: an index exists once something was written to it (records,
//! settings, a copy or a move), has settings, can be listed, browsed, copied, moved, cleared
//! and deleted.
//!
//! Table `indexes`, row `app 0 · index 0` (the index's record prefix, [`keys::index`]), family
//! `m`: `c` the creation time and `u` the last write's (ms, i64 big-endian), `s` the settings
//! (a JSON object). Every write to an index touches its row before its records are written.
//! Deleting an index deletes its row first, then its records: a move that stops halfway through
//! deleting its source, and is called again, finds no source and leaves the destination as the
//! first call made it (rather than copying a half-deleted source over it); a deletion called
//! again deletes whatever records remain.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{Mutation, ReadRows, RowMutation, RowRange, RowSet, prefix_successor};
use serde_json::{Map, Value};

use super::{COLUMN, Catalog, Record, check_index_name, index_prefix};
use crate::keys;
use crate::{EngineError, Result};
use penchant_model::recommend::filters::Filter;
pub(super) use penchant_model::tables::INDEXES_FAMILY as INDEX_FAMILY;
use penchant_model::tables::{CATALOG_FAMILY as FAMILY, CATALOG_TABLE};
pub use penchant_model::tables::{INDEXES, INDEXES_TABLE};

const CREATED: &[u8] = b"c";
const UPDATED: &[u8] = b"u";
const SETTINGS: &[u8] = b"s";
/// The largest settings object, serialized.
pub const MAX_SETTINGS_BYTES: usize = 100 * 1024;
/// The most records a browse page or a copy round reads.
pub const MAX_BROWSE_HITS: usize = 1000;

/// An index's settings: Algolia's, as given (Penchant reads `attributesForFaceting`).
pub type Settings = Map<String, Value>;

/// What `GET /1/indexes` lists of an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexInfo {
    pub name: String,
    /// ms since the epoch.
    pub created_at: i64,
    pub updated_at: i64,
    /// Records.
    pub entries: u64,
}

/// What a copy takes: Algolia's scopes (`rules` and `synonyms` name nothing Penchant keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope {
    pub records: bool,
    pub settings: bool,
}

impl Scope {
    /// Everything: a copy without a scope.
    pub const ALL: Scope = Scope {
        records: true,
        settings: true,
    };

    /// Algolia's `scope` list: `settings`, `synonyms`, `rules`.
    pub fn parse(names: &[String]) -> Result<Scope> {
        let mut scope = Scope {
            records: false,
            settings: false,
        };
        for name in names {
            match name.as_str() {
                "settings" => scope.settings = true,
                "synonyms" | "rules" => {}
                other => {
                    return Err(EngineError::Invalid(format!(
                        "scope: unknown scope '{other}'; expected settings, synonyms or rules"
                    )));
                }
            }
        }
        Ok(scope)
    }
}

/// A page of a browse.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub hits: Vec<Record>,
    /// The objectID to continue after, when records remain.
    pub next: Option<String>,
}

fn invalid(msg: impl Into<String>) -> EngineError {
    EngineError::Invalid(msg.into())
}

fn ms_cell(ms: i64) -> Bytes {
    Bytes::copy_from_slice(&ms.to_be_bytes())
}

fn ms_of(value: &[u8]) -> i64 {
    value.try_into().map(i64::from_be_bytes).unwrap_or(0)
}

/// Check a settings change: an object of at most [`MAX_SETTINGS_BYTES`], whose
/// `attributesForFaceting` (if given and not `null`) is a list of attribute names, each bare or
/// in one of Algolia's modifiers.
pub fn check_settings(settings: &Settings) -> Result<()> {
    let size = serde_json::to_vec(settings).map_or(usize::MAX, |b| b.len());
    if size > MAX_SETTINGS_BYTES {
        return Err(invalid(format!(
            "settings are too big: {size} bytes, the limit is {MAX_SETTINGS_BYTES}"
        )));
    }
    match settings.get("attributesForFaceting") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(items)) => {
            for item in items {
                let Some(text) = item.as_str() else {
                    return Err(invalid(
                        "attributesForFaceting must be a list of attribute names",
                    ));
                };
                if facet_attribute(text).is_none() {
                    return Err(invalid(format!(
                        "attributesForFaceting: '{text}' is not an attribute name, nor \
                         searchable(attr), filterOnly(attr) or afterDistinctOrdering(attr)"
                    )));
                }
            }
            Ok(())
        }
        Some(_) => Err(invalid(
            "attributesForFaceting must be a list of attribute names",
        )),
    }
}

/// The attribute of an `attributesForFaceting` entry: `brand`, `searchable(brand)`,
/// `filterOnly(brand)` or `afterDistinctOrdering(brand)`.
pub fn facet_attribute(entry: &str) -> Option<&str> {
    let entry = entry.trim();
    let name = ["searchable(", "filterOnly(", "afterDistinctOrdering("]
        .iter()
        .find_map(|m| entry.strip_prefix(m)?.strip_suffix(')'))
        .unwrap_or(entry)
        .trim();
    let ok = !name.is_empty() && !name.contains(['(', ')']);
    ok.then_some(name)
}

impl Catalog {
    /// Mark indexes as written now (created, if they were not): before their records are.
    pub(super) async fn touch(&self, app: &str, indexes: &BTreeSet<&str>) -> Result<()> {
        if indexes.is_empty() {
            return Ok(());
        }
        let existing = self.existing(app, indexes.iter().copied()).await?;
        let now = penchant_store::validate::now_micros() / 1000;
        let batch = indexes
            .iter()
            .map(|index| {
                let mut mutations = vec![Mutation::set_now(INDEX_FAMILY, UPDATED, ms_cell(now))];
                if !existing.contains(*index) {
                    mutations.push(Mutation::set_now(INDEX_FAMILY, CREATED, ms_cell(now)));
                }
                RowMutation::new(keys::index(app, index), mutations)
            })
            .collect();
        Ok(self.store.mutate_all(INDEXES_TABLE, batch).await?)
    }

    /// Which of these indexes exist.
    async fn existing<'a>(
        &self,
        app: &str,
        indexes: impl Iterator<Item = &'a str>,
    ) -> Result<BTreeSet<String>> {
        let rows = RowSet::keys(indexes.map(|i| keys::index(app, i)));
        let request = ReadRows::new(rows).filter(
            penchant_store::RowFilter::StripValue
                .and(penchant_store::RowFilter::CellsPerRowLimit(1)),
        );
        let rows = self.store.read_all(INDEXES_TABLE, request).await?;
        Ok(rows
            .iter()
            .filter_map(|r| keys::index_of(app, &r.key))
            .map(str::to_owned)
            .collect())
    }

    /// Whether an index exists.
    pub async fn exists(&self, app: &str, index: &str) -> Result<bool> {
        check_index_name(index)?;
        Ok(!self.existing(app, [index].into_iter()).await?.is_empty())
    }

    /// An index's settings as set (`None`: no such index).
    pub async fn settings(&self, app: &str, index: &str) -> Result<Option<Settings>> {
        check_index_name(index)?;
        let Some(row) = self
            .store
            .read_row(INDEXES_TABLE, keys::index(app, index), None)
            .await?
        else {
            return Ok(None);
        };
        match row.latest(INDEX_FAMILY, SETTINGS) {
            None => Ok(Some(Settings::new())),
            Some(cell) => serde_json::from_slice(&cell.value)
                .map(Some)
                .map_err(|e| EngineError::Internal(format!("index settings: {e}"))),
        }
    }

    /// Change an index's settings (creating it if needed): each given setting replaces the
    /// stored one, `null` removes it; the others stay.
    pub async fn set_settings(&self, app: &str, index: &str, changes: Settings) -> Result<()> {
        check_index_name(index)?;
        check_settings(&changes)?;
        let mut settings = self.settings(app, index).await?.unwrap_or_default();
        for (name, value) in changes {
            if value.is_null() {
                settings.remove(&name);
            } else {
                settings.insert(name, value);
            }
        }
        check_settings(&settings)?;
        self.write_settings(app, index, &settings).await
    }

    /// An index's settings, read through this node's cache: what serving records reads.
    pub async fn cached_settings(&self, app: &str, index: &str) -> Result<Option<Arc<Settings>>> {
        let key = (app.to_owned(), index.to_owned());
        if let Some(settings) = self.settings.get(&key) {
            return Ok(settings);
        }
        let settings = self.settings(app, index).await?.map(Arc::new);
        self.settings.insert(key, settings.clone());
        Ok(settings)
    }

    fn forget_settings(&self, app: &str, index: &str) {
        self.settings.remove(&(app.to_owned(), index.to_owned()));
    }

    async fn write_settings(&self, app: &str, index: &str, settings: &Settings) -> Result<()> {
        self.touch(app, &BTreeSet::from([index])).await?;
        let value = serde_json::to_vec(settings)
            .map_err(|e| EngineError::Internal(format!("index settings: {e}")))?;
        self.store
            .mutate_row(
                INDEXES_TABLE,
                keys::index(app, index),
                vec![Mutation::set_now(INDEX_FAMILY, SETTINGS, value)],
            )
            .await?;
        self.forget_settings(app, index);
        Ok(())
    }

    /// Every index of an app, by name, with its record count (a keys-only scan of each).
    pub async fn list_indexes(&self, app: &str) -> Result<Vec<IndexInfo>> {
        let request = ReadRows::new(RowSet::prefix(keys::app(app)));
        let rows = self.store.read_all(INDEXES_TABLE, request).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let Some(name) = keys::index_of(app, &row.key) else {
                continue;
            };
            let ms = |column| {
                row.latest(INDEX_FAMILY, column)
                    .map_or(0, |c| ms_of(&c.value))
            };
            out.push(IndexInfo {
                name: name.to_owned(),
                created_at: ms(CREATED),
                updated_at: ms(UPDATED),
                entries: self.object_ids(app, name).await?.len() as u64,
            });
        }
        Ok(out)
    }

    /// Records of an index in objectID order, after `after`, that pass `filter`: at most
    /// `limit` (1 to [`MAX_BROWSE_HITS`]), with where to go on when some may remain.
    pub async fn browse(
        &self,
        app: &str,
        index: &str,
        after: Option<&str>,
        limit: usize,
        filter: Option<&Filter>,
    ) -> Result<Page> {
        check_index_name(index)?;
        let limit = limit.clamp(1, MAX_BROWSE_HITS);
        let mut hits = Vec::new();
        let mut after = after.map(str::to_owned);
        loop {
            let rows = self.scan(app, index, after.as_deref(), limit).await?;
            let full = rows.len() == limit;
            for (id, record) in rows {
                after = Some(id);
                if filter.is_none_or(|f| f.matches(&record)) {
                    hits.push(record);
                    if hits.len() == limit {
                        // A cursor only while records remain.
                        let more = !self.scan(app, index, after.as_deref(), 1).await?.is_empty();
                        let next = after.filter(|_| more);
                        return Ok(Page { hits, next });
                    }
                }
            }
            if !full {
                return Ok(Page { hits, next: None });
            }
        }
    }

    /// Up to `limit` records of an index after `after`, in objectID order.
    async fn scan(
        &self,
        app: &str,
        index: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Record)>> {
        let prefix = index_prefix(app, index);
        let start = match after {
            Some(id) => Bound::Excluded(super::row_key(app, index, id)),
            None => Bound::Included(prefix.clone()),
        };
        let end = match prefix_successor(&prefix) {
            Some(end) => Bound::Excluded(Bytes::from(end)),
            None => Bound::Unbounded,
        };
        let request = ReadRows::new(RowSet::range(RowRange { start, end })).limit(limit as u64);
        let rows = self.store.read_all(CATALOG_TABLE, request).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let Some(id) = row
                .key
                .strip_prefix(&prefix[..])
                .and_then(|id| std::str::from_utf8(id).ok())
            else {
                continue;
            };
            if let Some(cell) = row.latest(FAMILY, COLUMN) {
                let record: Record = serde_json::from_slice(&cell.value)
                    .map_err(|e| EngineError::Internal(format!("record {id}: {e}")))?;
                out.push((id.to_owned(), record));
            }
        }
        Ok(out)
    }

    /// Delete the records of an index that pass `filter` (Algolia's `deleteBy`); returns their
    /// objectIDs.
    pub async fn delete_by(&self, app: &str, index: &str, filter: &Filter) -> Result<Vec<String>> {
        self.touch(app, &BTreeSet::from([index])).await?;
        let mut deleted = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .browse(app, index, after.as_deref(), MAX_BROWSE_HITS, Some(filter))
                .await?;
            let ids: Vec<String> = page
                .hits
                .iter()
                .filter_map(|r| super::object_id_of(r).ok().flatten())
                .collect();
            let batch = ids
                .iter()
                .map(|id| {
                    RowMutation::new(
                        super::row_key(app, index, id),
                        vec![Mutation::DeleteFromRow],
                    )
                })
                .collect();
            self.changing(app, self.store.mutate_all(CATALOG_TABLE, batch))
                .await?;
            deleted.extend(ids);
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(deleted),
            }
        }
    }

    /// Delete an index: its row (settings), then its records. Returns the objectIDs it had.
    pub async fn delete_index(&self, app: &str, index: &str) -> Result<Vec<String>> {
        check_index_name(index)?;
        self.forget_settings(app, index);
        let ids = self.object_ids(app, index).await?;
        self.store
            .mutate_row(
                INDEXES_TABLE,
                keys::index(app, index),
                vec![Mutation::DeleteFromRow],
            )
            .await?;
        let prefix = index_prefix(app, index);
        self.changing(app, self.store.delete_prefix(CATALOG_TABLE, prefix))
            .await?;
        Ok(ids)
    }

    /// Copy `from` onto `to` (Algolia's `copy`): with `scope.records`, `to`'s records become
    /// `from`'s (none if it does not exist); with `scope.settings`, its settings. Returns the
    /// objectIDs `to` had that it no longer has.
    pub async fn copy_index(
        &self,
        app: &str,
        from: &str,
        to: &str,
        scope: Scope,
    ) -> Result<Vec<String>> {
        check_index_name(from)?;
        check_index_name(to)?;
        if from == to {
            return Err(invalid("destination must be another index than the source"));
        }
        if scope.settings {
            let settings = self.settings(app, from).await?.unwrap_or_default();
            self.write_settings(app, to, &settings).await?;
        } else {
            self.touch(app, &BTreeSet::from([to])).await?;
        }
        if !scope.records {
            return Ok(Vec::new());
        }
        let before: BTreeSet<String> = self.object_ids(app, to).await?.into_iter().collect();
        let prefix = index_prefix(app, to);
        self.changing(app, self.store.delete_prefix(CATALOG_TABLE, prefix))
            .await?;
        let mut copied = BTreeSet::new();
        let mut after: Option<String> = None;
        loop {
            let rows = self
                .scan(app, from, after.as_deref(), MAX_BROWSE_HITS)
                .await?;
            let full = rows.len() == MAX_BROWSE_HITS;
            let mut batch = Vec::with_capacity(rows.len());
            for (id, record) in rows {
                let bytes = super::encode(&record)?;
                batch.push(RowMutation::new(
                    super::row_key(app, to, &id),
                    vec![Mutation::set_now(FAMILY, COLUMN, bytes)],
                ));
                copied.insert(id.clone());
                after = Some(id);
            }
            self.changing(app, self.store.mutate_all(CATALOG_TABLE, batch))
                .await?;
            if !full {
                break;
            }
        }
        Ok(before.difference(&copied).cloned().collect())
    }
}
