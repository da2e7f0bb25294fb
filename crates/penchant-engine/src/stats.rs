//! What an app receives, minute by minute: the dashboard's chart of events per minute by type.
//!
//! Table `stats`, family `m`, row `app 0 · hour (u32 BE) · shard`: one counter cell per event
//! type and minute of the hour (qualifier `type · minute`, e.g. `click·07`, the minute a byte),
//! incremented atomically by each ingested batch at the time it was received (an event's own
//! timestamp may be days old; this counts traffic). A batch's shard is a hash of its first user,
//! so a busy app's hour is [`SHARDS`] rows rather than one hot row. Like trending, counts follow
//! [`crate::events::Events::ingest`]: a retried request is not counted again, and a batch a crash
//! interrupts between storing its events and counting them is not counted.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{GcRule, ReadModifyWriteRule, ReadRows, RowFilter, RowRange, RowSet, Store};
use serde::Serialize;

use crate::events::{Event, EventType};
use crate::{Result, keys};

pub const STATS_TABLE: &str = "stats";
const FAMILY: &str = "m";
/// Rows an app's hour is spread over.
const SHARDS: u8 = 8;
const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;
/// The longest window a read covers; counters expire a day after it.
pub const MAX_HOURS: u32 = 48;
const TYPES: [EventType; 3] = [EventType::Click, EventType::Conversion, EventType::View];

/// The tables this module needs.
pub fn tables() -> Vec<(&'static str, BTreeMap<String, GcRule>)> {
    let age = std::time::Duration::from_millis((i64::from(MAX_HOURS) + 24) as u64 * HOUR_MS as u64);
    vec![(
        STATS_TABLE,
        BTreeMap::from([(
            FAMILY.to_owned(),
            GcRule::Union(vec![GcRule::MaxVersions(1), GcRule::MaxAge(age)]),
        )]),
    )]
}

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

fn row(app: &str, hour: i64, shard: u8) -> Bytes {
    let mut key = keys::app(app).to_vec();
    key.extend_from_slice(&(hour.max(0) as u32).to_be_bytes());
    key.push(shard);
    Bytes::from(key)
}

fn qualifier(event_type: EventType, minute: u8) -> Bytes {
    let mut q = event_type.as_str().as_bytes().to_vec();
    q.push(0);
    q.push(minute);
    Bytes::from(q)
}

/// Count stored events as received at `now` (ms): one atomic increment of one row.
pub(crate) async fn count(
    store: &Arc<dyn Store>,
    app: &str,
    events: &[&Event],
    now: i64,
) -> Result<()> {
    let Some(first) = events.first() else {
        return Ok(());
    };
    let mut by_type: BTreeMap<&'static str, i64> = BTreeMap::new();
    for event in events {
        *by_type.entry(event.event_type.as_str()).or_default() += 1;
    }
    let minute = ((now.rem_euclid(HOUR_MS)) / MINUTE_MS) as u8;
    let rules = TYPES
        .into_iter()
        .filter_map(|t| {
            let n = *by_type.get(t.as_str())?;
            Some(ReadModifyWriteRule::increment(
                FAMILY,
                qualifier(t, minute),
                n,
            ))
        })
        .collect();
    let shard = (xxhash_rust::xxh3::xxh3_64(first.user().as_bytes()) % u64::from(SHARDS)) as u8;
    store
        .read_modify_write_row(STATS_TABLE, row(app, now.div_euclid(HOUR_MS), shard), rules)
        .await?;
    Ok(())
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
    let range = RowRange::closed_open(row(app, from, 0), row(app, until, 0));
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
            .and_then(|rest| <[u8; 4]>::try_from(rest.get(..4)?).ok())
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
