//! User profiles: affinity scores per facet value, computed from a user's events under the app's
//! strategy.
//!
//! **Formula.** Each event the strategy counts (its type and name are in `eventsScoring`) adds,
//! for each facet of `facetsScoring` and each value of that facet the event touched `n` times,
//! `eventScore × facetScore × n` to the value's raw score. Events up to the user's
//! `deletedUntil` (inclusive, in ms) and beyond the retention window do not count. Each facet keeps its 100 best
//! values; scores are then scaled to integers 1..20 against the user's best raw score:
//! `max(1, round(20 × raw / best))`. There is no time decay.
//!
//! **Streaming equals batch.** Both paths run the one function [`compute`] over the same rows:
//! the user's per-day aggregates (read through the wide schema's qualifier filter: each day's
//! base and its not-yet-folded deltas), with the days a deletion or the retention window cuts
//! replaced by their raw events — or, for a full recompute from raw events, the raw events
//! themselves (the aggregates sum them exactly). Raw events are read in the app's layout
//! ([`crate::events::Layout`]): wide cells filtered in the store, narrow ones by [`Scorer`]. The streaming path refreshes the users of each
//! batch of events once its aggregate deltas are written, all of them in one read and one
//! write; the batch path (a strategy change) recomputes every user of the app. Concurrent
//! writers converge: after writing profiles, a refresh reads the users' aggregate cells again
//! (without values) and recomputes those whose cells changed. The batch path skips profiles
//! already computed with the current strategy and writes the others in batches, stamped with
//! the time it started reading: a streaming refresh stamps its profile later (from events at
//! least as fresh), so the newest cell wins in whichever order the writes land.
//!
//! | file | concern |
//! |---|---|
//! | `scoring.rs` | the formula: a strategy's weights, [`compute`] over a user's rows |
//! | `mod.rs` | stored profiles: read, the streaming refresh, deletions |
//! | `state.rs` | users' states: a profile updated from a batch instead of recomputed (the embedded store) |
//! | `recompute.rs` | the batch path over ranges of users |
//! | `job.rs` | the recompute job: every profile of an app after a strategy change, on the job runtime ([`crate::jobs`]) |

pub mod job;
mod recompute;
pub mod state;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use penchant_store::{Consistency, Mutation, ReadRows, Row, RowFilter, RowMutation, RowSet, Store};

pub use penchant_model::profiles::scoring::{
    self, MAX_SCORE, MAX_VALUES_PER_FACET, Scorer, aggregate_filter, compute,
};
pub use penchant_model::profiles::{Profile, Scores};
pub use recompute::{RecomputeStats, Source, UserRange};
pub use state::{STATES, States};

use crate::aggregates::{self, day_of};
use crate::clock::Clock;
use crate::events::{EVENT_COLUMN, Event, Layout};
use crate::keys;
use crate::strategy::{Strategies, Strategy};
use crate::tables::Rows;
use crate::tenancy::Tenancy;
use crate::{EngineError, Result};
use penchant_model::tables::{
    AGGREGATES_TABLE, EVENTS_FAMILY, EVENTS_TABLE, PROFILES_FAMILY as FAMILY,
};
pub use penchant_model::tables::{
    PROFILES, PROFILES_TABLE, PROFILES_WAITING_FAMILY as WAITING_FAMILY, STATES_TABLE,
};

/// Users [`Profiles::build_states`] gives states at once.
const STATE_CHUNK: usize = 256;
const PROFILE: &[u8] = b"profile";
const VERSION: &[u8] = b"version";
const DELETED_UNTIL: &[u8] = b"deletedUntil";

/// What a user's days hold, values aside: each cell's row, column and time.
fn print(days: Option<&Vec<Row>>) -> Vec<(&[u8], &[u8], i64)> {
    days.into_iter()
        .flatten()
        .flat_map(|r| {
            r.cells
                .iter()
                .map(|c| (&r.key[..], &c.qualifier[..], c.timestamp))
        })
        .collect()
}

/// What is stored about a user besides their events.
#[derive(Debug, Default)]
struct Stored {
    profile: Option<Profile>,
    version: Option<i64>,
    deleted_until: i64,
    /// The times (µs) of the user's events waiting for their items.
    waiting: Vec<i64>,
}

impl Stored {
    const EMPTY: Stored = Stored {
        profile: None,
        version: None,
        deleted_until: i64::MIN,
        waiting: Vec::new(),
    };

    fn from_row(row: &Row) -> Result<Stored> {
        let value = |q: &[u8]| row.latest(FAMILY, q).map(|c| &c.value[..]);
        let number = |q: &[u8]| value(q).and_then(|v| std::str::from_utf8(v).ok()?.parse().ok());
        Ok(Stored {
            profile: value(PROFILE)
                .map(serde_json::from_slice)
                .transpose()
                .map_err(corrupt)?,
            version: number(VERSION),
            deleted_until: number(DELETED_UNTIL).unwrap_or(i64::MIN),
            waiting: row.family(WAITING_FAMILY).map(|c| c.timestamp).collect(),
        })
    }

    /// How many waiting events still count: after the deletion, inside the window (`since`,
    /// ms).
    fn waiting_events(&self, since: i64) -> u64 {
        let from = since.max(self.deleted_until.saturating_add(1));
        self.waiting.iter().filter(|ts| **ts / 1000 >= from).count() as u64
    }
}

fn corrupt(e: impl std::fmt::Display) -> EngineError {
    crate::internal("corrupt profile", e)
}

/// Profiles of every app.
#[derive(Debug, Clone)]
pub struct Profiles {
    store: Arc<dyn Store>,
    strategies: Arc<Strategies>,
    tenancy: Arc<Tenancy>,
    clock: Clock,
    /// Where this node is the only one on its store: its changes to aggregates.
    local: Option<Arc<aggregates::LocalChanges>>,
    /// What folds the crowded days a refresh reads.
    aggregates: aggregates::Aggregates,
    /// Users' states, where batches update profiles from them ([`state`]), with the locks
    /// that keep a state's read and write apart from another's.
    states: Option<(Arc<States>, Arc<crate::locks::UserLocks>)>,
}

/// What a batch's update of its users' profiles writes ([`Profiles::update`]).
#[derive(Debug, Default)]
pub struct Update {
    /// Profiles and states, for the batch's atomic write.
    pub writes: Vec<penchant_store::TableMutation>,
    /// The users whose state could not answer (marked stale by these writes): refresh them
    /// after the write.
    pub refresh: Vec<String>,
}

impl Profiles {
    pub fn new(
        store: Arc<dyn Store>,
        strategies: Arc<Strategies>,
        tenancy: Arc<Tenancy>,
        clock: Clock,
    ) -> Self {
        Self {
            aggregates: aggregates::Aggregates::new(store.clone()),
            store,
            strategies,
            tenancy,
            clock,
            local: None,
            states: None,
        }
    }

    /// Keep users' states and update profiles from them ([`Profiles::update`]), holding users'
    /// users in `locks` from a state's read to its write.
    pub fn with_states(mut self, locks: Arc<crate::locks::UserLocks>) -> Self {
        self.states = Some((Arc::new(States::new(self.store.clone())), locks));
        self
    }

    /// Users' states, where they are kept.
    pub fn states(&self) -> Option<&Arc<States>> {
        self.states.as_ref().map(|(states, _)| states)
    }

    /// The profiles of a batch's users updated from its newly stored events (`stored`), and
    /// their states, for the batch's one atomic write; the caller holds the users' locks
    /// exclusively from before this read until that write. A user whose state cannot answer
    /// ([`state`]) is marked stale and named for a refresh after the write.
    pub async fn update(&self, app: &str, stored: &[crate::events::Stored<'_>]) -> Result<Update> {
        use penchant_store::TableMutation;
        let mut update = Update::default();
        let Some((states, _)) = &self.states else {
            return Ok(update);
        };
        let Some(strategy) = self.strategies.get(app).await? else {
            return Ok(update);
        };
        let mut by_user: BTreeMap<&str, Vec<&crate::events::Stored<'_>>> = BTreeMap::new();
        for s in stored {
            by_user.entry(s.event.user()).or_default().push(s);
        }
        let users: Vec<&str> = by_user.keys().copied().collect();
        let complete = states.complete(app).await?;
        let mut found = states.read_many(app, &users).await?;
        let since = self.window_start(app).await?;
        let scorer = Scorer::new(&strategy.strategy);
        for (user, events) in by_user {
            let state = match found.remove(user) {
                Some(state::Found::State(s)) if s.version == strategy.version => Some(s),
                Some(state::Found::Missing) | None if complete => {
                    Some(state::State::empty(strategy.version))
                }
                _ => None,
            };
            let profile = state.and_then(|mut state| {
                state.add(&scorer, events, since);
                Some((state.profile(user, since)?, state))
            });
            let Some((profile, state)) = profile else {
                update.writes.push(TableMutation::new(
                    STATES_TABLE,
                    States::write(app, user, None),
                ));
                update.refresh.push(user.to_owned());
                continue;
            };
            update.writes.push(TableMutation::new(
                PROFILES_TABLE,
                RowMutation::new(
                    keys::profile(app, user),
                    Self::profile_mutations(&profile, strategy.version, None)?,
                ),
            ));
            update.writes.push(TableMutation::new(
                STATES_TABLE,
                States::write(app, user, Some(&state)),
            ));
        }
        Ok(update)
    }

    /// Give every user of an app written before states a state, then mark the app complete
    /// ([`States::complete`]): an online pass over the app's users (their aggregate rows' keys,
    /// at the batch workload's pace), refreshing [`STATE_CHUNK`] users at a time from their
    /// aggregates — under their locks, as a batch's fallback does — and skipping those whose
    /// state answers already, so a pass stopped half-way resumes at little cost. Batches keep
    /// flowing meanwhile: a user the pass has not reached falls back to the refresh, which
    /// gives it a state. Returns how many users it gave a state, `None` when there is nothing
    /// to do (the app is complete, or has no strategy yet).
    pub async fn build_states(&self, app: &str) -> Result<Option<u64>> {
        use futures::TryStreamExt;
        let Some((states, _)) = &self.states else {
            return Ok(None);
        };
        if states.complete(app).await? {
            return Ok(None);
        }
        let Some(strategy) = self.strategies.get(app).await? else {
            return Ok(None);
        };
        let store = penchant_store::for_workload(&self.store, penchant_store::Workload::Batch);
        let request = ReadRows::new(RowSet::prefix(keys::app(app)))
            .filter(RowFilter::CellsPerRowLimit(1).and(RowFilter::StripValue));
        let mut rows = store.read_rows(AGGREGATES_TABLE, request).await?;
        let mut chunk: Vec<String> = Vec::new();
        let mut built = 0;
        loop {
            let row = rows.try_next().await?;
            if let Some(user) = row.as_ref().and_then(|r| keys::user_of(app, &r.key))
                && chunk.last().is_none_or(|last| last != user)
            {
                chunk.push(user.to_owned());
            }
            if chunk.len() >= STATE_CHUNK || (row.is_none() && !chunk.is_empty()) {
                let users: Vec<&str> = chunk.iter().map(String::as_str).collect();
                let found = states.read_many(app, &users).await?;
                let lacking: Vec<&str> = found
                    .into_iter()
                    .filter(|(_, f)| !matches!(f, state::Found::State(s) if s.version == strategy.version))
                    .map(|(user, _)| user)
                    .collect();
                self.refresh_many(app, &lacking).await?;
                built += lacking.len() as u64;
                // The user at the chunk's end may have more rows: it stays, to be skipped.
                let last = chunk.pop();
                chunk.clear();
                chunk.extend(last.filter(|_| row.is_some()));
            }
            if row.is_none() {
                break;
            }
        }
        states.mark_complete(app).await?;
        tracing::info!(%app, users = built, "every user of the app has a state");
        Ok(Some(built))
    }

    /// Mark these users' states stale (their aggregates are about to change behind them), their
    /// users held by the caller.
    pub async fn invalidate(&self, app: &str, users: &[&str]) -> Result<()> {
        if self.states.is_none() || users.is_empty() {
            return Ok(());
        }
        let writes = users.iter().map(|u| States::write(app, u, None)).collect();
        self.store.mutate_all(STATES_TABLE, writes).await?;
        Ok(())
    }

    /// Fold the crowded days a refresh reads with these aggregates (which may hold deltas of
    /// batches in flight out of folds).
    pub fn with_aggregates(mut self, aggregates: aggregates::Aggregates) -> Self {
        self.aggregates = aggregates;
        self
    }

    /// Trust `changes` to name every change to aggregates (this node is the only one on its
    /// store): a refresh checks them instead of reading the aggregates again after it writes.
    pub fn with_local_changes(mut self, changes: Arc<aggregates::LocalChanges>) -> Self {
        self.local = Some(changes);
        self
    }

    /// The oldest event time (ms) that counts for the app: its retention window.
    async fn window_start(&self, app: &str) -> Result<i64> {
        let retention = self.tenancy.retention(app).await?;
        Ok(self.clock.now_ms() - retention.as_millis() as i64)
    }

    /// The layout an app's raw events are read in.
    async fn layout(&self, app: &str) -> Result<Layout> {
        Ok(self.tenancy.events_of(app).await?.layout)
    }

    async fn stored(&self, app: &str, user: &str) -> Result<Stored> {
        match self
            .store
            .read_row(PROFILES_TABLE, keys::profile(app, user), None)
            .await?
        {
            Some(row) => Stored::from_row(&row),
            None => Ok(Stored::default()),
        }
    }

    /// What is stored about some users (sorted), by user (one read).
    async fn stored_many<'u>(
        &self,
        app: &str,
        users: &[&'u str],
    ) -> Result<BTreeMap<&'u str, Stored>> {
        let keys = users.iter().map(|u| keys::profile(app, u));
        let rows = self
            .store
            .read_all(PROFILES_TABLE, ReadRows::new(RowSet::keys(keys)))
            .await?;
        let mut out = BTreeMap::new();
        for row in &rows {
            let user = keys::profile_user(app, &row.key);
            if let Some(i) = user.and_then(|user| users.binary_search(&user).ok()) {
                out.insert(users[i], Stored::from_row(row)?);
            }
        }
        Ok(out)
    }

    /// Some users' (sorted) rows of `table` (raw events, or per-day aggregates), filtered, by
    /// user (one read).
    async fn read_users<'u>(
        &self,
        table: &str,
        app: &str,
        users: &[&'u str],
        filter: RowFilter,
    ) -> Result<BTreeMap<&'u str, Vec<Row>>> {
        let ranges = users
            .iter()
            .map(|u| penchant_store::RowRange::prefix(keys::user(app, u)))
            .collect();
        let rows = RowSet {
            keys: Vec::new(),
            ranges,
        };
        let mut out: BTreeMap<&str, Vec<Row>> = BTreeMap::new();
        for row in self
            .store
            .read_all(table, ReadRows::new(rows).filter(filter))
            .await?
        {
            let Some(user) = keys::user_of(app, &row.key) else {
                continue;
            };
            if let Ok(i) = users.binary_search(&user) {
                out.entry(users[i]).or_default().push(row);
            }
        }
        Ok(out)
    }

    /// A user's rows of `table` (raw events, or per-day aggregates), filtered.
    async fn read_user(
        &self,
        table: &str,
        app: &str,
        user: &str,
        filter: RowFilter,
    ) -> Result<Vec<Row>> {
        let request = ReadRows::new(RowSet::prefix(keys::user(app, user))).filter(filter);
        Ok(self.store.read_all(table, request).await?)
    }

    /// The cells of a profile, stamped with the store's clock (`None`) or at a given time.
    fn profile_mutations(
        profile: &Profile,
        version: i64,
        stamp: Option<i64>,
    ) -> Result<Vec<Mutation>> {
        let json = serde_json::to_vec(profile).map_err(corrupt)?;
        let set = |q: &'static [u8], v: Vec<u8>| match stamp {
            Some(ts) => Mutation::set(FAMILY, q, ts, v),
            None => Mutation::set_now(FAMILY, q, v),
        };
        Ok(vec![
            set(PROFILE, json),
            set(VERSION, version.to_string().into_bytes()),
        ])
    }

    /// Recompute one user's profile under the app's current strategy and store it. `None`
    /// when the app has no strategy.
    pub async fn refresh(&self, app: &str, user: &str) -> Result<Option<Profile>> {
        Ok(self.refresh_many(app, &[user]).await?.pop())
    }

    /// Recompute some users' profiles under the app's current strategy and store them (the
    /// streaming path, after each batch of events, once their aggregates are written); the
    /// profiles in the users' order, none when the app has no strategy.
    ///
    /// It reads what a batch recompute reads — the users' per-day aggregates, and the raw
    /// events of a day a deletion or the retention window cuts — so its cost follows the users'
    /// active days, not their events; and it reads and writes every user at once: a read of
    /// the stored profiles, a read of the aggregates, a write of the profiles, whatever the
    /// number of users. After writing, it reads the aggregates again (without their values)
    /// and starts over for the users whose rows changed meanwhile (another node's events, or
    /// a fold), so the last profile written saw the last events — or, on a node alone on its
    /// store, checks its counters of changes instead ([`aggregates::LocalChanges`]). Last, it folds the days it
    /// read that hold many deltas ([`aggregates::crowded`]).
    pub async fn refresh_many(&self, app: &str, users: &[&str]) -> Result<Vec<Profile>> {
        self.refresh_from(app, users, recompute::Source::Aggregates)
            .await
    }

    /// [`Profiles::refresh_many`] from the users' aggregates or from their raw events.
    async fn refresh_from(
        &self,
        app: &str,
        users: &[&str],
        source: recompute::Source,
    ) -> Result<Vec<Profile>> {
        let Some(strategy) = self.strategies.get(app).await? else {
            return Ok(Vec::new());
        };
        let scorer = Scorer::new(&strategy.strategy);
        let (table, filter) = match source {
            recompute::Source::Aggregates => {
                (AGGREGATES_TABLE, aggregate_filter(&strategy.strategy))
            }
            recompute::Source::Raw => (
                EVENTS_TABLE,
                self.layout(app).await?.read_filter(&strategy.strategy),
            ),
        };
        let keys_only = filter.clone().and(RowFilter::StripValue);
        let mut users: Vec<&str> = users.to_vec();
        users.sort_unstable();
        users.dedup();
        let mut profiles: BTreeMap<&str, Profile> = BTreeMap::new();
        let mut crowded = Vec::new();
        let mut pending = users.clone();
        // Converges unless events keep arriving for a user; each round sees more of them.
        for _ in 0..8 {
            if pending.is_empty() {
                break;
            }
            // Where states are kept, a refresh rebuilds them: alone with its users' batches.
            let _alone = match &self.states {
                Some((_, locks)) => Some(locks.exclusive_many(app, pending.iter().copied()).await),
                None => None,
            };
            let counters: Vec<u32> = match &self.local {
                Some(local) => pending.iter().map(|u| local.read(app, u)).collect(),
                None => Vec::new(),
            };
            let stored = self.stored_many(app, &pending).await?;
            let days = self
                .read_users(table, app, &pending, filter.clone())
                .await?;
            let since = self.window_start(app).await?;
            let mut writes = Vec::with_capacity(pending.len());
            let mut state_writes = Vec::new();
            let empty = Stored::EMPTY;
            for user in &pending {
                let rows = days.get(user).map_or(&[][..], Vec::as_slice);
                let stored = stored.get(user).unwrap_or(&empty);
                let cut = match source {
                    recompute::Source::Aggregates => {
                        self.cut_days(app, user, rows, &strategy.strategy, stored, since)
                            .await?
                    }
                    recompute::Source::Raw => None,
                };
                let rows = cut.as_deref().unwrap_or(rows);
                let computed = match &self.states {
                    // The same counts, kept per day.
                    Some(_) => {
                        let state = state::State {
                            version: strategy.version,
                            deleted_until: stored.deleted_until,
                            days: scorer.days(rows, stored.deleted_until, since),
                        };
                        state_writes.push(States::write(app, user, Some(&state)));
                        state::profile_of(user, &state.days)
                    }
                    None => scorer.compute(user, rows, stored.deleted_until, since),
                };
                writes.push(RowMutation::new(
                    keys::profile(app, user),
                    Self::profile_mutations(&computed, strategy.version, None)?,
                ));
                profiles.insert(user, computed);
            }
            if state_writes.is_empty() {
                self.store.mutate_all(PROFILES_TABLE, writes).await?;
            } else {
                use penchant_store::TableMutation;
                let writes = writes
                    .into_iter()
                    .map(|w| TableMutation::new(PROFILES_TABLE, w))
                    .chain(
                        state_writes
                            .into_iter()
                            .map(|w| TableMutation::new(STATES_TABLE, w)),
                    )
                    .collect();
                self.store.mutate_atomically(writes).await?;
            }
            if table == AGGREGATES_TABLE {
                crowded.extend(days.values().flat_map(|rows| aggregates::crowded(rows)));
            }
            if let Some(local) = &self.local {
                // A change written after this read bumped its counter before this check, or
                // its own refresh reads after this write (and writes a newer profile).
                let mut counters = counters.into_iter();
                pending.retain(|u| counters.next() != Some(local.read(app, u)));
                continue;
            }
            let again = self
                .read_users(table, app, &pending, keys_only.clone())
                .await?;
            pending.retain(|u| print(days.get(u)) != print(again.get(u)));
        }
        crowded.sort_unstable();
        crowded.dedup();
        let folds: Vec<_> = crowded
            .into_iter()
            .map(|day| self.aggregates.fold(day))
            .collect();
        crate::writes::concurrently(folds).await?;
        Ok(users.iter().filter_map(|u| profiles.remove(u)).collect())
    }

    /// A user's profile: as stored if it was computed with the current strategy, else
    /// recomputed now. `None` for a user without counted events.
    pub async fn get(&self, app: &str, user: &str) -> Result<Option<Profile>> {
        self.get_with(app, user, Consistency::Eventual).await
    }

    /// [`Profiles::get`] with its reads as consistent as asked: a strong read reads the stored
    /// profile and, if it has to be recomputed, every row the recompute reads from the user's
    /// home cluster only (failing when it cannot be reached, never answering from older data).
    pub async fn get_with(
        &self,
        app: &str,
        user: &str,
        consistency: Consistency,
    ) -> Result<Option<Profile>> {
        match consistency {
            Consistency::Eventual => self.read(app, user).await,
            Consistency::Strong => {
                // The stored profile and whatever a recompute reads: all strong.
                let strong = Self {
                    store: penchant_store::with_consistency(&self.store, consistency),
                    ..self.clone()
                };
                strong.read(app, user).await
            }
        }
    }

    async fn read(&self, app: &str, user: &str) -> Result<Option<Profile>> {
        let Some(strategy) = self.strategies.get(app).await? else {
            return Ok(None);
        };
        let stored = self.stored(app, user).await?;
        let waiting = match stored.waiting.is_empty() {
            true => 0,
            false => stored.waiting_events(self.window_start(app).await?),
        };
        let profile = match (stored.profile, stored.version) {
            (Some(p), Some(v)) if v == strategy.version => Some(p),
            _ => self.refresh(app, user).await?,
        };
        Ok(profile
            .map(|p| Profile {
                waiting_events: waiting,
                ..p
            })
            .filter(|p| p.last_event_at.is_some() || p.waiting_events > 0))
    }

    /// The profile as stored, with the strategy version it was computed with (no refresh).
    pub async fn stored_profile(&self, app: &str, user: &str) -> Result<Option<(Profile, i64)>> {
        let stored = self.stored(app, user).await?;
        Ok(stored.profile.zip(stored.version))
    }

    /// The profile a full recompute gives now, under the current strategy, without storing it.
    pub async fn recompute_one(&self, app: &str, user: &str) -> Result<Option<Profile>> {
        let Some(strategy) = self.strategies.fresh(app).await? else {
            return Ok(None);
        };
        let stored = self.stored(app, user).await?;
        let filter = self.layout(app).await?.read_filter(&strategy.strategy);
        let rows = self.read_user(EVENTS_TABLE, app, user, filter).await?;
        let since = self.window_start(app).await?;
        Ok(Some(compute(
            &strategy.strategy,
            user,
            &rows,
            stored.deleted_until,
            since,
        )))
    }

    /// The profile a strategy — saved or not — gives a user now, computed as the event path
    /// computes it (aggregates, cut days raw), without storing anything: the simulator's.
    pub async fn preview(&self, app: &str, user: &str, strategy: &Strategy) -> Result<Profile> {
        let stored = self.stored(app, user).await?;
        let rows = self
            .read_user(AGGREGATES_TABLE, app, user, aggregate_filter(strategy))
            .await?;
        let since = self.window_start(app).await?;
        let cut = self
            .cut_days(app, user, &rows, strategy, &stored, since)
            .await?;
        Ok(Scorer::new(strategy).compute(
            user,
            cut.as_deref().unwrap_or(&rows),
            stored.deleted_until,
            since,
        ))
    }

    /// How many users of the app have a stored profile, counting up to `cap`: `(n, exact)`,
    /// `exact` false when counting stopped at the cap (a keys-only scan of the app's profiles).
    pub async fn count(&self, app: &str, cap: usize) -> Result<(usize, bool)> {
        let request = ReadRows::new(RowSet::prefix(keys::app(app)))
            .filter(RowFilter::column(FAMILY, PROFILE).and(RowFilter::StripValue))
            .limit(cap as u64 + 1);
        let n = self.store.read_all(PROFILES_TABLE, request).await?.len();
        Ok((n.min(cap), n <= cap))
    }

    /// A user's latest events (at most `limit`), newest first, as stored: read back from now in
    /// growing windows (an hour, a day, a week, the retention window), so a heavy user's
    /// lookup reads about `limit` rows, not their whole history.
    pub async fn recent_events(&self, app: &str, user: &str, limit: usize) -> Result<Vec<Event>> {
        let now = self.clock.now_ms();
        let since = self.window_start(app).await?;
        let mut rows = Vec::new();
        for hours in [1, 24, 24 * 7, i64::MAX / 3_600_000] {
            let from = now
                .saturating_sub(hours.saturating_mul(3_600_000))
                .max(since);
            let request = ReadRows::new(keys::events_between(app, user, from, i64::MAX))
                .filter(RowFilter::column(EVENTS_FAMILY, EVENT_COLUMN));
            rows = self.store.read_all(EVENTS_TABLE, request).await?;
            if rows.len() >= limit || from == since {
                break;
            }
        }
        let mut events = Vec::with_capacity(limit.min(rows.len()));
        for row in rows.iter().rev().take(limit) {
            if let Some(cell) = row.latest(EVENTS_FAMILY, EVENT_COLUMN) {
                events.push(serde_json::from_slice(&cell.value).map_err(corrupt)?);
            }
        }
        Ok(events)
    }

    /// Forget a user's events up to `until` (ms, inclusive): they no longer count, from now on.
    pub async fn delete_profile(&self, app: &str, user: &str, until: i64) -> Result<()> {
        // The state counted the deleted events: stale before the deletion is written.
        let alone = match &self.states {
            Some((_, locks)) => Some(locks.exclusive(app, user).await),
            None => None,
        };
        self.invalidate(app, &[user]).await?;
        self.store
            .mutate_row(
                PROFILES_TABLE,
                keys::profile(app, user),
                vec![Mutation::set_now(FAMILY, DELETED_UNTIL, until.to_string())],
            )
            .await?;
        // A refresh that read the user before this write must not stand.
        if let Some(local) = &self.local {
            local.bump(app, [user]);
        }
        drop(alone);
        self.refresh(app, user).await?;
        Ok(())
    }

    /// Delete every trace of a user: events, aggregates, seen filter and profile.
    pub async fn delete_user(&self, app: &str, user: &str) -> Result<()> {
        // Row by row (Bigtable's DropRowRange is an admin operation, not meant for per-user
        // traffic).
        // Every user table's rows of the user (the profile, keyed apart, last).
        let prefix = keys::user(app, user);
        // The index rows of the user's waiting events (an app's table, keyed by item).
        let waiting: Vec<Bytes> = self
            .store
            .read_row(
                PROFILES_TABLE,
                keys::profile(app, user),
                Some(RowFilter::Family(WAITING_FAMILY.into()).and(RowFilter::StripValue)),
            )
            .await?
            .map(|row| row.cells.into_iter().map(|c| c.qualifier).collect())
            .unwrap_or_default();
        let index = crate::events::waiting::index_rows_of(&self.store, app, waiting).await?;
        let index = index
            .into_iter()
            .map(|key| RowMutation::new(key, vec![Mutation::DeleteFromRow]))
            .collect();
        self.store
            .mutate_all(crate::events::waiting::WAITING_TABLE, index)
            .await?;
        for table in crate::tables::named(Rows::User).filter(|t| *t != PROFILES_TABLE) {
            self.store.delete_prefix(table, prefix.clone()).await?;
        }
        if let Some(local) = &self.local {
            local.bump(app, [user]);
        }
        self.store
            .mutate_row(
                PROFILES_TABLE,
                keys::profile(app, user),
                vec![Mutation::DeleteFromRow],
            )
            .await?;
        Ok(())
    }

    /// Aggregate rows of a user, with the days a deletion or the retention window (from
    /// `since`, ms) cuts replaced by their raw events (an aggregate counts the whole day).
    /// `None` when no day is cut.
    async fn cut_days(
        &self,
        app: &str,
        user: &str,
        rows: &[Row],
        strategy: &Strategy,
        stored: &Stored,
        since: i64,
    ) -> Result<Option<Vec<Row>>> {
        let mut cut = vec![day_of(since)];
        if stored.deleted_until > i64::MIN {
            cut.push(day_of(stored.deleted_until));
        }
        let day = |row: &Row| keys::day_of(&row.key);
        // A day without an aggregate has no raw events either (an event's deltas are written
        // after its raw row, and expire with it).
        cut.retain(|d| rows.iter().any(|r| day(r) == Some(*d)));
        if cut.is_empty() {
            return Ok(None);
        }
        let mut out: Vec<Row> = rows
            .iter()
            .filter(|r| day(r).is_some_and(|d| !cut.contains(&d)))
            .cloned()
            .collect();
        let filter = self.layout(app).await?.read_filter(strategy);
        for d in cut {
            let request = ReadRows::new(aggregates::raw_day(app, user, d)).filter(filter.clone());
            out.extend(self.store.read_all(EVENTS_TABLE, request).await?);
        }
        Ok(Some(out))
    }
}
