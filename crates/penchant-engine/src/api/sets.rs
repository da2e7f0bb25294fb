//! Key sets and users' seen filters.

use std::sync::Arc;

use bytes::Bytes;
use futures::Stream;

use crate::seen::{SeenInfo, SeenSettings};
use crate::sets::{Rebuild, SetConfig, SetDescription, SetInfo};
use crate::{Consistency, Engine, Result};

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

    /// Hide items from a user's recommendations ("not for me") for `days` (the app's
    /// `hideDays` by default); returns until when (ms).
    pub async fn hide(
        &self,
        app: &str,
        user: &str,
        ids: &[String],
        days: Option<u32>,
    ) -> Result<i64> {
        let mut settings = (*self.seen.settings(app).await?).clone();
        if let Some(days) = days {
            if !(1..=crate::seen::MAX_HIDE_DAYS).contains(&days) {
                return Err(crate::EngineError::Invalid(
                    "days must be between 1 and 365".into(),
                ));
            }
            settings.hide_days = days;
        }
        let until = settings.hidden_until(self.now_ms());
        let items =
            std::iter::once((user, ids.iter().map(|id| (id.as_str(), until)).collect())).collect();
        self.seen.hide_many(app, &items).await?;
        Ok(until)
    }

    /// Show hidden items again.
    pub async fn unhide(&self, app: &str, user: &str, ids: &[String]) -> Result<()> {
        self.seen.unhide(app, user, ids).await
    }

    /// The items a user hides now, with until when (ms).
    pub async fn hidden(
        &self,
        app: &str,
        user: &str,
        consistency: Consistency,
    ) -> Result<std::collections::BTreeMap<String, i64>> {
        self.seen.hidden(app, user, consistency).await
    }
}
