//! One bounded cache with a time to live, for what a node may trust for a while without asking
//! the store again: API keys, strategies, retention windows, seen settings, set descriptions.
//! Bounded (least recently used entries go first, quick_cache's CLOCK-Pro), so a flood of
//! distinct lookups (e.g. random API keys) cannot grow a node's memory.

use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::clock::Clock;

/// Entries a cache holds by default.
pub const DEFAULT_CAPACITY: usize = 100_000;

/// A bounded map whose entries expire `ttl` after they were inserted.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    entries: quick_cache::sync::Cache<K, (i64, V)>,
    ttl: Duration,
    clock: Clock,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// How a cache has served: lookups answered, lookups missed (absent or expired), entries now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub entries: u64,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    pub fn new(capacity: usize, ttl: Duration, clock: Clock) -> Self {
        Self {
            entries: quick_cache::sync::Cache::new(capacity.max(1)),
            ttl,
            clock,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// How the cache has served so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: self.entries.len() as u64,
        }
    }

    /// The value, if it was inserted less than the TTL ago.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        Q: Hash + quick_cache::Equivalent<K> + ?Sized,
    {
        let fresh = self.entries.get(key).and_then(|(at, value)| {
            let age = self.clock.now_micros().saturating_sub(at);
            (age >= 0 && (age as u128) < self.ttl.as_micros()).then_some(value)
        });
        let counter = if fresh.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        fresh
    }

    pub fn insert(&self, key: K, value: V) {
        if !self.ttl.is_zero() {
            self.entries.insert(key, (self.clock.now_micros(), value));
        }
    }

    pub fn remove<Q>(&self, key: &Q)
    where
        Q: Hash + quick_cache::Equivalent<K> + ?Sized,
    {
        self.entries.remove(key);
    }

    /// Keep only the entries `keep` accepts.
    pub fn retain(&self, keep: impl Fn(&K) -> bool) {
        self.entries.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_the_cache_stays_bounded() {
        let clock = Clock::manual(0);
        let cache = TtlCache::new(100, Duration::from_secs(1), clock.clone());
        cache.insert("a".to_owned(), 1);
        assert_eq!(cache.get("a"), Some(1));
        clock.advance(Duration::from_millis(999));
        assert_eq!(cache.get("a"), Some(1));
        clock.advance(Duration::from_millis(1));
        assert_eq!(cache.get("a"), None, "expired at the TTL");
        assert_eq!(
            cache.stats(),
            CacheStats {
                hits: 2,
                misses: 1,
                entries: 1
            }
        );
        for i in 0..10_000 {
            cache.insert(i.to_string(), i);
        }
        assert!(cache.entries.len() <= 200, "{}", cache.entries.len());
        let off = TtlCache::new(10, Duration::ZERO, clock);
        off.insert(1, 1);
        assert_eq!(off.get(&1), None, "a zero TTL caches nothing");
    }
}
