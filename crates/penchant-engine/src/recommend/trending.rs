//! Trending items: what an index's users converted (and, lightly, clicked) over the last days,
//! newer days weighing more.
//!
//! Table `trending`, family `t`, row [`keys::trending`] `app 0 · index 0 · day · shard`: one
//! counter cell per item (qualifier = objectID, a 64-bit big-endian integer), incremented
//! atomically by each ingested batch (read-modify-write, no read on the event path). An item's
//! shard is a hash of its objectID, so one busy day of an index is [`SHARDS`] rows rather than
//! one hot row. A read scans the index's last [`WINDOW_DAYS`] days (`SHARDS` rows a day, one
//! range) and weighs each day by `0.5^(age / HALF_LIFE_DAYS)`.
//!
//! Counts follow [`crate::events::Events::prepare`]: an event stored again (a retried request)
//! is not counted again. A batch interrupted between storing its events and counting them
//! (a crash) is not counted: trending is an estimate, not an account.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{ReadModifyWriteRule, ReadRows, RowFilter, Store};

use crate::aggregates::{DAY_MS, day_of};
use crate::events::{Event, EventType, Target};
use crate::tables::{Gc, Rows, Table};
use crate::{Result, keys};

pub const TRENDING_TABLE: &str = "trending";
const FAMILY: &str = "t";
/// Rows an index's day is spread over.
const SHARDS: u8 = 8;
/// Days a trending read covers (today included).
pub const WINDOW_DAYS: i64 = 7;
/// Days after which a day's counts weigh half.
pub const HALF_LIFE_DAYS: f64 = 2.0;
/// What an event adds to its items' counters; a conversion weighs ten clicks.
const CONVERSION: i64 = 10;
const CLICK: i64 = 1;

/// Trending counters, kept a little longer than the window.
pub const TRENDING: Table = Table {
    name: TRENDING_TABLE,
    families: &[(
        FAMILY,
        Gc::VersionsAndAge(
            1,
            std::time::Duration::from_millis(((WINDOW_DAYS + 7) * DAY_MS) as u64),
        ),
    )],
    rows: Rows::App,
};

/// Count the conversions and clicks of stored events, one atomic increment per touched row.
pub(crate) async fn count(store: &Arc<dyn Store>, app: &str, events: &[&Event]) -> Result<()> {
    let mut rows: BTreeMap<Bytes, BTreeMap<&str, i64>> = BTreeMap::new();
    for event in events {
        let weight = match event.event_type {
            EventType::Conversion => CONVERSION,
            EventType::Click => CLICK,
            EventType::View => continue,
        };
        let Target::ObjectIds(ids) = &event.target else {
            continue;
        };
        // An objectID is a qualifier here: one longer than a record's is not counted (events
        // are checked at the edge; this keeps one that was not from failing the batch).
        if crate::catalog::check_index_name(&event.index).is_err() {
            continue;
        }
        let day = day_of(event.timestamp);
        for id in ids
            .iter()
            .filter(|id| crate::catalog::check_object_id(id).is_ok())
        {
            let key = keys::trending(app, &event.index, day, shard(id));
            *rows.entry(key).or_default().entry(id).or_default() += weight;
        }
    }
    let work = rows.into_iter().map(|(key, counts)| {
        let rules = counts
            .into_iter()
            .map(|(id, n)| ReadModifyWriteRule::increment(FAMILY, id.to_owned(), n))
            .collect();
        async move {
            store
                .read_modify_write_row(TRENDING_TABLE, key, rules)
                .await?;
            Ok(())
        }
    });
    crate::writes::concurrently(work.collect()).await
}

fn shard(id: &str) -> u8 {
    (xxhash_rust::xxh3::xxh3_64(id.as_bytes()) % u64::from(SHARDS)) as u8
}

/// An index's trending items at `now` (ms), best first, with their decayed scores (a
/// conversion today counts 1).
pub(crate) async fn scores(
    store: &Arc<dyn Store>,
    app: &str,
    index: &str,
    now: i64,
) -> Result<Vec<(String, f32)>> {
    let today = day_of(now);
    let rows = keys::trending_days(app, index, today - WINDOW_DAYS + 1, today + 1);
    let request = ReadRows::new(rows).filter(RowFilter::CellsPerColumnLimit(1));
    let rows = store.read_all(TRENDING_TABLE, request).await?;
    let mut scores: HashMap<String, f64> = HashMap::new();
    for row in rows {
        let Some(day) = keys::trending_day_of(&row.key) else {
            continue;
        };
        let weight = 0.5f64.powf((today - day) as f64 / HALF_LIFE_DAYS);
        for cell in row.family(FAMILY) {
            let (Ok(id), Ok(count)) = (
                std::str::from_utf8(&cell.qualifier),
                <[u8; 8]>::try_from(&cell.value[..]),
            ) else {
                continue;
            };
            let count = i64::from_be_bytes(count) as f64 / CONVERSION as f64;
            *scores.entry(id.to_owned()).or_default() += count * weight;
        }
    }
    let mut ranked: Vec<(String, f32)> = scores
        .into_iter()
        .filter(|(_, s)| *s > 0.0)
        .map(|(id, s)| (id, s as f32))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Ok(ranked)
}
