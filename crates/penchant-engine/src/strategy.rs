//! The personalization strategy of an app: which events count and how much, which facets count
//! and how much, and how strongly results are re-ranked. Algolia's
//! `GET/POST /1/strategies/personalization` body.

use std::sync::Arc;
use std::time::Duration;

use penchant_store::{Mutation, ReadRows, RowSet, Store};

use crate::Result;
use crate::cache::{self, TtlCache};
use crate::clock::Clock;
use crate::keys;
use penchant_model::tables::STRATEGIES_FAMILY as FAMILY;
pub use penchant_model::tables::{STRATEGIES, STRATEGIES_TABLE};

const COLUMN: &[u8] = b"strategy";
pub use penchant_model::strategy::{
    EventScoring, FacetScoring, MAX_EVENTS_SCORING, MAX_FACETS_SCORING, MAX_NAME_BYTES, Strategy,
    Versioned,
};

/// A version no other save gets: nanoseconds since the epoch, plus random low digits (two saves
/// in the same instant, on two nodes, still differ). Versions are only compared for equality.
fn new_version(clock: &Clock) -> i64 {
    clock.now_micros().saturating_mul(1000) + rand::random_range(0..1000)
}

/// Apps' strategies, with a per-node cache.
#[derive(Debug)]
pub struct Strategies {
    store: Arc<dyn Store>,
    clock: Clock,
    cache: TtlCache<String, Option<Arc<Versioned>>>,
}

impl Strategies {
    /// How the strategy cache has served.
    pub fn cache_stats(&self) -> crate::cache::CacheStats {
        self.cache.stats()
    }

    pub fn new(store: Arc<dyn Store>, ttl: Duration, clock: Clock) -> Self {
        Self {
            store,
            cache: TtlCache::new(cache::DEFAULT_CAPACITY, ttl, clock.clone()),
            clock,
        }
    }

    /// The app's strategy (cached for the TTL), if it has one.
    pub async fn get(&self, app: &str) -> Result<Option<Arc<Versioned>>> {
        if let Some(s) = self.cache.get(app) {
            return Ok(s);
        }
        self.fresh(app).await
    }

    /// The app's strategy as stored now.
    pub async fn fresh(&self, app: &str) -> Result<Option<Arc<Versioned>>> {
        let row = self
            .store
            .read_row(STRATEGIES_TABLE, keys::app(app), None)
            .await?;
        let strategy = decode(row.as_ref())?;
        self.cache.insert(app.to_owned(), strategy.clone());
        Ok(strategy)
    }

    /// Save a new strategy; returns it with its version.
    pub async fn set(&self, app: &str, strategy: Strategy) -> Result<Arc<Versioned>> {
        self.save(keys::app(app), app.to_owned(), strategy).await
    }

    /// Check and save a strategy in row `key`, cached under `cache_key`, with a new version.
    async fn save(
        &self,
        key: bytes::Bytes,
        cache_key: String,
        strategy: Strategy,
    ) -> Result<Arc<Versioned>> {
        strategy.check()?;
        let versioned = Arc::new(Versioned {
            strategy,
            version: new_version(&self.clock),
        });
        let value =
            serde_json::to_vec(&*versioned).map_err(|e| crate::internal("serialization", e))?;
        self.store
            .mutate_row(
                STRATEGIES_TABLE,
                key,
                vec![Mutation::set_now(FAMILY, COLUMN, value)],
            )
            .await?;
        self.cache.insert(cache_key, Some(versioned.clone()));
        Ok(versioned)
    }

    /// The cache key of a named strategy (the default's is the app ID alone).
    fn named_key(app: &str, name: &str) -> String {
        format!("{app}\0{name}")
    }

    /// A named strategy (cached for the TTL), if it exists.
    pub async fn named(&self, app: &str, name: &str) -> Result<Option<Arc<Versioned>>> {
        let key = Self::named_key(app, name);
        if let Some(s) = self.cache.get(&key) {
            return Ok(s);
        }
        let row = self
            .store
            .read_row(STRATEGIES_TABLE, keys::named_strategy(app, name), None)
            .await?;
        let strategy = decode(row.as_ref())?;
        self.cache.insert(key, strategy.clone());
        Ok(strategy)
    }

    /// Save a named strategy. Profiles are not recomputed for it: an answer that names it (an
    /// A/B test's variant) computes the user's profile with its weights from the user's
    /// aggregates.
    pub async fn set_named(
        &self,
        app: &str,
        name: &str,
        strategy: Strategy,
    ) -> Result<Arc<Versioned>> {
        keys::check_name("strategy", name, MAX_NAME_BYTES)?;
        let (key, cache_key) = (keys::named_strategy(app, name), Self::named_key(app, name));
        self.save(key, cache_key, strategy).await
    }

    /// Delete a named strategy; whether it existed.
    pub async fn delete_named(&self, app: &str, name: &str) -> Result<bool> {
        keys::check_name("strategy", name, MAX_NAME_BYTES)?;
        let existed = self.named(app, name).await?.is_some();
        self.store
            .mutate_row(
                STRATEGIES_TABLE,
                keys::named_strategy(app, name),
                vec![Mutation::DeleteFromRow],
            )
            .await?;
        self.cache.remove(&Self::named_key(app, name));
        Ok(existed)
    }

    /// The app's named strategies, by name.
    pub async fn all_named(&self, app: &str) -> Result<Vec<(String, Arc<Versioned>)>> {
        let prefix = keys::app(app);
        let mut out = Vec::new();
        let rows = self
            .store
            .read_all(
                STRATEGIES_TABLE,
                ReadRows::new(RowSet::prefix(prefix.clone())),
            )
            .await?;
        for row in rows {
            let Some(name) = row.key.strip_prefix(&prefix[..]).filter(|n| !n.is_empty()) else {
                continue;
            };
            let name = String::from_utf8_lossy(name).into_owned();
            if let Some(strategy) = decode(Some(&row))? {
                out.push((name, strategy));
            }
        }
        Ok(out)
    }

    /// Forget what this node cached of an app's strategies.
    pub fn forget(&self, app: &str) {
        let named = format!("{app}\0");
        self.cache.retain(|k| k != app && !k.starts_with(&named));
    }
}

/// The strategy a row holds, if any.
fn decode(row: Option<&penchant_store::Row>) -> Result<Option<Arc<Versioned>>> {
    row.and_then(|r| r.latest(FAMILY, COLUMN).map(|c| c.value.clone()))
        .map(|v| serde_json::from_slice::<Versioned>(&v))
        .transpose()
        .map_err(|e| crate::internal("corrupt strategy", e))
        .map(|s| s.map(Arc::new))
}
