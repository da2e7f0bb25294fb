//! Events: ingestion (the streaming path), the repair of interrupted batches, the retention
//! purge, and what the dashboard shows of them.

use std::collections::HashMap;

use bytes::Bytes;
use futures::StreamExt;
use penchant_store::TableMutation;

use crate::events::waiting;
use crate::{Engine, Result, aggregates, events, keys, pending, stats, tenancy};

/// The global leases of the repair and the purge.
const PURGE_LEASE: &str = "purge";
const REPAIR_LEASE: &str = "repair";
/// The (batch, user) intents the repair finishes at once.
const REPAIRS_AT_ONCE: usize = 8;
/// How long an attempt of a request waits for an earlier attempt still in flight to answer
/// before it goes on beside it.
const FIRST_ATTEMPT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Events.
impl Engine {
    /// Store valid events, then add them to their days' aggregates and refresh their users'
    /// profiles from them (the streaming path), while their items are marked seen: a profile
    /// read after this returns reflects the events. Each step is one write for the whole batch,
    /// whichever users it holds. An intent recorded before the events ([`pending`]) lets
    /// [`Engine::repair`] finish the work if this stops half-way, and holds the batch's deltas
    /// out of folds meanwhile, so that an attempt of the request beside this one still in
    /// flight (or dead) writes them again without counting an event twice ([`pending`]:
    /// retries in flight).
    pub async fn push_events(&self, app: &str, events: &[events::Event]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        if self.atomic_ingestion {
            return self.push_atomically(app, events).await;
        }
        let batch = pending::batch_id(app, events)?;
        let layouts = self.tenancy.events_of(app).await?.written();
        // From the raw write until the deltas are written, no rebuild of these users runs here.
        let users = self
            .user_locks
            .shared(app, events.iter().map(events::Event::user))
            .await;
        let mut prepared = self.events.prepare(app, events, &layouts).await?;
        let keys = prepared.ingested.keys();
        let Some(attempt) = self.pending.record(app, batch, events, &keys).await? else {
            // Another attempt of this request is in flight, or died half-way.
            drop(users);
            return self.push_beside_first_attempt(app, batch, prepared).await;
        };
        self.events.write(&mut prepared).await?;
        let stored = &prepared.ingested.stored;
        let deltas = async {
            let added = self.aggregates.add(app, batch, stored).await;
            drop(users);
            added?;
            // A node stalled past the repair's age: the repair's deltas and a fold of them may
            // have come before these.
            if self.pending.repaired_meanwhile(app, batch).await? {
                let counted: Vec<&events::Event> = stored.iter().map(|s| s.event).collect();
                self.rebuild_days(app, &counted).await?;
            }
            Ok(())
        };
        let users: Vec<&str> = events.iter().map(events::Event::user).collect();
        let seen = self.mark_events_seen(app, events);
        self.count_stored(app, stored, deltas, &users, seen).await?;
        self.leave_intent(app, batch, attempt);
        Ok(())
    }

    /// What a batch owes once its events are stored, on both paths: `deltas` (writing the
    /// aggregates' deltas, each path its own way), then settle the events that wait for their
    /// items and refresh the profiles of `refresh` (the batch's users whose profiles its write
    /// did not update); beside them, count traffic, trends and A/B tests, and `seen` (marking
    /// the items seen, or folding the filters the batch's write marked them in).
    async fn count_stored(
        &self,
        app: &str,
        stored: &[events::Stored<'_>],
        deltas: impl Future<Output = Result<()>>,
        refresh: &[&str],
        seen: impl Future<Output = Result<()>>,
    ) -> Result<()> {
        let negative = self.seen.settings(app).await?;
        let counted: Vec<&events::Event> = stored.iter().map(|s| s.event).collect();
        // "Not for me" events are no interaction: they count in no trend.
        let trending: Vec<&events::Event> = counted
            .iter()
            .copied()
            .filter(|e| !negative.is_negative(&e.event_name))
            .collect();
        let waiting: HashMap<Bytes, usize> = stored
            .iter()
            .filter(|s| s.waiting > 0)
            .map(|s| (s.key.clone(), s.waiting))
            .collect();
        self.waiting_counts.add(app, waiting.len() as u64, 0);
        let profiles = async {
            deltas.await?;
            if !waiting.is_empty() {
                // A record written since the catalog was read for these events.
                let keys: Vec<Bytes> = waiting.keys().cloned().collect();
                self.settle_waiting(app, &keys, &[], &waiting).await?;
            }
            if !refresh.is_empty() {
                let started = std::time::Instant::now();
                self.profiles.refresh_many(app, refresh).await?;
                self.refresh_latency.observe(started.elapsed());
            }
            Ok(())
        };
        self.traffic.add(app, &counted, self.clock.now_ms());
        self.recommend.trends.add(app, &trending);
        self.abtests.attribute(app, &counted).await?;
        futures::try_join!(profiles, seen)?;
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

    /// [`Engine::push_events`] where the store writes atomically and this node is alone on it
    /// (the embedded store), in one write: the batch's event rows, their deltas, the seen marks
    /// of its items, its users' profiles updated from their states ([`crate::profiles::state`])
    /// — so a batch is counted whole or not at all — and, only if a state could not answer for
    /// some user, an intent that owes their refresh. The attempts of one request take turns
    /// ([`pending::Attempts`]): a later one finds the events stored — counted, then — and
    /// writes nothing but that refresh (for every user: the first may have died before it);
    /// the repair does it if the node dies first.
    ///
    /// One batch's journey: take the request's turn; read the catalog and which events are
    /// stored already ([`events::Events::prepare`]); derive the aggregate deltas
    /// ([`aggregates::deltas`]); read the users' seen filters and plan their delta cells
    /// ([`crate::seen::Seen::marks`]); take the users' locks, read their states and update
    /// their profiles ([`crate::profiles::Profiles::update`]), write it all at once and let
    /// the locks go; wait for the log's fsync (shared with the batches beside:
    /// [`penchant_store::Store::sync`]); then refresh the profiles a state could not update,
    /// fold the seen filters that outgrew their deltas, count tallies.
    async fn push_atomically(&self, app: &str, events: &[events::Event]) -> Result<()> {
        let batch = pending::batch_id(app, events)?;
        let layouts = self.tenancy.events_of(app).await?.written();
        let (ingested, folds, refresh, seen_folds) = {
            let _turn = self.attempts.lock(batch).await;
            let mut prepared = self.events.prepare(app, events, &layouts).await?;
            if prepared.ingested.stored.is_empty() {
                // A later attempt: the first wrote the profiles and seen marks (durably: it
                // syncs before it lets its turn go), or its intent still owes a refresh.
                let users = events.iter().map(|e| e.user().to_owned()).collect();
                (prepared.ingested, Vec::new(), users, Vec::new())
            } else {
                let deltas = aggregates::deltas(app, &prepared.ingested.stored)?;
                let mut writes = prepared.writes();
                writes.extend(
                    deltas
                        .rows
                        .into_iter()
                        .map(|row| TableMutation::new(aggregates::AGGREGATES_TABLE, row)),
                );
                // Seen marks are blind cells: they need no lock.
                let settings = self.seen.settings(app).await?;
                let (seen, hidden) = seen_items(&settings, events);
                let marks = self.seen.marks(app, &seen, &hidden).await?;
                writes.extend(
                    marks
                        .writes
                        .into_iter()
                        .map(|row| TableMutation::new(crate::seen::SEEN_TABLE, row)),
                );
                let refresh = {
                    // From the states' read to the write, these users are the batch's alone;
                    // the wait for the disk comes after, shared with the batches beside.
                    let _users = self
                        .user_locks
                        .exclusive_many(app, events.iter().map(events::Event::user))
                        .await;
                    let update = self.profiles.update(app, &prepared.ingested.stored).await?;
                    writes.extend(update.writes);
                    if !update.refresh.is_empty() {
                        // The refresh of the users a state could not answer is owed: an
                        // intent, which the repair finishes if this node dies first.
                        let owed = |e: &&events::Event| {
                            update
                                .refresh
                                .binary_search_by(|u| u.as_str().cmp(e.user()))
                                .is_ok()
                        };
                        let intent =
                            self.pending
                                .counted(app, batch, events.iter().filter(owed), &[]);
                        writes.push(TableMutation::new(events::EVENTS_TABLE, intent));
                    }
                    self.store.mutate_atomically_deferred(writes).await?;
                    update.refresh
                };
                self.store.sync().await?;
                (prepared.ingested, deltas.folds, refresh, marks.folds)
            }
        };
        let deltas = self.aggregates.added(app, &ingested.stored, folds);
        let refresh: Vec<&str> = refresh.iter().map(String::as_str).collect();
        let seen = self.seen.fold_many(app, &seen_folds);
        self.count_stored(app, &ingested.stored, deltas, &refresh, seen)
            .await?;
        if !refresh.is_empty() {
            // This attempt did all an intent owes (a later attempt too: the first may have
            // died).
            let (pending, app) = (self.pending.clone(), app.to_owned());
            self.supervisor.spawn(async move {
                if let Err(e) = pending.done(&app, batch).await {
                    tracing::warn!(%app, error = %e, "cannot forget an ingestion's intent");
                }
            });
        }
        Ok(())
    }

    /// An attempt of a request whose first attempt is still in flight (or died): wait a
    /// while for its answer; else join its intent, store the events the first may not have
    /// stored yet, and write the deltas of every event the intent holds again (the same cells:
    /// none was folded, [`pending::held_in`]), then refresh the profiles and mark the items seen.
    /// The last attempt to leave the intent forgets it; the repair, if the other died. The
    /// tallies that are counted per stored event (trends, traffic, A/B tests) are the first
    /// attempt's to count.
    async fn push_beside_first_attempt(
        &self,
        app: &str,
        batch: u64,
        mut prepared: events::Prepared<'_>,
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
        let events: Vec<&events::Event> =
            prepared.ingested.stored.iter().map(|s| s.event).collect();
        let mut keys = self.pending.held_by(app, batch).await?;
        keys.extend(prepared.ingested.keys());
        keys.sort_unstable();
        keys.dedup();
        self.events.write(&mut prepared).await?;
        let layout = self.tenancy.events_of(app).await?.layout;
        let counted = self.aggregates.recount(app, batch, layout, &keys).await?;
        if self.pending.repaired_meanwhile(app, batch).await? {
            let all: Vec<&events::Event> = counted.iter().chain(events).collect();
            self.rebuild_days(app, &all).await?;
        }
        futures::try_join!(
            self.refresh_users(app, &counted),
            self.mark_events_seen(app, &counted)
        )?;
        self.leave_intent(app, batch, attempt);
        Ok(())
    }

    /// Count the items of waiting events ([`events::waiting`]) whose records now exist: the
    /// events of `keys` (raw rows) gain the arrived items' facet values in their counts, their
    /// days' aggregates are rebuilt from the raw events and their users' profiles refreshed —
    /// under an intent, as an ingestion is, so a crash half-way is finished by the repair.
    /// `entries`: the index rows that led here (those that point to nothing waiting are
    /// deleted); `expected`: how many items an event waited for when this node stored it (an
    /// event settled by another node in between is rebuilt all the same). Returns how many
    /// events counted items now.
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
        let touched: Vec<events::Event> = plan
            .settled
            .iter()
            .map(|s| s.event.clone())
            .chain(plan.changed_elsewhere.iter().cloned())
            .collect();
        let batch = self.pending.record_work(app, &touched).await?;
        plan.write(&*self.store).await?;
        let refs: Vec<&events::Event> = touched.iter().collect();
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

    /// Count the events waiting for these records of `index`, just written.
    pub(crate) async fn settle_records(
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

    /// Rebuild the days of these events' users from their raw events, each alone on this node
    /// ([`pending::UserLocks`]).
    async fn rebuild_days(&self, app: &str, events: &[&events::Event]) -> Result<()> {
        let days: std::collections::BTreeSet<(&str, i64)> = events
            .iter()
            .map(|e| (e.user(), aggregates::day_of(e.timestamp)))
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

    /// Finish the work of event batches that stopped half-way more than `age` ago (a crash
    /// between storing events and acknowledging them): write their deltas again from their raw
    /// rows (which of them were written is unknown; they are held, [`pending`]), refresh their
    /// users' profiles, mark their items seen, [`REPAIRS_AT_ONCE`] (batch, user) intents at a
    /// time. Returns how many it finished; one that fails is left for the next repair.
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

    /// [`Engine::finish`], or leave the intent to the next repair: whether it finished.
    async fn finish_or_leave(&self, intent: &pending::Intent) -> bool {
        let finished = self.finish(intent).await;
        if let Err(e) = &finished {
            tracing::warn!(app = %intent.app, user = %intent.user, error = %e,
                "cannot finish an interrupted ingestion; the next repair will");
        }
        finished.is_ok()
    }

    /// Finish one user's share of an interrupted batch.
    async fn finish(&self, intent: &pending::Intent) -> Result<()> {
        if let Some(keys) = &intent.counted {
            return self.finish_counted(intent, keys).await;
        }
        if !self.pending.mark_left_behind(intent).await? {
            // Its attempts finished it since it was read.
            return Ok(());
        }
        let layout = self.tenancy.events_of(&intent.app).await?.layout;
        if let Some(held) = &intent.held {
            // The batch's own deltas, written again: cheap whatever the user's history.
            let stored = self
                .aggregates
                .recount(&intent.app, intent.batch(), layout, held)
                .await?;
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
                penchant_store::ReadRows::new(aggregates::raw_day(&intent.app, &intent.user, *day))
                    .filter(penchant_store::RowFilter::column(
                        events::FAMILY,
                        events::EVENT_COLUMN,
                    ));
            for row in self.store.read_all(events::EVENTS_TABLE, request).await? {
                stored.extend(events::stored_event(&row)?);
            }
        }
        self.finish_with(intent, &stored).await
    }

    /// Refresh the profile of an intent's user and mark its events seen, then forget it.
    async fn finish_with(&self, intent: &pending::Intent, stored: &[events::Event]) -> Result<()> {
        if !stored.is_empty() {
            tracing::info!(app = %intent.app, user = %intent.user, events = stored.len(),
                "finishing an interrupted ingestion");
        }
        futures::try_join!(
            self.refresh_users(&intent.app, stored),
            self.mark_events_seen(&intent.app, stored)
        )?;
        // A settlement that stopped after counting its items left their marks.
        waiting::reconcile(&*self.store, &intent.app, &intent.user).await?;
        self.pending.resolve(intent).await
    }

    /// Finish one user's share of a batch counted already: refresh the profile and mark the
    /// batch's items seen, from the user's event rows in it (`keys`).
    async fn finish_counted(&self, intent: &pending::Intent, keys: &[Bytes]) -> Result<()> {
        let mut stored = Vec::with_capacity(keys.len());
        if !keys.is_empty() {
            let request =
                penchant_store::ReadRows::new(penchant_store::RowSet::keys(keys.iter().cloned()))
                    .filter(penchant_store::RowFilter::column(
                        events::FAMILY,
                        events::EVENT_COLUMN,
                    ));
            for row in self.store.read_all(events::EVENTS_TABLE, request).await? {
                stored.extend(events::stored_event(&row)?);
            }
        }
        let (app, users) = (&intent.app, [intent.user.as_str()]);
        futures::try_join!(
            self.profiles.refresh_many(app, &users),
            self.mark_events_seen(app, &stored)
        )?;
        self.pending.resolve(intent).await
    }

    async fn refresh_users(&self, app: &str, events: &[events::Event]) -> Result<()> {
        let users: Vec<&str> = events.iter().map(events::Event::user).collect();
        self.profiles.refresh_many(app, &users).await?;
        Ok(())
    }

    /// Mark the objectIDs of the app's seen-marking events as seen by their users, and hide
    /// those of its "not for me" events from them ([`crate::seen`]).
    async fn mark_events_seen(&self, app: &str, events: &[events::Event]) -> Result<()> {
        let settings = self.seen.settings(app).await?;
        let (seen, hidden) = seen_items(&settings, events);
        self.seen.add_many(app, &seen, &hidden).await
    }

    /// Delete the events (and per-day aggregates) of every app that are older than the app's
    /// retention window: they stopped counting already; the store's own 90-day rule would
    /// remove them only later. Returns how many event rows and aggregate rows it deleted, or
    /// `None` when another node holds the purge's lease (it is purging).
    pub async fn purge_expired(&self) -> Result<Option<(u64, u64)>> {
        self.leases.run("", PURGE_LEASE, self.purge_all()).await
    }

    async fn purge_all(&self) -> Result<(u64, u64)> {
        let mut deleted = (0, 0);
        for app in self.tenancy.list_apps().await? {
            if app.retention_days >= tenancy::MAX_RETENTION_DAYS {
                continue;
            }
            let window = self.tenancy.retention(&app.app_id).await?;
            let cutoff = self.clock.now_micros() - window.as_micros() as i64;
            deleted.0 += self
                .purge_before(events::EVENTS_TABLE, &app.app_id, cutoff)
                .await?;
            let agg = aggregates::AGGREGATES_TABLE;
            deleted.1 += self.purge_before(agg, &app.app_id, cutoff).await?;
            // Events gone need not be found when their items arrive.
            self.purge_before(waiting::WAITING_TABLE, &app.app_id, cutoff)
                .await?;
        }
        Ok(deleted)
    }

    /// Delete an app's rows of `table` whose cells are all older than `cutoff` (µs). Events
    /// and aggregates stamp every cell of a row with the same time (the event's; the day's
    /// latest), so a row with a cell newer than the cutoff is kept whole.
    async fn purge_before(&self, table: &str, app: &str, cutoff: i64) -> Result<u64> {
        use penchant_store::{ReadRows, RowFilter, RowSet, TimeRange};
        let store = penchant_store::for_workload(&self.store, penchant_store::Workload::Batch);
        // Rows with a cell in the window, then the others: keys only.
        let newer = RowFilter::TimestampRange(TimeRange::new(cutoff, i64::MAX));
        let old_only = RowFilter::Condition {
            predicate: Box::new(newer),
            on_match: Box::new(RowFilter::BlockAll),
            on_no_match: Box::new(RowFilter::StripValue.and(RowFilter::CellsPerRowLimit(1))),
        };
        let request = ReadRows::new(RowSet::prefix(keys::app(app))).filter(old_only);
        Ok(store.delete_read(table, request).await?)
    }

    /// An app's events per minute by type over the last `hours` (1–48), as received.
    pub async fn events_per_minute(&self, app: &str, hours: u32) -> Result<stats::EventsPerMinute> {
        self.traffic.flush().await?;
        stats::events_per_minute(&self.store, app, hours, self.clock.now_ms()).await
    }

    /// A user's latest events (at most `limit`), newest first, as stored.
    pub async fn recent_events(
        &self,
        app: &str,
        user: &str,
        limit: usize,
    ) -> Result<Vec<events::Event>> {
        keys::check_user_token(user)?;
        self.profiles.recent_events(app, user, limit).await
    }
}

/// The objectIDs events mark seen, by user, and those "not for me" events hide, with until when.
#[allow(clippy::type_complexity)]
fn seen_items<'e>(
    settings: &crate::seen::SeenSettings,
    events: &'e [events::Event],
) -> (
    std::collections::BTreeMap<&'e str, Vec<&'e str>>,
    std::collections::BTreeMap<&'e str, Vec<(&'e str, i64)>>,
) {
    let mut seen: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    let mut hidden: std::collections::BTreeMap<&str, Vec<(&str, i64)>> = Default::default();
    for event in events {
        let events::Target::ObjectIds(ids) = &event.target else {
            continue;
        };
        if settings.is_negative(&event.event_name) {
            let until = settings.hidden_until(event.timestamp);
            hidden
                .entry(event.user())
                .or_default()
                .extend(ids.iter().map(|id| (id.as_str(), until)));
        } else if settings.event_types.contains(&event.event_type) {
            seen.entry(event.user())
                .or_default()
                .extend(ids.iter().map(String::as_str));
        }
    }
    (seen, hidden)
}
