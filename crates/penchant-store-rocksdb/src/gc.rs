//! Garbage collection: a RocksDB compaction filter that drops the cells of deleted tables and
//! dropped families, and the cells the GC rules expire.
//!
//! The filter ranks each cell among the versions of its column that the compaction has passed
//! (keys come in order, the newest version of a column first), and drops it if its rule
//! expires it at that rank. A version the compaction sees under a newer one may be dropped even
//! if a tombstone outside the compaction deletes the newer one: a write that deletes from a
//! column deletes, in the same batch, every version its rule already hides
//! (`delete_hidden_versions` in `write.rs`), so a version never comes back from under a deleted
//! one. A compaction that misses some newer versions ranks a cell too high, never too low: it
//! keeps what a full ranking would drop, and reads apply every rule exactly.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::Arc;

use parking_lot::RwLock;
use penchant_store::GcRule;
use penchant_store::validate::now_micros;
use rocksdb::compaction_filter::{CompactionFilter, Decision};
use rocksdb::compaction_filter_factory::{CompactionFilterContext, CompactionFilterFactory};

use crate::keys;
use crate::schema::Catalog;

/// Makes one [`GcFilter`] per compaction, with a snapshot of the rules.
pub struct GcFilterFactory {
    pub catalog: Arc<RwLock<Catalog>>,
    name: CString,
}

impl GcFilterFactory {
    pub fn new(catalog: Arc<RwLock<Catalog>>) -> Self {
        Self {
            catalog,
            name: CString::new("penchant-gc-factory").unwrap_or_default(),
        }
    }
}

impl CompactionFilterFactory for GcFilterFactory {
    type Filter = GcFilter;

    fn create(&mut self, _context: CompactionFilterContext) -> GcFilter {
        GcFilter::new(&self.catalog.read())
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
    /// The column of the last cell judged, and how many of its versions came before it.
    column: Vec<u8>,
    rank: usize,
    name: CString,
}

impl GcFilter {
    fn new(catalog: &Catalog) -> Self {
        GcFilter {
            // Before the catalog is loaded every table looks deleted: keep everything.
            rules: catalog.loaded.then(|| catalog.gc_rules()),
            now: now_micros(),
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
            Some(Some(rule)) if rule.expires(cell.timestamp, self.rank, self.now) => {
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
            GcFilter::new(&catalog).decide(&key(3)),
            Decision::Keep
        ));
        catalog.loaded = true;
        assert!(matches!(
            GcFilter::new(&catalog).decide(&key(3)),
            Decision::Remove
        ));
    }

    #[test]
    fn versions_past_the_limit_are_dropped_as_the_compaction_ranks_them() {
        let mut catalog = Catalog {
            loaded: true,
            ..Catalog::default()
        };
        let families = [("f".to_owned(), GcRule::MaxVersions(1))].into();
        let meta = crate::schema::TableMeta::new(3, "t", families).unwrap();
        catalog
            .by_name
            .insert("t".into(), Arc::new(crate::schema::Table::new(meta)));
        let mut filter = GcFilter::new(&catalog);
        // In key order: a column's versions newest first, then the next column's.
        let decisions: Vec<bool> = [cell(3, b"a", 30), cell(3, b"a", 20), cell(3, b"a", 10)]
            .into_iter()
            .chain([cell(3, b"b", 5)])
            .map(|k| matches!(filter.decide(&k), Decision::Keep))
            .collect();
        assert_eq!(decisions, [true, false, false, true]);
    }
}
