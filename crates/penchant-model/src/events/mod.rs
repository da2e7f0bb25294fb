//! Insights events as the engine keeps them: their types, their row keys and stored form, and
//! the two layouts of their counts ([`layout`]).
//!
//! One row per event, [`keys::event`] `app 0 · user 0 · timestamp ms (u64 BE) · discriminator
//! (u64 BE)`, so one user's events are one contiguous key range in time order. The user is the
//! `authenticatedUserToken` when there is one, else the `userToken`. The discriminator is a hash
//! of the event and its place in the request ([`row_key`]). Column `e:event` keeps the event
//! itself ([`EVENT_COLUMN`]); its counts are stored in the app's [`Layout`].

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tables::EVENTS_FAMILY as FAMILY;
use crate::{Result, keys};

pub mod layout;
pub mod retries;

pub use layout::Layout;

/// The qualifier holding the event itself.
pub const EVENT_COLUMN: &[u8] = b"event";

/// An event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EventType {
    Click,
    Conversion,
    View,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Click => "click",
            EventType::Conversion => "conversion",
            EventType::View => "view",
        }
    }

    /// The type of a name, `None` for no type.
    pub fn parse(name: &str) -> Option<EventType> {
        match name {
            "click" => Some(EventType::Click),
            "conversion" => Some(EventType::Conversion),
            "view" => Some(EventType::View),
            _ => None,
        }
    }
}

/// What an event is about: items, or facet filters (`attribute`, `value`), decoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Target {
    ObjectIds(Vec<String>),
    Filters(Vec<(String, String)>),
}

/// A valid event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub event_type: EventType,
    pub event_subtype: Option<String>,
    pub event_name: String,
    pub index: String,
    pub user_token: String,
    pub authenticated_user_token: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
    pub target: Target,
    pub query_id: Option<String>,
    pub positions: Option<Vec<i64>>,
    pub object_data: Option<Vec<Value>>,
    pub value: Option<Value>,
    pub currency: Option<String>,
}

impl Event {
    /// The user the event counts for: the authenticated token when there is one.
    pub fn user(&self) -> &str {
        self.authenticated_user_token
            .as_deref()
            .unwrap_or(&self.user_token)
    }
}

/// The qualifier of an event's counts for one facet: `CSV(event type, event name, facet)`
/// ([`keys::event_qualifier`]).
pub fn qualifier(event_type: EventType, event_name: &str, facet: &str) -> Bytes {
    keys::event_qualifier(event_type.as_str(), event_name, facet)
}

/// The event a raw row keeps (its `e:event` cell), if the row was read with it.
pub fn stored_event(row: &penchant_store::Row) -> Result<Option<Event>> {
    row.latest(FAMILY, EVENT_COLUMN)
        .map(|cell| serde_json::from_slice(&cell.value))
        .transpose()
        .map_err(|e| crate::internal("corrupt event", e))
}

/// The row key of an event, the `occurrence`-th (from 0) of the events identical to it in its
/// request ([`occurrences`]).
///
/// An event is identified by what it says, not by where it stands: its app, its user, its
/// timestamp and a hash of its whole stored form, seeded by how many identical events come
/// before it in the request. So every attempt of a request names the same rows whatever its
/// order or its cut (the same events retried reordered, or split into several requests, or
/// joined into one), and a request that holds the same event twice stores it twice.
pub fn row_key(app: &str, event: &Event, occurrence: usize) -> Result<Bytes> {
    Ok(row_key_of(app, event, &canonical(event)?, occurrence))
}

/// For each event of a request (given in their [`canonical`] forms), how many identical events
/// come before it: the seed of its row key ([`row_key_of`]).
pub fn occurrences<T: AsRef<[u8]>>(canonicals: &[T]) -> Vec<usize> {
    let mut seen: HashMap<&[u8], usize> = HashMap::with_capacity(canonicals.len());
    canonicals
        .iter()
        .map(|c| {
            let n = seen.entry(c.as_ref()).or_default();
            *n += 1;
            *n - 1
        })
        .collect()
}

/// An event as stored, and as hashed into its row key.
pub fn canonical(event: &Event) -> Result<Vec<u8>> {
    serde_json::to_vec(event).map_err(|e| crate::internal("serialization", e))
}

/// [`row_key`], from the event's [`canonical`] form.
pub fn row_key_of(app: &str, event: &Event, canonical: &[u8], occurrence: usize) -> Bytes {
    let discriminator = xxhash_rust::xxh3::xxh3_64_with_seed(canonical, occurrence as u64);
    keys::event(app, event.user(), event.timestamp, discriminator)
}

/// An event's counts: facet → value → how many times the event touched it.
pub type Facets = BTreeMap<String, BTreeMap<String, u64>>;

/// An event a batch stores (the engine's `Events::prepare`): its row key, its counts per facet and value, and
/// how many items it waits for.
#[derive(Debug, Clone)]
pub struct Stored<'e> {
    pub event: &'e Event,
    pub key: Bytes,
    pub counts: Facets,
    /// How many of its objectIDs have no record yet (the engine's `events::waiting`).
    pub waiting: usize,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A view of `item` by `user` (the model's tests share it).
    pub(crate) fn view(user: &str, item: &str, timestamp: i64) -> Event {
        Event {
            event_type: EventType::View,
            event_subtype: None,
            event_name: "Viewed".into(),
            index: "products".into(),
            user_token: user.into(),
            authenticated_user_token: None,
            timestamp,
            target: Target::ObjectIds(vec![item.into()]),
            query_id: None,
            positions: None,
            object_data: None,
            value: None,
            currency: None,
        }
    }

    fn keys_of(events: &[Event]) -> Vec<Bytes> {
        let canonicals: Vec<Vec<u8>> = events.iter().map(|e| canonical(e).unwrap()).collect();
        events
            .iter()
            .zip(&canonicals)
            .zip(occurrences(&canonicals))
            .map(|((e, c), n)| row_key_of("app", e, c, n))
            .collect()
    }

    #[test]
    fn an_event_is_named_by_what_it_says_and_its_occurrence_not_its_position() {
        let (a, b, c) = (
            view("u1", "a", 10),
            view("u1", "b", 10),
            view("u2", "a", 11),
        );
        // The same view twice in one request is two events.
        let request = [a.clone(), b.clone(), a.clone(), c.clone()];
        let keys = keys_of(&request);
        assert_ne!(keys[0], keys[2]);
        let sorted = |mut k: Vec<Bytes>| {
            k.sort();
            k
        };
        // Reordered: the same rows.
        let reordered = [c.clone(), a.clone(), a.clone(), b.clone()];
        assert_eq!(sorted(keys_of(&reordered)), sorted(keys.clone()));
        // Cut in two (each copy of `a` in its own part: the first of each is the first
        // occurrence), or in two other parts: rows among the first attempt's.
        for parts in [
            [vec![a.clone(), b.clone()], vec![a.clone(), c.clone()]],
            [vec![c.clone(), a.clone(), a.clone()], vec![b.clone()]],
        ] {
            for part in parts {
                for key in keys_of(&part) {
                    assert!(
                        keys.contains(&key),
                        "a part names a row the request did not"
                    );
                }
            }
        }
        // One field apart: another event.
        assert!(!keys.contains(&keys_of(&[view("u1", "a", 12)])[0]));
        assert_eq!(
            occurrences(&[b"x".as_slice(), b"y", b"x", b"x"]),
            [0, 0, 1, 2]
        );
    }

    #[test]
    fn qualifiers_are_csv() {
        assert_eq!(
            &qualifier(EventType::View, "Viewed, twice", "brand")[..],
            b"view,\"Viewed, twice\",brand"
        );
        assert_eq!(
            &qualifier(EventType::Click, "a\"b", "c")[..],
            b"click,\"a\"\"b\",c"
        );
        for (t, name, facet) in [
            ("view", "Viewed, twice", "brand"),
            ("click", "a\"b", ""),
            ("x", "", "\""),
        ] {
            let q = keys::event_qualifier(t, name, facet);
            assert_eq!(
                keys::parse_event_qualifier(&q),
                Some([t.to_owned(), name.to_owned(), facet.to_owned()])
            );
        }
        assert_eq!(keys::parse_event_qualifier(b"a,b"), None);
        assert_eq!(keys::parse_event_qualifier(b"a,\"b,c"), None);
    }
}
