//! Commit, atomically: where the store writes atomically and this node is alone on it (the
//! embedded store), a batch is one write.

use bytes::Bytes;
use penchant_store::TableMutation;

use super::Ingest;
use crate::Result;
use crate::events::{Event, Ingested, Layout, Prepared};
use crate::locks::Held;
use penchant_model::tables::{AGGREGATES_TABLE, EVENTS_TABLE, SEEN_TABLE};

/// What an atomic commit leaves to the steps after it.
struct Committed<'e> {
    ingested: Ingested<'e>,
    /// The day rows whose deltas outgrew them, to fold.
    folds: Vec<Bytes>,
    /// The users whose profiles the write did not update.
    refresh: Vec<String>,
    /// The users whose seen filters outgrew their deltas, to fold.
    seen_folds: Vec<String>,
}

impl Ingest {
    /// The batch in one write: its event rows, their deltas, the seen marks of its items, its
    /// users' profiles updated from their states ([`crate::profiles::state`]) — so a batch is
    /// counted whole or not at all — and, only if a state could not answer for some user, an
    /// intent that owes their refresh. The attempts of one request take turns
    /// ([`crate::locks::Attempts`]): a later one finds the events stored — counted, then — and
    /// writes nothing but that refresh (for every user: the first may have died before it);
    /// the repair does it if the node dies first.
    pub(super) async fn push_atomically(
        &self,
        app: &str,
        batch: u64,
        events: &[Event],
        layouts: &[Layout],
    ) -> Result<()> {
        let committed = {
            let _turn = self.attempts.lock(batch).await;
            // From the read of what is stored to the write, these users are the batch's alone:
            // a batch beside that holds some of the same events (the request retried in
            // another order or cut) finds them stored, or stores them after this one looked.
            let users = self
                .user_locks
                .exclusive_many(app, events.iter().map(Event::user))
                .await;
            let prepared = self.events.prepare(app, events, layouts).await?;
            if prepared.ingested.stored.is_empty() {
                drop(users);
                // A later attempt: the first wrote the profiles and seen marks — durably once
                // this sync returns, whichever batch wrote them — or its intent still owes a
                // refresh.
                self.store.sync().await?;
                let refresh = events.iter().map(|e| e.user().to_owned()).collect();
                Committed {
                    ingested: prepared.ingested,
                    folds: Vec::new(),
                    refresh,
                    seen_folds: Vec::new(),
                }
            } else {
                self.commit_atomically(app, batch, events, prepared, users)
                    .await?
            }
        };
        let stored = &committed.ingested.stored;
        let refresh: Vec<&str> = committed.refresh.iter().map(String::as_str).collect();
        self.tally(app, stored).await?;
        futures::try_join!(
            async {
                self.aggregates.added(app, stored, committed.folds).await?;
                self.settle_stored(app, stored, &refresh).await
            },
            self.seen.fold_many(app, &committed.seen_folds),
        )?;
        if !refresh.is_empty() {
            self.forget_counted(app, batch);
        }
        Ok(())
    }

    /// With the batch's `users` held alone: derive the aggregate deltas
    /// ([`crate::aggregates::deltas`]); read the users' seen filters and plan their delta cells
    /// ([`crate::seen::Seen::marks`]); read their states and update their profiles
    /// ([`crate::profiles::Profiles::update`]), write it all at once and let the users go; wait
    /// for the log's fsync (shared with the batches beside: [`penchant_store::Store::sync`]).
    async fn commit_atomically<'e>(
        &self,
        app: &str,
        batch: u64,
        events: &'e [Event],
        mut prepared: Prepared<'e>,
        users: Held<'_>,
    ) -> Result<Committed<'e>> {
        let deltas = crate::aggregates::deltas(app, &prepared.ingested.stored)?;
        let mut writes = prepared.writes();
        writes.extend(
            deltas
                .rows
                .into_iter()
                .map(|row| TableMutation::new(AGGREGATES_TABLE, row)),
        );
        // Seen marks are blind cells: they need no lock.
        let settings = self.seen.settings(app).await?;
        let (seen, hidden) = super::marks::seen_items(&settings, events);
        let marks = self.seen.marks(app, &seen, &hidden).await?;
        writes.extend(
            marks
                .writes
                .into_iter()
                .map(|row| TableMutation::new(SEEN_TABLE, row)),
        );
        let refresh = {
            // The wait for the disk comes after the users go, shared with the batches beside.
            let _users = users;
            let update = self.profiles.update(app, &prepared.ingested.stored).await?;
            writes.extend(update.writes);
            if !update.refresh.is_empty() {
                // The refresh of the users a state could not answer is owed: an intent, which
                // the repair finishes if this node dies first.
                let owed = |e: &&Event| {
                    update
                        .refresh
                        .binary_search_by(|u| u.as_str().cmp(e.user()))
                        .is_ok()
                };
                let intent = self
                    .pending
                    .counted(app, batch, events.iter().filter(owed), &[]);
                writes.push(TableMutation::new(EVENTS_TABLE, intent));
            }
            self.store.mutate_atomically_deferred(writes).await?;
            update.refresh
        };
        self.store.sync().await?;
        Ok(Committed {
            ingested: prepared.ingested,
            folds: deltas.folds,
            refresh,
            seen_folds: marks.folds,
        })
    }

    /// This attempt did all the batch's intent owes (a later attempt too: the first may have
    /// died): forgetting it need not delay the answer.
    fn forget_counted(&self, app: &str, batch: u64) {
        let (pending, app) = (self.pending.clone(), app.to_owned());
        self.supervisor.spawn(async move {
            if let Err(e) = pending.done(&app, batch).await {
                tracing::warn!(%app, error = %e, "cannot forget an ingestion's intent");
            }
        });
    }
}
