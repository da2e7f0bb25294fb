//! Table metadata: ids for tables and families, persisted in the `meta` column family and
//! shared with the compaction filter.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use penchant_store::{FamilyName, GcRule, Result, StoreError, TableSchema};
use serde::{Deserialize, Serialize};

/// One family of a table: its id in keys and its GC rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FamilyMeta {
    pub id: u16,
    pub gc_rule: GcRule,
}

/// A table as stored in `meta`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableMeta {
    pub id: u32,
    pub name: String,
    pub families: BTreeMap<String, FamilyMeta>,
    /// The next family id to hand out; ids are never reused.
    pub next_family_id: u16,
}

impl TableMeta {
    /// A new table with families numbered from 0.
    pub fn new(id: u32, name: &str, families: BTreeMap<String, GcRule>) -> Result<Self> {
        let mut meta = TableMeta {
            id,
            name: name.to_owned(),
            families: BTreeMap::new(),
            next_family_id: 0,
        };
        for (family, gc_rule) in families {
            meta.add_family(family, gc_rule)?;
        }
        Ok(meta)
    }

    /// Add a family with the next id.
    pub fn add_family(&mut self, family: String, gc_rule: GcRule) -> Result<()> {
        let id = self.next_family_id;
        self.next_family_id = id.checked_add(1).ok_or_else(|| {
            StoreError::FailedPrecondition(format!(
                "table `{}` has used all {} family ids",
                self.name,
                u16::MAX
            ))
        })?;
        self.families.insert(family, FamilyMeta { id, gc_rule });
        Ok(())
    }

    /// The public schema.
    pub fn schema(&self) -> TableSchema {
        TableSchema {
            name: self.name.clone(),
            families: self
                .families
                .iter()
                .map(|(name, f)| (name.clone(), f.gc_rule.clone()))
                .collect(),
        }
    }

    /// A family's id.
    pub fn family_id(&self, family: &str) -> Option<u16> {
        self.families.get(family).map(|f| f.id)
    }
}

/// A table ready for reads and writes: metadata plus lookups by family id.
#[derive(Debug)]
pub struct Table {
    pub meta: TableMeta,
    pub schema: TableSchema,
    /// Family id → (name, GC rule).
    pub by_id: HashMap<u16, (FamilyName, GcRule)>,
    /// Whether some family has a GC rule (reads skip rank counting otherwise).
    pub has_gc: bool,
}

impl Table {
    pub fn new(meta: TableMeta) -> Self {
        let by_id = meta
            .families
            .iter()
            .map(|(name, f)| (f.id, (FamilyName::from(name.as_str()), f.gc_rule.clone())))
            .collect();
        let has_gc = meta.families.values().any(|f| f.gc_rule != GcRule::None);
        Table {
            schema: meta.schema(),
            meta,
            by_id,
            has_gc,
        }
    }
}

/// Every table, by name and by id.
#[derive(Debug, Default)]
pub struct Catalog {
    pub by_name: HashMap<String, Arc<Table>>,
    pub next_table_id: u32,
    /// Whether the tables have been loaded from `meta`. Until then compactions (which RocksDB
    /// may start while opening) must not judge any cell.
    pub loaded: bool,
}

impl Catalog {
    /// GC rules by table id and family id, for a compaction to use.
    pub fn gc_rules(&self) -> HashMap<u32, HashMap<u16, GcRule>> {
        self.by_name
            .values()
            .map(|t| {
                let rules = t
                    .meta
                    .families
                    .values()
                    .map(|f| (f.id, f.gc_rule.clone()))
                    .collect();
                (t.meta.id, rules)
            })
            .collect()
    }

    pub fn get(&self, name: &str) -> Result<Arc<Table>> {
        self.by_name
            .get(name)
            .cloned()
            .ok_or_else(|| StoreError::TableNotFound(name.to_owned()))
    }
}
