//! Ingestion intents: what a batch of events still owes its users, so that a crash between
//! storing events and finishing their work cannot leave a profile without them.
//!
//! A batch's intent row (table `events`, row [`keys::intent`] `app 0 · 0xFF · batch id`, past
//! every user of the app) is written before its events: a cell per user, the qualifier the user
//! token, the value the days the batch touches for the user and the ids of the user's events
//! the attempt stores (those not stored already). It comes first, in a write of its own,
//! because a store may apply a multi-row write in any order (Bigtable's `MutateRows`): no event
//! row may exist without the intent that would finish it. Once the batch's deltas, profiles and
//! seen marks are written, the row is deleted. An intent row still there afterwards is a batch
//! that stopped half-way (a crash, a killed node): [`Pending::left_behind`] lists its users,
//! and the engine redoes their work — write the batch's deltas again from its raw rows, refresh
//! the profile, mark the items seen — which is harmless to redo, every step being idempotent.
//!
//! **Held deltas.** A delta names its event, so writing it again writes the same cell; but once
//! a fold has summed it into its day's base and deleted it, writing it again would count the
//! event twice. So while an intent lists an event, the event's delta is *held*: the day row's
//! write of the batch's deltas carries a hold cell naming the batch, and a fold that finds one
//! reads that batch's intent ([`held_in`], after the day row, so a delta it sees was written
//! after its intent) and leaves the deltas it lists as they are
//! ([`crate::aggregates::Aggregates::fold`]). A fold's cost follows the holds in its row, not the
//! batches in flight elsewhere. Whoever finishes a batch — a later attempt, the repair —
//! rewrites only that batch's deltas ([`crate::aggregates::Aggregates::recount`]): its cost
//! follows the batch, never the user's history (a bot's day of 20,000 events).
//!
//! **A retry in flight with its first attempt.** A batch's id is a hash of its events, so
//! every attempt of one request names the same intent row, and only one of them creates it
//! (a conditional write). Another attempt that finds the row there — the first one still in
//! flight, on this node or another, or left behind by a crash — waits a while for it to go: the
//! first attempt answered (or the repair finished it), so the events are stored and counted,
//! and the later attempt answers at once. If the row stays, the later one joins it (an
//! attempt's cell, [`Pending::join`], only if it is still there), stores the events the first
//! may not have stored, and writes the held deltas again. Each attempt takes its cell away when
//! done, and the last one deletes the row ([`Pending::leave`]); a row whose attempt died is the
//! repair's to forget, after its age.
//!
//! **An attempt that read what is stored before the first stored it**, and was held up (a
//! slow node, a pause) until the first had answered and its intent was gone: it records the
//! intent again, so it would count the events again. So an attempt remembers its batch
//! answered (table `retries`, [`Pending::answer`]) before it forgets the intent, and an
//! attempt that recorded the intent reads that answer before it writes: answered, it leaves
//! the intent and writes nothing. The repair, too, writes no delta of a batch answered (an
//! intent recorded by such an attempt that died before it read the answer: it only refreshes
//! the users), and remembers each user's share of a batch whose deltas it wrote — the last
//! share gone, the batch is answered.
//!
//! **A node stalled past the repair's age.** The repair marks an intent ([`LEFT`]) before it
//! redoes its work and forgets it (its attempts no longer may), and its deltas may then be
//! folded; an attempt that wrote its
//! deltas only after that reads the mark ([`Pending::repaired_meanwhile`]) and rebuilds its
//! days from the raw events — the one case that still costs a day.
//!
//! On one node, [`crate::locks::UserLocks`] keep a user's rebuild apart from the ingestion of
//! the user's events: an ingestion holds its users shared from its raw write until its deltas
//! are written; a rebuild holds its user alone.
//!
//! **A batch written atomically** (a node alone on a store with atomic writes, the embedded
//! one): the intent goes in one write with the batch's events and deltas, with a [`COUNTED`]
//! cell listing the batch's event rows ([`Pending::counted`]). Such a batch is counted; all its
//! intent owes is its users' profile refresh and seen marks, which the repair redoes from those
//! rows alone ([`Intent::counted`]), and the row goes with its last user. Attempts of one
//! request take turns ([`crate::locks::Attempts`]), so a later one finds the events stored and
//! writes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use penchant_store::{
    Mutation, ReadRows, RowFilter, RowMutation, RowSet, Store, TimeRange, Workload, for_workload,
};

use crate::clock::Clock;
use crate::events::Event;
use crate::{Result, keys};
use penchant_model::days::day_of;
use penchant_model::tables::{
    ANSWERED_FAMILY, EVENTS_FAMILY as FAMILY, EVENTS_TABLE, RETRIES_TABLE,
};

/// The first byte of the cell of an attempt in flight (`0xFC · attempt id`): not UTF-8, so
/// never a user's. The intent goes with its last attempt ([`Pending::leave`]).
const ATTEMPT: u8 = 0xfc;

/// The qualifier of the mark the repair leaves on an intent before it redoes its work.
const LEFT: &[u8] = b"\xfd";

/// The qualifier of the cell that says a batch is counted already (written atomically with its
/// events, [`Pending::counted`]); its value lists the batch's event row keys. Not UTF-8.
const COUNTED: &[u8] = b"\xfe";

/// The first byte of a user's cell that lists, after the days, the ids of the events whose
/// deltas the batch holds ([`held_in`]); a cell of days alone starts with 0 (days since the epoch
/// fit in 24 bits).
const HOLDS: u8 = 1;

/// The cells of an intent that name its users (not its attempts, its mark nor its [`COUNTED`]
/// list: a row whose users were all repaired is gone).
fn users_of_intent() -> RowFilter {
    RowFilter::ColumnRange {
        family: FAMILY.to_owned(),
        start: std::ops::Bound::Unbounded,
        end: std::ops::Bound::Excluded(Bytes::from_static(&[ATTEMPT])),
    }
}

/// The cells of an intent that keep it: its attempts in flight, and the repair's mark.
fn kept() -> RowFilter {
    RowFilter::ColumnRange {
        family: FAMILY.to_owned(),
        start: std::ops::Bound::Included(Bytes::from_static(&[ATTEMPT])),
        end: std::ops::Bound::Excluded(Bytes::from_static(COUNTED)),
    }
}

/// An attempt's cell.
fn attempt_cell(attempt: u64) -> Mutation {
    let mut qualifier = vec![ATTEMPT];
    qualifier.extend_from_slice(&attempt.to_be_bytes());
    Mutation::set_now(FAMILY, qualifier, Bytes::new())
}

/// A user's cell of an intent: the days (u32 BE each), and with [`HOLDS`] first, their count
/// (u16 BE) before them and the held events' ids after them.
fn encode_user(days: &BTreeSet<i64>, held: Option<&[&[u8]]>) -> Vec<u8> {
    let mut out = Vec::new();
    if held.is_some() {
        out.push(HOLDS);
        out.extend_from_slice(&(days.len().min(usize::from(u16::MAX)) as u16).to_be_bytes());
    }
    for day in days {
        out.extend_from_slice(&((*day).clamp(0, i64::from(u32::MAX)) as u32).to_be_bytes());
    }
    for id in held.into_iter().flatten() {
        out.extend_from_slice(id);
    }
    out
}

/// A user's cell of an intent: its days, and the ids of the events it holds if it lists them.
fn decode_user(value: &[u8]) -> (Vec<i64>, Option<Vec<&[u8]>>) {
    let days = |bytes: &[u8]| {
        bytes
            .chunks_exact(4)
            .map(|d| i64::from(u32::from_be_bytes(d.try_into().unwrap_or_default())))
            .collect()
    };
    match value {
        [HOLDS, a, b, rest @ ..] => {
            let n = (usize::from(u16::from_be_bytes([*a, *b])) * 4).min(rest.len());
            let ids = rest[n..].chunks_exact(keys::EVENT_ID_BYTES);
            (days(&rest[..n]), Some(ids.collect()))
        }
        _ => (days(value), None),
    }
}

/// The ids of a user's events whose deltas a batch holds while it is in flight: `None` once its
/// intent no longer names the user (the batch is finished, or its user repaired). A fold leaves
/// held deltas as they are ([`crate::aggregates`]), so that the attempts of the batch and the
/// repair may write them again, the same cells, without counting one twice.
pub async fn held_in(
    store: &dyn Store,
    app: &str,
    batch: u64,
    user: &str,
) -> Result<Option<Vec<Bytes>>> {
    let filter = RowFilter::column(FAMILY, user.as_bytes().to_vec());
    let row = store
        .read_row(EVENTS_TABLE, keys::intent(app, batch), Some(filter))
        .await?;
    Ok(row.and_then(|row| {
        let cell = row.latest(FAMILY, user.as_bytes())?;
        let (_, ids) = decode_user(&cell.value);
        Some(
            ids.into_iter()
                .flatten()
                .map(Bytes::copy_from_slice)
                .collect(),
        )
    }))
}

/// The batches in flight that hold some of a user's events: every intent of the app naming the
/// user, by batch (a scan of the app's intents: for the rare rebuild of a day, which must hold
/// what they hold, [`crate::aggregates`]).
pub async fn holding(store: &dyn Store, app: &str, user: &str) -> Result<Vec<(u64, Vec<Bytes>)>> {
    let request = ReadRows::new(RowSet::prefix(keys::intents(app)))
        .filter(RowFilter::column(FAMILY, user.as_bytes().to_vec()));
    let mut out = Vec::new();
    for row in store.read_all(EVENTS_TABLE, request).await? {
        let Some(batch) = keys::batch_of_intent(app, &row.key) else {
            continue;
        };
        for cell in row.family(FAMILY) {
            let (_, ids) = decode_user(&cell.value);
            let ids: Vec<Bytes> = ids
                .into_iter()
                .flatten()
                .map(Bytes::copy_from_slice)
                .collect();
            if !ids.is_empty() {
                out.push((batch, ids));
            }
        }
    }
    Ok(out)
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

/// One batch's intent for one user, left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub app: String,
    pub user: String,
    pub days: Vec<i64>,
    /// For a batch that lists the events it stored ([`Pending::record`]): the user's event row
    /// keys among them, whose deltas are all the batch may have left unwritten.
    pub held: Option<Vec<Bytes>>,
    /// For a batch counted already ([`Pending::counted`]): the user's event rows in it, whose
    /// profile refresh and seen marks are all that is owed.
    pub counted: Option<Vec<Bytes>>,
    row: Bytes,
    stamp: i64,
}

impl Intent {
    /// The id of the intent's batch.
    pub fn batch(&self) -> u64 {
        keys::batch_of_intent(&self.app, &self.row).unwrap_or_default()
    }
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

    /// Record the intent of an ingested batch before its events are written, listing the
    /// event rows this attempt is to store (`stored`: the others exist already): until the
    /// intent is gone, their deltas are held ([`held_in`]). Unless another attempt of the same
    /// request recorded it already. Returns this attempt's id if it recorded the intent (it
    /// [`Pending::leave`]s it when done).
    pub async fn record(
        &self,
        app: &str,
        batch: u64,
        events: &[Event],
        stored: &[Bytes],
    ) -> Result<Option<u64>> {
        let attempt: u64 = rand::random();
        let mut intent = self.intent(app, batch, events, Some(stored));
        intent.mutations.push(attempt_cell(attempt));
        let found = self
            .store
            .check_and_mutate_row(
                EVENTS_TABLE,
                intent.row_key,
                Some(users_of_intent().and(RowFilter::StripValue)),
                vec![],
                intent.mutations,
            )
            .await?;
        Ok((!found).then_some(attempt))
    }

    /// The intent of a batch whose events and deltas are written in one atomic write with it
    /// (the embedded store): what it owes is only the profile refresh of these events' users,
    /// and the seen marks of the event rows `keys` lists (none where its write marked them),
    /// which the repair redoes if this node dies before them.
    pub fn counted<'e>(
        &self,
        app: &str,
        batch: u64,
        events: impl IntoIterator<Item = &'e Event>,
        keys: &[Bytes],
    ) -> RowMutation {
        let mut intent = self.intent(app, batch, events, None);
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
        let intent = self.intent(app, batch, events, None);
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

    /// Join a batch's intent as another attempt of its request (it [`Pending::leave`]s it
    /// when done), if the intent is still there (else the batch is done): this attempt's id.
    pub async fn join(&self, app: &str, batch: u64) -> Result<Option<u64>> {
        let attempt: u64 = rand::random();
        let joined = self
            .store
            .check_and_mutate_row(
                EVENTS_TABLE,
                keys::intent(app, batch),
                Some(users_of_intent().and(RowFilter::StripValue)),
                vec![attempt_cell(attempt)],
                vec![],
            )
            .await?;
        Ok(joined.then_some(attempt))
    }

    /// An attempt's work is done: remember the batch answered ([`Pending::answer`]), and forget
    /// its intent if no other attempt is in flight and the repair is not redoing it (one whose
    /// node died keeps it until the repair, which redoes the batch's work from its held rows and
    /// forgets it).
    pub async fn leave(&self, app: &str, batch: u64, attempt: u64) -> Result<()> {
        self.answer(app, batch).await?;
        let row = keys::intent(app, batch);
        let mut qualifier = vec![ATTEMPT];
        qualifier.extend_from_slice(&attempt.to_be_bytes());
        self.store
            .mutate_row(
                EVENTS_TABLE,
                row.clone(),
                vec![Mutation::delete_column(FAMILY, qualifier)],
            )
            .await?;
        self.store
            .check_and_mutate_row(
                EVENTS_TABLE,
                row,
                Some(kept().and(RowFilter::StripValue)),
                vec![],
                vec![Mutation::DeleteFromRow],
            )
            .await?;
        Ok(())
    }

    /// Remember that a batch's events are stored and counted, before its intent goes (for a
    /// day, [`penchant_model::events::retries::ANSWERED_FOR`]): an attempt that read what is
    /// stored before they were, and records the intent again once it is gone, finds the answer
    /// ([`Pending::answered`]) and writes nothing.
    pub async fn answer(&self, app: &str, batch: u64) -> Result<()> {
        self.answer_for(app, batch, "").await
    }

    /// Remember that the repair wrote the deltas of one user's share of a batch (the cell of
    /// [`Pending::answer`] says all of them were): once every share is, the batch is answered.
    pub async fn answer_share(&self, app: &str, batch: u64, user: &str) -> Result<()> {
        self.answer_for(app, batch, user).await
    }

    async fn answer_for(&self, app: &str, batch: u64, user: &str) -> Result<()> {
        let now = self.clock.now_ms() * 1000;
        let cell = Mutation::set(ANSWERED_FAMILY, user.as_bytes().to_vec(), now, Bytes::new());
        self.store
            .mutate_row(RETRIES_TABLE, keys::answered(app, batch), vec![cell])
            .await?;
        Ok(())
    }

    /// Whether a batch whose intent is gone was answered: an attempt of it answered, or the
    /// repair finished a share of it (then it finished them all, or the intent would be there).
    pub async fn answered(&self, app: &str, batch: u64) -> Result<bool> {
        Ok(!self.answers(app, batch, None).await?.is_empty())
    }

    /// Whether a user's share of a batch is counted: an attempt of the batch answered, or the
    /// repair wrote the share's deltas.
    pub async fn share_answered(&self, app: &str, batch: u64, user: &str) -> Result<bool> {
        Ok(!self.answers(app, batch, Some(user)).await?.is_empty())
    }

    /// The answers kept of a batch: every one, or only the batch's and `user`'s.
    async fn answers(&self, app: &str, batch: u64, user: Option<&str>) -> Result<Vec<Bytes>> {
        let mut filter = RowFilter::Family(ANSWERED_FAMILY.to_owned());
        if let Some(user) = user {
            let of = [Bytes::new(), Bytes::copy_from_slice(user.as_bytes())];
            filter = filter.and(RowFilter::Qualifiers(of.into_iter().collect()));
        }
        let row = self
            .store
            .read_row(
                RETRIES_TABLE,
                keys::answered(app, batch),
                Some(filter.and(RowFilter::StripValue)),
            )
            .await?;
        Ok(row
            .iter()
            .flat_map(|r| r.family(ANSWERED_FAMILY))
            .map(|c| c.qualifier.clone())
            .collect())
    }

    /// Mark a left-behind intent before its work is redone, if it is still there (else its
    /// attempts finished it since it was read): should an attempt of its batch still be in
    /// flight (a node stalled past the repair's age), it rebuilds its days after its deltas
    /// ([`Pending::repaired_meanwhile`]), and it no longer forgets the intent.
    pub async fn mark_left_behind(&self, intent: &Intent) -> Result<bool> {
        let left = Mutation::set_now(FAMILY, Bytes::from_static(LEFT), Bytes::new());
        let marked = self
            .store
            .check_and_mutate_row(
                EVENTS_TABLE,
                intent.row.clone(),
                Some(users_of_intent().and(RowFilter::StripValue)),
                vec![left],
                vec![],
            )
            .await?;
        Ok(marked)
    }

    /// Whether the repair took a batch's intent for left behind since it was recorded (its
    /// mark, or its users gone): then the deltas of an attempt that wrote them only now may
    /// have landed after the repair's and a fold of their day, and its days are rebuilt.
    pub async fn repaired_meanwhile(&self, app: &str, batch: u64) -> Result<bool> {
        let row = self
            .store
            .read_row(
                EVENTS_TABLE,
                keys::intent(app, batch),
                Some(RowFilter::StripValue),
            )
            .await?;
        let Some(row) = row else {
            return Ok(true);
        };
        let left = row.latest(FAMILY, LEFT).is_some();
        let users = row
            .family(FAMILY)
            .any(|c| std::str::from_utf8(&c.qualifier).is_ok());
        Ok(left || !users)
    }

    /// The event rows a batch's intent holds: those its first attempt was to store.
    pub async fn held_by(&self, app: &str, batch: u64) -> Result<Vec<Bytes>> {
        let row = self
            .store
            .read_row(
                EVENTS_TABLE,
                keys::intent(app, batch),
                Some(users_of_intent()),
            )
            .await?;
        let mut out = Vec::new();
        for cell in row.iter().flat_map(|r| r.family(FAMILY)) {
            let Ok(user) = std::str::from_utf8(&cell.qualifier) else {
                continue;
            };
            let (_, ids) = decode_user(&cell.value);
            out.extend(
                ids.into_iter()
                    .flatten()
                    .map(|id| keys::event_with_id(app, user, id)),
            );
        }
        Ok(out)
    }

    /// A batch's intent row; `stored`, the event rows it holds (for a batch whose attempts and
    /// repair may write their deltas again).
    fn intent<'e>(
        &self,
        app: &str,
        batch: u64,
        events: impl IntoIterator<Item = &'e Event>,
        stored: Option<&[Bytes]>,
    ) -> RowMutation {
        let mut days: BTreeMap<&str, BTreeSet<i64>> = BTreeMap::new();
        for e in events {
            days.entry(e.user())
                .or_default()
                .insert(day_of(e.timestamp));
        }
        let mut held: BTreeMap<&str, Vec<&[u8]>> = BTreeMap::new();
        for key in stored.into_iter().flatten() {
            if let Some((_, user)) = keys::app_and_user_of(key) {
                held.entry(user).or_default().push(keys::event_id(key));
            }
        }
        let now = self.clock.now_ms() * 1000;
        let cells = days
            .into_iter()
            .map(|(user, days)| {
                let ids = stored.map(|_| held.get(user).map_or(&[][..], Vec::as_slice));
                Mutation::set(
                    FAMILY,
                    user.as_bytes().to_vec(),
                    now,
                    encode_user(&days, ids),
                )
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
                    let (days, held) = decode_user(&cell.value);
                    out.push(Intent {
                        app: app.clone(),
                        user: user.to_owned(),
                        days,
                        held: held.map(|ids| {
                            ids.into_iter()
                                .map(|id| keys::event_with_id(app, user, id))
                                .collect()
                        }),
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
        // The row goes with its last user, marks and all: an attempt still in flight reads a
        // row gone as repaired. (Conditional: a new attempt of the request may have recorded
        // its users since.)
        self.store
            .check_and_mutate_row(
                EVENTS_TABLE,
                intent.row.clone(),
                Some(users_of_intent().and(RowFilter::StripValue)),
                vec![],
                vec![Mutation::DeleteFromRow],
            )
            .await?;
        Ok(())
    }
}
