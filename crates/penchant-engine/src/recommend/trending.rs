//! Trending items: what an index's users converted (and, lightly, clicked) over the last days,
//! newer days weighing more.
//!
//! Table `trending`, family `t`, row [`keys::trending`] `app 0 · index 0 · day · shard`: one
//! counter cell per item (qualifier = objectID, a 64-bit big-endian integer). An item's shard is
//! a hash of its objectID, so one busy day of an index is [`SHARDS`] rows rather than one hot
//! row. A read scans the index's last [`WINDOW_DAYS`] days (`SHARDS` rows a day, one range) and
//! weighs each day by `0.5^(age / HALF_LIFE_DAYS)`.
//!
//! An ingested batch counts in memory ([`Trends::add`], no store call on the event path); the
//! node adds its counts to the store every [`FLUSH_EVERY`] (one atomic increment per touched
//! row, so the nodes' counts add up) and on shutdown. A read adds the node's counts not yet
//! flushed to the stored ones: a node sees its own events at once, another node's within a
//! flush.
//!
//! Counts follow [`crate::events::Events::prepare`]: an event stored again (a retried request)
//! is not counted again. Counts not yet flushed when a node dies (at most [`FLUSH_EVERY`]'s
//! worth), and those of a batch interrupted between storing its events and counting them, are
//! lost: trending is an estimate, not an account.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use penchant_store::{ReadModifyWriteRule, ReadRows, RowFilter, Store};

use crate::aggregates::day_of;
use crate::events::{Event, EventType, Target};
use crate::{Result, keys};
use penchant_model::tables::TRENDING_FAMILY as FAMILY;
pub use penchant_model::tables::{TRENDING, TRENDING_TABLE};

/// Rows an index's day is spread over.
const SHARDS: u8 = 8;
pub use penchant_model::recommend::trending::{HALF_LIFE_DAYS, WINDOW_DAYS};
/// What an event adds to its items' counters; a conversion weighs ten clicks.
const CONVERSION: i64 = 10;
const CLICK: i64 = 1;
/// How often a node adds its counts to the store.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);

/// Counts not yet in the store, by row, then item.
type Counts = BTreeMap<Bytes, HashMap<String, i64>>;

/// A node's trending counts: kept in memory, added to the store every [`FLUSH_EVERY`].
#[derive(Debug)]
pub struct Trends {
    store: Arc<dyn Store>,
    pending: Mutex<Counts>,
}

impl Trends {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            pending: Mutex::default(),
        }
    }

    /// Count the conversions and clicks of stored events, in memory.
    pub(crate) fn add(&self, app: &str, events: &[&Event]) {
        let mut counted: Vec<(Bytes, &str, i64)> = Vec::new();
        for event in events {
            let weight = match event.event_type {
                EventType::Conversion => CONVERSION,
                EventType::Click => CLICK,
                EventType::View => continue,
            };
            let Target::ObjectIds(ids) = &event.target else {
                continue;
            };
            // An objectID is a qualifier here: one longer than a record's is not counted
            // (events are checked at the edge; this keeps one that was not from failing a flush).
            if crate::catalog::check_index_name(&event.index).is_err() {
                continue;
            }
            let day = day_of(event.timestamp);
            for id in ids
                .iter()
                .filter(|id| crate::catalog::check_object_id(id).is_ok())
            {
                counted.push((
                    keys::trending(app, &event.index, day, shard(id)),
                    id,
                    weight,
                ));
            }
        }
        if counted.is_empty() {
            return;
        }
        let mut pending = self.pending.lock();
        for (row, id, weight) in counted {
            let items = pending.entry(row).or_default();
            match items.get_mut(id) {
                Some(n) => *n += weight,
                None => {
                    items.insert(id.to_owned(), weight);
                }
            }
        }
    }

    /// Add the counts kept in memory to the store: one atomic increment per row. Counts a failed
    /// increment held are kept for the next flush.
    pub async fn flush(&self) -> Result<()> {
        let pending = std::mem::take(&mut *self.pending.lock());
        let failed = Mutex::new(None);
        let work = pending.into_iter().map(|(row, items)| {
            let rules = items
                .iter()
                .map(|(id, n)| ReadModifyWriteRule::increment(FAMILY, id.clone(), *n))
                .collect();
            let failed = &failed;
            async move {
                let done = self
                    .store
                    .read_modify_write_row(TRENDING_TABLE, row.clone(), rules)
                    .await;
                if let Err(e) = done {
                    self.put_back(row, items);
                    *failed.lock() = Some(e);
                }
                Ok(())
            }
        });
        crate::writes::concurrently(work.collect()).await?;
        match failed.into_inner() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    fn put_back(&self, row: Bytes, items: HashMap<String, i64>) {
        let mut pending = self.pending.lock();
        let kept = pending.entry(row).or_default();
        for (id, n) in items {
            *kept.entry(id).or_default() += n;
        }
    }

    /// Forget the counts not yet flushed of rows under `prefix` (an app's or an index's, being
    /// deleted): a later flush would bring them back.
    pub(crate) fn forget(&self, prefix: &[u8]) {
        self.pending
            .lock()
            .retain(|row, _| !row.starts_with(prefix));
    }

    /// An index's trending items at `now` (ms), best first, with their decayed scores (a
    /// conversion today counts 1): the stored counts and this node's not yet flushed.
    pub(crate) async fn scores(
        &self,
        app: &str,
        index: &str,
        now: i64,
    ) -> Result<Vec<(String, f32)>> {
        let today = day_of(now);
        let (from, until) = (today - WINDOW_DAYS + 1, today + 1);
        let request = ReadRows::new(keys::trending_days(app, index, from, until))
            .filter(RowFilter::CellsPerColumnLimit(1));
        let rows = self.store.read_all(TRENDING_TABLE, request).await?;
        let mut counts: HashMap<(i64, String), i64> = HashMap::new();
        for row in rows {
            let Some(day) = keys::trending_day_of(&row.key) else {
                continue;
            };
            for cell in row.family(FAMILY) {
                let (Ok(id), Ok(count)) = (
                    std::str::from_utf8(&cell.qualifier),
                    <[u8; 8]>::try_from(&cell.value[..]),
                ) else {
                    continue;
                };
                *counts.entry((day, id.to_owned())).or_default() += i64::from_be_bytes(count);
            }
        }
        {
            let pending = self.pending.lock();
            let rows = keys::trending(app, index, from, 0)..keys::trending(app, index, until, 0);
            for (row, items) in pending.range(rows) {
                let Some(day) = keys::trending_day_of(row) else {
                    continue;
                };
                for (id, n) in items {
                    *counts.entry((day, id.clone())).or_default() += n;
                }
            }
        }
        let mut scores: HashMap<String, f64> = HashMap::new();
        for ((day, id), count) in counts {
            let weight = 0.5f64.powf((today - day) as f64 / HALF_LIFE_DAYS);
            *scores.entry(id).or_default() += count as f64 / CONVERSION as f64 * weight;
        }
        let mut ranked: Vec<(String, f32)> = scores
            .into_iter()
            .filter(|(_, s)| *s > 0.0)
            .map(|(id, s)| (id, s as f32))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(ranked)
    }
}

fn shard(id: &str) -> u8 {
    (xxhash_rust::xxh3::xxh3_64(id.as_bytes()) % u64::from(SHARDS)) as u8
}
