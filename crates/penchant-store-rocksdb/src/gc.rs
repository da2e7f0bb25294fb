//! Garbage collection: a RocksDB compaction filter that drops the cells of deleted tables and
//! dropped families, and the cells the GC rules expire.
//!
//! The filter ranks each cell among the versions of its column that the compaction has passed
//! (keys come in order, the newest version of a column first), and drops it if its rule
//! expires it at that rank. A version it drops under a newer one was hidden by it while both
//! lived: a write that deletes from a column deletes, in the same batch, every version its rule
//! already hides (`delete_hidden_versions` in `write.rs`), so a version never comes back from
//! under a deleted one. A compaction that misses some newer versions ranks a cell too high,
//! never too low: it keeps what a full ranking would drop, and reads apply every rule exactly.
//!
//! A dead version the filter counts would rank a live one too low: a cell written under a
//! newer version deleted before it. RocksDB calls the filter on the cells a range tombstone
//! covers (it applies range tombstones after the filter), so the store records each range
//! tombstone it writes, in the batch that writes it ([`Ranking`]), and the filter ranks no
//! version under one until a compaction of its range that started after it was written has
//! dropped it (the compactor thread runs one at once). A point tombstone hides its cell from
//! the filter when both are in the compaction; where a file boundary falls between a deleted
//! version and one written under it later, a compaction may take the old version's file without
//! the tombstone's, and rank the later one out: a narrow case this does not close (files that
//! keep each row whole would).

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, CString};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use penchant_store::validate::now_micros;
use penchant_store::{GcRule, Result, StoreError};
use rocksdb::compaction_filter::{CompactionFilter, Decision};
use rocksdb::compaction_filter_factory::{CompactionFilterContext, CompactionFilterFactory};
use rocksdb::{ColumnFamily, DB, WriteBatch};

use crate::schema::Catalog;
use crate::{backend, keys};

/// Where the `meta` column family records the range tombstones not yet compacted away.
const DROPPED_PREFIX: &[u8] = b"dropped/";

/// A range of stored keys, `[start, end)`; no end: to the last key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeyRange {
    pub start: Vec<u8>,
    pub end: Option<Vec<u8>>,
}

impl KeyRange {
    pub fn new(start: Option<&[u8]>, end: Option<&[u8]>) -> Self {
        KeyRange {
            start: start.map(<[u8]>::to_vec).unwrap_or_default(),
            end: end.map(<[u8]>::to_vec),
        }
    }

    fn contains(&self, key: &[u8]) -> bool {
        key >= &self.start[..] && self.end.as_ref().is_none_or(|end| key < &end[..])
    }

    fn covers(&self, other: &KeyRange) -> bool {
        other.start >= self.start
            && match (&self.end, &other.end) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(end), Some(other)) => other <= end,
            }
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = (self.start.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&self.start);
        if let Some(end) = &self.end {
            out.extend_from_slice(end);
        }
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let len = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        let start = bytes.get(4..4 + len)?.to_vec();
        let end = bytes.get(4 + len..)?;
        // A range tombstone always has an end (a stored key range is never unbounded).
        (!end.is_empty()).then(|| KeyRange {
            start,
            end: Some(end.to_vec()),
        })
    }
}

/// A range tombstone the store wrote, and whether its write has ended (a compaction that
/// starts later sees it).
#[derive(Debug)]
struct Dropped {
    range: KeyRange,
    written: bool,
}

/// The range tombstones no compaction has dropped yet: the filter ranks no version under them
/// (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct Ranking {
    dropped: Mutex<BTreeMap<u64, Dropped>>,
}

impl Ranking {
    /// Load the range tombstones an earlier run recorded and no compaction has dropped (before
    /// the catalog: until it is loaded, filters keep every cell).
    pub fn load(&self, db: &DB, meta: &ColumnFamily) -> Result<()> {
        let mut dropped = self.dropped.lock();
        for item in db.prefix_iterator_cf(meta, DROPPED_PREFIX) {
            let (k, v) = item.map_err(backend)?;
            if !k.starts_with(DROPPED_PREFIX) {
                break;
            }
            let corrupt = || StoreError::Backend("corrupt range tombstone record".into());
            let id = k[DROPPED_PREFIX.len()..]
                .try_into()
                .map(u64::from_be_bytes)
                .map_err(|_| corrupt())?;
            let range = KeyRange::decode(&v).ok_or_else(corrupt)?;
            dropped.insert(
                id,
                Dropped {
                    range,
                    written: true,
                },
            );
        }
        Ok(())
    }

    /// A ranking loaded from `db` (tests).
    #[cfg(test)]
    fn loaded(db: &DB, meta: &ColumnFamily) -> Self {
        let ranking = Ranking::default();
        ranking.load(db, meta).unwrap();
        ranking
    }

    /// Record range tombstones a batch is about to write, in the batch itself; the ids to
    /// [`Ranking::settle`] once the write has ended.
    pub fn record(
        &self,
        ranges: Vec<KeyRange>,
        batch: &mut WriteBatch,
        meta: &ColumnFamily,
    ) -> Vec<u64> {
        let mut dropped = self.dropped.lock();
        let first = dropped.last_key_value().map_or(0, |(id, _)| id + 1);
        let mut ids = Vec::with_capacity(ranges.len());
        for (id, range) in (first..).zip(ranges) {
            batch.put_cf(meta, record_key(id), range.encode());
            let written = false;
            dropped.insert(id, Dropped { range, written });
            ids.push(id);
        }
        ids
    }

    /// The write of recorded range tombstones has ended: written, or failed (nothing of the
    /// batch was written).
    pub fn settle(&self, ids: &[u64], written: bool) {
        let mut dropped = self.dropped.lock();
        for id in ids {
            if written {
                if let Some(d) = dropped.get_mut(id) {
                    d.written = true;
                }
            } else {
                dropped.remove(id);
            }
        }
    }

    /// The ranges of the written range tombstones, for the compactor.
    pub fn written(&self) -> Vec<KeyRange> {
        let dropped = self.dropped.lock();
        dropped
            .values()
            .filter(|d| d.written)
            .map(|d| d.range.clone())
            .collect()
    }

    /// Run a manual compaction of `range` (it compacts every level of the range, down to the
    /// last), then forget the range tombstones within it that were written before it started:
    /// it dropped them, and the cells under them.
    pub fn compact(
        &self,
        range: KeyRange,
        db: &DB,
        meta: &ColumnFamily,
        compact: impl FnOnce(),
    ) -> Result<()> {
        let before: Vec<u64> = {
            let dropped = self.dropped.lock();
            dropped
                .iter()
                .filter(|(_, d)| d.written && range.covers(&d.range))
                .map(|(id, _)| *id)
                .collect()
        };
        compact();
        if before.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::default();
        for id in &before {
            batch.delete_cf(meta, record_key(*id));
        }
        db.write(batch).map_err(backend)?;
        let mut dropped = self.dropped.lock();
        for id in before {
            dropped.remove(&id);
        }
        Ok(())
    }

    /// How many range tombstones are recorded.
    pub fn unranked_count(&self) -> usize {
        self.dropped.lock().len()
    }

    /// The ranges where a compaction starting now may not rank versions.
    fn unranked(&self) -> Vec<KeyRange> {
        let dropped = self.dropped.lock();
        dropped.values().map(|d| d.range.clone()).collect()
    }
}

fn record_key(id: u64) -> Vec<u8> {
    [DROPPED_PREFIX, &id.to_be_bytes()].concat()
}

/// Makes one [`GcFilter`] per compaction, with a snapshot of the rules.
pub struct GcFilterFactory {
    catalog: Arc<RwLock<Catalog>>,
    ranking: Arc<Ranking>,
    name: CString,
}

impl GcFilterFactory {
    pub fn new(catalog: Arc<RwLock<Catalog>>, ranking: Arc<Ranking>) -> Self {
        Self {
            catalog,
            ranking,
            name: CString::new("penchant-gc-factory").unwrap_or_default(),
        }
    }
}

impl CompactionFilterFactory for GcFilterFactory {
    type Filter = GcFilter;

    fn create(&mut self, _context: CompactionFilterContext) -> GcFilter {
        GcFilter::new(&self.catalog.read(), self.ranking.unranked())
    }

    fn name(&self) -> &CStr {
        &self.name
    }
}

/// The filter of one compaction.
pub struct GcFilter {
    /// GC rules by table id and family id; `None` keeps every cell.
    rules: Option<HashMap<u32, HashMap<u16, GcRule>>>,
    now: i64,
    /// Where no cell is dropped for its rank among its column's versions: under range
    /// tombstones.
    unranked: Vec<KeyRange>,
    /// The column of the last cell judged, and how many of its versions came before it.
    column: Vec<u8>,
    rank: usize,
    name: CString,
}

impl GcFilter {
    fn new(catalog: &Catalog, unranked: Vec<KeyRange>) -> Self {
        GcFilter {
            // Before the catalog is loaded every table looks deleted: keep everything.
            rules: catalog.loaded.then(|| catalog.gc_rules()),
            now: now_micros(),
            unranked,
            column: Vec::new(),
            rank: 0,
            name: CString::new("penchant-gc").unwrap_or_default(),
        }
    }

    fn decide(&mut self, key: &[u8]) -> Decision {
        let (Some(cell), Some(rules)) = (keys::parse(key), &self.rules) else {
            return Decision::Keep;
        };
        if cell.column == self.column {
            self.rank += 1;
        } else {
            self.column.clear();
            self.column.extend_from_slice(cell.column);
            self.rank = 0;
        }
        match rules.get(&cell.table).map(|t| t.get(&cell.family)) {
            // A deleted table, or a dropped family.
            None | Some(None) => Decision::Remove,
            // Expired by its age alone, or by its rank where no range tombstone may hide
            // a newer version counted.
            Some(Some(rule))
                if rule.expires(cell.timestamp, 0, self.now)
                    || (rule.expires(cell.timestamp, self.rank, self.now)
                        && !self.unranked.iter().any(|r| r.contains(key))) =>
            {
                Decision::Remove
            }
            Some(Some(_)) => Decision::Keep,
        }
    }
}

impl CompactionFilter for GcFilter {
    fn filter(&mut self, _level: u32, key: &[u8], _value: &[u8]) -> Decision {
        self.decide(key)
    }

    fn name(&self) -> &CStr {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(table: u32) -> Vec<u8> {
        cell(table, b"q", 1000)
    }

    fn cell(table: u32, qualifier: &[u8], ts: i64) -> Vec<u8> {
        keys::cell_key(&keys::row_start(table, b"row"), 0, qualifier, ts)
    }

    #[test]
    fn nothing_is_judged_before_the_catalog_is_loaded() {
        // A compaction RocksDB starts while opening sees an empty catalog: every table would
        // look deleted.
        let mut catalog = Catalog::default();
        assert!(matches!(
            GcFilter::new(&catalog, Vec::new()).decide(&key(3)),
            Decision::Keep
        ));
        catalog.loaded = true;
        assert!(matches!(
            GcFilter::new(&catalog, Vec::new()).decide(&key(3)),
            Decision::Remove
        ));
    }

    /// A catalog with table 3 whose family 0 keeps one version.
    fn one_version() -> Catalog {
        let mut catalog = Catalog {
            loaded: true,
            ..Catalog::default()
        };
        let families = [("f".to_owned(), GcRule::MaxVersions(1))].into();
        let meta = crate::schema::TableMeta::new(3, "t", families).unwrap();
        catalog
            .by_name
            .insert("t".into(), Arc::new(crate::schema::Table::new(meta)));
        catalog
    }

    /// Which of a column's three versions, and of a later column's one, the filter keeps.
    fn kept(unranked: Vec<KeyRange>) -> Vec<bool> {
        let mut filter = GcFilter::new(&one_version(), unranked);
        // In key order: a column's versions newest first, then the next column's.
        [cell(3, b"a", 30), cell(3, b"a", 20), cell(3, b"a", 10)]
            .into_iter()
            .chain([cell(3, b"b", 5)])
            .map(|k| matches!(filter.decide(&k), Decision::Keep))
            .collect()
    }

    #[test]
    fn versions_past_the_limit_are_dropped_as_the_compaction_ranks_them() {
        assert_eq!(kept(Vec::new()), [true, false, false, true]);
    }

    #[test]
    fn no_version_is_ranked_under_a_range_tombstone_not_yet_compacted_away() {
        let row = keys::row_start(3, b"row");
        let column_b = keys::column_prefix(&row, 0, b"b");
        let tombstone = KeyRange::new(Some(&row), Some(&column_b));
        assert_eq!(kept(vec![tombstone]), [true; 4]);
        let elsewhere = KeyRange::new(Some(&column_b), None);
        assert_eq!(kept(vec![elsewhere]), [true, false, false, true]);
    }

    #[test]
    fn a_range_tombstone_is_forgotten_by_a_compaction_that_started_after_its_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let db = DB::open_cf(&opts, dir.path(), ["meta"]).unwrap();
        let meta = db.cf_handle("meta").unwrap();
        let ranking = Ranking::default();
        let range = |a: &[u8], b: &[u8]| KeyRange::new(Some(a), Some(b));
        let mut batch = WriteBatch::default();
        let ids = ranking.record(vec![range(b"b", b"c")], &mut batch, meta);
        // Being written: compactions keep out from under it, the compactor does not take it
        // yet, and a compaction started now does not drop it.
        assert_eq!(ranking.unranked(), [range(b"b", b"c")]);
        assert!(ranking.written().is_empty());
        ranking
            .compact(KeyRange::default(), &db, meta, || {})
            .unwrap();
        assert_eq!(ranking.dropped.lock().len(), 1);
        db.write(batch).unwrap();
        ranking.settle(&ids, true);
        assert_eq!(ranking.written(), [range(b"b", b"c")]);
        // A compaction of another range leaves it; one of its range forgets it, on disk too.
        ranking
            .compact(range(b"c", b"d"), &db, meta, || {})
            .unwrap();
        assert_eq!(ranking.written().len(), 1);
        assert_eq!(Ranking::loaded(&db, meta).written().len(), 1);
        ranking
            .compact(range(b"a", b"z"), &db, meta, || {})
            .unwrap();
        assert!(ranking.written().is_empty());
        assert!(ranking.unranked().is_empty());
        assert!(Ranking::loaded(&db, meta).written().is_empty());
        // A failed write leaves no record.
        let ids = ranking.record(vec![range(b"e", b"f")], &mut WriteBatch::default(), meta);
        ranking.settle(&ids, false);
        assert!(ranking.dropped.lock().is_empty());
    }
}
