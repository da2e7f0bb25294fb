//! Apps and API keys: multi-tenancy, with Algolia's ACLs.
//!
//! An app owns every row whose key starts with its prefix ([`keys::app`]). API keys belong to one app and
//! carry ACLs; they are stored hashed (SHA-256: keys are 128 random bits, so a fast hash is as safe
//! as a slow one) under the app's prefix, in table `keys`. A global admin key from the
//! configuration manages apps (bootstrapping) and acts as an admin key of every app.
//!
//! Every node caches key lookups (hits and misses) for a configured interval: a key created or
//! deleted through one node is seen by the others within that interval.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use penchant_store::{Mutation, ReadRows, RowSet, Store};
use rand::Rng;
use sha2::{Digest, Sha256};

use crate::cache::{self, TtlCache};
use crate::clock::Clock;
use crate::events::Layout;
use crate::keys;
use crate::{EngineError, Result};
use penchant_model::tables::TENANCY_FAMILY as FAMILY;
pub use penchant_model::tables::{APPS, APPS_TABLE, KEYS, KEYS_TABLE};

const APP_COLUMN: &[u8] = b"app";
const KEY_COLUMN: &[u8] = b"key";

use penchant_model::tenancy::check_retention;
pub use penchant_model::tenancy::{
    Acl, App, AppEvents, KeyInfo, MAX_RETENTION_DAYS, Principal, RateLimit, TenancyConfig,
    check_app_id,
};

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Apps and keys over the store, with a per-node cache of key lookups.
#[derive(Debug)]
pub struct Tenancy {
    store: Arc<dyn Store>,
    admin_digest: Option<[u8; 32]>,
    clock: Clock,
    /// (app, key digest) → what was found.
    cache: TtlCache<(String, [u8; 32]), Option<KeyInfo>>,
    /// App → what its events need.
    events: TtlCache<String, AppEvents>,
}

impl Tenancy {
    /// How the API key and retention caches have served.
    pub fn cache_stats(&self) -> [(&'static str, crate::cache::CacheStats); 2] {
        [
            ("api_keys", self.cache.stats()),
            ("app_events", self.events.stats()),
        ]
    }

    pub fn new(store: Arc<dyn Store>, config: &TenancyConfig, clock: Clock) -> Self {
        Self {
            store,
            admin_digest: config
                .admin_key
                .as_deref()
                .filter(|k| !k.is_empty())
                .map(digest),
            cache: TtlCache::new(cache::DEFAULT_CAPACITY, config.cache_ttl, clock.clone()),
            events: TtlCache::new(cache::DEFAULT_CAPACITY, config.cache_ttl, clock.clone()),
            clock,
        }
    }

    /// Whether `key` is the global admin key.
    pub fn is_global_admin(&self, key: &str) -> bool {
        self.admin_digest.is_some_and(|d| d == digest(key))
    }

    /// Whether this node has a global admin key at all.
    pub fn has_global_admin(&self) -> bool {
        self.admin_digest.is_some()
    }

    /// The principal of an (app, key) pair, or `None` if the key is not valid for the app.
    pub async fn authenticate(&self, app_id: &str, key: &str) -> Result<Option<Principal>> {
        if check_app_id(app_id).is_err() || key.is_empty() {
            return Ok(None);
        }
        if self.is_global_admin(key) {
            return Ok(self.app(app_id).await?.map(|_| Principal {
                app_id: app_id.to_owned(),
                acl: BTreeSet::from([Acl::Admin]),
                rate_limit: None,
            }));
        }
        let hash = digest(key);
        let cache_key = (app_id.to_owned(), hash);
        let info = match self.cache.get(&cache_key) {
            Some(info) => info,
            None => {
                let info = self.key_info(app_id, &hash).await?;
                self.cache.insert(cache_key, info.clone());
                info
            }
        };
        Ok(info.map(|i| Principal {
            app_id: app_id.to_owned(),
            acl: i.acl,
            rate_limit: (i.max_queries_per_ip_per_hour > 0).then(|| RateLimit {
                key: u64::from_be_bytes(hash[..8].try_into().expect("8 bytes")),
                per_hour: i.max_queries_per_ip_per_hour,
            }),
        }))
    }

    async fn key_info(&self, app_id: &str, hash: &[u8; 32]) -> Result<Option<KeyInfo>> {
        let row = self
            .store
            .read_row(KEYS_TABLE, key_row(app_id, hash), None)
            .await?;
        row.and_then(|r| r.latest(FAMILY, KEY_COLUMN).map(|c| c.value.clone()))
            .map(|v| decode(&v))
            .transpose()
    }

    /// Create an app (with a generated ID unless one is given) and its first admin key.
    pub async fn create_app(&self, app_id: Option<&str>, name: &str) -> Result<(App, String)> {
        self.create_app_with(app_id, name, MAX_RETENTION_DAYS, Layout::default())
            .await
    }

    /// [`Tenancy::create_app`] with a retention window and an event layout.
    pub async fn create_app_with(
        &self,
        app_id: Option<&str>,
        name: &str,
        retention_days: u32,
        event_layout: Layout,
    ) -> Result<(App, String)> {
        check_retention(retention_days)?;
        let app_id = match app_id {
            Some(id) => id.to_owned(),
            None => random_string(10, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"),
        };
        check_app_id(&app_id)?;
        let app = App {
            app_id: app_id.clone(),
            name: name.to_owned(),
            created_at: self.clock.now_micros() / 1_000_000,
            retention_days,
            event_layout,
            also_written: None,
        };
        let value = Bytes::from(serde_json::to_vec(&app).map_err(internal)?);
        let existed = self
            .store
            .check_and_mutate_row(
                APPS_TABLE,
                keys::app(&app_id),
                None,
                vec![],
                vec![Mutation::set_now(FAMILY, APP_COLUMN, value)],
            )
            .await?;
        if existed {
            return Err(EngineError::Exists(format!(
                "app `{app_id}` already exists"
            )));
        }
        let (key, _) = self
            .create_key(&app_id, BTreeSet::from([Acl::Admin]), "admin key", 0)
            .await?;
        Ok((app, key))
    }

    /// One app, if it exists.
    pub async fn app(&self, app_id: &str) -> Result<Option<App>> {
        if check_app_id(app_id).is_err() {
            return Ok(None);
        }
        let row = self
            .store
            .read_row(APPS_TABLE, keys::app(app_id), None)
            .await?;
        row.and_then(|r| r.latest(FAMILY, APP_COLUMN).map(|c| c.value.clone()))
            .map(|v| decode(&v))
            .transpose()
    }

    /// Change an app's name or retention window.
    pub async fn update_app(
        &self,
        app_id: &str,
        name: Option<String>,
        retention_days: Option<u32>,
    ) -> Result<App> {
        let mut app = self
            .app(app_id)
            .await?
            .ok_or_else(|| EngineError::NotFound(format!("app `{app_id}` does not exist")))?;
        if let Some(days) = retention_days {
            check_retention(days)?;
            app.retention_days = days;
        }
        if let Some(name) = name {
            app.name = name;
        }
        self.save_app(&app).await?;
        Ok(app)
    }

    /// Set an app's event layouts (a step of a migration, [`crate::events::migration`]):
    /// the one reads use, and the one also written.
    pub(crate) async fn set_event_layout(
        &self,
        app_id: &str,
        layout: Layout,
        also_written: Option<Layout>,
    ) -> Result<App> {
        let mut app = self
            .app(app_id)
            .await?
            .ok_or_else(|| EngineError::NotFound(format!("app `{app_id}` does not exist")))?;
        app.event_layout = layout;
        app.also_written = also_written;
        self.save_app(&app).await?;
        Ok(app)
    }

    async fn save_app(&self, app: &App) -> Result<()> {
        let value = Bytes::from(serde_json::to_vec(app).map_err(internal)?);
        self.store
            .mutate_row(
                APPS_TABLE,
                keys::app(&app.app_id),
                vec![Mutation::set_now(FAMILY, APP_COLUMN, value)],
            )
            .await?;
        self.events.remove(&app.app_id);
        Ok(())
    }

    /// What an app's events need: its retention window and layouts (cached like keys, for
    /// [`TenancyConfig::cache_ttl`]: other nodes see a change within that; the defaults for an
    /// unknown app).
    pub async fn events_of(&self, app_id: &str) -> Result<AppEvents> {
        if let Some(events) = self.events.get(app_id) {
            return Ok(events);
        }
        let events = self
            .app(app_id)
            .await?
            .map_or_else(AppEvents::default, |a| AppEvents::from(&a));
        self.events.insert(app_id.to_owned(), events);
        Ok(events)
    }

    /// An app's retention window ([`Tenancy::events_of`]).
    pub async fn retention(&self, app_id: &str) -> Result<Duration> {
        Ok(self.events_of(app_id).await?.retention())
    }

    /// Every app.
    pub async fn list_apps(&self) -> Result<Vec<App>> {
        let rows = self.store.read_all(APPS_TABLE, ReadRows::default()).await?;
        rows.iter()
            .filter_map(|r| r.latest(FAMILY, APP_COLUMN))
            .map(|c| decode(&c.value))
            .collect()
    }

    /// Delete an app and every row it owns, in every table.
    pub async fn delete_app(&self, app_id: &str) -> Result<()> {
        if self.app(app_id).await?.is_none() {
            return Err(EngineError::NotFound(format!(
                "app `{app_id}` does not exist"
            )));
        }
        self.drop_app_rows(app_id).await?;
        self.forget(app_id);
        Ok(())
    }

    /// Delete every row of an app, in every table; its own row last: until then the deletion
    /// can be retried.
    pub(crate) async fn drop_app_rows(&self, app_id: &str) -> Result<()> {
        let prefix = keys::app(app_id);
        for table in crate::tables::ALL.iter().filter(|t| t.name != APPS_TABLE) {
            self.store.drop_row_range(table.name, &prefix).await?;
        }
        self.store.drop_row_range(APPS_TABLE, &prefix).await?;
        Ok(())
    }

    /// Forget what this node cached of an app (its keys, its layouts).
    pub(crate) fn forget(&self, app_id: &str) {
        self.cache.retain(|(app, _)| app != app_id);
        self.events.remove(app_id);
    }

    /// Create an API key of an app; returns the key (the only time it is shown) and its info.
    pub async fn create_key(
        &self,
        app_id: &str,
        acl: BTreeSet<Acl>,
        description: &str,
        max_queries_per_ip_per_hour: u32,
    ) -> Result<(String, KeyInfo)> {
        if acl.is_empty() {
            return Err(EngineError::Invalid(
                "acl must name at least one ACL".into(),
            ));
        }
        let key = random_string(32, b"0123456789abcdef");
        let info = KeyInfo {
            acl,
            description: description.to_owned(),
            created_at: self.clock.now_micros() / 1_000_000,
            prefix: key[..6].to_owned(),
            max_queries_per_ip_per_hour,
        };
        let hash = digest(&key);
        let value = Bytes::from(serde_json::to_vec(&info).map_err(internal)?);
        self.store
            .mutate_row(
                KEYS_TABLE,
                key_row(app_id, &hash),
                vec![Mutation::set_now(FAMILY, KEY_COLUMN, value)],
            )
            .await?;
        self.cache.remove(&(app_id.to_owned(), hash));
        Ok((key, info))
    }

    /// One key's info.
    pub async fn get_key(&self, app_id: &str, key: &str) -> Result<Option<KeyInfo>> {
        self.key_info(app_id, &digest(key)).await
    }

    /// Every key of an app (their infos; keys are not stored).
    pub async fn list_keys(&self, app_id: &str) -> Result<Vec<KeyInfo>> {
        let request = ReadRows::new(RowSet::prefix(keys::app(app_id)));
        let rows = self.store.read_all(KEYS_TABLE, request).await?;
        let mut keys: Vec<KeyInfo> = rows
            .iter()
            .filter_map(|r| r.latest(FAMILY, KEY_COLUMN))
            .map(|c| decode(&c.value))
            .collect::<Result<_>>()?;
        keys.sort_by(|a, b| (a.created_at, &a.prefix).cmp(&(b.created_at, &b.prefix)));
        Ok(keys)
    }

    /// Delete a key; false if it did not exist.
    pub async fn delete_key(&self, app_id: &str, key: &str) -> Result<bool> {
        let hash = digest(key);
        let row = key_row(app_id, &hash);
        let existed = self
            .store
            .check_and_mutate_row(KEYS_TABLE, row, None, vec![Mutation::DeleteFromRow], vec![])
            .await?;
        self.cache.remove(&(app_id.to_owned(), hash));
        Ok(existed)
    }
}

fn key_row(app_id: &str, hash: &[u8; 32]) -> Bytes {
    keys::api_key(app_id, hash)
}

fn random_string(len: usize, alphabet: &[u8]) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| alphabet[rng.random_range(0..alphabet.len())] as char)
        .collect()
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(internal)
}

fn internal(e: impl std::fmt::Display) -> EngineError {
    crate::internal("corrupt tenancy record", e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use penchant_store::MemStore;

    async fn tenancy(ttl: Duration) -> (Arc<dyn Store>, Tenancy, Clock) {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let clock = Clock::manual(1_800_000_000_000_000);
        crate::tables::create(&*store, &crate::tables::ALL)
            .await
            .unwrap();
        let config = TenancyConfig {
            admin_key: Some("root".into()),
            cache_ttl: ttl,
        };
        (
            store.clone(),
            Tenancy::new(store, &config, clock.clone()),
            clock,
        )
    }

    #[tokio::test]
    async fn apps_keys_and_acls() {
        let (_, t, _) = tenancy(Duration::ZERO).await;
        let (app, admin) = t.create_app(Some("APP1"), "shop").await.unwrap();
        assert_eq!(app.app_id, "APP1");
        assert!(matches!(
            t.create_app(Some("APP1"), "again").await,
            Err(EngineError::Exists(_))
        ));
        assert!(matches!(
            t.create_app(Some("bad id"), "x").await,
            Err(EngineError::Invalid(_))
        ));
        let p = t.authenticate("APP1", &admin).await.unwrap().unwrap();
        assert!(p.allows(Acl::Recommendation));
        let (search, info) = t
            .create_key("APP1", BTreeSet::from([Acl::Search]), "front end", 0)
            .await
            .unwrap();
        assert_eq!(info.prefix, search[..6]);
        let p = t.authenticate("APP1", &search).await.unwrap().unwrap();
        assert!(p.allows(Acl::Search) && !p.allows(Acl::Recommendation));
        // A key works only for its app; the global admin key for every existing app.
        t.create_app(Some("APP2"), "other").await.unwrap();
        assert!(t.authenticate("APP2", &search).await.unwrap().is_none());
        assert!(
            t.authenticate("APP2", "root")
                .await
                .unwrap()
                .unwrap()
                .allows(Acl::Admin)
        );
        assert!(t.authenticate("NOPE", "root").await.unwrap().is_none());
        assert_eq!(t.list_keys("APP1").await.unwrap().len(), 2);
        assert!(t.delete_key("APP1", &search).await.unwrap());
        assert!(!t.delete_key("APP1", &search).await.unwrap());
        assert!(t.authenticate("APP1", &search).await.unwrap().is_none());
        assert_eq!(t.list_apps().await.unwrap().len(), 2);
        t.delete_app("APP1").await.unwrap();
        assert!(t.authenticate("APP1", &admin).await.unwrap().is_none());
        assert!(t.list_keys("APP1").await.unwrap().is_empty());
        assert_eq!(t.list_apps().await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn cached_lookups_go_stale_for_at_most_the_ttl() {
        let (store, t, clock) = tenancy(Duration::from_millis(200)).await;
        let (_, key) = t.create_app(Some("APP"), "shop").await.unwrap();
        assert!(t.authenticate("APP", &key).await.unwrap().is_some());
        // Deleted behind this node's back (as through another node): still cached...
        let other = Tenancy::new(store, &TenancyConfig::default(), clock.clone());
        assert!(other.delete_key("APP", &key).await.unwrap());
        assert!(t.authenticate("APP", &key).await.unwrap().is_some());
        clock.advance(Duration::from_millis(199));
        assert!(t.authenticate("APP", &key).await.unwrap().is_some());
        // ...until the TTL passes.
        clock.advance(Duration::from_millis(1));
        assert!(t.authenticate("APP", &key).await.unwrap().is_none());
    }
}
