//! What an app receives, minute by minute: the dashboard's chart of events per minute by type.
//!
//! Each node counts the events it stores in memory, per app, minute (of reception: an event's
//! own timestamp may be days old; this counts traffic) and type — a lock and a map update per
//! batch, no store write on the event path — and adds its counts to table `stats` every
//! [`FLUSH_EVERY`], at shutdown, and before it answers a read. Family `m`, row `app 0 · hour
//! (u32 BE)`: one counter cell per event type and minute of the hour (qualifier `type 0 ·
//! minute`, the minute a byte), each flush one atomic increment per row, so the nodes' counts add
//! up. Like trending, counts follow [`crate::events::Events::prepare`]: a retried request is not
//! counted again. A node that crashes loses the counts of its last seconds (up to
//! `FLUSH_EVERY`): the chart is a gauge of traffic, not an account.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use penchant_store::{ReadModifyWriteRule, ReadRows, RowFilter, RowRange, RowSet, Store};
use serde::Serialize;

use crate::events::{Event, EventType};
use crate::{Result, keys};
use penchant_model::tables::STATS_FAMILY as FAMILY;
pub use penchant_model::tables::{STATS, STATS_MAX_HOURS as MAX_HOURS, STATS_TABLE};

/// How often a node adds its counts to the store.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);
const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const TYPES: [EventType; 3] = [EventType::Click, EventType::Conversion, EventType::View];

/// Events per minute by type over a window, oldest minute first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsPerMinute {
    /// The first minute (ms since the epoch).
    pub start: i64,
    /// The width of a bucket (ms): a minute.
    pub step: i64,
    /// Per event type (`click`, `conversion`, `view`), one count per minute, the last being the
    /// current minute.
    pub counts: BTreeMap<&'static str, Vec<u64>>,
}

fn qualifier(event_type: EventType, minute: u8) -> Bytes {
    let mut q = event_type.as_str().as_bytes().to_vec();
    q.push(0);
    q.push(minute);
    Bytes::from(q)
}

fn type_index(event_type: EventType) -> usize {
    match event_type {
        EventType::Click => 0,
        EventType::Conversion => 1,
        EventType::View => 2,
    }
}

/// Events of each type (click, conversion, view).
type Counts = [i64; 3];

fn add_counts(total: &mut Counts, more: Counts) {
    for (total, n) in total.iter_mut().zip(more) {
        *total += n;
    }
}

/// A node's counts not yet in the store: per app and minute (since the epoch), per type.
#[derive(Debug)]
pub struct Traffic {
    store: Arc<dyn Store>,
    pending: Mutex<HashMap<(String, i64), Counts>>,
}

impl Traffic {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            pending: Mutex::default(),
        }
    }

    /// Count stored events as received at `now` (ms), in memory.
    pub(crate) fn add(&self, app: &str, events: &[&Event], now: i64) {
        if events.is_empty() {
            return;
        }
        let mut counts = [0; 3];
        for event in events {
            counts[type_index(event.event_type)] += 1;
        }
        let minute = now.div_euclid(MINUTE_MS);
        let mut pending = self.pending.lock();
        add_counts(pending.entry((app.to_owned(), minute)).or_default(), counts);
    }

    /// Add the counts kept in memory to the store: one atomic increment per app and hour. Counts
    /// a failed increment held are kept for the next flush.
    pub async fn flush(&self) -> Result<()> {
        let pending = std::mem::take(&mut *self.pending.lock());
        let mut rows: BTreeMap<(String, i64), Vec<(i64, Counts)>> = BTreeMap::new();
        for ((app, minute), counts) in pending {
            rows.entry((app, minute.div_euclid(60)))
                .or_default()
                .push((minute, counts));
        }
        let mut failed = None;
        for ((app, hour), minutes) in rows {
            let rules = minutes
                .iter()
                .flat_map(|(minute, counts)| {
                    let at = minute.rem_euclid(60) as u8;
                    TYPES
                        .into_iter()
                        .zip(counts)
                        .filter(|(_, n)| **n > 0)
                        .map(move |(t, n)| {
                            ReadModifyWriteRule::increment(FAMILY, qualifier(t, at), *n)
                        })
                })
                .collect();
            let done = self
                .store
                .read_modify_write_row(STATS_TABLE, keys::traffic_hour(&app, hour), rules)
                .await;
            if let Err(e) = done {
                let mut pending = self.pending.lock();
                for (minute, counts) in minutes {
                    add_counts(pending.entry((app.clone(), minute)).or_default(), counts);
                }
                failed = Some(e);
            }
        }
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

/// An app's events per minute by type over the last `hours` (1..=[`MAX_HOURS`]) up to `now`.
pub(crate) async fn events_per_minute(
    store: &Arc<dyn Store>,
    app: &str,
    hours: u32,
    now: i64,
) -> Result<EventsPerMinute> {
    let hours = hours.clamp(1, MAX_HOURS);
    let minutes = hours as usize * 60;
    let current = now.div_euclid(MINUTE_MS);
    let first = current - minutes as i64 + 1;
    let (from, until) = (
        (first * MINUTE_MS).div_euclid(HOUR_MS),
        now.div_euclid(HOUR_MS) + 1,
    );
    let range = RowRange::closed_open(
        keys::traffic_hour(app, from),
        keys::traffic_hour(app, until),
    );
    let request = ReadRows::new(RowSet::range(range)).filter(RowFilter::CellsPerColumnLimit(1));
    let mut counts: BTreeMap<&'static str, Vec<u64>> = TYPES
        .into_iter()
        .map(|t| (t.as_str(), vec![0; minutes]))
        .collect();
    let prefix = keys::app(app);
    for row in store.read_all(STATS_TABLE, request).await? {
        let Some(hour) = row
            .key
            .strip_prefix(&prefix[..])
            .and_then(|rest| <[u8; 4]>::try_from(rest).ok())
            .map(|b| i64::from(u32::from_be_bytes(b)))
        else {
            continue;
        };
        for cell in row.family(FAMILY) {
            let q = &cell.qualifier[..];
            let (Some((&minute, name)), Ok(n)) = (
                q.split_last()
                    .and_then(|(m, rest)| Some((m, rest.strip_suffix(b"\0")?))),
                <[u8; 8]>::try_from(&cell.value[..]),
            ) else {
                continue;
            };
            let at = hour * 60 + i64::from(minute) - first;
            let Some(series) = std::str::from_utf8(name)
                .ok()
                .and_then(|n| counts.get_mut(n))
            else {
                continue;
            };
            if let Some(slot) = usize::try_from(at).ok().and_then(|i| series.get_mut(i)) {
                *slot += i64::from_be_bytes(n).max(0) as u64;
            }
        }
    }
    Ok(EventsPerMinute {
        start: first * MINUTE_MS,
        step: MINUTE_MS,
        counts,
    })
}
