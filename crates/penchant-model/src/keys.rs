//! Row keys: the one place that encodes, decodes and validates the key of every row Penchant
//! writes. No other module formats or parses a key.
//!
//! Every key starts with the app and a 0 byte ([`app`]), so an app's data is one contiguous key
//! range in every table — what multi-tenancy, deleting an app and data residency (placing an
//! app's prefix in a region's store) rest on. Rows about one user continue with the user token
//! and a 0 byte ([`user`]), so a user's rows are one range too, and deleting a user is deleting a
//! prefix. The 0 byte separates parts: no app ID, user token, index name or set name may hold
//! one ([`check_user_token`] and the other checks keep them out), else `a\0` would reach `a`'s
//! rows.
//!
//! Each table's row key is listed with the table in the registry (`penchant_engine::tables`).
//!
//! Qualifiers built from data are here too: [`event_qualifier`] (the wide schema's
//! `CSV(event type, event name, facet)`), an aggregate's per-event [`aggregate_delta`] and
//! [`seen_delta`].

use std::ops::Bound;

use bytes::Bytes;
use penchant_store::{RowRange, RowSet};

use crate::{EngineError, Result};

/// The longest user token, in bytes (Algolia's documented 128, and one more as it accepts).
pub const MAX_USER_TOKEN_BYTES: usize = 129;

/// Whether a user token is valid: 1 to 129 of `a-z A-Z 0-9 _ = / + -` (Algolia's pattern), so
/// never the separator.
pub fn user_token_ok(token: &str) -> bool {
    (1..=MAX_USER_TOKEN_BYTES).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'=' | b'/' | b'+' | b'-'))
}

/// Algolia's message for a user token outside its pattern.
pub const USER_TOKEN_MESSAGE: &str = "UserToken must contain only alphanumeric, equal, plus, \
    slash, hyphen, or underscore characters, and be between 1 and 128 characters long";

/// Check a user token that names a user (in a path, or a body).
pub fn check_user_token(token: &str) -> Result<()> {
    if user_token_ok(token) {
        Ok(())
    } else {
        Err(EngineError::Invalid(USER_TOKEN_MESSAGE.into()))
    }
}

/// Check a name that is a key part (a space, a queue): 1 to `max` bytes of letters, digits,
/// `-`, `_` and `.`; the error says what `what` names must be.
pub fn check_name(what: &str, name: &str, max: usize) -> Result<()> {
    let ok = (1..=max).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(EngineError::Invalid(format!(
            "a {what} name must be 1 to {max} letters, digits, '-', '_' or '.'"
        )))
    }
}

/// Whether a key part may go between separators: no 0 byte.
fn part_ok(part: &str) -> bool {
    !part.as_bytes().contains(&0)
}

/// The key prefix of every row of `app`: its ID and a 0 byte, so that no app's prefix is a
/// prefix of another's. Also the whole key of the app's one-row records (its description, its
/// strategy, its job status, its seen settings).
pub fn app(app: &str) -> Bytes {
    debug_assert!(part_ok(app), "app IDs never hold a 0 byte");
    let mut key = Vec::with_capacity(app.len() + 1);
    key.extend_from_slice(app.as_bytes());
    key.push(0);
    Bytes::from(key)
}

/// The app of an `app 0` key (table `jobs`).
pub fn app_of(key: &[u8]) -> Option<&str> {
    std::str::from_utf8(key.strip_suffix(b"\0")?).ok()
}

fn app_and(app_id: &str, rest: &[&[u8]]) -> Vec<u8> {
    let mut key =
        Vec::with_capacity(app_id.len() + 1 + rest.iter().map(|r| r.len()).sum::<usize>());
    key.extend_from_slice(&app(app_id));
    for part in rest {
        key.extend_from_slice(part);
    }
    key
}

/// The prefix of every row of one user of an app (events, aggregates, seen filter).
pub fn user(app_id: &str, user: &str) -> Bytes {
    debug_assert!(
        part_ok(user),
        "user tokens are checked before they reach a key"
    );
    Bytes::from(app_and(app_id, &[user.as_bytes(), b"\0"]))
}

/// The user of a row keyed `app 0 · user 0 · ...` (events, aggregates), or of a store split
/// point inside such rows.
pub fn user_of<'k>(app_id: &str, key: &'k [u8]) -> Option<&'k str> {
    let rest = key.strip_prefix(&app(app_id)[..])?;
    let end = rest.iter().position(|b| *b == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// The app and user of a row keyed `app 0 · user 0 · ...` (events, aggregates).
pub fn app_and_user_of(key: &[u8]) -> Option<(&str, &str)> {
    let app_end = key.iter().position(|b| *b == 0)?;
    let rest = &key[app_end + 1..];
    let user_end = rest.iter().position(|b| *b == 0)?;
    Some((
        std::str::from_utf8(&key[..app_end]).ok()?,
        std::str::from_utf8(&rest[..user_end]).ok()?,
    ))
}

/// The prefix of an app's ingestion intents in table `events`: `app 0 · 0xFF`, past every user
/// of the app (no user token holds the byte 0xFF), inside the app's prefix.
pub fn intents(app_id: &str) -> Bytes {
    Bytes::from(app_and(app_id, &[b"\xff"]))
}

/// A batch's intent row (table `events`): `app 0 · 0xFF · batch id (u64 BE)`.
pub fn intent(app_id: &str, batch: u64) -> Bytes {
    Bytes::from(app_and(app_id, &[b"\xff", &batch.to_be_bytes()]))
}

/// The batch id of an intent row's key ([`intent`]).
pub fn batch_of_intent(app_id: &str, key: &[u8]) -> Option<u64> {
    let id = key.strip_prefix(&intents(app_id)[..])?;
    Some(u64::from_be_bytes(id.try_into().ok()?))
}

/// A batch's row in table `retries` once an attempt of it answered: `app 0 · 0xFF · batch id
/// (u64 BE)`, the shape of its intent's ([`intent`]).
pub fn answered(app_id: &str, batch: u64) -> Bytes {
    intent(app_id, batch)
}

/// A user's row of arrivals in table `retries`: the user's prefix itself.
pub fn arrivals(app_id: &str, user_token: &str) -> Bytes {
    user(app_id, user_token)
}

/// An API key's row: the app, and the key's SHA-256.
pub fn api_key(app_id: &str, digest: &[u8; 32]) -> Bytes {
    Bytes::from(app_and(app_id, &[digest]))
}

/// The prefix of every record of an index.
pub fn index(app_id: &str, index: &str) -> Bytes {
    debug_assert!(part_ok(index));
    Bytes::from(app_and(app_id, &[index.as_bytes(), b"\0"]))
}

/// The index of an `indexes` row (`app 0 · index 0`).
pub fn index_of<'k>(app_id: &str, key: &'k [u8]) -> Option<&'k str> {
    user_of(app_id, key)
}

/// A catalog record's row.
pub fn record(app_id: &str, index_name: &str, object_id: &str) -> Bytes {
    let mut key = index(app_id, index_name).to_vec();
    key.extend_from_slice(object_id.as_bytes());
    Bytes::from(key)
}

/// The prefix of the events waiting for an item (table `waiting`): `app 0 · index 0 ·
/// objectID 0` (objectIDs of records hold no 0 byte).
pub fn waiting_for(app_id: &str, index_name: &str, object_id: &str) -> Bytes {
    debug_assert!(part_ok(object_id));
    let mut key = record(app_id, index_name, object_id).to_vec();
    key.push(0);
    Bytes::from(key)
}

/// An event waiting for an item: the item's prefix, then the event's row key.
pub fn waiting(app_id: &str, index_name: &str, object_id: &str, event_key: &[u8]) -> Bytes {
    let mut key = waiting_for(app_id, index_name, object_id).to_vec();
    key.extend_from_slice(event_key);
    Bytes::from(key)
}

/// The objectID and event row key of a `waiting` row of an index.
pub fn waiting_of<'k>(
    app_id: &str,
    index_name: &str,
    key: &'k [u8],
) -> Option<(&'k str, &'k [u8])> {
    let rest = key.strip_prefix(&index(app_id, index_name)[..])?;
    let end = rest.iter().position(|b| *b == 0)?;
    Some((std::str::from_utf8(&rest[..end]).ok()?, &rest[end + 1..]))
}

/// An event's row: its user, its time (ms) and a discriminator.
pub fn event(app_id: &str, user_token: &str, ms: i64, discriminator: u64) -> Bytes {
    let mut key = user(app_id, user_token).to_vec();
    key.extend_from_slice(&(ms.max(0) as u64).to_be_bytes());
    key.extend_from_slice(&discriminator.to_be_bytes());
    Bytes::from(key)
}

/// An impression's row: its user, when it was served (ms) and its queryID.
pub fn impression(app_id: &str, user_token: &str, ms: i64, query_id: &str) -> Bytes {
    debug_assert!(part_ok(query_id));
    let mut key = user(app_id, user_token).to_vec();
    key.extend_from_slice(&(ms.max(0) as u64).to_be_bytes());
    key.extend_from_slice(query_id.as_bytes());
    Bytes::from(key)
}

/// The raw event rows of a user from `from` to `until` ms (`[from, until)`).
pub fn events_between(app_id: &str, user_token: &str, from: i64, until: i64) -> RowSet {
    let prefix = user(app_id, user_token);
    let at = |ms: i64| {
        let mut k = prefix.to_vec();
        k.extend_from_slice(&(ms.max(0) as u64).to_be_bytes());
        Bytes::from(k)
    };
    RowSet::range(RowRange::closed_open(at(from), at(until)))
}

/// A user's aggregate row of one day (days since the epoch).
pub fn day(app_id: &str, user_token: &str, day: i64) -> Bytes {
    let mut key = user(app_id, user_token).to_vec();
    key.extend_from_slice(&(day.max(0) as u32).to_be_bytes());
    Bytes::from(key)
}

/// The day of an aggregate row.
pub fn day_of(key: &[u8]) -> Option<i64> {
    let bytes: [u8; 4] = key.get(key.len().checked_sub(4)?..)?.try_into().ok()?;
    Some(i64::from(u32::from_be_bytes(bytes)))
}

/// A user's seen-filter row: the user's prefix itself.
pub fn seen(app_id: &str, user_token: &str) -> Bytes {
    user(app_id, user_token)
}

/// A user's profile row.
pub fn profile(app_id: &str, user_token: &str) -> Bytes {
    debug_assert!(part_ok(user_token));
    Bytes::from(app_and(app_id, &[user_token.as_bytes()]))
}

/// The user of a profile row.
pub fn profile_user<'k>(app_id: &str, key: &'k [u8]) -> Option<&'k str> {
    std::str::from_utf8(key.strip_prefix(&app(app_id)[..])?).ok()
}

/// The rows of users from `start` (or the app's first user) to before `end` (or past its last),
/// skipping every row up to and including user `after`'s, in a table keyed `app 0 · user 0 ·`.
pub fn users_between(
    app_id: &str,
    start: Option<&str>,
    after: Option<&str>,
    end: Option<&str>,
) -> RowRange {
    let at = |user: &str, tail: &[u8]| Bytes::from(app_and(app_id, &[user.as_bytes(), tail]));
    // User tokens never contain bytes below 0x2b: `user 0x01` is past every row of `user` and
    // before every other user's.
    let start = match (after, start) {
        (Some(after), _) => Bound::Included(at(after, b"\x01")),
        (None, Some(start)) => Bound::Included(at(start, b"")),
        (None, None) => Bound::Included(app(app_id)),
    };
    let end = match end {
        Some(end) => Bound::Excluded(at(end, b"")),
        None => match penchant_store::prefix_successor(&app(app_id)) {
            Some(e) => Bound::Excluded(Bytes::from(e)),
            None => Bound::Unbounded,
        },
    };
    RowRange { start, end }
}

/// A set's description row.
pub fn set(app_id: &str, name: &str) -> Bytes {
    debug_assert!(part_ok(name));
    Bytes::from(app_and(app_id, &[name.as_bytes()]))
}

/// The prefix of every partition of a set, of every generation.
pub fn set_partitions(app_id: &str, name: &str) -> Bytes {
    Bytes::from(app_and(app_id, &[name.as_bytes(), b"\0"]))
}

/// The prefix of the partitions of one generation of a set.
pub fn generation(app_id: &str, name: &str, generation: u64) -> Bytes {
    let mut key = set_partitions(app_id, name).to_vec();
    key.extend_from_slice(&generation.to_be_bytes());
    Bytes::from(key)
}

/// One partition's row.
pub fn partition(app_id: &str, name: &str, gen_: u64, partition: u32) -> Bytes {
    let mut key = generation(app_id, name, gen_).to_vec();
    key.extend_from_slice(&partition.to_be_bytes());
    Bytes::from(key)
}

/// A vector space's description row.
pub fn space(app_id: &str, name: &str) -> Bytes {
    debug_assert!(part_ok(name));
    Bytes::from(app_and(app_id, &[name.as_bytes()]))
}

/// The prefix of every item vector of a space: its items are one contiguous range, loaded in
/// one scan.
pub fn space_items(app_id: &str, name: &str) -> Bytes {
    debug_assert!(part_ok(name));
    Bytes::from(app_and(app_id, &[name.as_bytes(), b"\0"]))
}

/// An item's vector row in a space.
pub fn item_vector(app_id: &str, space: &str, object_id: &str) -> Bytes {
    let mut key = space_items(app_id, space).to_vec();
    key.extend_from_slice(object_id.as_bytes());
    Bytes::from(key)
}

/// The objectID of an item vector row of a space.
pub fn item_of<'k>(app_id: &str, space: &str, key: &'k [u8]) -> Option<&'k str> {
    std::str::from_utf8(key.strip_prefix(&space_items(app_id, space)[..])?).ok()
}

/// A user's vectors row (one column per space): the user's prefix, like its seen filter.
pub fn user_vectors(app_id: &str, user_token: &str) -> Bytes {
    user(app_id, user_token)
}

/// One CSV field, quoted when it must be (RFC 4180).
fn csv_field(out: &mut String, field: &str) {
    if field.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&field.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(field);
    }
}

/// The qualifier of an event's (and a day's) counts for one facet, in tables `events` and
/// `aggregates`: `CSV(event type, event name, facet)` — the seed's wide schema.
pub fn event_qualifier(event_type: &str, event_name: &str, facet: &str) -> Bytes {
    let mut q = String::with_capacity(event_name.len() + facet.len() + 16);
    q.push_str(event_type);
    q.push(',');
    csv_field(&mut q, event_name);
    q.push(',');
    csv_field(&mut q, facet);
    Bytes::from(q)
}

/// The three fields of an [`event_qualifier`] (event type, event name, facet), or `None` for a
/// qualifier that is not one.
pub fn parse_event_qualifier(qualifier: &[u8]) -> Option<[String; 3]> {
    let text = std::str::from_utf8(qualifier).ok()?;
    let mut fields: Vec<String> = Vec::with_capacity(3);
    let mut chars = text.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '"' if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    '"' => break,
                    c => field.push(c),
                }
            }
        }
        while let Some(&c) = chars.peek() {
            if c == ',' {
                break;
            }
            field.push(c);
            chars.next();
        }
        fields.push(field);
        if chars.next().is_none() {
            break;
        }
    }
    fields.try_into().ok()
}

/// The byte between an aggregate delta's qualifier and its event id: never in UTF-8, so never in
/// an [`event_qualifier`].
pub const AGGREGATE_DELTA: u8 = 0xFF;
/// The length of an event's id in an aggregate delta: its row's time and discriminator.
pub const EVENT_ID_BYTES: usize = 16;

/// One event's counts for one qualifier in a day's aggregate: `qualifier · 0xFF · event id`,
/// the id being the last 16 bytes of the event's row key ([`event`]) — named by the event, so a
/// rewrite of the same event writes the same cell.
pub fn aggregate_delta(qualifier: &[u8], event_key: &[u8]) -> Bytes {
    let id = event_id(event_key);
    let mut q = Vec::with_capacity(qualifier.len() + 1 + id.len());
    q.extend_from_slice(qualifier);
    q.push(AGGREGATE_DELTA);
    q.extend_from_slice(id);
    Bytes::from(q)
}

/// The id of an event within its user's rows: the last bytes of its row key (its time and
/// discriminator), the end of its aggregate deltas' qualifiers.
pub fn event_id(event_key: &[u8]) -> &[u8] {
    &event_key[event_key.len().saturating_sub(EVENT_ID_BYTES)..]
}

/// A user's event row key from the event's [`event_id`].
pub fn event_with_id(app_id: &str, user_token: &str, id: &[u8]) -> Bytes {
    let mut key = user(app_id, user_token).to_vec();
    key.extend_from_slice(id);
    Bytes::from(key)
}

/// The event id an aggregate delta names, or `None` for a qualifier that is not a delta.
pub fn aggregate_delta_event(qualifier: &[u8]) -> Option<&[u8]> {
    let at = qualifier.len().checked_sub(EVENT_ID_BYTES + 1)?;
    (qualifier[at] == AGGREGATE_DELTA).then(|| &qualifier[at + 1..])
}

/// The qualifier an aggregate delta counts for, or `None` for a qualifier that is not a delta.
pub fn aggregate_delta_base(qualifier: &[u8]) -> Option<&[u8]> {
    let at = qualifier.len().checked_sub(EVENT_ID_BYTES + 1)?;
    (qualifier[at] == AGGREGATE_DELTA).then(|| &qualifier[..at])
}

/// The columns of every aggregate delta of `qualifier`: `[qualifier · 0xFF, successor)`.
pub fn aggregate_deltas_of(qualifier: &[u8]) -> (Bound<Bytes>, Bound<Bytes>) {
    let mut start = qualifier.to_vec();
    start.push(AGGREGATE_DELTA);
    let end = penchant_store::prefix_successor(&start).map(Bytes::from);
    (
        Bound::Included(Bytes::from(start)),
        end.map_or(Bound::Unbounded, Bound::Excluded),
    )
}

/// The first byte of a seen filter's delta column.
pub const SEEN_DELTA: u8 = b'+';

/// A seen filter's delta column: `+`, the writer's time (`nanos`, big-endian: deltas replay in
/// the order they were written, as far as the writers' clocks tell) and random bytes (`salt`:
/// no two adds collide).
pub fn seen_delta(nanos: u64, salt: u32) -> Bytes {
    let mut q = vec![SEEN_DELTA];
    q.extend_from_slice(&nanos.to_be_bytes());
    q.extend_from_slice(&salt.to_be_bytes());
    Bytes::from(q)
}

/// A user's queue row (table `queues`): under the user's prefix, so that deleting the user
/// deletes it.
pub fn queue(app_id: &str, user_token: &str, name: &str) -> Bytes {
    debug_assert!(part_ok(name));
    let mut key = user(app_id, user_token).to_vec();
    key.extend_from_slice(name.as_bytes());
    Bytes::from(key)
}

/// The prefix of an app's queue definitions (table `queues`): `app 0 · 0xFF`, past every user.
pub fn queue_definitions(app_id: &str) -> Bytes {
    Bytes::from(app_and(app_id, &[b"\xff"]))
}

/// An index's learned ranker (table `rankers`): `app 0 · index`.
pub fn ranker(app_id: &str, index: &str) -> Bytes {
    debug_assert!(part_ok(index));
    Bytes::from(app_and(app_id, &[index.as_bytes()]))
}

/// A queue's definition row.
pub fn queue_definition(app_id: &str, name: &str) -> Bytes {
    debug_assert!(part_ok(name));
    Bytes::from(app_and(app_id, &[b"\xff", name.as_bytes()]))
}

/// A named strategy's row (table `strategies`): `app 0 · name` (the app's strategy is `app 0`).
pub fn named_strategy(app_id: &str, name: &str) -> Bytes {
    debug_assert!(part_ok(name));
    Bytes::from(app_and(app_id, &[name.as_bytes()]))
}

/// An A/B test's row (table `abtests`): `app 0 · test ID (u32 BE)`; the app's own row
/// (`app 0`) holds the counter of its test IDs.
pub fn abtest(app_id: &str, id: u32) -> Bytes {
    Bytes::from(app_and(app_id, &[&id.to_be_bytes()]))
}

/// The test ID of an `abtests` row key, if it is a test's.
pub fn abtest_of(app_id: &str, key: &[u8]) -> Option<u32> {
    let rest = key.strip_prefix(&app(app_id)[..])?;
    Some(u32::from_be_bytes(rest.try_into().ok()?))
}

/// A user's counts in an A/B test (table `abtest_users`): under the user's prefix, so that
/// deleting the user deletes them.
pub fn abtest_user(app_id: &str, user_token: &str, id: u32) -> Bytes {
    let mut key = user(app_id, user_token).to_vec();
    key.extend_from_slice(&id.to_be_bytes());
    Bytes::from(key)
}

/// An item-count row of an index's day (table `trending`), one of a few shards.
pub fn trending(app_id: &str, index_name: &str, day: i64, shard: u8) -> Bytes {
    let mut key = index(app_id, index_name).to_vec();
    key.extend_from_slice(&(day.max(0) as u32).to_be_bytes());
    key.push(shard);
    Bytes::from(key)
}

/// The item-count rows of an index's days `[from, until)`.
pub fn trending_days(app_id: &str, index_name: &str, from: i64, until: i64) -> RowSet {
    RowSet::range(RowRange::closed_open(
        trending(app_id, index_name, from, 0),
        trending(app_id, index_name, until, 0),
    ))
}

/// The day of an item-count row.
pub fn trending_day_of(key: &[u8]) -> Option<i64> {
    let bytes: [u8; 4] = key
        .get(key.len().checked_sub(5)?..key.len() - 1)?
        .try_into()
        .ok()?;
    Some(i64::from(u32::from_be_bytes(bytes)))
}

/// The prefix of a model's item lists of an index (table `related`).
pub fn related_model(app_id: &str, index_name: &str, model: &str) -> Bytes {
    debug_assert!(part_ok(model));
    let mut key = index(app_id, index_name).to_vec();
    key.extend_from_slice(model.as_bytes());
    key.push(0);
    Bytes::from(key)
}

/// An item's list of a model (table `related`).
pub fn related(app_id: &str, index_name: &str, model: &str, object_id: &str) -> Bytes {
    let mut key = related_model(app_id, index_name, model).to_vec();
    key.extend_from_slice(object_id.as_bytes());
    Bytes::from(key)
}

/// A lease's row: held by one node at a time (`app 0 · name`; global leases use app `""`).
pub fn lease(app_id: &str, name: &str) -> Bytes {
    Bytes::from(app_and(app_id, &[name.as_bytes()]))
}

/// An app's traffic counts of one hour (table `stats`).
pub fn traffic_hour(app_id: &str, hour: i64) -> Bytes {
    Bytes::from(app_and(app_id, &[&(hour.max(0) as u32).to_be_bytes()]))
}

/// A placement's row (table `placements`): an app's is `app`, a user's `app 0 user` — the
/// start of the unit's rows in every table it places.
pub fn placement(app_id: &str, user: Option<&str>) -> Bytes {
    match user {
        None => Bytes::copy_from_slice(app_id.as_bytes()),
        Some(user) => profile(app_id, user),
    }
}

/// The app and user (`None`: the whole app) of a placement's row.
pub fn placement_of(key: &[u8]) -> Option<(&str, Option<&str>)> {
    let text = std::str::from_utf8(key).ok()?;
    Some(match text.split_once('\0') {
        Some((app, user)) => (app, Some(user)),
        None => (text, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregate_deltas_name_their_event_and_qualifier() {
        let event = event("app", "u", 1_700_000_000_000, 42);
        let q = event_qualifier("view", "Viewed", "brand");
        let delta = aggregate_delta(&q, &event);
        assert_eq!(aggregate_delta_base(&delta), Some(&q[..]));
        assert_eq!(aggregate_delta_event(&delta), Some(event_id(&event)));
        assert_eq!(app_and_user_of(&event), Some(("app", "u")));
        assert_eq!(event_with_id("app", "u", event_id(&event)), event);
        assert_eq!(&delta[delta.len() - 16..], &event[event.len() - 16..]);
        assert_eq!(aggregate_delta_base(&q), None);
        assert_eq!(aggregate_delta_base(b"short"), None);
        // The delta range of `brand` holds its deltas, not `brandName`'s nor `brand` itself.
        let (start, end) = aggregate_deltas_of(&q);
        let other = aggregate_delta(&event_qualifier("view", "Viewed", "brandName"), &event);
        let inside = |k: &[u8]| penchant_store::in_bounds(k, &start, &end);
        assert!(inside(&delta));
        assert!(!inside(&other));
        assert!(!inside(&q));
    }

    #[test]
    fn app_prefixes_never_nest() {
        let a = app("APP");
        let b = app("APP2");
        assert!(!b.starts_with(&a) && !a.starts_with(&b));
        assert!(a < b, "apps sort like their IDs");
    }

    #[test]
    fn keys_decode_what_they_encode() {
        let e = event("APP", "u-1", 1_700_000_000_000, 7);
        assert_eq!(user_of("APP", &e), Some("u-1"));
        assert_eq!(user_of("OTHER", &e), None);
        let d = day("APP", "u-1", 19_700);
        assert_eq!(
            (user_of("APP", &d), day_of(&d)),
            (Some("u-1"), Some(19_700))
        );
        assert!(d.starts_with(&user("APP", "u-1")));
        assert_eq!(profile_user("APP", &profile("APP", "u=1")), Some("u=1"));
        assert_eq!(app_of(&app("APP")), Some("APP"));
        assert!(intent("APP", 7).starts_with(&intents("APP")));
        assert!(intent("APP", 7).starts_with(&app("APP")));
        let all = users_between("APP", None, None, None);
        assert!(
            all.contains(&intent("APP", u64::MAX)),
            "inside the app's range"
        );
        assert!(
            event("APP", "zzz", i64::MAX, u64::MAX) < intent("APP", 0),
            "past every user"
        );
        let p = partition("APP", "s", 5, 2);
        assert!(p.starts_with(&generation("APP", "s", 5)));
        assert!(p.starts_with(&set_partitions("APP", "s")));
        assert!(!p.starts_with(&set_partitions("APP", "s2")));
    }

    #[test]
    fn a_user_range_holds_exactly_its_users() {
        let range = users_between("APP", Some("b"), Some("b"), Some("d"));
        let inside = |k: &Bytes| range.contains(k);
        assert!(!inside(&event("APP", "b", 5, 0)), "after b");
        assert!(inside(&event("APP", "b0", 5, 0)));
        assert!(inside(&day("APP", "c", 1)));
        assert!(!inside(&day("APP", "d", 1)), "end excluded");
        let all = users_between("APP", None, None, None);
        assert!(all.contains(&event("APP", "a", 0, 0)));
        assert!(!all.contains(&event("APQ", "a", 0, 0)));
    }

    #[test]
    fn separators_cannot_hide_in_tokens() {
        assert!(check_user_token("a\0").is_err());
        assert!(check_user_token("a").is_ok());
        assert!(check_user_token(&"x".repeat(130)).is_err());
    }
}
