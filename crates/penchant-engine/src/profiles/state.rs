//! A user's state: what their profile is made of, kept so that a batch of events updates the
//! profile instead of recomputing it (on a store a node is alone on, with atomic writes: the
//! embedded one).
//!
//! Table `states`, family `s`, row [`keys::user`] `app 0 · user 0`, one cell: the user's counted
//! events summed per day — per facet and value, `event score × facet score × n` — with each
//! day's latest event, the strategy version that weighed them and the deletion they were counted
//! after ([`State`], binary). A batch reads its users' states, adds its new events, rescores,
//! and writes states and profiles in the batch's one atomic write, with its events and their
//! aggregate deltas: counted whole or not at all, its users' locks held from the read to the
//! write ([`crate::locks::UserLocks`]). What a state cannot answer — another strategy version, a
//! day at the retention window's edge (its raw events decide), a stale or missing state — the
//! batch marks stale in that write and the full refresh ([`super::Profiles::refresh_many`])
//! rebuilds from the aggregates after it, under the same locks.
//!
//! A missing state means "no counted events" only in an app whose every user has one
//! ([`States::complete`]): an app created with states (no aggregates when first asked), or one
//! whose users the migration job has given states. Its marker is the app's row in the table
//! (`app 0`, cell `s:complete`): it moves with the app, and an import removes it.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{Mutation, ReadRows, RowFilter, RowMutation, RowSet, Store};

use super::Profile;
use super::scoring::{Scorer, finish};
use crate::aggregates::day_of;
use crate::events::Stored;
use crate::{Result, keys};
use penchant_model::tables::{AGGREGATES_TABLE, STATES_TABLE};
pub use penchant_model::tables::{STATES, STATES_FAMILY as FAMILY};

const STATE: &[u8] = b"s";
const COMPLETE: &[u8] = b"complete";
/// The first byte of an encoded state.
const FORMAT: u8 = 1;

/// What a user's counted events of one day add up to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Day {
    /// The latest counted event, ms.
    pub last: i64,
    /// Raw scores per facet and value.
    pub sums: BTreeMap<String, BTreeMap<String, i64>>,
}

impl Day {
    pub fn add(&mut self, facet: &str, value: &str, n: i64) {
        let values = match self.sums.get_mut(facet) {
            Some(values) => values,
            None => self.sums.entry(facet.to_owned()).or_default(),
        };
        match values.get_mut(value) {
            Some(sum) => *sum += n,
            None => {
                values.insert(value.to_owned(), n);
            }
        }
    }
}

/// A user's counted events, per day, as one strategy version weighs them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub version: i64,
    /// Events up to this time (ms, inclusive) do not count: the user deleted them.
    pub deleted_until: i64,
    pub days: BTreeMap<i64, Day>,
}

impl State {
    /// A user without counted events.
    pub fn empty(version: i64) -> Self {
        Self {
            version,
            deleted_until: i64::MIN,
            days: BTreeMap::new(),
        }
    }

    /// Count a batch's newly stored events of this user: those after the deletion and in the
    /// window (from `since`, ms).
    pub fn add<'e>(
        &mut self,
        scorer: &Scorer,
        events: impl IntoIterator<Item = &'e Stored<'e>>,
        since: i64,
    ) {
        for stored in events {
            let event = stored.event;
            let ts = event.timestamp;
            if ts <= self.deleted_until || ts < since {
                continue;
            }
            let day = self.days.entry(day_of(ts)).or_default();
            day.last = day.last.max(ts);
            for (facet, counts) in &stored.counts {
                let Some(weight) = scorer.weight(event.event_type, &event.event_name, facet) else {
                    continue;
                };
                for (value, n) in counts {
                    day.add(facet, value, weight * *n as i64);
                }
            }
        }
    }

    /// The profile, from the days in the window (from `since`, ms; older ones are dropped):
    /// `None` when a day at the window's edge holds events (only its raw events say which of
    /// them still count).
    pub fn profile(&mut self, user: &str, since: i64) -> Option<Profile> {
        let edge = day_of(since);
        self.days = self.days.split_off(&edge);
        if self.days.contains_key(&edge) && since > edge * crate::aggregates::DAY_MS {
            return None;
        }
        Some(profile_of(user, &self.days))
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT];
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.deleted_until.to_le_bytes());
        put_len(&mut out, self.days.len());
        for (day, d) in &self.days {
            out.extend_from_slice(&day.to_le_bytes());
            out.extend_from_slice(&d.last.to_le_bytes());
            put_len(&mut out, d.sums.len());
            for (facet, values) in &d.sums {
                put_str(&mut out, facet);
                put_len(&mut out, values.len());
                for (value, sum) in values {
                    put_str(&mut out, value);
                    out.extend_from_slice(&sum.to_le_bytes());
                }
            }
        }
        out
    }

    /// `None` for anything but a state this version encoded (a stale mark is empty).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let mut r = Reader(bytes);
        if r.take(1)? != [FORMAT] {
            return None;
        }
        let version = r.i64()?;
        let deleted_until = r.i64()?;
        let mut days = BTreeMap::new();
        for _ in 0..r.len()? {
            let day = r.i64()?;
            let last = r.i64()?;
            let mut sums = BTreeMap::new();
            for _ in 0..r.len()? {
                let facet = r.str()?;
                let mut values = BTreeMap::new();
                for _ in 0..r.len()? {
                    let value = r.str()?;
                    values.insert(value, r.i64()?);
                }
                sums.insert(facet, values);
            }
            days.insert(day, Day { last, sums });
        }
        r.0.is_empty().then_some(Self {
            version,
            deleted_until,
            days,
        })
    }
}

/// The profile of a user's days: every one counts whole.
pub fn profile_of(user: &str, days: &BTreeMap<i64, Day>) -> Profile {
    let mut raw: BTreeMap<&str, BTreeMap<Cow<'_, str>, i64>> = BTreeMap::new();
    let mut last = None;
    for day in days.values() {
        last = last.max(Some(day.last));
        for (facet, values) in &day.sums {
            let sums = raw.entry(facet.as_str()).or_default();
            for (value, n) in values {
                *sums.entry(Cow::Borrowed(value.as_str())).or_default() += n;
            }
        }
    }
    finish(user, raw, last)
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn len(&mut self) -> Option<usize> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?) as usize)
    }
    fn str(&mut self) -> Option<String> {
        let n = self.len()?;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

/// What is stored of a user's state.
#[derive(Debug)]
pub enum Found {
    /// No row: no counted events, in a [`States::complete`] app.
    Missing,
    /// Marked stale, or unreadable: the full refresh rebuilds it.
    Stale,
    State(State),
}

/// Users' states, and which apps have them for every user.
#[derive(Debug)]
pub struct States {
    store: Arc<dyn Store>,
    /// Apps known complete (this node is alone on its store: nothing else makes one so).
    complete: parking_lot::Mutex<HashMap<String, bool>>,
}

impl States {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            complete: Default::default(),
        }
    }

    /// Some users' states (sorted users), one read.
    pub async fn read_many<'u>(
        &self,
        app: &str,
        users: &[&'u str],
    ) -> Result<BTreeMap<&'u str, Found>> {
        let keys = users.iter().map(|u| keys::user(app, u));
        let rows = self
            .store
            .read_all(STATES_TABLE, ReadRows::new(RowSet::keys(keys)))
            .await?;
        let mut out: BTreeMap<&str, Found> = users.iter().map(|u| (*u, Found::Missing)).collect();
        for row in &rows {
            let Some(user) = keys::user_of(app, &row.key) else {
                continue;
            };
            let Ok(i) = users.binary_search(&user) else {
                continue;
            };
            let found = row
                .latest(FAMILY, STATE)
                .and_then(|c| State::decode(&c.value))
                .map_or(Found::Stale, Found::State);
            out.insert(users[i], found);
        }
        Ok(out)
    }

    /// The write of a user's state: `None` marks it stale.
    pub fn write(app: &str, user: &str, state: Option<&State>) -> RowMutation {
        let value = state.map(State::encode).unwrap_or_default();
        RowMutation::new(
            keys::user(app, user),
            vec![Mutation::set_now(FAMILY, STATE, value)],
        )
    }

    /// Whether every user of the app with counted events has a state: the app's marker says
    /// so, or it has no aggregates yet (a new app: the marker is written then).
    pub async fn complete(&self, app: &str) -> Result<bool> {
        if let Some(known) = self.complete.lock().get(app) {
            return Ok(*known);
        }
        let marker = self
            .store
            .read_row(
                STATES_TABLE,
                keys::app(app),
                Some(RowFilter::column(FAMILY, COMPLETE)),
            )
            .await?;
        let complete = match marker {
            Some(_) => true,
            None => {
                let request = ReadRows::new(RowSet::prefix(keys::app(app)))
                    .filter(RowFilter::CellsPerRowLimit(1).and(RowFilter::StripValue))
                    .limit(1);
                let any = self.store.read_all(AGGREGATES_TABLE, request).await?;
                if any.is_empty() {
                    self.mark_complete(app).await?;
                }
                any.is_empty()
            }
        };
        self.complete.lock().insert(app.to_owned(), complete);
        Ok(complete)
    }

    /// Mark the app complete: every user with counted events has a state.
    pub async fn mark_complete(&self, app: &str) -> Result<()> {
        self.store
            .mutate_row(
                STATES_TABLE,
                keys::app(app),
                vec![Mutation::set_now(FAMILY, COMPLETE, Bytes::new())],
            )
            .await?;
        self.complete.lock().insert(app.to_owned(), true);
        Ok(())
    }

    /// Forget what is known of the app (it was deleted, or data was imported into it).
    pub fn forget(&self, app: &str) {
        self.complete.lock().remove(app);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_round_trips_and_garbage_is_no_state() {
        let mut day = Day {
            last: 1_700_000_000_123,
            ..Day::default()
        };
        day.add("brand", "Acme", 6);
        day.add("brand", "Acme", -2);
        day.add("genre", "Sci\"Fi é", 3);
        let state = State {
            version: 7,
            deleted_until: 1_600_000_000_000,
            days: BTreeMap::from([(19_675, day), (19_676, Day::default())]),
        };
        let bytes = state.encode();
        assert_eq!(State::decode(&bytes), Some(state.clone()));
        assert_eq!(state.days[&19_675].sums["brand"]["Acme"], 4);
        assert_eq!(State::decode(&[]), None);
        assert_eq!(State::decode(&bytes[..bytes.len() - 1]), None);
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(State::decode(&longer), None);
    }

    #[test]
    fn a_day_at_the_windows_edge_needs_its_raw_events_and_older_days_drop() {
        let day = |last| Day {
            last,
            sums: BTreeMap::from([("f".to_owned(), BTreeMap::from([("v".to_owned(), 1)]))]),
        };
        let d = crate::aggregates::DAY_MS;
        let mut state = State::empty(1);
        state.days = BTreeMap::from([(9, day(9 * d + 5)), (10, day(10 * d + 5))]);
        // The window starts at day 10's first ms: day 9 drops, day 10 counts whole.
        let profile = state.clone().profile("u", 10 * d).unwrap();
        assert_eq!(profile.last_event_at, Some(10 * d + 5));
        // Mid-day 10: which of its events count is for the raw events to say.
        assert!(state.clone().profile("u", 10 * d + 1).is_none());
        // Day 10 gone too: nothing left.
        let mut gone = state.clone();
        let empty = gone.profile("u", 11 * d).unwrap();
        assert!(empty.scores.is_empty() && gone.days.is_empty());
    }
}
