//! Settle: what a batch owes once its events are stored and counted — the events whose items
//! arrived meanwhile, and the profiles its commit did not update — and the settlement of
//! events waiting for their items when those items' records are written
//! ([`crate::events::waiting`]).

use std::collections::HashMap;

use bytes::Bytes;

use super::Ingest;
use crate::Result;
use crate::events::{Event, Stored, waiting};

impl Ingest {
    /// Settle the events of `stored` that wait for their items (a record may have been written
    /// since the catalog was read for them), then refresh the profiles of `refresh` (the
    /// batch's users whose profiles its write did not update).
    pub(super) async fn settle_stored(
        &self,
        app: &str,
        stored: &[Stored<'_>],
        refresh: &[&str],
    ) -> Result<()> {
        let waiting: HashMap<Bytes, usize> = stored
            .iter()
            .filter(|s| s.waiting > 0)
            .map(|s| (s.key.clone(), s.waiting))
            .collect();
        if !waiting.is_empty() {
            let keys: Vec<Bytes> = waiting.keys().cloned().collect();
            self.settle_waiting(app, &keys, &[], &waiting).await?;
        }
        if !refresh.is_empty() {
            let started = std::time::Instant::now();
            self.profiles.refresh_many(app, refresh).await?;
            self.refresh_latency.observe(started.elapsed());
        }
        Ok(())
    }

    /// Count the events waiting for these records of `index`, just written.
    pub async fn settle_records(
        &self,
        app: &str,
        index: &str,
        object_ids: &[String],
    ) -> Result<usize> {
        let mut settled = 0;
        for chunk in object_ids.chunks(1000) {
            let entries = waiting::waiting_for(&*self.store, app, index, chunk).await?;
            if entries.is_empty() {
                continue;
            }
            let mut keys: Vec<Bytes> = entries.iter().map(|e| e.event.clone()).collect();
            keys.sort();
            keys.dedup();
            settled += self
                .settle_waiting(app, &keys, &entries, &HashMap::new())
                .await?;
        }
        Ok(settled)
    }

    /// Count the items of waiting events whose records now exist: the events of `keys` (raw
    /// rows) gain the arrived items' facet values in their counts, their days' aggregates are
    /// rebuilt from the raw events and their users' profiles refreshed — under an intent, as an
    /// ingestion is, so a crash half-way is finished by the repair. `entries`: the index rows
    /// that led here (those that point to nothing waiting are deleted); `expected`: how many
    /// items an event waited for when this node stored it (an event settled by another node in
    /// between is rebuilt all the same). Returns how many events counted items now.
    pub(crate) async fn settle_waiting(
        &self,
        app: &str,
        keys: &[Bytes],
        entries: &[waiting::Entry],
        expected: &HashMap<Bytes, usize>,
    ) -> Result<usize> {
        let layouts = self.tenancy.events_of(app).await?.written();
        let mut plan =
            waiting::plan(&*self.store, &self.catalog, app, keys, &layouts, expected).await?;
        let stale: Vec<Bytes> = entries
            .iter()
            .filter(|e| {
                !plan
                    .waits
                    .get(&e.event)
                    .is_some_and(|ids| ids.contains(&e.object_id))
            })
            .map(|e| e.row.clone())
            .collect();
        if plan.settled.is_empty() && plan.changed_elsewhere.is_empty() {
            if !stale.is_empty() {
                plan.unmark(&*self.store, app, &stale).await?;
            }
            return Ok(0);
        }
        let touched: Vec<Event> = plan
            .settled
            .iter()
            .map(|s| s.event.clone())
            .chain(plan.changed_elsewhere.iter().cloned())
            .collect();
        let batch = self.pending.record_work(app, &touched).await?;
        plan.write(&*self.store).await?;
        let refs: Vec<&Event> = touched.iter().collect();
        self.rebuild_days(app, &refs).await?;
        self.refresh_users(app, &touched).await?;
        plan.unmark(&*self.store, app, &stale).await?;
        self.pending.done(app, batch).await?;
        let done = plan.settled.iter().filter(|s| s.done).count();
        self.waiting_counts.add(app, 0, done as u64);
        if !plan.settled.is_empty() {
            tracing::info!(%app, events = plan.settled.len(), "events counted their items' new records");
        }
        Ok(plan.settled.len())
    }
}
