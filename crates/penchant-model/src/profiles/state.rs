//! A user's state, its pure part: the user's counted events summed per day — per facet and
//! value, `event score × facet score × n` — with each day's latest event, the strategy version
//! that weighed them and the deletion they were counted after, and its binary form. The
//! engine's `profiles::state` stores it (table `states`) and says when a batch may trust it.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::Profile;
pub use super::scoring::Day;
use super::scoring::{Scorer, finish};
use crate::days::day_of;
use crate::events::Stored;

/// The first byte of an encoded state.
const FORMAT: u8 = 1;

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
        if self.days.contains_key(&edge) && since > edge * crate::days::DAY_MS {
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
        let d = crate::days::DAY_MS;
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
