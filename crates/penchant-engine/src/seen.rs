//! Per-user "seen" filters (Coffee Meets Bagel's already-seen Bloom filters).
//!
//! Each user of an app has one rotating Bloom filter ([`RotatingFilter`]): two generations of
//! `filterBits` bits each (2^17 by default, per app); when the current one holds its design
//! capacity (the keys it fits at the app's `errorRate`), it becomes the previous one and a fresh
//! one starts, so the false-positive rate stays bounded instead of climbing. Items are marked
//! seen by events of the app's `eventTypes` (views by default) and through the API; a bulk check
//! returns the candidates not seen.
//!
//! Storage: table `seen`, row [`keys::seen`] `app 0 · user 0` (the user's prefix, so that deleting a user
//! token deletes it with the events). The base: columns `s:cur`, `s:prev`, `s:n` (keys in
//! `cur`), `s:cap` (keys per generation) and `s:v` (its version, for optimistic updates); then
//! up to [`COMPACT_AT`] deltas `s:+<time><random>`, each the 8-byte hashes of the items one add
//! found new, replayed over the base on read. The app's settings live in row [`keys::app`].
//!
//! **Sized to what it holds.** A user who has seen a few items has no base: their row holds only
//! deltas (8 bytes an item), replayed over an empty filter on read — until the hashes pass
//! [`SPARSE_SHARE`] of the bitmap's size (or [`COMPACT_AT`] deltas), when an add writes the base.
//! The answers are the filter's either way (the hashes replay into the same bits), so the
//! false-positive guarantee is unchanged; a light user costs tens of bytes, not `filterBits / 8`.
//!
//! **Not for me.** A user can hide items for a while (negative feedback): an event whose name
//! is one of the app's `negativeEventNames` (it is not stored as an interaction: it counts in no
//! profile, list, training or trend), or `POST /1/seen/users/{userToken}/hide`. Each hidden item
//! is a cell of family `n` of the same row (qualifier the objectID, value until when, ms,
//! big-endian), kept [`MAX_HIDE_DAYS`] days and a day; [`Seen::unseen`] leaves hidden items out
//! until then, as it leaves out seen ones, with the same row read.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use penchant_bloom::{BloomFilter, RotatingFilter, key_hash};
use penchant_store::{Consistency, Mutation, ReadRows, Row, RowFilter, RowMutation, RowSet, Store};

use crate::cache::{self, TtlCache};
use crate::clock::Clock;
use crate::keys;
use crate::writes::{VERSION, write_if_version};
use crate::{EngineError, Result};
pub use penchant_model::tables::{MAX_HIDE_DAYS, SEEN, SEEN_TABLE};
use penchant_model::tables::{SEEN_FAMILY as FAMILY, SEEN_HIDDEN as HIDDEN};

const SETTINGS: &[u8] = b"settings";
const CURRENT: &[u8] = b"cur";
const PREVIOUS: &[u8] = b"prev";
const COUNT: &[u8] = b"n";
/// Keys per generation, fixed when the filter is created.
const CAPACITY: &[u8] = b"cap";
/// The first byte of a delta's column.
const DELTA: u8 = keys::SEEN_DELTA;
/// Deltas a row holds before an add folds them into the base.
pub const COMPACT_AT: usize = 16;
/// A row without a base keeps its hashes as deltas while they take at most this share of the
/// bitmap's bytes (1/16: 1 KB of hashes, 128 items, for the default 16 KB filter).
pub const SPARSE_SHARE: u64 = 16;
const ATTEMPTS: usize = 32;

pub use penchant_model::seen::{MAX_IDS_PER_CALL, SeenInfo, SeenSettings};

fn corrupt(e: impl std::fmt::Display) -> EngineError {
    crate::internal("corrupt seen filter", e)
}

/// The users' seen filters of every app.
#[derive(Debug)]
pub struct Seen {
    store: Arc<dyn Store>,
    settings: TtlCache<String, Arc<SeenSettings>>,
    /// Empty filters by (bits, error rate): sizing one takes a search over the model.
    empty: Mutex<HashMap<(u64, u64), RotatingFilter>>,
    /// What hidden items are compared with.
    clock: Clock,
}

impl Seen {
    /// How the settings cache has served.
    pub fn cache_stats(&self) -> crate::cache::CacheStats {
        self.settings.stats()
    }

    /// Seen filters over `store`; a node trusts its copy of an app's settings for `ttl`.
    pub fn new(store: Arc<dyn Store>, ttl: Duration, clock: Clock) -> Self {
        Self {
            store,
            settings: TtlCache::new(cache::DEFAULT_CAPACITY, ttl, clock.clone()),
            empty: Mutex::new(HashMap::new()),
            clock,
        }
    }

    /// An app's settings (defaults until set).
    pub async fn settings(&self, app: &str) -> Result<Arc<SeenSettings>> {
        if let Some(s) = self.settings.get(app) {
            return Ok(s);
        }
        let row = self
            .store
            .read_row(
                SEEN_TABLE,
                keys::app(app),
                Some(RowFilter::column(FAMILY, SETTINGS)),
            )
            .await?;
        let settings = match row.as_ref().and_then(|r| r.latest(FAMILY, SETTINGS)) {
            Some(c) => serde_json::from_slice(&c.value).map_err(corrupt)?,
            None => SeenSettings::default(),
        };
        let settings = Arc::new(settings);
        self.settings.insert(app.to_owned(), settings.clone());
        Ok(settings)
    }

    /// Replace an app's settings.
    pub async fn set_settings(&self, app: &str, settings: SeenSettings) -> Result<()> {
        settings.check()?;
        let json =
            serde_json::to_vec(&settings).map_err(|e| crate::internal("serialization", e))?;
        self.store
            .mutate_row(
                SEEN_TABLE,
                keys::app(app),
                vec![Mutation::set_now(FAMILY, SETTINGS, json)],
            )
            .await?;
        self.settings.insert(app.to_owned(), Arc::new(settings));
        Ok(())
    }

    /// A new, empty filter as the app's settings size it.
    async fn new_filter(&self, app: &str) -> Result<RotatingFilter> {
        let settings = self.settings(app).await?;
        let shape = (settings.filter_bits, settings.error_rate.to_bits());
        if let Some(empty) = self.empty.lock().get(&shape) {
            return Ok(empty.clone());
        }
        let empty = settings.new_filter()?;
        self.empty.lock().insert(shape, empty.clone());
        Ok(empty)
    }

    fn row(app: &str, user: &str) -> Result<Bytes> {
        keys::check_user_token(user)?;
        Ok(keys::seen(app, user))
    }

    /// A user's filter (its base, or an empty filter, with the deltas written since replayed),
    /// or `None`.
    async fn load(
        &self,
        app: &str,
        user: &str,
        consistency: Consistency,
    ) -> Result<Option<Loaded>> {
        match self.read(app, user, consistency).await? {
            Some(row) => self.decode(app, &row).await,
            None => Ok(None),
        }
    }

    /// A user's row (its filter and hidden items), as consistent as asked.
    async fn read(&self, app: &str, user: &str, consistency: Consistency) -> Result<Option<Row>> {
        Ok(penchant_store::with_consistency(&self.store, consistency)
            .read_row(SEEN_TABLE, Self::row(app, user)?, None)
            .await?)
    }

    /// The filter of a user's row (`None`: the row holds none).
    async fn decode(&self, app: &str, row: &Row) -> Result<Option<Loaded>> {
        let empty = match row.latest(FAMILY, CURRENT) {
            Some(_) => None,
            None => Some(self.new_filter(app).await?),
        };
        decode(row, empty)
    }

    /// The items a row hides now, with until when.
    fn hidden_in(&self, row: &Row) -> HashMap<Bytes, i64> {
        let now = self.clock.now_ms();
        row.family(HIDDEN)
            .filter_map(|c| {
                let until = i64::from_be_bytes(<[u8; 8]>::try_from(&c.value[..]).ok()?);
                (until > now).then(|| (c.qualifier.clone(), until))
            })
            .collect()
    }

    /// Hide items from users until the given times (ms): "not for me". One write for all.
    pub async fn hide_many(
        &self,
        app: &str,
        items: &BTreeMap<&str, Vec<(&str, i64)>>,
    ) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        self.store
            .mutate_all(SEEN_TABLE, Self::hides(app, items)?)
            .await?;
        Ok(())
    }

    /// The writes that hide items from users until the given times (ms): blind cells.
    fn hides(app: &str, items: &BTreeMap<&str, Vec<(&str, i64)>>) -> Result<Vec<RowMutation>> {
        let mut rows = Vec::new();
        for (user, ids) in items {
            check_count(ids.len())?;
            let cells = ids
                .iter()
                .map(|(id, until)| {
                    crate::catalog::check_object_id(id)?;
                    Ok(Mutation::set_now(
                        HIDDEN,
                        Bytes::copy_from_slice(id.as_bytes()),
                        until.to_be_bytes().to_vec(),
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            rows.push(RowMutation::new(Self::row(app, user)?, cells));
        }
        Ok(rows)
    }

    /// Show hidden items again.
    pub async fn unhide<K: AsRef<[u8]>>(&self, app: &str, user: &str, ids: &[K]) -> Result<()> {
        check_count(ids.len())?;
        let cells = ids
            .iter()
            .map(|id| Mutation::delete_column(HIDDEN, Bytes::copy_from_slice(id.as_ref())))
            .collect();
        self.store
            .mutate_row(SEEN_TABLE, Self::row(app, user)?, cells)
            .await?;
        Ok(())
    }

    /// The items a user hides now, with until when (ms), by objectID.
    pub async fn hidden(
        &self,
        app: &str,
        user: &str,
        consistency: Consistency,
    ) -> Result<BTreeMap<String, i64>> {
        let Some(row) = penchant_store::with_consistency(&self.store, consistency)
            .read_row(
                SEEN_TABLE,
                Self::row(app, user)?,
                Some(RowFilter::FamilyRegex(HIDDEN.into())),
            )
            .await?
        else {
            return Ok(BTreeMap::new());
        };
        Ok(self
            .hidden_in(&row)
            .into_iter()
            .map(|(id, until)| (String::from_utf8_lossy(&id).into_owned(), until))
            .collect())
    }

    /// Mark items seen; each answer tells whether the item was new to the filter.
    ///
    /// An add writes only a small delta cell with the hashes of the new items — no
    /// read-change-write of the whole filter, no conflict between concurrent adds. Once a row
    /// holds [`COMPACT_AT`] deltas, or a row without a base holds more hashes than
    /// [`SPARSE_SHARE`] allows, an add folds them into the base instead (a conditional write on
    /// the base's version, deleting the deltas it folded, in one row mutation).
    pub async fn add<K: AsRef<[u8]>>(&self, app: &str, user: &str, ids: &[K]) -> Result<Vec<bool>> {
        check_count(ids.len())?;
        let row = Self::row(app, user)?;
        for _ in 0..ATTEMPTS {
            let loaded = match self.load(app, user, Consistency::Eventual).await? {
                Some(loaded) => loaded,
                None => Loaded::empty(self.new_filter(app).await?),
            };
            let (added, plan) = plan(loaded, ids);
            match plan {
                Plan::Nothing => return Ok(added),
                Plan::Delta(cell) => {
                    self.store.mutate_row(SEEN_TABLE, row, vec![cell]).await?;
                    return Ok(added);
                }
                Plan::Rewrite { version, cells, .. } => {
                    let store = &*self.store;
                    if write_if_version(store, SEEN_TABLE, row.clone(), FAMILY, version, cells)
                        .await?
                    {
                        return Ok(added);
                    }
                }
            }
        }
        Err(EngineError::Unavailable(
            "too many concurrent updates of one seen filter; retry".into(),
        ))
    }

    /// Mark items seen by several users at once and hide others (the items of a batch of
    /// events): one read of their rows and one write, whatever the number of users; the rows
    /// that outgrew their deltas are folded after ([`Seen::fold`]).
    pub async fn add_many(
        &self,
        app: &str,
        seen: &BTreeMap<&str, Vec<&str>>,
        hidden: &BTreeMap<&str, Vec<(&str, i64)>>,
    ) -> Result<()> {
        let marks = self.marks(app, seen, hidden).await?;
        self.store.mutate_all(SEEN_TABLE, marks.writes).await?;
        self.fold_many(app, &marks.folds).await
    }

    /// What marking items seen by several users and hiding others writes — delta cells of the
    /// items new to each filter, hidden-item cells: blind writes, for one write with whatever
    /// else (a batch's events) — and the users whose rows to fold after it. One read of the
    /// rows of `seen`'s users.
    pub async fn marks(
        &self,
        app: &str,
        seen: &BTreeMap<&str, Vec<&str>>,
        hidden: &BTreeMap<&str, Vec<(&str, i64)>>,
    ) -> Result<Marks> {
        let mut marks = Marks {
            writes: Self::hides(app, hidden)?,
            folds: Vec::new(),
        };
        if seen.is_empty() {
            return Ok(marks);
        }
        let items = seen;
        let empty = self.new_filter(app).await?;
        let keys = items
            .iter()
            .map(|(user, ids)| {
                check_count(ids.len())?;
                Self::row(app, user)
            })
            .collect::<Result<Vec<_>>>()?;
        let request = ReadRows::new(RowSet::keys(keys.iter().cloned()));
        let mut rows: HashMap<Bytes, Row> = self
            .store
            .read_all(SEEN_TABLE, request)
            .await?
            .into_iter()
            .map(|r| (r.key.clone(), r))
            .collect();
        for ((user, ids), key) in items.iter().zip(keys) {
            let loaded = match rows.remove(&key) {
                Some(row) => {
                    let base = row.latest(FAMILY, CURRENT).is_some();
                    decode(&row, (!base).then(|| empty.clone()))?
                }
                None => None,
            };
            let loaded = loaded.unwrap_or_else(|| Loaded::empty(empty.clone()));
            match plan(loaded, ids).1 {
                Plan::Nothing => {}
                Plan::Delta(cell) => marks.writes.push(RowMutation::new(key, vec![cell])),
                // A delta all the same (it is blind), and the row folded after the write.
                Plan::Rewrite { delta, .. } => {
                    marks.writes.push(RowMutation::new(key, vec![delta]));
                    marks.folds.push((*user).to_owned());
                }
            }
        }
        Ok(marks)
    }

    /// Fold these users' deltas into their bases ([`Seen::fold`]), all at once.
    pub async fn fold_many(&self, app: &str, users: &[String]) -> Result<()> {
        let folds = users.iter().map(|user| self.fold(app, user));
        crate::writes::concurrently(folds.collect()).await
    }

    /// Fold a user's deltas into the base (a conditional write on the base's version, deleting
    /// the deltas it folded). Folding never changes an answer, only the row's size: a fold
    /// that meets another gives way to it.
    pub async fn fold(&self, app: &str, user: &str) -> Result<()> {
        let row = Self::row(app, user)?;
        for _ in 0..ATTEMPTS {
            let Some(loaded) = self.load(app, user, Consistency::Strong).await? else {
                return Ok(());
            };
            if loaded.deltas.is_empty() {
                return Ok(());
            }
            let version = loaded.version;
            let cells = rewrite(loaded.filter, loaded.deltas);
            let store = &*self.store;
            if write_if_version(store, SEEN_TABLE, row.clone(), FAMILY, version, cells).await? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Whether each item may have been seen (the filter read as consistent as asked).
    pub async fn exists<K: AsRef<[u8]>>(
        &self,
        app: &str,
        user: &str,
        ids: &[K],
        consistency: Consistency,
    ) -> Result<Vec<bool>> {
        check_count(ids.len())?;
        Ok(match self.load(app, user, consistency).await? {
            Some(l) => ids
                .iter()
                .map(|id| l.filter.contains(id.as_ref()))
                .collect(),
            None => vec![false; ids.len()],
        })
    }

    /// The items neither seen nor hidden, in their order: the bulk check before recommending
    /// (the user's row read once, as consistent as asked).
    pub async fn unseen<'k, K: AsRef<[u8]>>(
        &self,
        app: &str,
        user: &str,
        ids: &'k [K],
        consistency: Consistency,
    ) -> Result<Vec<&'k K>> {
        check_count(ids.len())?;
        let Some(row) = self.read(app, user, consistency).await? else {
            return Ok(ids.iter().collect());
        };
        let hidden = self.hidden_in(&row);
        let shown = |id: &&K| !hidden.contains_key(id.as_ref());
        Ok(match self.decode(app, &row).await? {
            Some(l) => l.filter.unseen(ids).into_iter().filter(shown).collect(),
            None => ids.iter().filter(shown).collect(),
        })
    }

    /// What a user's filter holds (read as consistent as asked). `NotFound` when the user has
    /// none.
    pub async fn info(&self, app: &str, user: &str, consistency: Consistency) -> Result<SeenInfo> {
        let Loaded { filter, .. } = self
            .load(app, user, consistency)
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

/// What an add does to a user's row.
enum Plan {
    /// Nothing: every item is in the current generation already.
    Nothing,
    /// Write this delta cell: the hashes of the new items.
    Delta(Mutation),
    /// Rewrite the base with these cells, deleting the deltas, if its version is still
    /// `version`; or write `delta` (the new items), and fold after.
    Rewrite {
        version: u64,
        cells: Vec<Mutation>,
        delta: Mutation,
    },
}

/// What a marking of items seen writes beside a batch's events ([`Seen::marks`]).
#[derive(Debug, Default)]
pub struct Marks {
    /// Delta cells of items new to filters, cells of hidden items.
    pub writes: Vec<RowMutation>,
    /// The users whose rows to fold after the write ([`Seen::fold`]).
    pub folds: Vec<String>,
}

/// Mark items seen in a loaded filter; each answer tells whether the item was new to it, and
/// the plan says what to write.
fn plan<K: AsRef<[u8]>>(loaded: Loaded, ids: &[K]) -> (Vec<bool>, Plan) {
    let Loaded {
        version,
        mut filter,
        deltas,
        hashes: hashed,
    } = loaded;
    let mut new_hashes = Vec::new();
    let added: Vec<bool> = ids
        .iter()
        .map(|id| {
            let hash = key_hash(id.as_ref());
            let new = !filter.contains_hash(hash);
            // Into the current generation even if the previous one has it: an item seen
            // again is remembered anew. The delta holds what changed it.
            if !filter.current().contains_hash(hash) {
                new_hashes.push(hash);
                filter.insert_hash(hash);
            }
            new
        })
        .collect();
    if new_hashes.is_empty() {
        return (added, Plan::Nothing);
    }
    let sparse = (hashed + new_hashes.len() as u64) * 8
        <= filter.current().size_bytes() as u64 / SPARSE_SHARE;
    let delta: Vec<u8> = new_hashes.iter().flat_map(|h| h.to_le_bytes()).collect();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let column = keys::seen_delta(nanos, rand::random::<u32>());
    let delta = Mutation::set_now(FAMILY, column, delta);
    if (version > 0 || sparse) && deltas.len() < COMPACT_AT {
        return (added, Plan::Delta(delta));
    }
    let cells = rewrite(filter, deltas);
    (
        added,
        Plan::Rewrite {
            version,
            cells,
            delta,
        },
    )
}

/// The cells that rewrite a row's base as `filter` (its deltas replayed), deleting the deltas.
fn rewrite(filter: RotatingFilter, deltas: Vec<Bytes>) -> Vec<Mutation> {
    let mut cells = vec![
        Mutation::set_now(FAMILY, CURRENT, filter.current().to_bytes()),
        Mutation::set_now(FAMILY, COUNT, filter.current_keys().to_string()),
        Mutation::set_now(FAMILY, CAPACITY, filter.capacity().to_string()),
    ];
    cells.push(match filter.previous() {
        Some(p) => Mutation::set_now(FAMILY, PREVIOUS, p.to_bytes()),
        None => Mutation::delete_column(FAMILY, PREVIOUS),
    });
    cells.extend(
        deltas
            .into_iter()
            .map(|q| Mutation::delete_column(FAMILY, q)),
    );
    cells
}

/// A user's filter as loaded.
struct Loaded {
    /// The base's version.
    version: u64,
    /// The base with the deltas replayed.
    filter: RotatingFilter,
    /// The qualifiers of the deltas replayed.
    deltas: Vec<Bytes>,
    /// The hashes the deltas hold.
    hashes: u64,
}

impl Loaded {
    /// A user without a row: an empty filter.
    fn empty(filter: RotatingFilter) -> Loaded {
        Loaded {
            version: 0,
            filter,
            deltas: Vec::new(),
            hashes: 0,
        }
    }
}

/// A user's row: its base, or `empty` when it has none, with its deltas replayed. `None` for a
/// row without a base or a delta.
fn decode(row: &Row, empty: Option<RotatingFilter>) -> Result<Option<Loaded>> {
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
    // In the order they were written (their columns sort by time).
    let mut cells: Vec<_> = row
        .family(FAMILY)
        .filter(|c| c.qualifier.first() == Some(&DELTA))
        .collect();
    cells.sort_by(|a, b| a.qualifier.cmp(&b.qualifier));
    let mut filter = match (filter(CURRENT)?, empty) {
        (Some(current), _) => {
            let previous = filter(PREVIOUS)?;
            RotatingFilter::from_parts(current, previous, number(COUNT), number(CAPACITY))
                .map_err(corrupt)?
        }
        (None, Some(empty)) if !cells.is_empty() => empty,
        (None, _) => return Ok(None),
    };
    let mut deltas = Vec::with_capacity(cells.len());
    let mut hashes = 0;
    for c in cells {
        for hash in c.value.chunks_exact(8) {
            filter.insert_hash(u64::from_le_bytes(hash.try_into().unwrap_or_default()));
            hashes += 1;
        }
        deltas.push(c.qualifier.clone());
    }
    Ok(Some(Loaded {
        version: number(VERSION),
        filter,
        deltas,
        hashes,
    }))
}
