//! Table administration: creating, changing and deleting tables and ranges of their rows, with
//! each table's metadata persisted in the `meta` column family (and loaded from it on open).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;
use penchant_store::{FamilyChange, GcRule, Result, StoreError, TableSchema, prefix_successor};
use rocksdb::DB;

use crate::schema::{Catalog, Table, TableMeta};
use crate::write::Batch;
use crate::{Inner, META_CF, RocksStore, backend, keys, missing_cf};

const TABLE_META_PREFIX: &[u8] = b"table/";
const NEXT_TABLE_ID_KEY: &[u8] = b"next_table_id";

/// Load the catalog (the tables' metadata and the next table id) from the `meta` column family.
pub(crate) fn load_catalog(db: &DB, catalog: &RwLock<Catalog>) -> Result<()> {
    let meta = db.cf_handle(META_CF).ok_or_else(|| missing_cf(META_CF))?;
    let mut cat = catalog.write();
    if let Some(v) = db.get_cf(meta, NEXT_TABLE_ID_KEY).map_err(backend)? {
        let bytes: [u8; 4] = v[..]
            .try_into()
            .map_err(|_| StoreError::Backend("corrupt next table id".into()))?;
        cat.next_table_id = u32::from_be_bytes(bytes);
    }
    for item in db.prefix_iterator_cf(meta, TABLE_META_PREFIX) {
        let (k, v) = item.map_err(backend)?;
        if !k.starts_with(TABLE_META_PREFIX) {
            break;
        }
        let table: TableMeta = serde_json::from_slice(&v)
            .map_err(|e| StoreError::Backend(format!("corrupt table metadata: {e}")))?;
        cat.by_name
            .insert(table.name.clone(), Arc::new(Table::new(table)));
    }
    cat.loaded = true;
    Ok(())
}

impl Inner {
    /// Save a table's metadata (or delete it) together with other changes, atomically.
    fn save_meta(&self, batch: &mut Batch, meta: &TableMeta, delete: bool) -> Result<()> {
        let mut key = TABLE_META_PREFIX.to_vec();
        key.extend_from_slice(meta.name.as_bytes());
        if delete {
            batch.delete_cf(self.meta_cf()?, key);
        } else {
            let value = serde_json::to_vec(meta)
                .map_err(|e| StoreError::Backend(format!("cannot encode table metadata: {e}")))?;
            batch.put_cf(self.meta_cf()?, key, value);
        }
        Ok(())
    }
}

pub(crate) async fn create_table(
    store: &RocksStore,
    name: &str,
    families: BTreeMap<String, GcRule>,
) -> Result<()> {
    penchant_store::check_new_table(name, &families)?;
    let name = name.to_owned();
    store
        .blocking(move |inner| {
            let _admin = inner.admin.lock();
            if inner.catalog.read().by_name.contains_key(&name) {
                return Err(StoreError::TableExists(name));
            }
            let id = inner.catalog.read().next_table_id;
            if id == u32::MAX {
                return Err(StoreError::FailedPrecondition("no table ids left".into()));
            }
            let meta = TableMeta::new(id, &name, families)?;
            let mut batch = Batch::default();
            inner.save_meta(&mut batch, &meta, false)?;
            batch.put_cf(inner.meta_cf()?, NEXT_TABLE_ID_KEY, (id + 1).to_be_bytes());
            // Clear the id's key space, in case an older store left anything there. (Not a
            // recorded range tombstone, `gc::Ranking`: ids are never reused, so nothing a
            // compaction could count under it is there.)
            batch.clear_cf(inner.data_cf()?, keys::table_start(id), keys::table_end(id));
            inner.write(batch)?;
            let mut cat = inner.catalog.write();
            cat.next_table_id = id + 1;
            cat.by_name.insert(name, Arc::new(Table::new(meta)));
            Ok(())
        })
        .await
}

pub(crate) async fn modify_families(
    store: &RocksStore,
    table: &str,
    changes: Vec<FamilyChange>,
) -> Result<TableSchema> {
    let table = table.to_owned();
    store
        .blocking(move |inner| {
            let _admin = inner.admin.lock();
            let current = inner.table(&table)?;
            // Validate the whole change list first, then apply it to the metadata.
            penchant_store::change_families(&current.schema, &changes)?;
            let mut meta = current.meta.clone();
            for change in changes {
                match change {
                    FamilyChange::Create { family, gc_rule } => meta.add_family(family, gc_rule)?,
                    FamilyChange::Update { family, gc_rule } => {
                        if let Some(f) = meta.families.get_mut(&family) {
                            f.gc_rule = gc_rule;
                        }
                    }
                    FamilyChange::Drop { family } => {
                        meta.families.remove(&family);
                    }
                }
            }
            let mut batch = Batch::default();
            inner.save_meta(&mut batch, &meta, false)?;
            inner.write(batch)?;
            let table = Arc::new(Table::new(meta));
            inner
                .catalog
                .write()
                .by_name
                .insert(table.meta.name.clone(), table.clone());
            Ok(table.schema.clone())
        })
        .await
}

pub(crate) async fn get_table(store: &RocksStore, table: &str) -> Result<TableSchema> {
    Ok(store.inner.table(table)?.schema.clone())
}

pub(crate) async fn list_tables(store: &RocksStore) -> Result<Vec<TableSchema>> {
    let cat = store.inner.catalog.read();
    let mut tables: Vec<TableSchema> = cat.by_name.values().map(|t| t.schema.clone()).collect();
    tables.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(tables)
}

pub(crate) async fn delete_table(store: &RocksStore, table: &str) -> Result<()> {
    let table = table.to_owned();
    store
        .blocking(move |inner| {
            let _admin = inner.admin.lock();
            let t = inner.table(&table)?;
            let mut batch = Batch::default();
            inner.save_meta(&mut batch, &t.meta, true)?;
            // Not a recorded range tombstone (`gc::Ranking`): the filter drops every cell of a
            // deleted table, without ranking it.
            batch.clear_cf(
                inner.data_cf()?,
                keys::table_start(t.meta.id),
                keys::table_end(t.meta.id),
            );
            inner.write(batch)?;
            inner.catalog.write().by_name.remove(&table);
            Ok(())
        })
        .await
}

pub(crate) async fn drop_row_range(store: &RocksStore, table: &str, prefix: &[u8]) -> Result<()> {
    let t = store.inner.table(table)?;
    let prefix = prefix.to_vec();
    store
        .blocking(move |inner| {
            let id = t.meta.id;
            let start = keys::row_prefix(id, &prefix);
            let end = prefix_successor(&start).unwrap_or_else(|| keys::table_end(id));
            let mut batch = Batch::default();
            batch.delete_range_cf(inner.data_cf()?, start, end);
            inner.write(batch)
        })
        .await
}
