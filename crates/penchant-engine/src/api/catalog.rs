//! Catalog records and indexes.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::catalog::{IndexInfo, Page, Record, Scope, Settings, Write};
use crate::recommend::Filter;
use crate::{Engine, EngineError, Result};

/// Catalog records.
impl Engine {
    /// One record.
    pub async fn record(&self, app: &str, index: &str, object_id: &str) -> Result<Option<Record>> {
        self.catalog.get(app, index, object_id).await
    }

    /// Apply writes to indexes (all checked before any is written); returns the objectIDs.
    /// Deleted records lose their vectors (a cleared index, all its records'); events that
    /// waited for written ones count them ([`crate::events::waiting`]).
    pub async fn write_records(
        &self,
        app: &str,
        writes: Vec<(String, Write)>,
    ) -> Result<Vec<String>> {
        let mut deleted: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (index, write) in &writes {
            match write {
                Write::Delete(id) => deleted.entry(index.clone()).or_default().push(id.clone()),
                Write::Clear => {
                    let ids = self.catalog.object_ids(app, index).await?;
                    deleted.entry(index.clone()).or_default().extend(ids);
                }
                Write::Put(_) | Write::Partial { .. } => {}
            }
        }
        let written: Vec<(String, bool)> = writes
            .iter()
            .map(|(index, w)| {
                (
                    index.clone(),
                    matches!(w, Write::Put(_) | Write::Partial { .. }),
                )
            })
            .collect();
        let ids = self.catalog.apply(app, writes).await?;
        for (index, ids) in deleted {
            self.vectors.forget_items(app, &index, &ids).await?;
        }
        // Events that waited for these records count them from now on.
        let mut arrived: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for ((index, put), id) in written.iter().zip(&ids) {
            if *put {
                arrived.entry(index).or_default().push(id.clone());
            }
        }
        for (index, ids) in arrived {
            self.ingest.settle_records(app, index, &ids).await?;
        }
        Ok(ids)
    }
}

/// Indexes as wholes: settings, listing, browsing, copying, moving, deleting.
impl Engine {
    /// Whether an index exists (something was written to it, and it was not deleted since).
    pub async fn index_exists(&self, app: &str, index: &str) -> Result<bool> {
        self.catalog.exists(app, index).await
    }

    /// An index's settings as this node last read them (a change through another node shows
    /// within the strategy cache's TTL): what serving its records reads.
    pub async fn serving_settings(&self, app: &str, index: &str) -> Result<Option<Arc<Settings>>> {
        self.catalog.cached_settings(app, index).await
    }

    /// An index's settings as set; `None` if the index does not exist.
    pub async fn index_settings(&self, app: &str, index: &str) -> Result<Option<Settings>> {
        self.catalog.settings(app, index).await
    }

    /// Change some settings of an index (creating it): `null` removes a setting.
    pub async fn set_index_settings(
        &self,
        app: &str,
        index: &str,
        changes: Settings,
    ) -> Result<()> {
        self.catalog.set_settings(app, index, changes).await
    }

    /// Every index of an app.
    pub async fn list_indexes(&self, app: &str) -> Result<Vec<IndexInfo>> {
        self.catalog.list_indexes(app).await
    }

    /// Records of an index in objectID order, after `after`, that pass `filter`.
    pub async fn browse(
        &self,
        app: &str,
        index: &str,
        after: Option<&str>,
        limit: usize,
        filter: Option<&Filter>,
    ) -> Result<Page> {
        self.catalog.browse(app, index, after, limit, filter).await
    }

    /// Several records, each of its own index (`None` where there is none), in request order.
    pub async fn records(
        &self,
        app: &str,
        wanted: &[(String, String)],
    ) -> Result<Vec<Option<Record>>> {
        let mut by_index: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (index, id) in wanted {
            by_index.entry(index).or_default().push(id.clone());
        }
        let mut found: BTreeMap<(&str, String), Record> = BTreeMap::new();
        for (index, ids) in by_index {
            for (id, record) in self.catalog.get_many(app, index, &ids).await? {
                found.insert((index, id), record);
            }
        }
        Ok(wanted
            .iter()
            .map(|(index, id)| found.remove(&(index.as_str(), id.clone())))
            .collect())
    }

    /// Delete the records of an index that pass `filter`; returns how many.
    pub async fn delete_by(&self, app: &str, index: &str, filter: &Filter) -> Result<usize> {
        if !self.catalog.exists(app, index).await? {
            return Err(EngineError::NotFound("Index does not exist".into()));
        }
        let ids = self.catalog.delete_by(app, index, filter).await?;
        self.vectors.forget_items(app, index, &ids).await?;
        Ok(ids.len())
    }

    /// Delete an index: its records (and their vectors), its settings, and the recommendation
    /// lists and trending counters made from its events.
    pub async fn delete_index(&self, app: &str, index: &str) -> Result<()> {
        self.delete_index_keeping(app, index, false).await
    }

    /// `delete_index`; a move (`moved`) keeps the vectors of spaces not bound to the index,
    /// whose items now live on in the destination.
    async fn delete_index_keeping(&self, app: &str, index: &str, moved: bool) -> Result<()> {
        let prefix = crate::keys::index(app, index);
        self.recommend.trends.forget(&prefix);
        for table in [
            crate::recommend::trending::TRENDING_TABLE,
            crate::recommend::related::RELATED_TABLE,
        ] {
            self.store.delete_prefix(table, prefix.clone()).await?;
        }
        let ids = self.catalog.delete_index(app, index).await?;
        if moved {
            self.vectors.forget_bound_items(app, index, &ids).await
        } else {
            self.vectors.forget_items(app, index, &ids).await
        }
    }

    /// Copy an index onto another (Algolia's `copy`, `scope` as given).
    pub async fn copy_index(&self, app: &str, from: &str, to: &str, scope: Scope) -> Result<()> {
        let removed = self.catalog.copy_index(app, from, to, scope).await?;
        self.vectors.forget_items(app, to, &removed).await
    }

    /// Move an index onto another (Algolia's `move`: the destination is replaced, the source
    /// deleted); when the source does not exist, the destination is left as it is (and what a
    /// move that stopped halfway left of the source's records is deleted).
    pub async fn move_index(&self, app: &str, from: &str, to: &str) -> Result<()> {
        if !self.catalog.exists(app, from).await? {
            let ids = self.catalog.delete_index(app, from).await?;
            return self.vectors.forget_bound_items(app, from, &ids).await;
        }
        self.copy_index(app, from, to, Scope::ALL).await?;
        self.delete_index_keeping(app, from, true).await
    }
}
