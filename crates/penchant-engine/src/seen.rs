//! Per-user "seen" filters (Coffee Meets Bagel's already-seen Bloom filters).
//!
//! Each user of an app has one rotating Bloom filter ([`RotatingFilter`]): two generations of
//! `filterBits` bits each (2^17 by default, per app); when the current one holds its design
//! capacity (the keys it fits at the app's `errorRate`), it becomes the previous one and a fresh
//! one starts, so the false-positive rate stays bounded instead of climbing. Items are marked
//! seen by events of the app's `eventTypes` (views by default) and through the API; a bulk check
//! returns the candidates not seen.
//!
//! Storage: table `seen`, row `app 0x00 | user 0x00` (the user's prefix, so that deleting a user
//! token deletes it with the events), columns `s:cur`, `s:prev`, `s:n` (keys in `cur`), `s:cap`
//! (keys per generation) and `s:v` (a version for optimistic updates). The app's settings live in row `app 0x00`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use penchant_bloom::{BloomFilter, RotatingFilter, keys_per_partition};
use penchant_store::{GcRule, Mutation, Row, RowFilter, Store};
use serde::{Deserialize, Serialize};

use crate::events::{EventType, token_ok, user_prefix};
use crate::layout::app_prefix;
use crate::sets::write_if_version;
use crate::{EngineError, Result};

pub const SEEN_TABLE: &str = "seen";
const FAMILY: &str = "s";
const SETTINGS: &[u8] = b"settings";
const CURRENT: &[u8] = b"cur";
const PREVIOUS: &[u8] = b"prev";
const COUNT: &[u8] = b"n";
/// Keys per generation, fixed when the filter is created.
const CAPACITY: &[u8] = b"cap";
const VERSION: &[u8] = b"v";
/// Most objectIDs in one call.
pub const MAX_IDS_PER_CALL: usize = 100_000;
const ATTEMPTS: usize = 32;

/// The tables this module needs.
pub fn tables() -> Vec<(&'static str, BTreeMap<String, GcRule>)> {
    vec![(
        SEEN_TABLE,
        BTreeMap::from([(FAMILY.to_owned(), GcRule::MaxVersions(1))]),
    )]
}

/// An app's seen-filter settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SeenSettings {
    /// Bits per generation: a multiple of 512, from 512 to 2^30. New filters take a change;
    /// existing ones keep their size until deleted.
    #[serde(default = "default_bits")]
    pub filter_bits: u64,
    /// The false-positive rate a generation is allowed before it rotates, in (0, 1).
    #[serde(default = "default_error_rate")]
    pub error_rate: f64,
    /// Which events mark their objectIDs as seen.
    #[serde(default = "default_event_types")]
    pub event_types: Vec<EventType>,
}

fn default_bits() -> u64 {
    1 << 17
}

fn default_error_rate() -> f64 {
    0.01
}

fn default_event_types() -> Vec<EventType> {
    vec![EventType::View]
}

impl Default for SeenSettings {
    fn default() -> Self {
        Self {
            filter_bits: default_bits(),
            error_rate: default_error_rate(),
            event_types: default_event_types(),
        }
    }
}

impl SeenSettings {
    fn check(&self) -> Result<()> {
        let bad = |m: &str| Err(EngineError::Invalid(m.to_owned()));
        if self.filter_bits == 0
            || !self.filter_bits.is_multiple_of(512)
            || self.filter_bits > 1 << 30
        {
            return bad("filterBits must be a multiple of 512 between 512 and 1073741824");
        }
        if !(self.error_rate > 0.0 && self.error_rate < 1.0) {
            return bad("errorRate must be between 0 and 1 (exclusive)");
        }
        self.capacity().map(|_| ())
    }

    /// Keys per generation.
    fn capacity(&self) -> Result<u64> {
        keys_per_partition(self.filter_bits / 8, self.error_rate)
            .map(|(keys, _)| keys)
            .map_err(|_| {
                EngineError::Invalid(
                    "filterBits is too small for errorRate: not one key fits".into(),
                )
            })
    }

    fn new_filter(&self) -> Result<RotatingFilter> {
        RotatingFilter::new(self.filter_bits / 8, self.capacity()?).map_err(invalid)
    }
}

/// What `GET /1/seen/users/{userToken}` tells.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SeenInfo {
    pub user_token: String,
    pub filter_bits: u64,
    pub probes: u32,
    /// Keys per generation before it rotates.
    pub capacity: u64,
    /// Keys in the current generation.
    pub keys: u64,
    /// Whether a previous generation is kept.
    pub rotated: bool,
    pub fill_ratio: f64,
    pub estimated_error_rate: f64,
}

fn invalid(e: impl std::fmt::Display) -> EngineError {
    EngineError::Invalid(e.to_string())
}

fn corrupt(e: impl std::fmt::Display) -> EngineError {
    EngineError::Invalid(format!("corrupt seen filter: {e}"))
}

/// The users' seen filters of every app.
#[derive(Debug)]
pub struct Seen {
    store: Arc<dyn Store>,
    ttl: Duration,
    settings: Mutex<HashMap<String, (Instant, Arc<SeenSettings>)>>,
}

impl Seen {
    /// Seen filters over `store`; a node trusts its copy of an app's settings for `ttl`.
    pub fn new(store: Arc<dyn Store>, ttl: Duration) -> Self {
        Self {
            store,
            ttl,
            settings: Mutex::new(HashMap::new()),
        }
    }

    /// An app's settings (defaults until set).
    pub async fn settings(&self, app: &str) -> Result<Arc<SeenSettings>> {
        if let Some((at, s)) = self.settings.lock().get(app)
            && at.elapsed() < self.ttl
        {
            return Ok(s.clone());
        }
        let row = self
            .store
            .read_row(
                SEEN_TABLE,
                Bytes::from(app_prefix(app)),
                Some(RowFilter::column(FAMILY, SETTINGS)),
            )
            .await?;
        let settings = match row.as_ref().and_then(|r| r.latest(FAMILY, SETTINGS)) {
            Some(c) => serde_json::from_slice(&c.value).map_err(invalid)?,
            None => SeenSettings::default(),
        };
        let settings = Arc::new(settings);
        self.settings
            .lock()
            .insert(app.to_owned(), (Instant::now(), settings.clone()));
        Ok(settings)
    }

    /// Replace an app's settings.
    pub async fn set_settings(&self, app: &str, settings: SeenSettings) -> Result<()> {
        settings.check()?;
        let json = serde_json::to_vec(&settings).map_err(invalid)?;
        self.store
            .mutate_row(
                SEEN_TABLE,
                Bytes::from(app_prefix(app)),
                vec![Mutation::set_now(FAMILY, SETTINGS, json)],
            )
            .await?;
        self.settings
            .lock()
            .insert(app.to_owned(), (Instant::now(), Arc::new(settings)));
        Ok(())
    }

    fn row(app: &str, user: &str) -> Result<Bytes> {
        if !token_ok(user) {
            return Err(EngineError::Invalid(
                "userToken must be 1 to 129 characters among a-z A-Z 0-9 _ = / + -".into(),
            ));
        }
        Ok(Bytes::from(user_prefix(app, user)))
    }

    /// A user's filter and its version (0: none stored).
    async fn load(&self, app: &str, user: &str) -> Result<Option<(u64, RotatingFilter)>> {
        let row = self
            .store
            .read_row(SEEN_TABLE, Self::row(app, user)?, None)
            .await?;
        row.as_ref().map(decode).transpose()
    }

    /// Mark items seen; each answer tells whether the item was new to the filter.
    pub async fn add<K: AsRef<[u8]>>(&self, app: &str, user: &str, ids: &[K]) -> Result<Vec<bool>> {
        check_count(ids.len())?;
        for _ in 0..ATTEMPTS {
            let (version, mut filter) = match self.load(app, user).await? {
                Some(stored) => stored,
                None => (0, self.settings(app).await?.new_filter()?),
            };
            let added: Vec<bool> = ids
                .iter()
                .map(|id| {
                    let new = !filter.contains(id.as_ref());
                    filter.insert(id.as_ref());
                    new
                })
                .collect();
            if !added.contains(&true) {
                return Ok(added);
            }
            let mut cells = vec![
                Mutation::set_now(FAMILY, CURRENT, filter.current().to_bytes()),
                Mutation::set_now(FAMILY, COUNT, filter.current_keys().to_string()),
                Mutation::set_now(FAMILY, CAPACITY, filter.capacity().to_string()),
            ];
            cells.push(match filter.previous() {
                Some(p) => Mutation::set_now(FAMILY, PREVIOUS, p.to_bytes()),
                None => Mutation::delete_column(FAMILY, PREVIOUS),
            });
            if write_if_version(
                &*self.store,
                SEEN_TABLE,
                Self::row(app, user)?,
                FAMILY,
                version,
                cells,
            )
            .await?
            {
                return Ok(added);
            }
        }
        Err(EngineError::Store(penchant_store::StoreError::Unavailable(
            "too many concurrent updates of one seen filter; retry".into(),
        )))
    }

    /// Whether each item may have been seen.
    pub async fn exists<K: AsRef<[u8]>>(
        &self,
        app: &str,
        user: &str,
        ids: &[K],
    ) -> Result<Vec<bool>> {
        check_count(ids.len())?;
        Ok(match self.load(app, user).await? {
            Some((_, filter)) => ids.iter().map(|id| filter.contains(id.as_ref())).collect(),
            None => vec![false; ids.len()],
        })
    }

    /// The items not seen, in their order: the bulk check before recommending.
    pub async fn unseen<'k, K: AsRef<[u8]>>(
        &self,
        app: &str,
        user: &str,
        ids: &'k [K],
    ) -> Result<Vec<&'k K>> {
        check_count(ids.len())?;
        Ok(match self.load(app, user).await? {
            Some((_, filter)) => filter.unseen(ids),
            None => ids.iter().collect(),
        })
    }

    /// What a user's filter holds. `NotFound` when the user has none.
    pub async fn info(&self, app: &str, user: &str) -> Result<SeenInfo> {
        let (_, filter) = self
            .load(app, user)
            .await?
            .ok_or_else(|| EngineError::NotFound(format!("user {user} has no seen filter")))?;
        let current = filter.current();
        Ok(SeenInfo {
            user_token: user.to_owned(),
            filter_bits: current.bits(),
            probes: current.probes(),
            capacity: filter.capacity(),
            keys: filter.current_keys(),
            rotated: filter.previous().is_some(),
            fill_ratio: current.fill_ratio(),
            estimated_error_rate: filter.estimated_fp_rate(),
        })
    }

    /// Forget what a user has seen.
    pub async fn clear(&self, app: &str, user: &str) -> Result<()> {
        self.store
            .mutate_row(
                SEEN_TABLE,
                Self::row(app, user)?,
                vec![Mutation::DeleteFromRow],
            )
            .await?;
        Ok(())
    }
}

fn check_count(n: usize) -> Result<()> {
    if n > MAX_IDS_PER_CALL {
        return Err(EngineError::Invalid(format!(
            "at most {MAX_IDS_PER_CALL} objectIDs per call"
        )));
    }
    Ok(())
}

fn decode(row: &Row) -> Result<(u64, RotatingFilter)> {
    let cell = |q: &[u8]| row.latest(FAMILY, q).map(|c| &c.value[..]);
    let number = |q: &[u8]| {
        cell(q)
            .and_then(|v| std::str::from_utf8(v).ok()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let filter = |q: &[u8]| {
        cell(q)
            .map(BloomFilter::from_bytes)
            .transpose()
            .map_err(corrupt)
    };
    let current = filter(CURRENT)?.ok_or_else(|| corrupt("no current generation"))?;
    let previous = filter(PREVIOUS)?;
    let filter = RotatingFilter::from_parts(current, previous, number(COUNT), number(CAPACITY))
        .map_err(corrupt)?;
    Ok((number(VERSION), filter))
}
