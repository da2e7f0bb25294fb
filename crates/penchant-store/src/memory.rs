//! [`MemStore`]: the in-memory reference model of the store.
//!
//! It is written to be obviously right rather than fast (nested `BTreeMap`s behind one lock), so
//! property tests can compare a real backend against it, and layers above the store can unit-test
//! against it without a disk. It is not durable.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::RwLock;

use crate::validate::{self, now_micros, resolve_timestamp};
use crate::{
    Cell, FamilyChange, GcRule, KeySample, Mutation, ReadModifyWriteRule, ReadRows, Result, Row,
    RowFilter, RowMutation, RowStream, Store, StoreError, TableSchema,
};

type Column = BTreeMap<Reverse<i64>, Bytes>;
type MemRow = BTreeMap<(String, Bytes), Column>;

#[derive(Debug)]
struct MemTable {
    schema: TableSchema,
    rows: BTreeMap<Bytes, MemRow>,
}

impl MemTable {
    fn cells(&self, key: &[u8], now: i64) -> Vec<Cell> {
        let Some(row) = self.rows.get(key) else {
            return Vec::new();
        };
        let cells = row
            .iter()
            .flat_map(|((family, qualifier), column)| {
                column.iter().map(move |(Reverse(ts), value)| Cell {
                    family: family.as_str().into(),
                    qualifier: qualifier.clone(),
                    timestamp: *ts,
                    value: value.clone(),
                })
            })
            .collect();
        validate::visible_cells(&self.schema, now, cells)
    }

    fn apply(&mut self, key: &Bytes, mutations: &[Mutation], now: i64) {
        let schema = &self.schema;
        let row = self.rows.entry(key.clone()).or_default();
        for m in mutations {
            match m {
                Mutation::SetCell {
                    family,
                    qualifier,
                    timestamp,
                    value,
                } => {
                    row.entry((family.clone(), qualifier.clone()))
                        .or_default()
                        .insert(Reverse(resolve_timestamp(*timestamp, now)), value.clone());
                }
                Mutation::DeleteFromColumn {
                    family,
                    qualifier,
                    range,
                } => {
                    if let Some(col) = row.get_mut(&(family.clone(), qualifier.clone())) {
                        col.retain(|Reverse(ts), _| !range.contains(*ts));
                    }
                }
                Mutation::DeleteFromFamily { family } => row.retain(|(f, _), _| f != family),
                Mutation::DeleteFromRow => row.clear(),
            }
        }
        // Version limits are enforced on write, on the columns written.
        for m in mutations {
            if let Mutation::SetCell {
                family, qualifier, ..
            } = m
                && let Some(rule) = schema.families.get(family).filter(|r| !r.is_age_only())
                && let Some(col) = row.get_mut(&(family.clone(), qualifier.clone()))
            {
                let expired =
                    validate::expired_versions(rule, col.keys().map(|Reverse(ts)| *ts), now);
                for ts in expired {
                    col.remove(&Reverse(ts));
                }
            }
        }
        row.retain(|_, col| !col.is_empty());
        if row.is_empty() {
            self.rows.remove(key);
        }
    }
}

/// The in-memory reference store.
#[derive(Debug, Default)]
pub struct MemStore {
    tables: RwLock<BTreeMap<String, MemTable>>,
}

impl MemStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn with_table<T>(&self, table: &str, f: impl FnOnce(&MemTable) -> Result<T>) -> Result<T> {
        let tables = self.tables.read();
        let t = tables
            .get(table)
            .ok_or_else(|| StoreError::TableNotFound(table.to_owned()))?;
        f(t)
    }

    fn with_table_mut<T>(
        &self,
        table: &str,
        f: impl FnOnce(&mut MemTable) -> Result<T>,
    ) -> Result<T> {
        let mut tables = self.tables.write();
        let t = tables
            .get_mut(table)
            .ok_or_else(|| StoreError::TableNotFound(table.to_owned()))?;
        f(t)
    }
}

/// Apply family changes to a schema, or fail without changing it.
pub fn change_families(schema: &TableSchema, changes: &[FamilyChange]) -> Result<TableSchema> {
    let mut next = schema.clone();
    let missing = |family: &String| StoreError::FamilyNotFound {
        table: schema.name.clone(),
        family: family.clone(),
    };
    for change in changes {
        match change {
            FamilyChange::Create { family, gc_rule } => {
                validate::check_family_name(family)?;
                validate::check_gc_rule(family, gc_rule)?;
                if next
                    .families
                    .insert(family.clone(), gc_rule.clone())
                    .is_some()
                {
                    return Err(StoreError::FamilyExists {
                        table: schema.name.clone(),
                        family: family.clone(),
                    });
                }
            }
            FamilyChange::Update { family, gc_rule } => {
                validate::check_gc_rule(family, gc_rule)?;
                let rule = next
                    .families
                    .get_mut(family)
                    .ok_or_else(|| missing(family))?;
                *rule = gc_rule.clone();
            }
            FamilyChange::Drop { family } => {
                next.families
                    .remove(family)
                    .ok_or_else(|| missing(family))?;
            }
        }
    }
    Ok(next)
}

/// Check a new table's name and families.
pub fn check_new_table(name: &str, families: &BTreeMap<String, GcRule>) -> Result<()> {
    validate::check_table_name(name)?;
    families.iter().try_for_each(|(f, rule)| {
        validate::check_family_name(f)?;
        validate::check_gc_rule(f, rule)
    })
}

#[async_trait]
impl Store for MemStore {
    async fn create_table(&self, name: &str, families: BTreeMap<String, GcRule>) -> Result<()> {
        check_new_table(name, &families)?;
        let mut tables = self.tables.write();
        if tables.contains_key(name) {
            return Err(StoreError::TableExists(name.to_owned()));
        }
        let schema = TableSchema {
            name: name.to_owned(),
            families,
        };
        tables.insert(
            name.to_owned(),
            MemTable {
                schema,
                rows: BTreeMap::new(),
            },
        );
        Ok(())
    }

    async fn modify_families(
        &self,
        table: &str,
        changes: Vec<FamilyChange>,
    ) -> Result<TableSchema> {
        self.with_table_mut(table, |t| {
            let next = change_families(&t.schema, &changes)?;
            for row in t.rows.values_mut() {
                row.retain(|(f, _), _| next.families.contains_key(f));
            }
            t.rows.retain(|_, row| !row.is_empty());
            t.schema = next.clone();
            Ok(next)
        })
    }

    async fn get_table(&self, table: &str) -> Result<TableSchema> {
        self.with_table(table, |t| Ok(t.schema.clone()))
    }

    async fn list_tables(&self) -> Result<Vec<TableSchema>> {
        Ok(self
            .tables
            .read()
            .values()
            .map(|t| t.schema.clone())
            .collect())
    }

    async fn delete_table(&self, table: &str) -> Result<()> {
        self.tables
            .write()
            .remove(table)
            .map(drop)
            .ok_or_else(|| StoreError::TableNotFound(table.to_owned()))
    }

    async fn drop_row_range(&self, table: &str, prefix: &[u8]) -> Result<()> {
        self.with_table_mut(table, |t| {
            t.rows.retain(|k, _| !k.starts_with(prefix));
            Ok(())
        })
    }

    async fn mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        mutations: Vec<Mutation>,
    ) -> Result<()> {
        self.with_table_mut(table, |t| {
            validate::check_mutations(&t.schema, &row_key, &mutations)?;
            t.apply(&row_key, &mutations, now_micros());
            Ok(())
        })
    }

    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        check_batch_size(&entries)?;
        self.with_table_mut(table, |t| {
            let now = now_micros();
            Ok(entries
                .iter()
                .map(|e| {
                    validate::check_mutations(&t.schema, &e.row_key, &e.mutations)?;
                    t.apply(&e.row_key, &e.mutations, now);
                    Ok(())
                })
                .collect())
        })
    }

    async fn read_rows(&self, table: &str, request: ReadRows) -> Result<RowStream> {
        let filter = request
            .filter
            .as_ref()
            .map(RowFilter::compile)
            .transpose()?;
        let rows = self.with_table(table, |t| {
            let now = now_micros();
            let mut out = Vec::new();
            for key in t.rows.keys() {
                if request.limit.is_some_and(|l| out.len() as u64 >= l) {
                    break;
                }
                if !request.rows.contains(key) {
                    continue;
                }
                let mut cells = t.cells(key, now);
                if let Some(f) = &filter {
                    cells = f.apply(key, cells);
                }
                if !cells.is_empty() {
                    out.push(Ok(Row {
                        key: key.clone(),
                        cells,
                    }));
                }
            }
            Ok(out)
        })?;
        Ok(Box::pin(futures::stream::iter(rows)))
    }

    async fn check_and_mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        predicate: Option<RowFilter>,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        let predicate = predicate.as_ref().map(RowFilter::compile).transpose()?;
        self.with_table_mut(table, |t| {
            check_conditional(&t.schema, &row_key, &on_match, &on_no_match)?;
            let now = now_micros();
            let cells = t.cells(&row_key, now);
            let matched = match &predicate {
                Some(p) => p.matches(&row_key, &cells),
                None => !cells.is_empty(),
            };
            let mutations = if matched { &on_match } else { &on_no_match };
            if !mutations.is_empty() {
                t.apply(&row_key, mutations, now);
            }
            Ok(matched)
        })
    }

    async fn read_modify_write_row(
        &self,
        table: &str,
        row_key: Bytes,
        rules: Vec<ReadModifyWriteRule>,
    ) -> Result<Row> {
        self.with_table_mut(table, |t| {
            validate::check_rmw_rules(&t.schema, &row_key, &rules)?;
            let now = now_micros();
            let cells = validate::read_modify_write(&t.cells(&row_key, now), &rules, now)?;
            let mutations: Vec<Mutation> = cells.iter().map(cell_to_mutation).collect();
            t.apply(&row_key, &mutations, now);
            Ok(Row {
                key: row_key,
                cells,
            })
        })
    }

    async fn sample_row_keys(&self, table: &str) -> Result<Vec<KeySample>> {
        self.with_table(table, |t| {
            let mut samples = Vec::new();
            let mut bytes = 0u64;
            for (i, (key, row)) in t.rows.iter().enumerate() {
                if i > 0 && i % 64 == 0 {
                    samples.push(KeySample {
                        row_key: key.clone(),
                        offset_bytes: bytes,
                    });
                }
                bytes += key.len() as u64
                    + row
                        .iter()
                        .map(|((f, q), col)| {
                            (f.len() + q.len()) as u64
                                + col.values().map(|v| v.len() as u64 + 8).sum::<u64>()
                        })
                        .sum::<u64>();
            }
            samples.push(KeySample {
                row_key: Bytes::new(),
                offset_bytes: bytes,
            });
            Ok(samples)
        })
    }

    async fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn atomic_writes(&self) -> bool {
        true
    }

    async fn mutate_atomically(&self, writes: Vec<crate::TableMutation>) -> Result<()> {
        check_atomic(&writes)?;
        let mut tables = self.tables.write();
        for w in &writes {
            let t = tables
                .get(w.table)
                .ok_or_else(|| StoreError::TableNotFound(w.table.to_owned()))?;
            validate::check_mutations(&t.schema, &w.row.row_key, &w.row.mutations)?;
        }
        let now = now_micros();
        for w in writes {
            if let Some(t) = tables.get_mut(w.table) {
                t.apply(&w.row.row_key, &w.row.mutations, now);
            }
        }
        Ok(())
    }
}

/// Refuse an atomic write with no mutation, or more than a batch may hold.
pub fn check_atomic(writes: &[crate::TableMutation]) -> Result<()> {
    let total: usize = writes.iter().map(|w| w.row.mutations.len()).sum();
    if total == 0 {
        return Err(StoreError::InvalidArgument(
            "an atomic write needs at least one mutation".into(),
        ));
    }
    if total > validate::MAX_MUTATIONS {
        return Err(StoreError::InvalidArgument(format!(
            "{total} mutations in one request, the limit is {}",
            validate::MAX_MUTATIONS
        )));
    }
    Ok(())
}

/// A `SetCell` that writes exactly this cell.
pub fn cell_to_mutation(cell: &Cell) -> Mutation {
    Mutation::SetCell {
        family: cell.family.to_string(),
        qualifier: cell.qualifier.clone(),
        timestamp: crate::Timestamp::Micros(cell.timestamp),
        value: cell.value.clone(),
    }
}

/// Check the two mutation lists of a check-and-mutate.
pub fn check_conditional(
    schema: &TableSchema,
    row_key: &[u8],
    on_match: &[Mutation],
    on_no_match: &[Mutation],
) -> Result<()> {
    validate::check_row_key(row_key)?;
    if on_match.is_empty() && on_no_match.is_empty() {
        return Err(StoreError::InvalidArgument(
            "a check-and-mutate needs mutations for the match case, the no-match case or both"
                .into(),
        ));
    }
    for list in [on_match, on_no_match] {
        if !list.is_empty() {
            validate::check_mutations(schema, row_key, list)?;
        }
    }
    Ok(())
}

/// Check the size of a batch of row mutations.
pub fn check_batch_size(entries: &[RowMutation]) -> Result<()> {
    if entries.is_empty() {
        return Err(StoreError::InvalidArgument(
            "a batch needs at least one row mutation".into(),
        ));
    }
    let total: usize = entries.iter().map(|e| e.mutations.len()).sum();
    if total > validate::MAX_MUTATIONS {
        return Err(StoreError::InvalidArgument(format!(
            "{total} mutations in one request, the limit is {}",
            validate::MAX_MUTATIONS
        )));
    }
    Ok(())
}
