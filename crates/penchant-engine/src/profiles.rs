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
//! the user's per-day aggregates (read through the wide schema's qualifier filter), with the
//! days a deletion or the retention window cuts replaced by their raw events — or, for a full
//! recompute from raw events, the raw events themselves (the aggregates sum them exactly). The
//! streaming path refreshes a user after each accepted event, once the aggregates of its days
//! are rebuilt; the batch path (a strategy change) recomputes every user of the app. Concurrent
//! writers converge: after writing a profile, a refresh reads the user's days' fingerprints
//! again and recomputes if one changed. The batch path skips profiles already computed with the
//! current strategy and writes the others in batches, stamped with the time it started reading:
//! a streaming refresh stamps its profile later (from events at least as fresh), so the newest
//! cell wins in whichever order the writes land.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use penchant_store::{
    GcRule, Mutation, ReadRows, Row, RowFilter, RowMutation, RowSet, Store, Workload, for_workload,
};
use serde::{Deserialize, Serialize};

use crate::aggregates::{self, AGGREGATES_TABLE, day_of};
use crate::events::{self, EVENTS_TABLE, qualifier, user_prefix};
use crate::layout::app_prefix;
use crate::strategy::{Strategies, Strategy, Versioned};
use crate::tenancy::Tenancy;
use crate::{EngineError, Result};

pub const PROFILES_TABLE: &str = "profiles";
const FAMILY: &str = "p";
const PROFILE: &[u8] = b"profile";
const VERSION: &[u8] = b"version";
const DELETED_UNTIL: &[u8] = b"deletedUntil";
/// Users a recompute writes at once.
const RECOMPUTE_CHUNK: usize = 64;
/// Values kept per facet.
pub const MAX_VALUES_PER_FACET: usize = 100;
/// The highest score.
pub const MAX_SCORE: u64 = 20;

/// The tables this module needs.
pub fn tables() -> Vec<(&'static str, BTreeMap<String, GcRule>)> {
    vec![(
        PROFILES_TABLE,
        BTreeMap::from([(FAMILY.to_owned(), GcRule::MaxVersions(1))]),
    )]
}

/// Scores per facet and value, 1..20.
pub type Scores = BTreeMap<String, BTreeMap<String, u32>>;

/// A user's profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    pub user_token: String,
    /// The user's latest counted event, in ms.
    pub last_event_at: Option<i64>,
    pub scores: Scores,
}

/// The wide-schema qualifiers a strategy reads, with the weight of each: event score × facet
/// score, and the facet.
fn weights(strategy: &Strategy) -> HashMap<Bytes, (u64, String)> {
    let mut out = HashMap::new();
    for e in &strategy.events_scoring {
        for f in &strategy.facets_scoring {
            out.insert(
                qualifier(e.event_type, &e.event_name, &f.facet_name),
                (
                    u64::from(e.score) * u64::from(f.score),
                    f.facet_name.clone(),
                ),
            );
        }
    }
    out
}

/// The filter reading what a strategy needs of a row: its qualifiers, and a marker cell without
/// its value (every row has one: it gives the row's time even when no qualifier matches).
fn strategy_filter(strategy: &Strategy, family: &str, marker: &'static [u8]) -> RowFilter {
    let qualifiers: Vec<Bytes> = weights(strategy).into_keys().collect();
    let marker = RowFilter::column(family, marker).and(RowFilter::StripValue);
    if qualifiers.is_empty() {
        marker
    } else {
        RowFilter::Interleave(vec![RowFilter::qualifiers(qualifiers), marker])
    }
}

/// What a strategy needs of a user's raw events (marker: each event's `event` cell).
fn read_filter(strategy: &Strategy) -> RowFilter {
    strategy_filter(strategy, events::FAMILY, events::EVENT_COLUMN)
}

/// The event time of a row, in ms (its cells carry it).
fn row_time(row: &Row) -> Option<i64> {
    row.cells.first().map(|c| c.timestamp / 1000)
}

/// Compute a profile from a user's event rows (as read with [`read_filter`]), counting the
/// events after `deleted_until` and from `since` on (the app's retention window), both in ms.
pub fn compute(
    strategy: &Strategy,
    user: &str,
    rows: &[Row],
    deleted_until: i64,
    since: i64,
) -> Profile {
    Scorer::new(strategy).compute(user, rows, deleted_until, since)
}

/// A strategy's weights per qualifier, built once and used for every user of a recompute.
#[derive(Debug)]
pub struct Scorer {
    weights: HashMap<Bytes, (u64, String)>,
}

impl Scorer {
    pub fn new(strategy: &Strategy) -> Self {
        Self {
            weights: weights(strategy),
        }
    }

    /// [`compute`] with this scorer's strategy.
    pub fn compute(&self, user: &str, rows: &[Row], deleted_until: i64, since: i64) -> Profile {
        let weights = &self.weights;
        // Facet values borrow from the rows' JSON where it has no escapes (nearly always).
        let mut raw: BTreeMap<&str, BTreeMap<Cow<'_, str>, u64>> = BTreeMap::new();
        let mut last_event_at = None;
        for row in rows {
            let Some(ts) = row_time(row) else { continue };
            if ts <= deleted_until || ts < since {
                continue;
            }
            last_event_at = last_event_at.max(Some(ts));
            for cell in &row.cells {
                let Some((weight, facet)) = weights.get(&cell.qualifier) else {
                    continue;
                };
                let Ok(Counts(counts)) = serde_json::from_slice::<Counts<'_>>(&cell.value) else {
                    continue;
                };
                let values = raw.entry(facet.as_str()).or_default();
                for (value, n) in counts {
                    *values.entry(value).or_default() += weight * n;
                }
            }
        }
        let best = raw
            .values()
            .flat_map(|v| v.values())
            .copied()
            .max()
            .unwrap_or(0);
        let scores = raw
            .into_iter()
            .map(|(facet, values)| {
                let mut ranked: Vec<(Cow<'_, str>, u64)> = values.into_iter().collect();
                ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                ranked.truncate(MAX_VALUES_PER_FACET);
                let scaled = ranked
                    .into_iter()
                    .map(|(value, r)| {
                        let score = ((MAX_SCORE * r + best / 2) / best).clamp(1, MAX_SCORE);
                        (value.into_owned(), score as u32)
                    })
                    .collect();
                (facet.to_owned(), scaled)
            })
            .collect();
        Profile {
            user_token: user.to_owned(),
            last_event_at,
            scores,
        }
    }
}

/// The timestamp (µs, whole ms) a batch under `strategy` stamps its profiles with: later than
/// the strategy's save (profiles computed before it lose) and earlier than any read of the
/// batch (refreshes that start after the batch's reads win). It waits for the clock to pass the
/// stamp before returning, so that the batch's reads come after it.
async fn batch_stamp(strategy: &Versioned) -> i64 {
    let now_ms = || penchant_store::validate::now_micros() / 1000;
    // Versions are nanoseconds at the save (see `strategy::new_version`).
    let stamp = (now_ms() - 1).max(strategy.version / 1_000_000 + 1);
    while now_ms() <= stamp {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    stamp * 1000
}

/// A cell's counts, `{"value": n, ...}`, with the values borrowed from the JSON where they
/// have no escapes: a recompute decodes millions of them.
struct Counts<'a>(Vec<(Cow<'a, str>, u64)>);

impl<'de> Deserialize<'de> for Counts<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Key<'a>(Cow<'a, str>);
        impl<'de> Deserialize<'de> for Key<'de> {
            fn deserialize<D: serde::Deserializer<'de>>(
                d: D,
            ) -> std::result::Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = Key<'de>;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("a string")
                    }
                    fn visit_borrowed_str<E>(
                        self,
                        v: &'de str,
                    ) -> std::result::Result<Key<'de>, E> {
                        Ok(Key(Cow::Borrowed(v)))
                    }
                    fn visit_str<E>(self, v: &str) -> std::result::Result<Key<'de>, E> {
                        Ok(Key(Cow::Owned(v.to_owned())))
                    }
                }
                d.deserialize_str(V)
            }
        }
        struct Map;
        impl<'de> serde::de::Visitor<'de> for Map {
            type Value = Counts<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of counts")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Counts<'de>, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(2));
                while let Some((Key(k), n)) = map.next_entry::<Key<'de>, u64>()? {
                    out.push((k, n));
                }
                Ok(Counts(out))
            }
        }
        d.deserialize_map(Map)
    }
}

/// What a user's days hold: each aggregate row's key and fingerprint (`_print`).
fn prints(days: &[Row]) -> Vec<(&[u8], Option<&[u8]>)> {
    days.iter()
        .map(|r| {
            let print = r.latest(aggregates::FAMILY, aggregates::PRINT);
            (&r.key[..], print.map(|c| &c.value[..]))
        })
        .collect()
}

fn profile_row(app: &str, user: &str) -> Bytes {
    let mut key = app_prefix(app);
    key.extend_from_slice(user.as_bytes());
    Bytes::from(key)
}

/// What is stored about a user besides their events.
#[derive(Debug, Default)]
struct Stored {
    profile: Option<Profile>,
    version: Option<i64>,
    deleted_until: i64,
}

impl Stored {
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
        })
    }
}

fn corrupt(e: impl std::fmt::Display) -> EngineError {
    EngineError::Invalid(format!("corrupt profile: {e}"))
}

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

    /// The rows of the range, in a table keyed `app 0x00 | user 0x00 | ...`.
    pub fn rows(&self, app: &str) -> penchant_store::RowRange {
        use std::ops::Bound;
        let prefix = app_prefix(app);
        let at = |user: &str, tail: &[u8]| {
            let mut k = prefix.clone();
            k.extend_from_slice(user.as_bytes());
            k.extend_from_slice(tail);
            Bytes::from(k)
        };
        // User tokens never contain bytes below 0x2b: `user 0x01` is past every row of `user`
        // and before every other user's.
        let start = match (&self.after, &self.start) {
            (Some(after), _) => Bound::Included(at(after, b"\x01")),
            (None, Some(start)) => Bound::Included(at(start, b"")),
            (None, None) => Bound::Included(Bytes::from(prefix.clone())),
        };
        let end = match &self.end {
            Some(end) => Bound::Excluded(at(end, b"")),
            None => match penchant_store::prefix_successor(&prefix) {
                Some(e) => Bound::Excluded(Bytes::from(e)),
                None => Bound::Unbounded,
            },
        };
        penchant_store::RowRange { start, end }
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

/// What a strategy needs of aggregate rows (marker: each day's `_last` cell).
fn aggregate_filter(strategy: &Strategy) -> RowFilter {
    strategy_filter(strategy, aggregates::FAMILY, aggregates::LAST)
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

/// Profiles of every app.
#[derive(Debug, Clone)]
pub struct Profiles {
    store: Arc<dyn Store>,
    strategies: Arc<Strategies>,
    tenancy: Arc<Tenancy>,
}

impl Profiles {
    pub fn new(store: Arc<dyn Store>, strategies: Arc<Strategies>, tenancy: Arc<Tenancy>) -> Self {
        Self {
            store,
            strategies,
            tenancy,
        }
    }

    /// The oldest event time (ms) that counts for the app: its retention window.
    async fn window_start(&self, app: &str) -> Result<i64> {
        let retention = self.tenancy.retention(app).await?;
        Ok(penchant_store::validate::now_micros() / 1000 - retention.as_millis() as i64)
    }

    async fn stored(&self, app: &str, user: &str) -> Result<Stored> {
        match self
            .store
            .read_row(PROFILES_TABLE, profile_row(app, user), None)
            .await?
        {
            Some(row) => Stored::from_row(&row),
            None => Ok(Stored::default()),
        }
    }

    /// A user's rows of `table` (raw events, or per-day aggregates), filtered.
    async fn read_user(
        &self,
        table: &str,
        app: &str,
        user: &str,
        filter: RowFilter,
    ) -> Result<Vec<Row>> {
        let request =
            ReadRows::new(RowSet::prefix(Bytes::from(user_prefix(app, user)))).filter(filter);
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

    /// Recompute one user's profile under the app's current strategy and store it (the
    /// streaming path, after each event, once the aggregates of its days are rebuilt). `None`
    /// when the app has no strategy.
    ///
    /// It reads what a batch recompute reads — the user's per-day aggregates, and the raw events
    /// of a day a deletion or the retention window cuts — so its cost follows the user's active
    /// days, not their events. After writing, it reads the days' fingerprints again and starts
    /// over if another node rebuilt one meanwhile.
    pub async fn refresh(&self, app: &str, user: &str) -> Result<Option<Profile>> {
        let Some(strategy) = self.strategies.get(app).await? else {
            return Ok(None);
        };
        let scorer = Scorer::new(&strategy.strategy);
        let print = RowFilter::column(aggregates::FAMILY, aggregates::PRINT);
        let filter =
            RowFilter::Interleave(vec![aggregate_filter(&strategy.strategy), print.clone()]);
        let mut profile = None;
        // Converges unless events keep arriving for this user; each round sees more of them.
        for _ in 0..8 {
            let stored = self.stored(app, user).await?;
            let days = self
                .read_user(AGGREGATES_TABLE, app, user, filter.clone())
                .await?;
            let since = self.window_start(app).await?;
            let cut = self
                .cut_days(app, user, &days, &strategy, &stored, since)
                .await?;
            let rows = cut.as_deref().unwrap_or(&days);
            let computed = scorer.compute(user, rows, stored.deleted_until, since);
            self.store
                .mutate_row(
                    PROFILES_TABLE,
                    profile_row(app, user),
                    Self::profile_mutations(&computed, strategy.version, None)?,
                )
                .await?;
            profile = Some(computed);
            let again = self
                .read_user(AGGREGATES_TABLE, app, user, print.clone())
                .await?;
            if prints(&again) == prints(&days) {
                break;
            }
        }
        Ok(profile)
    }

    /// A user's profile: as stored if it was computed with the current strategy, else
    /// recomputed now. `None` for a user without counted events.
    pub async fn get(&self, app: &str, user: &str) -> Result<Option<Profile>> {
        let Some(strategy) = self.strategies.get(app).await? else {
            return Ok(None);
        };
        let stored = self.stored(app, user).await?;
        let profile = match (stored.profile, stored.version) {
            (Some(p), Some(v)) if v == strategy.version => Some(p),
            _ => self.refresh(app, user).await?,
        };
        Ok(profile.filter(|p| p.last_event_at.is_some()))
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
        let rows = self
            .read_user(EVENTS_TABLE, app, user, read_filter(&strategy.strategy))
            .await?;
        let since = self.window_start(app).await?;
        Ok(Some(compute(
            &strategy.strategy,
            user,
            &rows,
            stored.deleted_until,
            since,
        )))
    }

    /// Forget a user's events up to `until` (ms, inclusive): they no longer count, from now on.
    pub async fn delete_profile(&self, app: &str, user: &str, until: i64) -> Result<()> {
        self.store
            .mutate_row(
                PROFILES_TABLE,
                profile_row(app, user),
                vec![Mutation::set_now(FAMILY, DELETED_UNTIL, until.to_string())],
            )
            .await?;
        self.refresh(app, user).await?;
        Ok(())
    }

    /// Delete every trace of a user: events, aggregates, seen filter and profile.
    pub async fn delete_user(&self, app: &str, user: &str) -> Result<()> {
        // Rows are listed with every cell's value stripped, and deleted row by row (Bigtable's
        // DropRowRange is an admin operation, not meant for per-user traffic).
        let prefix = Bytes::from(user_prefix(app, user));
        for table in [EVENTS_TABLE, AGGREGATES_TABLE, crate::seen::SEEN_TABLE] {
            let keys = ReadRows::new(RowSet::prefix(prefix.clone()))
                .filter(RowFilter::StripValue.and(RowFilter::CellsPerRowLimit(1)));
            let rows = self.store.read_all(table, keys).await?;
            for chunk in rows.chunks(1000) {
                let entries = chunk
                    .iter()
                    .map(|r| RowMutation::new(r.key.clone(), vec![Mutation::DeleteFromRow]))
                    .collect();
                for status in self.store.mutate_rows(table, entries).await? {
                    status?;
                }
            }
        }
        self.store
            .mutate_row(
                PROFILES_TABLE,
                profile_row(app, user),
                vec![Mutation::DeleteFromRow],
            )
            .await?;
        Ok(())
    }

    /// Recompute every profile of an app under `strategy` (the batch path): up to
    /// `parallelism` ranges of users at once (see [`Profiles::plan_ranges`]), then the profiles
    /// of users without events. Jobs run the same with checkpoints ([`Profiles::recompute_range`],
    /// [`Profiles::recompute_stale`]).
    pub async fn recompute_all(
        &self,
        app: &str,
        strategy: &Versioned,
        source: Source,
        parallelism: usize,
    ) -> Result<RecomputeStats> {
        let ranges = self.plan_ranges(app, parallelism).await?;
        let tasks: Vec<_> = ranges
            .into_iter()
            .map(|range| {
                let (this, app, strategy) = (self.clone(), app.to_owned(), strategy.clone());
                tokio::spawn(async move {
                    this.recompute_range(&app, &strategy, source, &range, |_, _| true)
                        .await
                })
            })
            .collect();
        let mut stats = RecomputeStats::default();
        for task in tasks {
            // A range's panic is this call's panic.
            let range = task
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
            stats.events += range.events;
            stats.users += range.users;
            stats.skipped += range.skipped;
        }
        let stale = self.recompute_stale(app, strategy).await?;
        stats.users += stale.users;
        Ok(stats)
    }

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
        let stamp = batch_stamp(strategy).await;
        let (table, filter) = match source {
            Source::Raw => (EVENTS_TABLE, read_filter(&strategy.strategy)),
            Source::Aggregates => (AGGREGATES_TABLE, aggregate_filter(&strategy.strategy)),
        };
        let request = ReadRows::new(RowSet::range(range.rows(app))).filter(filter);
        let mut stream = store.read_rows(table, request).await?;
        let prefix_len = app_prefix(app).len();
        let mut stats = RecomputeStats::default();
        let mut current: Option<(String, Vec<Row>)> = None;
        // Users are written a chunk at a time, concurrently (a durable store commits their
        // writes as a group); progress is reported after each chunk, at its last user.
        let mut chunk: Vec<(String, Vec<Row>)> = Vec::with_capacity(RECOMPUTE_CHUNK);
        loop {
            let next = stream.next().await.transpose()?;
            let user = next.as_ref().and_then(|row| {
                let rest = row.key.get(prefix_len..)?;
                let end = rest.iter().position(|b| *b == 0)?;
                Some(String::from_utf8_lossy(&rest[..end]).into_owned())
            });
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
        let stamp = batch_stamp(strategy).await;
        let prefix_len = app_prefix(app).len();
        let request = ReadRows::new(RowSet::prefix(Bytes::from(app_prefix(app))))
            .filter(RowFilter::column(FAMILY, VERSION));
        let mut profiles = store.read_rows(PROFILES_TABLE, request).await?;
        let mut stats = RecomputeStats::default();
        let mut chunk = Vec::new();
        loop {
            let row = profiles.next().await.transpose()?;
            if let Some(row) = &row {
                let fresh = row
                    .latest(FAMILY, VERSION)
                    .is_some_and(|c| c.value == strategy.version.to_string().as_bytes());
                if !fresh {
                    let user = String::from_utf8_lossy(&row.key[prefix_len..]).into_owned();
                    let rows = self
                        .read_user(EVENTS_TABLE, app, &user, read_filter(&strategy.strategy))
                        .await?;
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
        let prefix = app_prefix(app);
        let mut users: Vec<String> = samples
            .iter()
            .filter_map(|s| {
                let rest = s.row_key.strip_prefix(prefix.as_slice())?;
                let end = rest.iter().position(|b| *b == 0)?;
                Some(String::from_utf8_lossy(&rest[..end]).into_owned())
            })
            .collect();
        users.dedup();
        Ok(UserRange::split(&users, n))
    }

    /// Aggregate rows of a user, with the days a deletion or the retention window (from
    /// `since`, ms) cuts replaced by their raw events (an aggregate counts the whole day).
    /// `None` when no day is cut.
    async fn cut_days(
        &self,
        app: &str,
        user: &str,
        rows: &[Row],
        strategy: &Versioned,
        stored: &Stored,
        since: i64,
    ) -> Result<Option<Vec<Row>>> {
        let mut cut = vec![day_of(since)];
        if stored.deleted_until > i64::MIN {
            cut.push(day_of(stored.deleted_until));
        }
        let day = |row: &Row| {
            let bytes: [u8; 4] = row
                .key
                .get(row.key.len().saturating_sub(4)..)?
                .try_into()
                .ok()?;
            Some(i64::from(u32::from_be_bytes(bytes)))
        };
        // A day without an aggregate has no raw events either (aggregates are rebuilt after
        // every raw write, and expire with their day's last event).
        cut.retain(|d| rows.iter().any(|r| day(r) == Some(*d)));
        if cut.is_empty() {
            return Ok(None);
        }
        let mut out: Vec<Row> = rows
            .iter()
            .filter(|r| day(r).is_some_and(|d| !cut.contains(&d)))
            .cloned()
            .collect();
        for d in cut {
            let request = ReadRows::new(aggregates::raw_day(app, user, d))
                .filter(read_filter(&strategy.strategy));
            out.extend(self.store.read_all(EVENTS_TABLE, request).await?);
        }
        Ok(Some(out))
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
        let store = for_workload(&self.store, Workload::Batch);
        let keys = users.iter().map(|(u, _)| profile_row(app, u));
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
            let key = profile_row(app, user);
            let stored = stored.remove(&key).unwrap_or_default();
            if stored.version == Some(strategy.version) {
                continue;
            }
            let cut;
            let rows = match source {
                Source::Raw => rows,
                Source::Aggregates => {
                    cut = self
                        .cut_days(app, user, rows, strategy, &stored, since)
                        .await?;
                    cut.as_deref().unwrap_or(rows)
                }
            };
            let profile = scorer.compute(user, rows, stored.deleted_until, since);
            let mutations = Self::profile_mutations(&profile, strategy.version, Some(stamp))?;
            entries.push(RowMutation::new(key, mutations));
        }
        let wrote = entries.len() as u64;
        if !entries.is_empty() {
            for status in store.mutate_rows(PROFILES_TABLE, entries).await? {
                status?;
            }
        }
        Ok((wrote, users.len() as u64 - wrote))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_borrow_plain_values_and_own_escaped_ones() {
        let json = br#"{"Drama": 2, "Sci\"Fi": 1, "caf\u00e9": 3}"#;
        let Counts(counts) = serde_json::from_slice(json).unwrap();
        assert_eq!(
            counts,
            vec![
                (Cow::Borrowed("Drama"), 2),
                (Cow::Owned("Sci\"Fi".into()), 1),
                (Cow::Owned("café".into()), 3)
            ]
        );
        assert!(matches!(counts[0].0, Cow::Borrowed(_)));
        assert!(matches!(counts[1].0, Cow::Owned(_)));
        assert!(serde_json::from_slice::<Counts<'_>>(b"[1]").is_err());
    }
}
