//! Repair: finish the batches that stopped half-way (a crash between storing events and
//! acknowledging them) from the intents they left behind ([`crate::pending`]), and rebuild a
//! user's days from the raw events where deltas cannot be trusted.

use futures::StreamExt;
use penchant_store::{ReadRows, RowFilter, RowSet};

use super::Ingest;
use crate::Result;
use crate::events::{self, Event};
use crate::pending::Intent;
use bytes::Bytes;
use penchant_model::days::day_of;
use penchant_model::tables::{EVENTS_FAMILY, EVENTS_TABLE};

/// The global lease of the repair.
const REPAIR_LEASE: &str = "repair";
/// The (batch, user) intents the repair finishes at once.
const REPAIRS_AT_ONCE: usize = 8;

impl Ingest {
    /// Finish the work of event batches that stopped half-way more than `age` ago: write their
    /// deltas again from their raw rows (which of them were written is unknown; they are held,
    /// [`crate::pending`]), refresh their users' profiles, mark their items seen,
    /// [`REPAIRS_AT_ONCE`] (batch, user) intents at a time. Returns how many it finished; one
    /// that fails is left for the next repair.
    pub async fn repair(&self, age: std::time::Duration) -> Result<usize> {
        let apps: Vec<String> = self
            .tenancy
            .list_apps()
            .await?
            .into_iter()
            .map(|a| a.app_id)
            .collect();
        let intents = self.pending.left_behind(&apps, age).await?;
        // Several at once: each is a handful of store calls, one after the other.
        let work: Vec<_> = intents.iter().map(|i| self.finish_or_leave(i)).collect();
        let finished = futures::stream::iter(work)
            .buffer_unordered(REPAIRS_AT_ONCE)
            .fold(0, |n, finished| async move { n + usize::from(finished) })
            .await;
        Ok(finished)
    }

    /// One repair round under the repair lease (one node at a time): whether it ran.
    pub async fn repair_once(&self, age: std::time::Duration) -> Result<bool> {
        Ok(self
            .leases
            .run("", REPAIR_LEASE, self.repair(age))
            .await?
            .is_some())
    }

    /// [`Ingest::finish`], or leave the intent to the next repair: whether it finished.
    async fn finish_or_leave(&self, intent: &Intent) -> bool {
        let finished = self.finish(intent).await;
        if let Err(e) = &finished {
            tracing::warn!(app = %intent.app, user = %intent.user, error = %e,
                "cannot finish an interrupted ingestion; the next repair will");
        }
        finished.is_ok()
    }

    /// Finish one user's share of an interrupted batch.
    async fn finish(&self, intent: &Intent) -> Result<()> {
        if let Some(keys) = &intent.counted {
            return self.finish_counted(intent, keys).await;
        }
        if !self.pending.mark_left_behind(intent).await? {
            // Its attempts finished it since it was read.
            return Ok(());
        }
        let layout = self.tenancy.events_of(&intent.app).await?.layout;
        if let Some(held) = &intent.held {
            let (app, batch) = (&intent.app, intent.batch());
            let stored = if self
                .pending
                .share_answered(app, batch, &intent.user)
                .await?
            {
                // Counted (an attempt of the batch answered, or a repair wrote this share's
                // deltas and stopped before it forgot it): what this intent holds is owed only
                // its refresh — the intent of a later attempt that died before it read the
                // answer, say.
                self.stored_events(held).await?
            } else {
                // The batch's own deltas, written again: cheap whatever the user's history.
                let stored = self
                    .aggregates
                    .recount(&intent.app, intent.batch(), layout, held)
                    .await?;
                self.pending.answer_share(app, batch, &intent.user).await?;
                stored
            };
            return self.finish_with(intent, &stored).await;
        }
        let mut stored = Vec::new();
        for day in &intent.days {
            {
                let _alone = self.user_locks.exclusive(&intent.app, &intent.user).await;
                self.profiles
                    .invalidate(&intent.app, &[&intent.user])
                    .await?;
                self.aggregates
                    .rebuild_day(&intent.app, &intent.user, *day, layout)
                    .await?;
            }
            let request =
                ReadRows::new(crate::aggregates::raw_day(&intent.app, &intent.user, *day))
                    .filter(RowFilter::column(EVENTS_FAMILY, events::EVENT_COLUMN));
            for row in self.store.read_all(EVENTS_TABLE, request).await? {
                stored.extend(events::stored_event(&row)?);
            }
        }
        self.finish_with(intent, &stored).await
    }

    /// Refresh the profile of an intent's user and mark its events seen, then forget it.
    async fn finish_with(&self, intent: &Intent, stored: &[Event]) -> Result<()> {
        if !stored.is_empty() {
            tracing::info!(app = %intent.app, user = %intent.user, events = stored.len(),
                "finishing an interrupted ingestion");
        }
        futures::try_join!(
            self.refresh_users(&intent.app, stored),
            self.mark_seen(&intent.app, stored)
        )?;
        // A settlement that stopped after counting its items left their marks.
        events::waiting::reconcile(&*self.store, &intent.app, &intent.user).await?;
        self.pending.resolve(intent).await
    }

    /// Finish one user's share of a batch counted already: refresh the profile and mark the
    /// batch's items seen, from the user's event rows in it (`keys`).
    async fn finish_counted(&self, intent: &Intent, keys: &[Bytes]) -> Result<()> {
        let stored = self.stored_events(keys).await?;
        let (app, users) = (&intent.app, [intent.user.as_str()]);
        futures::try_join!(
            self.profiles.refresh_many(app, &users),
            self.mark_seen(app, &stored)
        )?;
        self.pending.resolve(intent).await
    }

    /// The events of these raw rows, those that exist.
    async fn stored_events(&self, keys: &[Bytes]) -> Result<Vec<Event>> {
        let mut stored = Vec::with_capacity(keys.len());
        if !keys.is_empty() {
            let request = ReadRows::new(RowSet::keys(keys.iter().cloned()))
                .filter(RowFilter::column(EVENTS_FAMILY, events::EVENT_COLUMN));
            for row in self.store.read_all(EVENTS_TABLE, request).await? {
                stored.extend(events::stored_event(&row)?);
            }
        }
        Ok(stored)
    }

    /// Rebuild the days of these events' users from their raw events, each alone on this node
    /// ([`crate::locks::UserLocks`]).
    pub(super) async fn rebuild_days(&self, app: &str, events: &[&Event]) -> Result<()> {
        let days: std::collections::BTreeSet<(&str, i64)> = events
            .iter()
            .map(|e| (e.user(), day_of(e.timestamp)))
            .collect();
        if days.is_empty() {
            return Ok(());
        }
        let layout = self.tenancy.events_of(app).await?.layout;
        for (user, day) in days {
            let _alone = self.user_locks.exclusive(app, user).await;
            // A state must not count without the day's new sums: the refresh after rebuilds it.
            self.profiles.invalidate(app, &[user]).await?;
            self.aggregates.rebuild_day(app, user, day, layout).await?;
        }
        Ok(())
    }

    pub(super) async fn refresh_users(&self, app: &str, events: &[Event]) -> Result<()> {
        let users: Vec<&str> = events.iter().map(Event::user).collect();
        self.profiles.refresh_many(app, &users).await?;
        Ok(())
    }
}
