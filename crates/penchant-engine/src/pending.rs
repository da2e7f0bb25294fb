//! Ingestion intents: what an acknowledged-or-not batch of events still owes its users, so that
//! a crash between storing events and finishing their work cannot leave a profile without them.
//!
//! Before a batch's events are stored, each of its users gets an intent cell: table `pending`,
//! row [`keys::pending`] `app 0 · user 0`, qualifier the batch's random id (8 bytes), value the
//! days the batch touches for the user (u32 BE each). Once the batch's aggregates, profiles and
//! seen marks are written, the batch deletes its cells. An intent still there afterwards is a
//! batch that stopped half-way (a crash, a killed node): [`Pending::left_behind`] lists them,
//! and the engine redoes their work — rebuild the days' aggregates, refresh the profile, mark
//! the days' items seen — which is harmless to redo, every step being idempotent.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use penchant_store::{
    GcRule, Mutation, ReadRows, RowFilter, RowMutation, RowSet, Store, TimeRange, Workload,
    for_workload,
};

use crate::aggregates::day_of;
use crate::clock::Clock;
use crate::events::{Event, RETENTION};
use crate::{Result, keys};

pub const PENDING_TABLE: &str = "pending";
const FAMILY: &str = "i";

/// The tables this module needs.
pub fn tables() -> Vec<(&'static str, BTreeMap<String, GcRule>)> {
    vec![(
        PENDING_TABLE,
        BTreeMap::from([(FAMILY.to_owned(), GcRule::MaxAge(RETENTION))]),
    )]
}

/// One batch's intent for one user, left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub app: String,
    pub user: String,
    pub days: Vec<i64>,
    batch: Bytes,
    stamp: i64,
}

/// The intents of every app.
#[derive(Debug, Clone)]
pub struct Pending {
    store: Arc<dyn Store>,
    clock: Clock,
}

impl Pending {
    pub fn new(store: Arc<dyn Store>, clock: Clock) -> Self {
        Self { store, clock }
    }

    /// Record a batch's intents (before its events are stored). Returns the batch's id.
    pub async fn record(&self, app: &str, events: &[Event]) -> Result<u64> {
        let batch: u64 = rand::random();
        let mut days: BTreeMap<&str, BTreeSet<i64>> = BTreeMap::new();
        for e in events {
            days.entry(e.user())
                .or_default()
                .insert(day_of(e.timestamp));
        }
        let now = self.clock.now_ms() * 1000;
        let rows = days
            .into_iter()
            .map(|(user, days)| {
                let value: Vec<u8> = days
                    .iter()
                    .flat_map(|d| ((*d).clamp(0, i64::from(u32::MAX)) as u32).to_be_bytes())
                    .collect();
                let cell = Mutation::set(FAMILY, batch.to_be_bytes().to_vec(), now, value);
                RowMutation::new(keys::pending(app, user), vec![cell])
            })
            .collect();
        self.store.mutate_all(PENDING_TABLE, rows).await?;
        Ok(batch)
    }

    /// Forget a batch's intents (its work is done).
    pub async fn done(&self, app: &str, events: &[Event], batch: u64) -> Result<()> {
        let users: BTreeSet<&str> = events.iter().map(Event::user).collect();
        let rows = users
            .into_iter()
            .map(|user| {
                let delete = Mutation::delete_column(FAMILY, batch.to_be_bytes().to_vec());
                RowMutation::new(keys::pending(app, user), vec![delete])
            })
            .collect();
        Ok(self.store.mutate_all(PENDING_TABLE, rows).await?)
    }

    /// The intents recorded more than `age` ago that are still there (of every app).
    pub async fn left_behind(&self, age: Duration) -> Result<Vec<Intent>> {
        let store = for_workload(&self.store, Workload::Batch);
        // Cells are stamped in whole ms (Bigtable's granularity).
        let before = (self.clock.now_ms() - age.as_millis() as i64 + 1) * 1000;
        let old = RowFilter::TimestampRange(TimeRange {
            start: None,
            end: Some(before),
        });
        let request = ReadRows::new(RowSet::all()).filter(old);
        let mut rows = store.read_rows(PENDING_TABLE, request).await?;
        let mut out = Vec::new();
        while let Some(row) = rows.try_next().await? {
            let Some((app, user)) = keys::app_user_of(&row.key) else {
                continue;
            };
            for cell in row.family(FAMILY) {
                out.push(Intent {
                    app: app.to_owned(),
                    user: user.to_owned(),
                    days: cell
                        .value
                        .chunks_exact(4)
                        .map(|d| i64::from(u32::from_be_bytes(d.try_into().unwrap_or_default())))
                        .collect(),
                    batch: cell.qualifier.clone(),
                    stamp: cell.timestamp,
                });
            }
        }
        Ok(out)
    }

    /// Delete an intent whose work was redone (only that cell: a newer batch's stays).
    pub async fn resolve(&self, intent: &Intent) -> Result<()> {
        let delete = Mutation::DeleteFromColumn {
            family: FAMILY.to_owned(),
            qualifier: intent.batch.clone(),
            range: TimeRange::new(intent.stamp, intent.stamp + 1000),
        };
        self.store
            .mutate_row(
                PENDING_TABLE,
                keys::pending(&intent.app, &intent.user),
                vec![delete],
            )
            .await?;
        Ok(())
    }
}
