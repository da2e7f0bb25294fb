//! Commit, with an intent: on a shared store (Bigtable, several nodes), a batch records what it
//! owes ([`crate::pending`]) before its events, then writes them and their deltas; an attempt of
//! the same request beside one still in flight joins its intent.

use super::Ingest;
use crate::Result;
use crate::events::{Event, Layout, Prepared, Stored};
use crate::locks::Held;

/// How long an attempt of a request waits for an earlier attempt still in flight to answer
/// before it goes on beside it.
const FIRST_ATTEMPT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Ingest {
    /// The batch on a shared store: hold its users shared, find what is stored, record the
    /// intent (or go beside the attempt that did), unless an earlier attempt answered since
    /// ([`crate::pending::Pending::answered`]) write the event rows, count the tallies,
    /// then the deltas and the settlement beside the seen marks, and leave the intent.
    pub(super) async fn push_with_intent(
        &self,
        app: &str,
        batch: u64,
        events: &[Event],
        layouts: &[Layout],
    ) -> Result<()> {
        // From the raw write until the deltas are written, no rebuild of these users runs here.
        let users = self
            .user_locks
            .shared(app, events.iter().map(Event::user))
            .await;
        let mut prepared = self.events.prepare(app, events, layouts).await?;
        let keys = prepared.ingested.keys();
        let Some(attempt) = self.pending.record(app, batch, events, &keys).await? else {
            // Another attempt of this request is in flight, or died half-way.
            drop(users);
            return self.push_beside_first_attempt(app, batch, prepared).await;
        };
        if self.pending.answered(app, batch).await? {
            // An earlier attempt answered after this one read what is stored, and its intent
            // went before this one's record: its events are stored and counted.
            drop(users);
            self.leave_intent(app, batch, attempt);
            return Ok(());
        }
        self.events.write(&mut prepared).await?;
        let stored = &prepared.ingested.stored;
        let refresh: Vec<&str> = events.iter().map(Event::user).collect();
        self.tally(app, stored).await?;
        futures::try_join!(
            async {
                self.add_deltas(app, batch, stored, users).await?;
                self.settle_stored(app, stored, &refresh).await
            },
            self.mark_seen(app, events),
        )?;
        self.leave_intent(app, batch, attempt);
        Ok(())
    }

    /// Write the batch's deltas and let its users go. A node stalled past the repair's age:
    /// the repair's deltas and a fold of them may have come before these, so the days are
    /// rebuilt from the raw events.
    async fn add_deltas(
        &self,
        app: &str,
        batch: u64,
        stored: &[Stored<'_>],
        users: Held<'_>,
    ) -> Result<()> {
        let added = self.aggregates.add(app, batch, stored).await;
        drop(users);
        added?;
        if self.pending.repaired_meanwhile(app, batch).await? {
            let counted: Vec<&Event> = stored.iter().map(|s| s.event).collect();
            self.rebuild_days(app, &counted).await?;
        }
        Ok(())
    }

    /// This attempt of a batch is done: forgetting its intent need not delay the answer (if it
    /// is lost, the repair redoes work that is already done, which changes nothing).
    fn leave_intent(&self, app: &str, batch: u64, attempt: u64) {
        let (pending, app) = (self.pending.clone(), app.to_owned());
        self.supervisor.spawn(async move {
            if let Err(e) = pending.leave(&app, batch, attempt).await {
                tracing::warn!(%app, error = %e, "cannot forget an ingestion's intent");
            }
        });
    }

    /// An attempt of a request whose first attempt is still in flight (or died): wait a
    /// while for its answer; else join its intent, store the events the first may not have
    /// stored yet, and write the deltas of every event the intent holds again (the same cells:
    /// none was folded, [`crate::pending::held_in`]), then refresh the profiles and mark the
    /// items seen. The last attempt to leave the intent forgets it; the repair, if the other
    /// died. The tallies that are counted per stored event (trends, traffic, A/B tests) are the
    /// first attempt's to count.
    async fn push_beside_first_attempt(
        &self,
        app: &str,
        batch: u64,
        mut prepared: Prepared<'_>,
    ) -> Result<()> {
        let gone = self
            .pending
            .wait_gone(app, batch, FIRST_ATTEMPT_WAIT)
            .await?;
        // Gone: it answered (or the repair finished it), its events stored and counted.
        if gone {
            return Ok(());
        }
        let Some(attempt) = self.pending.join(app, batch).await? else {
            return Ok(());
        };
        let events: Vec<&Event> = prepared.ingested.stored.iter().map(|s| s.event).collect();
        let mut keys = self.pending.held_by(app, batch).await?;
        keys.extend(prepared.ingested.keys());
        keys.sort_unstable();
        keys.dedup();
        self.events.write(&mut prepared).await?;
        let layout = self.tenancy.events_of(app).await?.layout;
        let counted = self.aggregates.recount(app, batch, layout, &keys).await?;
        if self.pending.repaired_meanwhile(app, batch).await? {
            let all: Vec<&Event> = counted.iter().chain(events).collect();
            self.rebuild_days(app, &all).await?;
        }
        futures::try_join!(
            self.refresh_users(app, &counted),
            self.mark_seen(app, &counted)
        )?;
        self.leave_intent(app, batch, attempt);
        Ok(())
    }
}
