//! The formula: which qualifiers a strategy reads and how much each weighs, and the profile a
//! user's rows give.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use penchant_store::{Row, RowFilter};
use serde::Deserialize;

use super::Profile;
use crate::events::{EventType, qualifier};
use crate::strategy::Strategy;
use crate::{aggregates, days, keys};

/// Values kept per facet.
pub const MAX_VALUES_PER_FACET: usize = 100;
/// The highest score.
pub const MAX_SCORE: u64 = 20;

/// The wide-schema qualifiers a strategy reads, with the weight of each: event score × facet
/// score (negative for a "not for me" event), and the facet.
fn weights(strategy: &Strategy) -> HashMap<Bytes, (i64, String)> {
    let mut out = HashMap::new();
    for e in &strategy.events_scoring {
        for f in &strategy.facets_scoring {
            out.insert(
                qualifier(e.event_type, &e.event_name, &f.facet_name),
                (
                    i64::from(e.score) * i64::from(f.score),
                    f.facet_name.clone(),
                ),
            );
        }
    }
    out
}

/// The event time of a row, in ms (its cells carry it).
fn row_time(row: &Row) -> Option<i64> {
    row.cells.first().map(|c| c.timestamp / 1000)
}

/// Compute a profile from a user's rows (raw events as read with
/// [`crate::events::Layout::read_filter`], in either layout, or per-day aggregates), counting the
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

/// A strategy's weights, built once and used for every user of a recompute: per wide
/// qualifier (raw events in the wide layout, aggregates), and per event type, then event name,
/// then facet (raw events in the narrow layout).
#[derive(Debug)]
pub struct Scorer {
    weights: HashMap<Bytes, (i64, String)>,
    narrow: HashMap<EventType, HashMap<Bytes, HashMap<String, i64>>>,
}

impl Scorer {
    pub fn new(strategy: &Strategy) -> Self {
        let mut narrow: HashMap<EventType, HashMap<Bytes, HashMap<String, i64>>> = HashMap::new();
        for e in &strategy.events_scoring {
            let facets = narrow
                .entry(e.event_type)
                .or_default()
                .entry(Bytes::copy_from_slice(e.event_name.as_bytes()))
                .or_default();
            for f in &strategy.facets_scoring {
                facets.insert(
                    f.facet_name.clone(),
                    i64::from(e.score) * i64::from(f.score),
                );
            }
        }
        Self {
            weights: weights(strategy),
            narrow,
        }
    }

    /// [`compute`] with this scorer's strategy.
    pub fn compute(&self, user: &str, rows: &[Row], deleted_until: i64, since: i64) -> Profile {
        // Facet values borrow from the rows' JSON where it has no escapes (nearly always).
        let mut raw: BTreeMap<&str, BTreeMap<Cow<'_, str>, i64>> = BTreeMap::new();
        let mut last_event_at = None;
        self.scan(rows, deleted_until, since, |seen| match seen {
            Seen::Row(ts) => last_event_at = last_event_at.max(Some(ts)),
            Seen::Count(facet, value, n) => {
                *raw.entry(facet).or_default().entry(value).or_default() += n;
            }
        });
        finish(user, raw, last_event_at)
    }

    /// What [`Scorer::compute`] counts of these rows, per day: a user's [`super::state`].
    pub fn days(&self, rows: &[Row], deleted_until: i64, since: i64) -> BTreeMap<i64, Day> {
        let mut days: BTreeMap<i64, Day> = BTreeMap::new();
        let mut today = None;
        self.scan(rows, deleted_until, since, |seen| match seen {
            Seen::Row(ts) => {
                let day = days.entry(days::day_of(ts)).or_default();
                day.last = day.last.max(ts);
                today = Some(days::day_of(ts));
            }
            Seen::Count(facet, value, n) => {
                if let Some(day) = today.and_then(|d| days.get_mut(&d)) {
                    day.add(facet, &value, n);
                }
            }
        });
        days
    }

    /// The weight of a facet's values in an event of this type and name (event score × facet
    /// score), if the strategy weighs them.
    pub fn weight(&self, event_type: EventType, event_name: &str, facet: &str) -> Option<i64> {
        let facets = self.narrow.get(&event_type)?.get(event_name.as_bytes())?;
        facets.get(facet).copied()
    }

    /// Visit each row the window and the deletion leave (its time, in ms), then each weighted
    /// count it holds.
    fn scan<'s, 'r>(
        &'s self,
        rows: &'r [Row],
        deleted_until: i64,
        since: i64,
        mut visit: impl FnMut(Seen<'s, 'r>),
    ) {
        let weights = &self.weights;
        for row in rows {
            let Some(ts) = row_time(row) else { continue };
            if ts <= deleted_until || ts < since {
                continue;
            }
            visit(Seen::Row(ts));
            for cell in &row.cells {
                // A narrow cell: every facet's counts of one event, filtered here.
                if let Some(event_type) = EventType::parse(&cell.family) {
                    let facets = self
                        .narrow
                        .get(&event_type)
                        .and_then(|names| names.get(&cell.qualifier[..]));
                    let Some(facets) = facets else { continue };
                    let seed = NarrowCounts { facets };
                    let mut de = serde_json::Deserializer::from_slice(&cell.value);
                    let Ok(counted) = serde::de::DeserializeSeed::deserialize(seed, &mut de) else {
                        continue;
                    };
                    for (facet, weight, Counts(counts)) in counted {
                        for (value, n) in counts {
                            visit(Seen::Count(facet, value, weight * n as i64));
                        }
                    }
                    continue;
                }
                // A wide cell, a day's base, or one event's delta of it.
                let qualifier =
                    keys::aggregate_delta_base(&cell.qualifier).unwrap_or(&cell.qualifier);
                let Some((weight, facet)) = weights.get(qualifier) else {
                    continue;
                };
                let Ok(Counts(counts)) = serde_json::from_slice::<Counts<'_>>(&cell.value) else {
                    continue;
                };
                for (value, n) in counts {
                    visit(Seen::Count(facet, value, weight * n as i64));
                }
            }
        }
    }
}

/// What [`Scorer::scan`] meets: a counted row (its time, ms), then each of its weighted counts
/// (facet, value, event score × facet score × n).
enum Seen<'s, 'r> {
    Row(i64),
    Count(&'s str, Cow<'r, str>, i64),
}

/// The profile of a user's raw scores per facet and value: values at 0 or below leave it (a
/// "not for me" event brought them there), each facet keeps its [`MAX_VALUES_PER_FACET`] best,
/// scaled to 1..[`MAX_SCORE`] against the best of all.
pub fn finish<'a>(
    user: &str,
    mut raw: BTreeMap<&'a str, BTreeMap<Cow<'a, str>, i64>>,
    last_event_at: Option<i64>,
) -> Profile {
    for values in raw.values_mut() {
        values.retain(|_, sum| *sum > 0);
    }
    raw.retain(|_, values| !values.is_empty());
    let best = raw
        .values()
        .flat_map(|v| v.values())
        .map(|&sum| sum as u64)
        .max()
        .unwrap_or(0);
    let scores = raw
        .into_iter()
        .map(|(facet, values)| {
            let mut ranked: Vec<(Cow<'_, str>, u64)> =
                values.into_iter().map(|(v, sum)| (v, sum as u64)).collect();
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
        waiting_events: 0,
    }
}

/// A JSON object's key, borrowed from the JSON where it has no escapes.
struct Key<'a>(Cow<'a, str>);
impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> std::result::Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// A cell's counts, `{"value": n, ...}`, with the values borrowed from the JSON where they
/// have no escapes: a recompute decodes millions of them.
struct Counts<'a>(Vec<(Cow<'a, str>, u64)>);

impl<'de> Deserialize<'de> for Counts<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
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

/// A narrow cell, `{"facet": {"value": n, ...}, ...}`, read for the facets the strategy weighs
/// (with their weights): the others are skipped unparsed.
struct NarrowCounts<'w> {
    facets: &'w HashMap<String, i64>,
}

impl<'de, 'w> serde::de::DeserializeSeed<'de> for NarrowCounts<'w> {
    type Value = Vec<(&'w str, i64, Counts<'de>)>;
    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, 'w> serde::de::Visitor<'de> for NarrowCounts<'w> {
    type Value = Vec<(&'w str, i64, Counts<'de>)>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object of counts per facet")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Key(facet)) = map.next_key::<Key<'de>>()? {
            match self.facets.get_key_value(&*facet) {
                Some((facet, weight)) => out.push((facet.as_str(), *weight, map.next_value()?)),
                None => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

/// What a strategy needs of aggregate rows: its qualifiers' bases and deltas, and the marker
/// (each day's newest `_last` cell, without its value).
pub fn aggregate_filter(strategy: &Strategy) -> RowFilter {
    let mut filters = aggregates::qualifiers_filter(weights(strategy).into_keys());
    filters.push(aggregates::marker());
    RowFilter::Interleave(filters)
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
