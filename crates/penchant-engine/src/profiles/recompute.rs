//! The batch path: every profile of an app recomputed under a strategy, range of users by range
//! of users, reading the app's events (or their per-day aggregates) once in key order, as a batch
//! workload. [`crate::jobs`] runs it with checkpoints, leases and progress.

use std::collections::HashMap;

use bytes::Bytes;
use futures::StreamExt;
use penchant_store::{ReadRows, Row, RowFilter, RowMutation, RowSet, Workload, for_workload};
use serde::{Deserialize, Serialize};

use super::scoring::aggregate_filter;
use super::{Profiles, Scorer, Stored, VERSION};
use crate::Result;
use crate::keys;
use crate::strategy::Versioned;
use penchant_model::tables::{
    AGGREGATES_TABLE, EVENTS_TABLE, PROFILES_FAMILY as FAMILY, PROFILES_TABLE,
};

/// Users a recompute writes at once.
const RECOMPUTE_CHUNK: usize = 64;

/// A range of an app's users, by user token: `[start, end)`, minus everything up to `after`
/// (a checkpoint). Unset bounds are the app's first and last users.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserRange {
    pub start: Option<String>,
    pub end: Option<String>,
    /// The last user done: the range resumes after it.
    pub after: Option<String>,
}

impl UserRange {
    /// `n` ranges cut at evenly spaced users of `users` (sorted), covering every user once.
    pub fn split(users: &[String], n: usize) -> Vec<UserRange> {
        let n = n.max(1).min(users.len() + 1);
        let mut cuts: Vec<String> = (1..n).map(|i| users[i * users.len() / n].clone()).collect();
        cuts.dedup();
        let starts = std::iter::once(None).chain(cuts.iter().cloned().map(Some));
        let ends = cuts.iter().cloned().map(Some).chain(std::iter::once(None));
        starts
            .zip(ends)
            .map(|(start, end)| UserRange {
                start,
                end,
                after: None,
            })
            .collect()
    }

    /// The rows of the range, in a table keyed `app 0 · user 0 · ...`.
    pub fn rows(&self, app: &str) -> penchant_store::RowRange {
        keys::users_between(
            app,
            self.start.as_deref(),
            self.after.as_deref(),
            self.end.as_deref(),
        )
    }
}

/// What a full recompute reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Every raw event.
    Raw,
    /// The per-day aggregates (raw events only for a day cut by a deletion or the retention).
    Aggregates,
}

/// Progress of a full recompute.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecomputeStats {
    pub users: u64,
    pub events: u64,
    /// Users skipped because a fresher profile (same strategy) was there.
    pub skipped: u64,
}

/// The timestamp (µs, whole ms) a batch under `strategy` stamps its profiles with: later than
/// the strategy's save (profiles computed before it lose) and earlier than any read of the
/// batch (refreshes that start after the batch's reads win). It waits for the clock to pass the
/// stamp before returning, so that the batch's reads come after it.
async fn batch_stamp(strategy: &Versioned) -> i64 {
    // The store's clock, not the engine's: the stamp competes with cells the store stamps.
    let now_ms = || penchant_store::validate::now_micros() / 1000;
    // Versions are nanoseconds at the save (see `strategy::new_version`).
    let stamp = (now_ms() - 1).max(strategy.version / 1_000_000 + 1);
    while now_ms() <= stamp {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    stamp * 1000
}

impl Profiles {
    /// Recompute the profiles of the users of one range, reading the app's events (or their
    /// aggregates) once, in key order, as a batch workload. After each user, `progress` gets the
    /// user and the range's totals so far; returning `false` stops the scan.
    pub async fn recompute_range(
        &self,
        app: &str,
        strategy: &Versioned,
        source: Source,
        range: &UserRange,
        mut progress: impl FnMut(&str, &RecomputeStats) -> bool,
    ) -> Result<RecomputeStats> {
        let store = for_workload(&self.store, Workload::Batch);
        let scorer = Scorer::new(&strategy.strategy);
        let stamp = self.batch_stamp(strategy).await;
        let (table, mut filter) = match source {
            Source::Raw => (
                EVENTS_TABLE,
                self.layout(app).await?.read_filter(&strategy.strategy),
            ),
            Source::Aggregates => (AGGREGATES_TABLE, aggregate_filter(&strategy.strategy)),
        };
        if self.states.is_some() {
            // The scan only names the users: their rows are read again under their locks.
            filter = filter.and(RowFilter::StripValue);
        }
        let request = ReadRows::new(RowSet::range(range.rows(app))).filter(filter);
        let mut stream = store.read_rows(table, request).await?;
        let mut stats = RecomputeStats::default();
        let mut current: Option<(String, Vec<Row>)> = None;
        // Users are written a chunk at a time, concurrently (a durable store commits their
        // writes as a group); progress is reported after each chunk, at its last user.
        let mut chunk: Vec<(String, Vec<Row>)> = Vec::with_capacity(RECOMPUTE_CHUNK);
        loop {
            let next = stream.next().await.transpose()?;
            let user = next
                .as_ref()
                .and_then(|row| keys::user_of(app, &row.key).map(str::to_owned));
            let done = match (&current, &user) {
                (Some((u, _)), Some(n)) => u != n,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if done && let Some(finished) = current.take() {
                chunk.push(finished);
            }
            let last = next.is_none();
            if chunk.len() >= RECOMPUTE_CHUNK || (last && !chunk.is_empty()) {
                let users = std::mem::take(&mut chunk);
                let (wrote, skipped) = self
                    .recompute_chunk(app, strategy, &scorer, source, &users, stamp)
                    .await?;
                stats.events += users.iter().map(|(_, rows)| rows.len() as u64).sum::<u64>();
                stats.users += wrote;
                stats.skipped += skipped;
                let last_user = users.last().map(|(u, _)| u.as_str()).unwrap_or_default();
                if !progress(last_user, &stats) {
                    return Ok(stats);
                }
            }
            match (next, user) {
                (Some(row), Some(u)) => match &mut current {
                    Some((_, rows)) => rows.push(row),
                    None => current = Some((u, vec![row])),
                },
                (Some(_), None) => continue,
                (None, _) => break,
            }
        }
        Ok(stats)
    }

    /// Recompute the profiles not computed with `strategy` whose users have no events left
    /// (deleted or expired): the users a scan of events does not meet.
    pub async fn recompute_stale(&self, app: &str, strategy: &Versioned) -> Result<RecomputeStats> {
        let store = for_workload(&self.store, Workload::Batch);
        let scorer = Scorer::new(&strategy.strategy);
        let stamp = self.batch_stamp(strategy).await;
        let request = ReadRows::new(RowSet::prefix(keys::app(app)))
            .filter(RowFilter::column(FAMILY, VERSION));
        let mut profiles = store.read_rows(PROFILES_TABLE, request).await?;
        let filter = self.layout(app).await?.read_filter(&strategy.strategy);
        let mut stats = RecomputeStats::default();
        let mut chunk = Vec::new();
        loop {
            let row = profiles.next().await.transpose()?;
            if let Some(row) = &row {
                let fresh = row
                    .latest(FAMILY, VERSION)
                    .is_some_and(|c| c.value == strategy.version.to_string().as_bytes());
                if !fresh && let Some(user) = keys::profile_user(app, &row.key) {
                    let user = user.to_owned();
                    let rows = match self.states {
                        // Read under the user's lock.
                        Some(_) => Vec::new(),
                        None => {
                            self.read_user(EVENTS_TABLE, app, &user, filter.clone())
                                .await?
                        }
                    };
                    chunk.push((user, rows));
                }
            }
            if chunk.len() >= RECOMPUTE_CHUNK || (row.is_none() && !chunk.is_empty()) {
                let users = std::mem::take(&mut chunk);
                let (wrote, _) = self
                    .recompute_chunk(app, strategy, &scorer, Source::Raw, &users, stamp)
                    .await?;
                stats.users += wrote;
            }
            if row.is_none() {
                return Ok(stats);
            }
        }
    }

    /// Up to `n` ranges of an app's users of about the same size, from the store's split points
    /// of the aggregates table.
    pub async fn plan_ranges(&self, app: &str, n: usize) -> Result<Vec<UserRange>> {
        let samples = self.store.sample_row_keys(AGGREGATES_TABLE).await?;
        let mut users: Vec<String> = samples
            .iter()
            .filter_map(|s| keys::user_of(app, &s.row_key).map(str::to_owned))
            .collect();
        users.dedup();
        Ok(UserRange::split(&users, n))
    }

    /// Compute and write the profiles of a chunk of users from their rows (events, or
    /// aggregates), skipping the users whose profile is already computed with `strategy`.
    /// Returns how many profiles it wrote and how many it skipped.
    ///
    /// The profiles are written in one batch, each cell stamped `stamp` ([`batch_stamp`]: from
    /// before the rows were read) rather than now: a streaming refresh racing with the batch
    /// stamps its profile later, from events at least as fresh, so the newest cell wins
    /// whichever write lands last (the profile family keeps one version).
    async fn recompute_chunk(
        &self,
        app: &str,
        strategy: &Versioned,
        scorer: &Scorer,
        source: Source,
        users: &[(String, Vec<Row>)],
        stamp: i64,
    ) -> Result<(u64, u64)> {
        if let Some(states) = self.states() {
            return self
                .refresh_chunk(app, strategy, states, source, users)
                .await;
        }
        let store = for_workload(&self.store, Workload::Batch);
        let keys = users.iter().map(|(u, _)| keys::profile(app, u));
        let mut stored: HashMap<Bytes, Stored> = HashMap::new();
        for row in store
            .read_all(PROFILES_TABLE, ReadRows::new(RowSet::keys(keys)))
            .await?
        {
            stored.insert(row.key.clone(), Stored::from_row(&row)?);
        }
        let since = self.window_start(app).await?;
        let mut entries = Vec::with_capacity(users.len());
        for (user, rows) in users {
            let key = keys::profile(app, user);
            let stored = stored.remove(&key).unwrap_or_default();
            if stored.version == Some(strategy.version) {
                continue;
            }
            let cut;
            let rows = match source {
                Source::Raw => rows,
                Source::Aggregates => {
                    cut = self
                        .cut_days(app, user, rows, &strategy.strategy, &stored, since)
                        .await?;
                    cut.as_deref().unwrap_or(rows)
                }
            };
            let profile = scorer.compute(user, rows, stored.deleted_until, since);
            let mutations = Self::profile_mutations(&profile, strategy.version, Some(stamp))?;
            entries.push(RowMutation::new(key, mutations));
        }
        let wrote = entries.len() as u64;
        store.mutate_all(PROFILES_TABLE, entries).await?;
        Ok((wrote, users.len() as u64 - wrote))
    }

    /// [`Profiles::recompute_chunk`] where users have states: the users whose profile or state
    /// is not `strategy`'s are refreshed, under their locks as a batch's fallback is — their
    /// rows read after the locks are taken, profiles and states written at once, stamped now.
    /// A stamp from before the reads ([`batch_stamp`]) cannot order this write after a
    /// batch's: a batch's profile counts the events of its own write, stamped before the write
    /// lands, so a recompute that read between the two would hide them.
    async fn refresh_chunk(
        &self,
        app: &str,
        strategy: &Versioned,
        states: &super::States,
        source: Source,
        users: &[(String, Vec<Row>)],
    ) -> Result<(u64, u64)> {
        let mut names: Vec<&str> = users.iter().map(|(u, _)| u.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        let found = states.read_many(app, &names).await?;
        let stored = self.stored_many(app, &names).await?;
        let current = |user: &str| {
            let state = matches!(found.get(user), Some(super::state::Found::State(s)) if s.version == strategy.version);
            state && stored.get(user).and_then(|s| s.version) == Some(strategy.version)
        };
        let lacking: Vec<&str> = names.iter().copied().filter(|u| !current(u)).collect();
        self.refresh_from(app, &lacking, source).await?;
        let wrote = lacking.len() as u64;
        Ok((wrote, names.len() as u64 - wrote))
    }

    /// The stamp of a recompute's profiles ([`batch_stamp`]); none where users have states
    /// (their profiles are written under the users' locks, stamped now).
    async fn batch_stamp(&self, strategy: &Versioned) -> i64 {
        match self.states {
            Some(_) => 0,
            None => batch_stamp(strategy).await,
        }
    }
}
