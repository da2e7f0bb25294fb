//! Ingestion intents: what a batch of events still owes its users, so that a crash between
//! storing events and finishing their work cannot leave a profile without them.
//!
//! A batch's intent row (table `events`, row [`keys::intent`] `app 0 · 0xFF · batch id`, past
//! every user of the app) is written before its events: a cell per user, the qualifier the user
//! token, the value the days the batch touches for the user (u32 BE each). It comes first, in a
//! write of its own, because a store may apply a multi-row write in any order (Bigtable's
//! `MutateRows`): no event row may exist without the intent that would finish it. Once the
//! batch's aggregates, profiles and seen marks are written, the row is deleted. An intent row
//! still there afterwards is a batch that stopped half-way (a crash, a killed node):
//! [`Pending::left_behind`] lists its users, and the engine redoes their work — rebuild the
//! days' aggregates from their raw events (which deltas were written is unknown), refresh the
//! profile, mark the days' items seen — which is harmless to redo, every step being idempotent.
//!
//! **A retry in flight with its first attempt.** A batch's id is a hash of its events, so
//! every attempt of one request names the same intent row, and only one of them creates it
//! (a conditional write). Another attempt that finds the row there — the first one still in
//! flight, on this node or another, or left behind by a crash — waits for it to go: the first
//! attempt answered (or the repair finished it), so the events are stored and counted, and the
//! later attempt answers at once. If the row stays (a slow or dead first attempt), the later one marks it
//! ([`RETRIED`]) and counts nothing itself: it stores the raw events the first may not have
//! stored yet and rebuilds their days from the raw events. The first attempt reads its row
//! again once its deltas are written: marked, it rebuilds its days too — so a delta of its that
//! landed after the other attempt's rebuild and a fold of the day (which would count the event
//! twice) is folded into an exact rebuild; unmarked, the other's rebuild comes after its
//! deltas.
//!
//! On one node, [`UserLocks`] keep a user's rebuild apart from the ingestion of the user's
//! events: an ingestion holds its users' stripes shared from its raw write until its deltas are
//! written; a rebuild holds its user's stripe alone.
//!
//! **A batch written atomically** (a node alone on a store with atomic writes, the embedded
//! one): the intent goes in one write with the batch's events and deltas, with a [`COUNTED`]
//! cell listing the batch's event rows ([`Pending::counted`]). Such a batch is counted; all its
//! intent owes is its users' profile refresh and seen marks, which the repair redoes from those
//! rows alone ([`Intent::counted`]), and the row goes with its last user. Attempts of one
//! request take turns ([`Attempts`]), so a later one finds the events stored and writes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use penchant_store::{
    Mutation, ReadRows, RowFilter, RowMutation, RowSet, Store, TimeRange, Workload, for_workload,
};

use crate::aggregates::day_of;
use crate::clock::Clock;
use crate::events::{EVENTS_TABLE, Event, FAMILY};
use crate::{Result, keys};

/// The qualifier of the mark a second attempt of a batch leaves on the batch's intent: not
/// UTF-8, so never a user's.
const RETRIED: &[u8] = b"\xff";

/// The qualifier of the cell that says a batch is counted already (written atomically with its
/// events, [`Pending::counted`]); its value lists the batch's event row keys. Not UTF-8.
const COUNTED: &[u8] = b"\xfe";

/// The cells of an intent that name its users (not its [`COUNTED`] list nor its [`RETRIED`]
/// mark: a row whose users were all repaired is gone even if it was marked).
fn users_of_intent() -> RowFilter {
    RowFilter::ColumnRange {
        family: FAMILY.to_owned(),
        start: std::ops::Bound::Unbounded,
        end: std::ops::Bound::Excluded(Bytes::from_static(COUNTED)),
    }
}

/// Row keys, each with its length (u16 BE) first.
fn encode_keys<'k>(keys: impl IntoIterator<Item = &'k Bytes>) -> Vec<u8> {
    let mut out = Vec::new();
    for key in keys {
        out.extend_from_slice(&(key.len().min(usize::from(u16::MAX)) as u16).to_be_bytes());
        out.extend_from_slice(key);
    }
    out
}

fn decode_keys(mut bytes: &[u8]) -> Vec<Bytes> {
    let mut out = Vec::new();
    while let [a, b, rest @ ..] = bytes {
        let len = usize::from(u16::from_be_bytes([*a, *b])).min(rest.len());
        out.push(Bytes::copy_from_slice(&rest[..len]));
        bytes = &rest[len..];
    }
    out
}

/// The id of a request's batch of events: a hash of the app and the events, the same for every
/// attempt of the request.
pub fn batch_id(app: &str, events: &[Event]) -> Result<u64> {
    let json = serde_json::to_vec(events).map_err(|e| crate::internal("serialization", e))?;
    Ok(xxhash_rust::xxh3::xxh3_64_with_seed(
        &json,
        xxhash_rust::xxh3::xxh3_64(app.as_bytes()),
    ))
}

/// What [`Pending::record`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// The batch's id.
    pub batch: u64,
    /// Whether this attempt recorded the intent (else another attempt had, and this one marked
    /// it).
    pub first: bool,
}

/// One batch's intent for one user, left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub app: String,
    pub user: String,
    pub days: Vec<i64>,
    /// For a batch counted already ([`Pending::counted`]): the user's event rows in it, whose
    /// profile refresh and seen marks are all that is owed.
    pub counted: Option<Vec<Bytes>>,
    row: Bytes,
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

    /// Record the intent of an ingested batch (before its events are written), unless another
    /// attempt of the same request recorded it already: then mark that one [`RETRIED`].
    pub async fn record(&self, app: &str, events: &[Event]) -> Result<Recorded> {
        let batch = batch_id(app, events)?;
        let intent = self.intent(app, batch, events);
        let found = self
            .store
            .check_and_mutate_row(
                EVENTS_TABLE,
                intent.row_key,
                Some(users_of_intent()),
                vec![],
                intent.mutations,
            )
            .await?;
        Ok(Recorded {
            batch,
            first: !found,
        })
    }

    /// The intent of a batch whose events and deltas are written in one atomic write with it
    /// (the embedded store): what it owes is only its users' profile refresh and seen marks,
    /// which the repair redoes from the event rows it lists if this node dies before them.
    pub fn counted(&self, app: &str, batch: u64, events: &[Event], keys: &[Bytes]) -> RowMutation {
        let mut intent = self.intent(app, batch, events);
        let now = self.clock.now_ms() * 1000;
        intent.mutations.push(Mutation::set(
            FAMILY,
            Bytes::from_static(COUNTED),
            now,
            encode_keys(keys),
        ));
        intent
    }

    /// Record the intent of work on these events that is no request's (a settlement of waiting
    /// events); returns its id.
    pub async fn record_work(&self, app: &str, events: &[Event]) -> Result<u64> {
        let batch: u64 = rand::random();
        let intent = self.intent(app, batch, events);
        self.store
            .mutate_row(EVENTS_TABLE, intent.row_key, intent.mutations)
            .await?;
        Ok(batch)
    }

    /// Wait until the intent of `batch` is gone (its attempt answered), for `within` at the
    /// most: whether it is.
    pub async fn wait_gone(&self, app: &str, batch: u64, within: Duration) -> Result<bool> {
        let deadline = std::time::Instant::now() + within;
        let mut pause = Duration::from_millis(2);
        loop {
            let row = self
                .store
                .read_row(
                    EVENTS_TABLE,
                    keys::intent(app, batch),
                    Some(users_of_intent().and(RowFilter::StripValue)),
                )
                .await?;
            if row.is_none() {
                return Ok(true);
            }
            if std::time::Instant::now() + pause > deadline {
                return Ok(false);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Mark a batch's intent: another attempt of the request goes on without waiting for the
    /// one that recorded it.
    pub async fn mark_retried(&self, app: &str, batch: u64) -> Result<()> {
        self.mark(keys::intent(app, batch)).await
    }

    /// Mark a left-behind intent before its work is redone: should its batch still be in
    /// flight (a node stalled past the repair's age), its own rebuild then follows its deltas.
    pub async fn mark_left_behind(&self, intent: &Intent) -> Result<()> {
        self.mark(intent.row.clone()).await
    }

    async fn mark(&self, row: Bytes) -> Result<()> {
        let retried = Mutation::set_now(FAMILY, Bytes::from_static(RETRIED), Bytes::new());
        self.store
            .mutate_row(EVENTS_TABLE, row, vec![retried])
            .await?;
        Ok(())
    }

    /// Whether another attempt of the batch marked its intent since it was recorded.
    pub async fn retried_meanwhile(&self, app: &str, batch: u64) -> Result<bool> {
        let marker = RowFilter::column(FAMILY, Bytes::from_static(RETRIED));
        let row = self
            .store
            .read_row(EVENTS_TABLE, keys::intent(app, batch), Some(marker))
            .await?;
        Ok(row.is_some())
    }

    /// A batch's intent row.
    fn intent(&self, app: &str, batch: u64, events: &[Event]) -> RowMutation {
        let mut days: BTreeMap<&str, BTreeSet<i64>> = BTreeMap::new();
        for e in events {
            days.entry(e.user())
                .or_default()
                .insert(day_of(e.timestamp));
        }
        let now = self.clock.now_ms() * 1000;
        let cells = days
            .into_iter()
            .map(|(user, days)| {
                let value: Vec<u8> = days
                    .iter()
                    .flat_map(|d| ((*d).clamp(0, i64::from(u32::MAX)) as u32).to_be_bytes())
                    .collect();
                Mutation::set(FAMILY, user.as_bytes().to_vec(), now, value)
            })
            .collect();
        RowMutation::new(keys::intent(app, batch), cells)
    }

    /// Forget a batch's intents (its work is done).
    pub async fn done(&self, app: &str, batch: u64) -> Result<()> {
        self.store
            .mutate_row(
                EVENTS_TABLE,
                keys::intent(app, batch),
                vec![Mutation::DeleteFromRow],
            )
            .await?;
        Ok(())
    }

    /// The intents of `apps` recorded more than `age` ago that are still there.
    pub async fn left_behind(&self, apps: &[String], age: Duration) -> Result<Vec<Intent>> {
        let store = for_workload(&self.store, Workload::Batch);
        // Cells are stamped in whole ms (Bigtable's granularity).
        let before = (self.clock.now_ms() - age.as_millis() as i64 + 1) * 1000;
        let mut out = Vec::new();
        for app in apps {
            let old = RowFilter::TimestampRange(TimeRange {
                start: None,
                end: Some(before),
            });
            let request = ReadRows::new(RowSet::prefix(keys::intents(app))).filter(old);
            let mut rows = store.read_rows(EVENTS_TABLE, request).await?;
            while let Some(row) = rows.try_next().await? {
                let counted = row
                    .latest(FAMILY, COUNTED)
                    .map(|cell| decode_keys(&cell.value));
                for cell in row.family(FAMILY) {
                    let Ok(user) = std::str::from_utf8(&cell.qualifier) else {
                        continue;
                    };
                    out.push(Intent {
                        app: app.clone(),
                        user: user.to_owned(),
                        days: cell
                            .value
                            .chunks_exact(4)
                            .map(|d| {
                                i64::from(u32::from_be_bytes(d.try_into().unwrap_or_default()))
                            })
                            .collect(),
                        counted: counted.as_ref().map(|keys| {
                            let mine = keys::user(app, user);
                            keys.iter()
                                .filter(|k| k.starts_with(&mine))
                                .cloned()
                                .collect()
                        }),
                        row: row.key.clone(),
                        stamp: cell.timestamp,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Delete an intent whose work was redone (its cell only: the batch's other users' stay).
    pub async fn resolve(&self, intent: &Intent) -> Result<()> {
        let delete = Mutation::DeleteFromColumn {
            family: FAMILY.to_owned(),
            qualifier: Bytes::from(intent.user.clone()),
            range: TimeRange::new(intent.stamp, intent.stamp + 1000),
        };
        self.store
            .mutate_row(EVENTS_TABLE, intent.row.clone(), vec![delete])
            .await?;
        // A counted batch's row goes with its last user (an uncounted one keeps its marks: a
        // first attempt still in flight reads them).
        if intent.counted.is_some() {
            let users = users_of_intent().and(RowFilter::StripValue);
            let row = self
                .store
                .read_row(EVENTS_TABLE, intent.row.clone(), Some(users))
                .await?;
            if row.is_none() {
                self.store
                    .mutate_row(
                        EVENTS_TABLE,
                        intent.row.clone(),
                        vec![Mutation::DeleteFromRow],
                    )
                    .await?;
            }
        }
        Ok(())
    }
}

/// Stripes of locks on batch ids, on this node: the attempts of one request written one at a
/// time where a batch is written atomically, so a later attempt finds the events stored.
#[derive(Debug)]
pub struct Attempts {
    stripes: Vec<tokio::sync::Mutex<()>>,
}

impl Default for Attempts {
    fn default() -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
        }
    }
}

impl Attempts {
    /// Hold the stripe of a batch.
    pub async fn lock(&self, batch: u64) -> tokio::sync::MutexGuard<'_, ()> {
        self.stripes[(batch % STRIPES as u64) as usize].lock().await
    }
}

/// Stripes of per-user locks on this node: ingestion takes its users' stripes shared, a
/// rebuild of a user's days takes the user's stripe alone. Stripes are taken in increasing
/// order and a rebuild holds one, so no two holders wait on each other in a cycle.
#[derive(Debug)]
pub struct UserLocks {
    stripes: Vec<tokio::sync::RwLock<()>>,
}

/// Stripes of [`UserLocks`]: two users share one with odds 1 in this.
const STRIPES: usize = 256;

impl Default for UserLocks {
    fn default() -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| tokio::sync::RwLock::new(())).collect(),
        }
    }
}

impl UserLocks {
    fn stripe(app: &str, user: &str) -> usize {
        let hash = xxhash_rust::xxh3::xxh3_64(&keys::user(app, user));
        (hash % STRIPES as u64) as usize
    }

    /// Hold the stripes of these users shared (an ingestion of their events).
    pub async fn shared<'u>(
        &self,
        app: &str,
        users: impl IntoIterator<Item = &'u str>,
    ) -> Vec<tokio::sync::RwLockReadGuard<'_, ()>> {
        let stripes: BTreeSet<usize> = users.into_iter().map(|u| Self::stripe(app, u)).collect();
        let mut guards = Vec::with_capacity(stripes.len());
        for i in stripes {
            guards.push(self.stripes[i].read().await);
        }
        guards
    }

    /// Hold a user's stripe alone (a rebuild of the user's days).
    pub async fn exclusive(&self, app: &str, user: &str) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.stripes[Self::stripe(app, user)].write().await
    }
}
