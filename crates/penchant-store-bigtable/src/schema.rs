//! The schema cache: each table's families and GC rules, read through the Admin API and kept for
//! `schema_ttl_ms`; a family the cached schema lacks is looked for again in a fresh one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use penchant_store::{Result, StoreError, TableSchema};

use crate::{BigtableStore, convert, proto};

impl BigtableStore {
    /// A table's schema, from the cache unless it is older than the TTL or `fresh` is asked.
    pub(crate) async fn schema(&self, table: &str, fresh: bool) -> Result<Arc<TableSchema>> {
        let ttl = Duration::from_millis(self.inner.config.schema_ttl_ms);
        if !fresh
            && let Some((at, schema)) = self.inner.schemas.lock().get(table)
            && at.elapsed() < ttl
        {
            return Ok(Arc::clone(schema));
        }
        let name = self.table_path(table);
        let t = self
            .retry(table, || async {
                let request = proto::admin::GetTableRequest {
                    name: name.clone(),
                    view: proto::admin::table::View::SchemaView as i32,
                };
                let request = self.request(request, self.call_timeout(), &[]).await?;
                self.inner.admin.clone().get_table(request).await
            })
            .await?
            .into_inner();
        let schema = Arc::new(self.schema_of(table, &t));
        self.inner
            .schemas
            .lock()
            .insert(table.to_owned(), (Instant::now(), Arc::clone(&schema)));
        Ok(schema)
    }

    pub(crate) fn schema_of(&self, table: &str, t: &proto::admin::Table) -> TableSchema {
        TableSchema {
            name: table.to_owned(),
            families: t
                .column_families
                .iter()
                .map(|(name, cf)| (name.clone(), convert::gc_rule_from(cf.gc_rule.as_ref())))
                .collect(),
        }
    }

    /// The schema, checked by `check`; a family the cached schema lacks may have been created
    /// through another node, so that failure is checked again against a fresh schema.
    pub(crate) async fn checked_schema(
        &self,
        table: &str,
        check: impl Fn(&TableSchema) -> Result<()>,
    ) -> Result<Arc<TableSchema>> {
        let schema = self.schema(table, false).await?;
        match check(&schema) {
            Ok(()) => Ok(schema),
            Err(StoreError::FamilyNotFound { .. }) => {
                let schema = self.schema(table, true).await?;
                check(&schema)?;
                Ok(schema)
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) fn forget_schema(&self, table: &str) {
        self.inner.schemas.lock().remove(table);
    }
}
