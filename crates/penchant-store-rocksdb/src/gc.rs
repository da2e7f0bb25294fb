//! Garbage collection: a RocksDB compaction filter that drops the cells the GC rules expire,
//! and the cells of deleted tables and dropped families.
//!
//! A compaction sees keys in order, so the versions of one column arrive newest first and the
//! filter can rank them. It ranks only the versions inside the compaction's input, which never
//! exceeds a version's true rank: a max-versions rule can keep a cell longer than needed, never
//! drop one too early. Reads apply the rules exactly, so expired cells are never returned either
//! way.

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
        GcFilter {
            rules: self.catalog.read().gc_rules(),
            now: now_micros(),
            column: Vec::new(),
            rank: 0,
            name: CString::new("penchant-gc").unwrap_or_default(),
        }
    }

    fn name(&self) -> &CStr {
        &self.name
    }
}

/// The filter of one compaction.
pub struct GcFilter {
    rules: HashMap<u32, HashMap<u16, GcRule>>,
    now: i64,
    /// The column of the previous key, and the rank of that key among its versions.
    column: Vec<u8>,
    rank: usize,
    name: CString,
}

impl GcFilter {
    fn decide(&mut self, key: &[u8]) -> Decision {
        let Some(cell) = keys::parse(key) else {
            return Decision::Keep;
        };
        if self.column == cell.column {
            self.rank += 1;
        } else {
            self.column.clear();
            self.column.extend_from_slice(cell.column);
            self.rank = 0;
        }
        match self.rules.get(&cell.table).map(|t| t.get(&cell.family)) {
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
