//! Per-user, per-day aggregates of raw events, so that a profile reads one row per user and
//! active day instead of one per event. Raw events stay the source of truth: a day's aggregate
//! sums them exactly, and can always be rebuilt from them.
//!
//! Table `aggregates`, families `a` and `h` (the raw events' retention), row [`keys::day`]
//! `app 0 · user 0 · day (u32 BE, days since the epoch)`. Cells:
//!
//! | qualifier | value | timestamp |
//! |---|---|---|
//! | `CSV(type, name, facet)` (the base) | the folded events' counts, `{"value": n}` | the latest folded event |
//! | `CSV(type, name, facet) · 0xFF · event id` (a delta, [`keys::aggregate_delta`]) | one event's counts | the event's |
//! | `_last` | the event's time (ms); a version per event until a fold keeps the newest | the event's |
//! | `v` | the fold version | when folded |
//! | `h:` batch id (u64 BE) (a hold, [`HOLDS`]) | none: a batch in flight holds some of the deltas | the row's newest in that write |
//!
//! **Per-event cost independent of history.** Ingesting an event writes its deltas — a few small
//! cells, no read — in one write with every other event of the batch, whichever users they are
//! for. Readers sum base and deltas (the qualifier filter of a strategy selects both, see
//! [`qualifiers_filter`]). Now and then ([`FOLD_EVERY`]: an event whose id hashes to it) the
//! ingest folds the row: it reads it, sums the deltas into the base and deletes them, in one
//! conditional write on `v` — a fold that lost a race to another changes nothing and is simply
//! skipped. So a day's row holds its distinct qualifiers plus a handful of deltas, and an event
//! costs the same for a new user and for one with 100,000 events today.
//!
//! **Exact under retries and several nodes.** A delta is named by its event (a rewrite of the
//! same event writes the same cell); an event whose raw row exists already adds no delta
//! ([`crate::events::Events::prepare`]); deltas of different events commute, whichever node
//! writes them; and a fold deletes exactly the deltas it summed. A fold leaves out the deltas of
//! batches still in flight (their hold cells, [`hold`]), so a later attempt of a batch or the
//! repair writes them again ([`Aggregates::recount`]) without counting one twice. The rebuild
//! from raw rows ([`Aggregates::rebuild_day`], for a settlement of waiting events, or an
//! attempt stalled past the repair) turns the base back into one delta per raw event — the same
//! cells the ingestion writes, so a delta still in flight lands on its own copy instead of
//! being counted twice.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{Mutation, ReadRows, Row, RowMutation, RowSet, Store, TimeRange};

use crate::events::{self, Event, Layout, Stored};
use crate::writes::{VERSION, write_if_version};
use crate::{EngineError, Result, keys};
use penchant_model::tables::EVENTS_TABLE;
pub use penchant_model::tables::{
    AGGREGATES, AGGREGATES_FAMILY as FAMILY, AGGREGATES_HOLDS as HOLDS, AGGREGATES_TABLE,
};

pub use penchant_model::aggregates::{LAST, marker, qualifiers_filter};
pub use penchant_model::days::{DAY_MS, day_of};
/// A day row whose profile read shows this many deltas is folded after the read
/// ([`crowded`]).
pub const FOLD_AT: usize = 32;
/// One event in this many (by its id's hash) folds its day's deltas as it is added: the
/// fold of last resort, for rows whose deltas no profile reads (facets or events the strategy
/// does not weigh).
pub const FOLD_EVERY: u64 = 256;
/// Attempts of a rebuild that keeps losing races to folds.
const ATTEMPTS: usize = 8;
/// Deltas a rebuild writes in one row mutation.
const REBUILD_CHUNK: usize = 20_000;

/// Whether the event of this row key folds its day's deltas when it is added (one in
/// [`FOLD_EVERY`]).
pub fn folds_day(event_key: &[u8]) -> bool {
    xxhash_rust::xxh3::xxh3_64(event_key).is_multiple_of(FOLD_EVERY)
}

/// The day rows of a profile's read holding [`FOLD_AT`] deltas or more: worth folding.
pub fn crowded(rows: &[Row]) -> impl Iterator<Item = Bytes> + '_ {
    rows.iter()
        .filter(|r| {
            r.family(FAMILY)
                .filter(|c| keys::aggregate_delta_base(&c.qualifier).is_some())
                .nth(FOLD_AT - 1)
                .is_some()
        })
        .map(|r| r.key.clone())
}

/// The raw event rows of one user's day.
pub fn raw_day(app: &str, user: &str, day: i64) -> RowSet {
    keys::events_between(app, user, day * DAY_MS, (day + 1) * DAY_MS)
}

fn json(counts: &impl serde::Serialize) -> Result<Vec<u8>> {
    serde_json::to_vec(counts).map_err(|e| crate::internal("serialization", e))
}

fn corrupt(e: impl std::fmt::Display) -> EngineError {
    crate::internal("corrupt aggregate cell", e)
}

/// Counts per qualifier, summed.
#[derive(Debug, Default)]
struct Sums {
    counts: BTreeMap<Bytes, BTreeMap<String, u64>>,
    last: Option<i64>,
}

impl Sums {
    fn add(&mut self, qualifier: &[u8], value: &[u8], timestamp: i64) -> Result<()> {
        let counts: BTreeMap<String, u64> = serde_json::from_slice(value).map_err(corrupt)?;
        self.add_counts(Bytes::copy_from_slice(qualifier), counts);
        self.last = self.last.max(Some(timestamp));
        Ok(())
    }

    fn add_counts(&mut self, qualifier: Bytes, counts: BTreeMap<String, u64>) {
        let sum = self.counts.entry(qualifier).or_default();
        for (value, n) in counts {
            *sum.entry(value).or_default() += n;
        }
    }

    /// The row mutations that make these sums a row's base, replacing `old` (its columns as
    /// read: each is deleted, so that no second version of a column remains). `_last` is the one
    /// column events write unconditionally: only its versions older than the sums' are deleted,
    /// so the version of an event added since the row was read stays.
    fn into_base(self, old: &[Bytes]) -> Result<Vec<Mutation>> {
        let mut mutations: Vec<Mutation> = old
            .iter()
            .filter(|q| &q[..] != LAST || self.last.is_none())
            .map(|q| Mutation::delete_column(FAMILY, q.clone()))
            .collect();
        if let Some(ts) = self.last {
            mutations.push(Mutation::DeleteFromColumn {
                family: FAMILY.to_owned(),
                qualifier: Bytes::from_static(LAST),
                range: TimeRange {
                    start: None,
                    end: Some(ts),
                },
            });
            for (qualifier, counts) in &self.counts {
                mutations.push(Mutation::set(FAMILY, qualifier.clone(), ts, json(counts)?));
            }
            mutations.push(Mutation::set(FAMILY, LAST, ts, (ts / 1000).to_string()));
        }
        Ok(mutations)
    }
}

/// The fold version of a row (0: never folded).
fn version(row: Option<&Row>) -> u64 {
    row.and_then(|r| r.latest(FAMILY, VERSION))
        .and_then(|c| std::str::from_utf8(&c.value).ok()?.parse().ok())
        .unwrap_or(0)
}

/// The distinct columns of a row but its version.
fn columns(row: Option<&Row>) -> Vec<Bytes> {
    let mut out: Vec<Bytes> = row
        .into_iter()
        .flat_map(|r| r.family(FAMILY))
        .filter(|c| c.qualifier != VERSION)
        .map(|c| c.qualifier.clone())
        .collect();
    out.dedup();
    out
}

/// Cells to write: qualifier and value.
type Cells = Vec<(Bytes, Vec<u8>)>;

/// A raw event row's time (µs, every cell's) and its deltas, a cell per facet counted; `None`
/// for a row with no cell.
fn raw_deltas(layout: Layout, raw_row: &Row) -> Result<Option<(i64, Cells)>> {
    let Some(ts) = raw_row.cells.first().map(|c| c.timestamp) else {
        return Ok(None);
    };
    let mut deltas = Vec::new();
    if let Some((event_type, name, counts)) = layout.read_counts(raw_row)? {
        for (facet, values) in counts {
            let q = events::qualifier(event_type, &name, &facet);
            deltas.push((keys::aggregate_delta(&q, &raw_row.key), json(&values)?));
        }
    }
    Ok(Some((ts, deltas)))
}

/// The deltas of newly stored events, a row per day, and the days to fold after them.
#[derive(Debug, Default)]
pub struct Deltas {
    pub rows: Vec<RowMutation>,
    pub folds: Vec<Bytes>,
}

/// The deltas of these newly stored events ([`Aggregates::add`] writes them).
pub fn deltas(app: &str, stored: &[Stored<'_>]) -> Result<Deltas> {
    let mut rows: BTreeMap<Bytes, Vec<Mutation>> = BTreeMap::new();
    let mut folds = Vec::new();
    for s in stored {
        let ts = s.event.timestamp * 1000;
        let day = keys::day(app, s.event.user(), day_of(s.event.timestamp));
        let cells = rows.entry(day.clone()).or_default();
        for (facet, counts) in &s.counts {
            let q = events::qualifier(s.event.event_type, &s.event.event_name, facet);
            let delta = keys::aggregate_delta(&q, &s.key);
            cells.push(Mutation::set(FAMILY, delta, ts, json(counts)?));
        }
        cells.push(Mutation::set(
            FAMILY,
            LAST,
            ts,
            s.event.timestamp.to_string(),
        ));
        if folds_day(&s.key) {
            folds.push(day);
        }
    }
    let rows = rows
        .into_iter()
        .map(|(key, cells)| RowMutation::new(key, cells))
        .collect();
    Ok(Deltas { rows, folds })
}

/// Add to each day row's write of deltas the hold cell of their batch: family [`HOLDS`],
/// qualifier the batch id (u64 BE), no value, stamped like the row's newest cell. While the
/// batch's intent lists the events, folds of the row leave their deltas as they are, so that the
/// batch's other attempts and the repair may write them again; the first fold after the intent
/// is gone folds them and deletes the cell. In the row's own write, so a fold that sees a held
/// delta sees its hold.
fn hold(rows: &mut [RowMutation], batch: u64) {
    for row in rows {
        let newest = row
            .mutations
            .iter()
            .filter_map(|m| match m {
                Mutation::SetCell {
                    timestamp: penchant_store::Timestamp::Micros(ts),
                    ..
                } => Some(*ts),
                _ => None,
            })
            .max();
        if let Some(ts) = newest {
            let qualifier = batch.to_be_bytes().to_vec();
            row.mutations
                .push(Mutation::set(HOLDS, qualifier, ts, Bytes::new()));
        }
    }
}

/// Counters of the changes this node made to users' aggregate rows, for a node that is the
/// only one on its store: a profile refresh that saw no counter of its users move between its
/// read and its write knows its profile is the newest without reading the rows again
/// ([`crate::profiles::Profiles::refresh_many`]). A counter is shared by the users hashing to
/// it (one in [`COUNTERS`]): a collision costs a read, never a stale profile.
///
/// Every write that changes what a user's aggregates sum to bumps the user's counter once it is
/// written: deltas, rebuilds, deletions. A fold does not (the sums stay).
#[derive(Debug)]
pub struct LocalChanges {
    counters: Box<[std::sync::atomic::AtomicU32]>,
}

/// Counters of [`LocalChanges`] (4 bytes each).
const COUNTERS: usize = 1 << 18;

impl Default for LocalChanges {
    fn default() -> Self {
        Self {
            counters: (0..COUNTERS).map(|_| Default::default()).collect(),
        }
    }
}

impl LocalChanges {
    fn counter(&self, app: &str, user: &str) -> &std::sync::atomic::AtomicU32 {
        let hash = xxhash_rust::xxh3::xxh3_64(&keys::user(app, user));
        &self.counters[(hash % COUNTERS as u64) as usize]
    }

    /// Some users' aggregates changed (after the change is written).
    pub fn bump<'u>(&self, app: &str, users: impl IntoIterator<Item = &'u str>) {
        for user in users {
            self.counter(app, user)
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A user's counter now.
    pub fn read(&self, app: &str, user: &str) -> u32 {
        self.counter(app, user)
            .load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Aggregates of every app.
#[derive(Debug, Clone)]
pub struct Aggregates {
    store: Arc<dyn Store>,
    local: Option<Arc<LocalChanges>>,
}

impl Aggregates {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store, local: None }
    }

    /// Bump `changes` after every write that changes a user's sums (this node is the only one
    /// on its store).
    pub fn with_local_changes(mut self, changes: Arc<LocalChanges>) -> Self {
        self.local = Some(changes);
        self
    }

    fn changed<'u>(&self, app: &str, users: impl IntoIterator<Item = &'u str>) {
        if let Some(local) = &self.local {
            local.bump(app, users);
        }
    }

    /// A user's counts over every day, bases and deltas summed, per qualifier (a check's view:
    /// a profile reads only its strategy's qualifiers).
    pub async fn counts(
        &self,
        app: &str,
        user: &str,
    ) -> Result<BTreeMap<Bytes, BTreeMap<String, u64>>> {
        let request = ReadRows::new(RowSet::prefix(keys::user(app, user)));
        let mut sums = Sums::default();
        for row in self.store.read_all(AGGREGATES_TABLE, request).await? {
            for cell in row.family(FAMILY) {
                if cell.qualifier == LAST || cell.qualifier == VERSION {
                    continue;
                }
                let qualifier =
                    keys::aggregate_delta_base(&cell.qualifier).unwrap_or(&cell.qualifier);
                sums.add(qualifier, &cell.value, cell.timestamp)?;
            }
        }
        Ok(sums.counts)
    }

    /// Add newly stored events of `batch` to their days' aggregates: their deltas, held while
    /// the batch is in flight ([`hold`]), in one write for the whole batch; then fold the days of
    /// the events chosen to ([`FOLD_EVERY`]).
    pub async fn add(&self, app: &str, batch: u64, stored: &[Stored<'_>]) -> Result<()> {
        let mut deltas = deltas(app, stored)?;
        hold(&mut deltas.rows, batch);
        let written = self.store.mutate_all(AGGREGATES_TABLE, deltas.rows).await;
        self.changed(app, stored.iter().map(|s| s.event.user()));
        written?;
        self.fold_days(deltas.folds).await
    }

    /// After the caller wrote these events' [`deltas`] (in an atomic write of its own): note
    /// the change, and fold the days of the events chosen to.
    pub async fn added(&self, app: &str, stored: &[Stored<'_>], folds: Vec<Bytes>) -> Result<()> {
        self.changed(app, stored.iter().map(|s| s.event.user()));
        self.fold_days(folds).await
    }

    async fn fold_days(&self, mut days: Vec<Bytes>) -> Result<()> {
        days.sort_unstable();
        days.dedup();
        let folds: Vec<_> = days.into_iter().map(|day| self.fold(day)).collect();
        crate::writes::concurrently(folds).await
    }

    /// Fold a day's deltas into its base, if no other fold changed the row meanwhile (then it
    /// leaves the row as it is: folding is an optimization, never owed). Deltas that a batch in
    /// flight holds stay deltas.
    pub async fn fold(&self, day: Bytes) -> Result<bool> {
        let row = self
            .store
            .read_row(AGGREGATES_TABLE, day.clone(), None)
            .await?;
        let cells = || row.iter().flat_map(|r| r.family(FAMILY));
        if !cells().any(|c| keys::aggregate_delta_base(&c.qualifier).is_some()) {
            return Ok(false);
        }
        let (held, done) = self.holds(&day, row.as_ref()).await?;
        let mut sums = Sums::default();
        let mut deltas = 0;
        let mut kept = HashSet::new();
        for cell in cells() {
            if cell.qualifier == LAST || cell.qualifier == VERSION {
                continue;
            }
            let qualifier = match keys::aggregate_delta_base(&cell.qualifier) {
                Some(_)
                    if keys::aggregate_delta_event(&cell.qualifier)
                        .is_some_and(|id| held.contains(id)) =>
                {
                    kept.insert(cell.qualifier.clone());
                    continue;
                }
                Some(base) => {
                    deltas += 1;
                    base
                }
                None => &cell.qualifier[..],
            };
            sums.add(qualifier, &cell.value, cell.timestamp)?;
        }
        if deltas == 0 {
            return Ok(false);
        }
        // The day's latest event: also those whose counts the strategy's facets left empty.
        let last = row.as_ref().and_then(|r| r.latest(FAMILY, LAST));
        sums.last = sums.last.max(last.map(|c| c.timestamp));
        let v = version(row.as_ref());
        let mut old = columns(row.as_ref());
        old.retain(|q| !kept.contains(q));
        let mut mutations = sums.into_base(&old)?;
        mutations.extend(done.into_iter().map(|q| Mutation::delete_column(HOLDS, q)));
        write_if_version(&*self.store, AGGREGATES_TABLE, day, FAMILY, v, mutations).await
    }

    /// The deltas of a day row that batches in flight hold — those its hold cells name, whose
    /// intents still list them ([`crate::pending::held_in`], read after the row: a delta the row
    /// holds was written after its intent) — and the hold cells of batches gone.
    async fn holds(&self, day: &[u8], row: Option<&Row>) -> Result<(HashSet<Bytes>, Vec<Bytes>)> {
        let (mut held, mut done) = (HashSet::new(), Vec::new());
        let Some((app, user)) = keys::app_and_user_of(day) else {
            return Ok((held, done));
        };
        let mut batches: Vec<&Bytes> = row
            .iter()
            .flat_map(|r| r.family(HOLDS))
            .map(|c| &c.qualifier)
            .collect();
        batches.dedup();
        let intents = batches.iter().map(|q| async move {
            match <[u8; 8]>::try_from(&q[..]) {
                Ok(id) => {
                    crate::pending::held_in(&*self.store, app, u64::from_be_bytes(id), user).await
                }
                Err(_) => Ok(None),
            }
        });
        for (q, ids) in batches
            .iter()
            .zip(futures::future::try_join_all(intents).await?)
        {
            match ids {
                Some(ids) => held.extend(ids),
                None => done.push((*q).clone()),
            }
        }
        Ok((held, done))
    }

    /// Write the deltas of these stored events of `batch` from their raw rows, the very cells
    /// their ingestion writes, held as it holds them ([`hold`]): the events of a batch whose
    /// deltas its intent holds, which the batch's later attempts and the repair write again
    /// since which of them were written is unknown. Returns the events read (rows that do not
    /// exist were never stored: nothing to count).
    pub async fn recount(
        &self,
        app: &str,
        batch: u64,
        layout: Layout,
        rows: &[Bytes],
    ) -> Result<Vec<Event>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        // Whole rows: the event, and its counts in the layout.
        let request = ReadRows::new(RowSet::keys(rows.iter().cloned()));
        let raw = self.store.read_all(EVENTS_TABLE, request).await?;
        let mut days: BTreeMap<Bytes, Vec<Mutation>> = BTreeMap::new();
        let mut stored = Vec::with_capacity(raw.len());
        for raw_row in &raw {
            let Some(event) = events::stored_event(raw_row)? else {
                continue;
            };
            if let Some((ts, deltas)) = raw_deltas(layout, raw_row)? {
                let day = keys::day(app, event.user(), day_of(ts / 1000));
                let cells = days.entry(day).or_default();
                cells.extend(
                    deltas
                        .into_iter()
                        .map(|(q, v)| Mutation::set(FAMILY, q, ts, v)),
                );
                cells.push(Mutation::set(FAMILY, LAST, ts, (ts / 1000).to_string()));
            }
            stored.push(event);
        }
        let mut rows: Vec<RowMutation> = days
            .into_iter()
            .map(|(key, cells)| RowMutation::new(key, cells))
            .collect();
        hold(&mut rows, batch);
        let written = self.store.mutate_all(AGGREGATES_TABLE, rows).await;
        self.changed(app, stored.iter().map(Event::user));
        written?;
        Ok(stored)
    }

    /// Rebuild one user's day from its raw events (finishing a batch that stopped half-way, or
    /// a retried one whose first attempt did: which of its deltas were written is unknown).
    ///
    /// The rebuilt row holds a delta for every raw event of the day and no base: the base is
    /// deleted, and the deltas it lacks are written — those of the events folded into the base,
    /// and those never written. A delta names its event and holds that event's counts, so an
    /// ingestion still writing the delta of an event this read counts writes the very same cell
    /// again (a no-op), and a delta written after the row was read stays. The first write is
    /// conditional on the fold version, so a fold that read the row before cannot write its
    /// base over the rebuild (nor the rebuild over a fold that read after it).
    ///
    /// The one interleaving this cannot absorb: an ingestion that wrote an event's raw row before
    /// this read and its delta only after this rebuild *and* a fold of the row — it would count
    /// twice. On one node the engine excludes it (ingestion and rebuild of a user never overlap,
    /// [`crate::locks::UserLocks`]); across nodes it needs a node stalled between its two
    /// writes while another rebuilds and folds the day.
    pub async fn rebuild_day(&self, app: &str, user: &str, day: i64, layout: Layout) -> Result<()> {
        let rebuilt = self.rebuild(app, user, day, layout).await;
        self.changed(app, [user]);
        rebuilt
    }

    async fn rebuild(&self, app: &str, user: &str, day: i64, layout: Layout) -> Result<()> {
        let key = keys::day(app, user, day);
        for _ in 0..ATTEMPTS {
            let row = self
                .store
                .read_row(AGGREGATES_TABLE, key.clone(), None)
                .await?;
            let request = ReadRows::new(raw_day(app, user, day)).filter(layout.all_filter());
            let raw = self.store.read_all(EVENTS_TABLE, request).await?;
            if row.is_none() && raw.is_empty() {
                return Ok(());
            }
            // Deltas already there stay, unless their event's counts changed since (an event
            // that gained an item whose record arrived late, [`events::waiting`]).
            let present: std::collections::HashMap<&[u8], &[u8]> = row
                .iter()
                .flat_map(|r| r.family(FAMILY))
                .filter(|c| keys::aggregate_delta_base(&c.qualifier).is_some())
                .map(|c| (&c.qualifier[..], &c.value[..]))
                .collect();
            // The base columns go; the version is bumped by the conditional write.
            let mut first: Vec<Mutation> = columns(row.as_ref())
                .into_iter()
                .filter(|q| &q[..] != LAST && keys::aggregate_delta_base(q).is_none())
                .map(|q| Mutation::delete_column(FAMILY, q))
                .collect();
            let mut deltas = Vec::new();
            let mut last: Option<i64> = None;
            for raw_row in &raw {
                let Some((ts, cells)) = raw_deltas(layout, raw_row)? else {
                    continue;
                };
                last = last.max(Some(ts));
                for (delta, value) in cells {
                    if present.get(&delta[..]) != Some(&&value[..]) {
                        deltas.push(Mutation::set(FAMILY, delta, ts, value));
                    }
                }
            }
            if let Some(ts) = last {
                first.push(Mutation::set(FAMILY, LAST, ts, (ts / 1000).to_string()));
                // The deltas of batches in flight among these: held as their own writes hold
                // them ([`hold`]). Their intents were written before their raw rows, so read
                // after them.
                let ids: HashSet<&[u8]> = raw.iter().map(|r| keys::event_id(&r.key)).collect();
                for (batch, held) in crate::pending::holding(&*self.store, app, user).await? {
                    if held.iter().any(|id| ids.contains(&id[..])) {
                        let qualifier = batch.to_be_bytes().to_vec();
                        first.push(Mutation::set(HOLDS, qualifier, ts, Bytes::new()));
                    }
                }
            }
            // Bigtable takes at most 100,000 mutations per row write: a bot's day is written in
            // several, the first one conditional. A crash in between leaves deltas missing, and
            // the batch's intent, so the repair rebuilds the day again.
            let rest = deltas.split_off(deltas.len().min(REBUILD_CHUNK));
            first.extend(deltas);
            let v = version(row.as_ref());
            if !write_if_version(
                &*self.store,
                AGGREGATES_TABLE,
                key.clone(),
                FAMILY,
                v,
                first,
            )
            .await?
            {
                continue;
            }
            let mut rest = rest.into_iter().peekable();
            while rest.peek().is_some() {
                let chunk: Vec<Mutation> = rest.by_ref().take(REBUILD_CHUNK).collect();
                self.store
                    .mutate_row(AGGREGATES_TABLE, key.clone(), chunk)
                    .await?;
            }
            return Ok(());
        }
        Err(EngineError::Unavailable(
            "too many concurrent updates of one day's aggregate; retry".into(),
        ))
    }
}
