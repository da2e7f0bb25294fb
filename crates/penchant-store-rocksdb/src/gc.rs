//! Garbage collection: a RocksDB compaction filter that drops the cells of deleted tables and
//! dropped families, and the cells the GC rules expire by age.
//!
//! The filter judges each cell alone, as the newest version of its column (rank 0): a
//! compaction cannot rank versions safely, because the newer versions it sees may be deleted by
//! tombstones outside its input. Rules are monotone in the rank, so a cell expired at rank 0 is
//! expired at any rank. Version limits are enforced on write instead (see `write.rs`), and reads
//! apply every rule exactly.

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
    name: CString,
}

impl GcFilter {
    fn new(catalog: &Catalog) -> Self {
        GcFilter {
            // Before the catalog is loaded every table looks deleted: keep everything.
            rules: catalog.loaded.then(|| catalog.gc_rules()),
            now: now_micros(),
            name: CString::new("penchant-gc").unwrap_or_default(),
        }
    }

    fn decide(&self, key: &[u8]) -> Decision {
        let (Some(cell), Some(rules)) = (keys::parse(key), &self.rules) else {
            return Decision::Keep;
        };
        match rules.get(&cell.table).map(|t| t.get(&cell.family)) {
            // A deleted table, or a dropped family.
            None | Some(None) => Decision::Remove,
            Some(Some(rule)) if rule.expires(cell.timestamp, 0, self.now) => Decision::Remove,
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
        keys::cell_key(&keys::row_start(table, b"row"), 0, b"q", 1000)
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
}
