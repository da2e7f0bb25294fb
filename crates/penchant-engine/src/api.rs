//! The engine's API by resource, for the server's handlers: apps and keys, catalog records, key
//! sets and seen filters. (Events, strategies, profiles and background work are in the crate
//! root.) Handlers call these, never a subsystem or the store.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use futures::Stream;

use crate::catalog::{IndexInfo, Page, Record, Scope, Settings, Write};
use crate::recommend::Filter;
use crate::seen::{SeenInfo, SeenSettings};
use crate::sets::{Rebuild, SetConfig, SetDescription, SetInfo};
use crate::tenancy::{Acl, App, KeyInfo, Principal};
use crate::vectors::training::{Evaluation, TrainingConfig, TrainingStatus};
use crate::vectors::{Hit, Kind, Query, SearchOptions, Serving, Space, SpaceConfig};
use crate::{Consistency, Engine, EngineError, Result};
use penchant_vectors::Aggregate;

/// Apps and API keys.
impl Engine {
    /// Whether `key` is the global admin key.
    pub fn is_global_admin(&self, key: &str) -> bool {
        self.tenancy.is_global_admin(key)
    }

    /// The principal of an (app, key) pair, or `None` if the key is not valid for the app.
    pub async fn authenticate(&self, app_id: &str, key: &str) -> Result<Option<Principal>> {
        self.tenancy.authenticate(app_id, key).await
    }

    /// Create an app (a random ID if none is given) with a retention window and an event
    /// layout; returns it and its admin key.
    pub async fn create_app(
        &self,
        app_id: Option<&str>,
        name: &str,
        retention_days: u32,
        event_layout: crate::events::Layout,
    ) -> Result<(App, String)> {
        self.tenancy
            .create_app_with(app_id, name, retention_days, event_layout)
            .await
    }

    /// Change an app's name or retention window.
    pub async fn update_app(
        &self,
        app_id: &str,
        name: Option<String>,
        retention_days: Option<u32>,
    ) -> Result<App> {
        self.tenancy.update_app(app_id, name, retention_days).await
    }

    /// Start moving an app's events to another layout, in the background
    /// ([`crate::events::migration`]).
    pub async fn migrate_layout(
        &self,
        app_id: &str,
        to: crate::events::Layout,
    ) -> Result<crate::events::migration::MigrationStatus> {
        self.migrations.start(app_id, to).await
    }

    /// An app's latest layout migration, as last saved.
    pub async fn layout_migration(
        &self,
        app_id: &str,
    ) -> Result<Option<crate::events::migration::MigrationStatus>> {
        self.migrations.status(app_id).await
    }

    /// One app, if it exists.
    pub async fn app(&self, app_id: &str) -> Result<Option<App>> {
        self.tenancy.app(app_id).await
    }

    /// Every app.
    pub async fn list_apps(&self) -> Result<Vec<App>> {
        self.tenancy.list_apps().await
    }

    /// Delete an app and every row it owns.
    pub async fn delete_app(&self, app_id: &str) -> Result<()> {
        let deleted = self.tenancy.delete_app(app_id);
        self.catalog.changing(app_id, deleted).await
    }

    /// Create an API key (with a rate limit per client and hour, 0 for none); returns the key
    /// (shown only now) and its info.
    pub async fn create_key(
        &self,
        app_id: &str,
        acl: BTreeSet<Acl>,
        description: &str,
        max_queries_per_ip_per_hour: u32,
    ) -> Result<(String, KeyInfo)> {
        self.tenancy
            .create_key(app_id, acl, description, max_queries_per_ip_per_hour)
            .await
    }

    /// One key's info.
    pub async fn get_key(&self, app_id: &str, key: &str) -> Result<Option<KeyInfo>> {
        self.tenancy.get_key(app_id, key).await
    }

    /// Every key of an app.
    pub async fn list_keys(&self, app_id: &str) -> Result<Vec<KeyInfo>> {
        self.tenancy.list_keys(app_id).await
    }

    /// Delete a key; `false` if it did not exist.
    pub async fn delete_key(&self, app_id: &str, key: &str) -> Result<bool> {
        self.tenancy.delete_key(app_id, key).await
    }
}

/// Catalog records.
impl Engine {
    /// One record.
    pub async fn record(&self, app: &str, index: &str, object_id: &str) -> Result<Option<Record>> {
        self.catalog.get(app, index, object_id).await
    }

    /// Apply writes to indexes (all checked before any is written); returns the objectIDs.
    /// Deleted records lose their vectors (a cleared index, all its records').
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
        let ids = self.catalog.apply(app, writes).await?;
        for (index, ids) in deleted {
            self.vectors.forget_items(app, &index, &ids).await?;
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

/// Key sets.
impl Engine {
    pub async fn reserve_set(&self, app: &str, name: &str, config: SetConfig) -> Result<SetInfo> {
        self.sets.reserve(app, name, config).await
    }

    pub async fn list_sets(&self, app: &str) -> Result<Vec<SetDescription>> {
        self.sets.list(app).await
    }

    /// A set's description with its size, fill and estimated false-positive rate.
    pub async fn set_info(&self, app: &str, name: &str) -> Result<SetInfo> {
        self.sets.info(app, name).await
    }

    pub async fn delete_set(&self, app: &str, name: &str) -> Result<()> {
        self.sets.delete(app, name).await
    }

    /// Add keys to a set; for each, whether it was new.
    pub async fn add_to_set<K: AsRef<[u8]> + Sync>(
        &self,
        app: &str,
        name: &str,
        keys: &[K],
    ) -> Result<Vec<bool>> {
        self.sets.add(app, name, keys).await
    }

    /// For each key, whether the set may hold it (no false negatives).
    pub async fn set_contains<K: AsRef<[u8]>>(
        &self,
        app: &str,
        name: &str,
        keys: &[K],
    ) -> Result<Vec<bool>> {
        self.sets.exists(app, name, keys).await
    }

    /// Rebuild a set from a stream of newline-separated keys, into a new generation.
    pub async fn rebuild_set<S, E>(&self, app: &str, name: &str, lines: S) -> Result<Rebuild>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        self.sets.rebuild(app, name, lines).await
    }
}

/// Users' seen filters.
impl Engine {
    pub async fn seen_settings(&self, app: &str) -> Result<Arc<SeenSettings>> {
        self.seen.settings(app).await
    }

    pub async fn set_seen_settings(&self, app: &str, settings: SeenSettings) -> Result<()> {
        self.seen.set_settings(app, settings).await
    }

    /// What a user's filter holds, read as consistent as asked.
    pub async fn seen_info(
        &self,
        app: &str,
        user: &str,
        consistency: Consistency,
    ) -> Result<SeenInfo> {
        self.seen.info(app, user, consistency).await
    }

    /// Forget what a user has seen.
    pub async fn clear_seen(&self, app: &str, user: &str) -> Result<()> {
        self.seen.clear(app, user).await
    }

    /// Mark items seen; for each, whether it was new.
    pub async fn mark_seen<K: AsRef<[u8]>>(
        &self,
        app: &str,
        user: &str,
        ids: &[K],
    ) -> Result<Vec<bool>> {
        self.seen.add(app, user, ids).await
    }

    /// For each item, whether the user may have seen it (the filter read as consistent as
    /// asked).
    pub async fn has_seen<K: AsRef<[u8]>>(
        &self,
        app: &str,
        user: &str,
        ids: &[K],
        consistency: Consistency,
    ) -> Result<Vec<bool>> {
        self.seen.exists(app, user, ids, consistency).await
    }

    /// The items the user has not seen, in their order (the filter read as consistent as
    /// asked).
    pub async fn unseen<'k, K: AsRef<[u8]>>(
        &self,
        app: &str,
        user: &str,
        ids: &'k [K],
        consistency: Consistency,
    ) -> Result<Vec<&'k K>> {
        self.seen.unseen(app, user, ids, consistency).await
    }
}

/// Vector spaces, similarity and ALS training.
impl Engine {
    pub async fn create_space(&self, app: &str, name: &str, config: SpaceConfig) -> Result<Space> {
        self.vectors.create(app, name, config).await
    }

    pub async fn list_spaces(&self, app: &str) -> Result<Vec<Space>> {
        self.vectors.list(app).await
    }

    pub async fn space(&self, app: &str, name: &str) -> Result<Arc<Space>> {
        self.vectors.fresh(app, name).await
    }

    /// A space's description and how this node serves its searches now.
    pub async fn space_serving(&self, app: &str, name: &str) -> Result<(Arc<Space>, Serving)> {
        let space = self.vectors.fresh(app, name).await?;
        let serving = self.vectors.serving(app, &space);
        Ok((space, serving))
    }

    /// Go back to a space's previous training.
    pub async fn rollback_space(&self, app: &str, name: &str) -> Result<Arc<Space>> {
        self.vectors.rollback(app, name).await
    }

    pub async fn delete_space(&self, app: &str, name: &str) -> Result<()> {
        self.vectors.delete(app, name).await
    }

    /// Write vectors (all checked before any is written); returns how many.
    pub async fn put_vectors(
        &self,
        app: &str,
        space: &str,
        kind: Kind,
        vectors: &[(String, Vec<f32>)],
    ) -> Result<usize> {
        self.vectors.put(app, space, kind, vectors).await
    }

    /// A user's or item's vector; a user the space's training did not see is folded in.
    pub async fn vector(
        &self,
        app: &str,
        space: &str,
        kind: Kind,
        id: &str,
    ) -> Result<Option<Vec<f32>>> {
        let stored = self.vectors.get(app, space, kind, id).await?;
        if stored.is_some() || kind == Kind::Item {
            return Ok(stored);
        }
        let space = self.vectors.space(app, space).await?;
        self.trainings.fold_in(app, &space, id).await
    }

    pub async fn delete_vector(&self, app: &str, space: &str, kind: Kind, id: &str) -> Result<()> {
        self.vectors.remove(app, space, kind, id).await
    }

    /// The items closest to a vector, an item or a user (folded in if the training did not see
    /// them), best first.
    pub async fn search_vectors(
        &self,
        app: &str,
        space: &str,
        query: Query,
        options: &SearchOptions,
    ) -> Result<Vec<Hit>> {
        let query = match query {
            Query::User(user) => {
                let vector = self.vector(app, space, Kind::User, &user).await?;
                Query::Vector(vector.ok_or_else(|| {
                    EngineError::NotFound(format!("user '{user}' has no vector in space '{space}'"))
                })?)
            }
            other => other,
        };
        self.vectors.search(app, space, query, options).await
    }

    /// The items closest to the last `last` items the user clicked or converted on (in the
    /// app's retention window); returns those items and the hits.
    pub async fn similar_to_liked(
        &self,
        app: &str,
        space: &str,
        user: &str,
        last: usize,
        aggregate: Aggregate,
        options: &SearchOptions,
    ) -> Result<(Vec<String>, Vec<Hit>)> {
        let window = self.tenancy.retention(app).await?;
        let since = self.now_ms() - window.as_millis() as i64;
        self.vectors
            .similar_to_liked(app, space, user, last, aggregate, options, since)
            .await
    }

    /// Start an ALS training of the app in the background.
    pub async fn train(&self, app: &str, config: TrainingConfig) -> Result<TrainingStatus> {
        self.trainings.start(app, config).await
    }

    /// The app's latest training.
    pub async fn training_status(&self, app: &str) -> Result<Option<TrainingStatus>> {
        self.trainings.status(app).await
    }

    /// Evaluate ALS against popularity on a time-ordered holdout of the app's events.
    pub async fn evaluate_als(
        &self,
        app: &str,
        config: &TrainingConfig,
        holdout: usize,
        k: usize,
    ) -> Result<Evaluation> {
        self.trainings.evaluate(app, config, holdout, k).await
    }
}
