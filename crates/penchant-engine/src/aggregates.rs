//! Per-user, per-day aggregates of raw events, so that a full recompute reads one row per user
//! and active day instead of one per event. Raw events stay the source of truth: an aggregate is
//! always rebuilt from the raw rows of its day.
//!
//! Table `aggregates`, family `a` (the raw events' retention), row [`keys::day`] `app 0 · user 0 ·
//! day (u32 BE, days since the epoch)`; qualifiers as the raw events' — `CSV(type, name, facet)` → the
//! day's summed counts — plus `_last` (the day's latest event, ms) and `_print` (a fingerprint of
//! the day's raw rows). Every cell's timestamp is the day's latest event: the aggregate expires
//! with it.
//!
//! After events are stored, each (user, day) they touch is rebuilt: read the day's raw rows, write
//! the sums, read the day's keys again, and rebuild again if another node added an event meanwhile.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{GcRule, Mutation, ReadRows, Row, RowSet, Store};

use crate::events::{self, EVENTS_TABLE, RETENTION};
use crate::{Result, keys};

pub const AGGREGATES_TABLE: &str = "aggregates";
pub const FAMILY: &str = "a";
pub const LAST: &[u8] = b"_last";
pub const PRINT: &[u8] = b"_print";
pub const DAY_MS: i64 = 86_400_000;

/// The tables this module needs.
pub fn tables() -> Vec<(&'static str, BTreeMap<String, GcRule>)> {
    vec![(
        AGGREGATES_TABLE,
        BTreeMap::from([(FAMILY.to_owned(), GcRule::MaxAge(RETENTION))]),
    )]
}

/// The day (since the epoch) of a time in ms.
pub fn day_of(ms: i64) -> i64 {
    ms.div_euclid(DAY_MS)
}

/// The raw event rows of one user's day.
pub fn raw_day(app: &str, user: &str, day: i64) -> RowSet {
    keys::events_between(app, user, day * DAY_MS, (day + 1) * DAY_MS)
}

/// An order-independent fingerprint of rows: which rows exist.
pub fn fingerprint(rows: &[Row]) -> u64 {
    rows.iter()
        .map(|r| xxhash_rust::xxh3::xxh3_64(&r.key))
        .fold(rows.len() as u64, |acc, h| acc ^ h)
}

/// Aggregates of every app.
#[derive(Debug, Clone)]
pub struct Aggregates {
    store: Arc<dyn Store>,
}

impl Aggregates {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Rebuild the aggregate of one user's day from its raw events.
    pub async fn rebuild_day(&self, app: &str, user: &str, day: i64) -> Result<()> {
        let keys_only = penchant_store::RowFilter::column(events::FAMILY, events::EVENT_COLUMN)
            .and(penchant_store::RowFilter::StripValue);
        for _ in 0..8 {
            let rows = self
                .store
                .read_all(EVENTS_TABLE, ReadRows::new(raw_day(app, user, day)))
                .await?;
            let print = fingerprint(&rows);
            let mut sums: BTreeMap<Bytes, BTreeMap<String, u64>> = BTreeMap::new();
            let mut last = None;
            for row in &rows {
                for cell in &row.cells {
                    last = last.max(Some(cell.timestamp));
                    if cell.qualifier == events::EVENT_COLUMN {
                        continue;
                    }
                    let counts: BTreeMap<String, u64> = serde_json::from_slice(&cell.value)
                        .map_err(|e| crate::internal("corrupt event cell", e))?;
                    let sum = sums.entry(cell.qualifier.clone()).or_default();
                    for (value, n) in counts {
                        *sum.entry(value).or_default() += n;
                    }
                }
            }
            let mut mutations = vec![Mutation::DeleteFromRow];
            if let Some(ts) = last {
                let json = |v: &BTreeMap<String, u64>| {
                    serde_json::to_vec(v).map_err(|e| crate::internal("serialization", e))
                };
                for (qualifier, counts) in &sums {
                    mutations.push(Mutation::set(FAMILY, qualifier.clone(), ts, json(counts)?));
                }
                mutations.push(Mutation::set(FAMILY, LAST, ts, (ts / 1000).to_string()));
                mutations.push(Mutation::set(FAMILY, PRINT, ts, print.to_string()));
            }
            self.store
                .mutate_row(AGGREGATES_TABLE, keys::day(app, user, day), mutations)
                .await?;
            let again = self
                .store
                .read_all(
                    EVENTS_TABLE,
                    ReadRows::new(raw_day(app, user, day)).filter(keys_only.clone()),
                )
                .await?;
            if fingerprint(&again) == print {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Rebuild every (user, day) the events touch.
    pub async fn rebuild_for(&self, app: &str, events: &[events::Event]) -> Result<()> {
        let mut days: Vec<(&str, i64)> = events
            .iter()
            .map(|e| (e.user(), day_of(e.timestamp)))
            .collect();
        days.sort_unstable();
        days.dedup();
        let rebuilds: Vec<_> = days
            .into_iter()
            .map(|(user, day)| self.rebuild_day(app, user, day))
            .collect();
        crate::concurrently(rebuilds).await
    }
}
