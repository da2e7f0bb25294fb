//! Table administration through the Admin API: creating, reading, listing, changing and deleting
//! tables, and dropping ranges of rows; against an emulator, a dropped family's cells are
//! deleted first.

use std::collections::BTreeMap;
use std::future::Future;

use bytes::Bytes;
use penchant_store::validate;
use penchant_store::{
    FamilyChange, GcRule, Mutation, ReadRows, Result, RowFilter, RowMutation, Store, StoreError,
    TableSchema,
};

use crate::{BigtableStore, convert, proto};

impl BigtableStore {
    /// Delete every cell of one family, row by row (emulators only: see `modify_families`).
    async fn delete_family_cells(&self, table: &str, family: &str) -> Result<()> {
        let request = ReadRows::default().filter(
            RowFilter::Family(family.to_owned())
                .and(RowFilter::CellsPerRowLimit(1))
                .and(RowFilter::StripValue),
        );
        let rows = self.read_all(table, request).await?;
        for chunk in rows.chunks(1000) {
            let entries = chunk
                .iter()
                .map(|row| {
                    RowMutation::new(
                        row.key.clone(),
                        vec![Mutation::DeleteFromFamily {
                            family: family.to_owned(),
                        }],
                    )
                })
                .collect();
            for status in self.mutate_rows(table, entries).await? {
                status?;
            }
        }
        Ok(())
    }

    /// Run an admin call that changes a table (never retried blindly: creating or modifying
    /// twice is not the same as once).
    async fn admin_once<T, Fut>(&self, table: &str, call: Fut) -> Result<T>
    where
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let result = call.await.map(tonic::Response::into_inner);
        self.forget_schema(table);
        result.map_err(|status| self.error(table, &status))
    }
}

pub(crate) async fn create_table(
    store: &BigtableStore,
    name: &str,
    families: BTreeMap<String, GcRule>,
) -> Result<()> {
    penchant_store::check_new_table(name, &families)?;
    let id = format!("{}{name}", store.inner.config.table_prefix);
    validate::check_table_name(&id).map_err(|_| {
        StoreError::InvalidArgument(format!(
            "table name `{name}` with the prefix `{}` is longer than Bigtable allows ({} \
             characters)",
            store.inner.config.table_prefix,
            validate::MAX_TABLE_NAME
        ))
    })?;
    let table = proto::admin::Table {
        column_families: families
            .iter()
            .map(|(f, rule)| (f.clone(), convert::column_family(rule)))
            .collect(),
        ..Default::default()
    };
    let message = proto::admin::CreateTableRequest {
        parent: store.inner.instance.clone(),
        table_id: id,
        table: Some(table),
        initial_splits: Vec::new(),
    };
    let request = store
        .request(message, store.call_timeout(), &[])
        .await
        .map_err(|s| store.error(name, &s))?;
    store
        .admin_once(name, store.inner.admin.clone().create_table(request))
        .await
        .map(drop)
}

pub(crate) async fn modify_families(
    store: &BigtableStore,
    table: &str,
    changes: Vec<FamilyChange>,
) -> Result<TableSchema> {
    // Check the whole list first, against the table as it is now: a failing list changes
    // nothing.
    let current = store.schema(table, true).await?;
    let wanted = penchant_store::change_families(&current, &changes)?;
    // Bigtable deletes a dropped family's cells; older emulators (Go's bttest before 2021)
    // keep them and show them again if the family is created anew. Against an emulator,
    // delete them first.
    if store.inner.emulated {
        for change in &changes {
            if let FamilyChange::Drop { family } = change {
                store.delete_family_cells(table, family).await?;
            }
        }
    }
    use proto::admin::modify_column_families_request::{Modification, modification::Mod};
    let modifications = changes
        .iter()
        .map(|c| match c {
            FamilyChange::Create { family, gc_rule } => Modification {
                id: family.clone(),
                r#mod: Some(Mod::Create(convert::column_family(gc_rule))),
                ..Default::default()
            },
            FamilyChange::Update { family, gc_rule } => Modification {
                id: family.clone(),
                r#mod: Some(Mod::Update(convert::column_family(gc_rule))),
                ..Default::default()
            },
            FamilyChange::Drop { family } => Modification {
                id: family.clone(),
                r#mod: Some(Mod::Drop(true)),
                ..Default::default()
            },
        })
        .collect();
    let message = proto::admin::ModifyColumnFamiliesRequest {
        name: store.table_path(table),
        modifications,
        ignore_warnings: true,
    };
    let request = store
        .request(message, store.call_timeout(), &[])
        .await
        .map_err(|s| store.error(table, &s))?;
    let t = store
        .admin_once(
            table,
            store.inner.admin.clone().modify_column_families(request),
        )
        .await?;
    let schema = store.schema_of(table, &t);
    Ok(
        if schema.families.is_empty() && !wanted.families.is_empty() {
            wanted
        } else {
            schema
        },
    )
}

pub(crate) async fn get_table(store: &BigtableStore, table: &str) -> Result<TableSchema> {
    Ok(store.schema(table, true).await?.as_ref().clone())
}

pub(crate) async fn list_tables(store: &BigtableStore) -> Result<Vec<TableSchema>> {
    let prefix = format!(
        "{}/tables/{}",
        store.inner.instance, store.inner.config.table_prefix
    );
    let mut out = Vec::new();
    let mut page_token = String::new();
    loop {
        let response = store
            .retry("", || async {
                let message = proto::admin::ListTablesRequest {
                    parent: store.inner.instance.clone(),
                    view: proto::admin::table::View::SchemaView as i32,
                    page_size: 0,
                    page_token: page_token.clone(),
                };
                let request = store.request(message, store.call_timeout(), &[]).await?;
                store.inner.admin.clone().list_tables(request).await
            })
            .await?
            .into_inner();
        for t in &response.tables {
            if let Some(name) = t.name.strip_prefix(&prefix) {
                out.push(store.schema_of(name, t));
            }
        }
        if response.next_page_token.is_empty() {
            break;
        }
        page_token = response.next_page_token;
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

pub(crate) async fn delete_table(store: &BigtableStore, table: &str) -> Result<()> {
    let message = proto::admin::DeleteTableRequest {
        name: store.table_path(table),
    };
    let request = store
        .request(message, store.call_timeout(), &[])
        .await
        .map_err(|s| store.error(table, &s))?;
    store
        .admin_once(table, store.inner.admin.clone().delete_table(request))
        .await
}

pub(crate) async fn drop_row_range(
    store: &BigtableStore,
    table: &str,
    prefix: &[u8],
) -> Result<()> {
    use proto::admin::drop_row_range_request::Target;
    let target = if prefix.is_empty() {
        Target::DeleteAllDataFromTable(true)
    } else {
        Target::RowKeyPrefix(Bytes::copy_from_slice(prefix))
    };
    let name = store.table_path(table);
    // Dropping a range twice is dropping it once: retried like a delete.
    store
        .retry(table, || async {
            let message = proto::admin::DropRowRangeRequest {
                name: name.clone(),
                target: Some(target.clone()),
            };
            let request = store.request(message, store.call_timeout(), &[]).await?;
            store.inner.admin.clone().drop_row_range(request).await
        })
        .await
        .map(drop)
}
