//! What tells a retry from new events.
//!
//! An event is stored once whatever the number of attempts of its request, their order and
//! their cut: its row is named by what it says and its occurrence among the identical events of
//! its request ([`super::row_key`]), and an attempt stores only the events whose rows are not
//! there yet. Two things would still make a retry look new; they are remembered in table
//! `retries` ([`crate::tables::RETRIES`]):
//!
//! - **An event without a timestamp** is stamped with its request's arrival. A retry of it
//!   arrives later, so it would be another event: the arrival of each such event is kept for
//!   [`RETRY_WINDOW`], under its identity ([`arrival_ids`]: what it says but its timestamp, and
//!   its occurrence among the identical ones of its request), and an attempt within the window
//!   takes the first attempt's arrival for it. Past the window, the same event is a new one (a
//!   user who views the same item again).
//! - **A batch answered**: an attempt of a request that read what is stored before an earlier
//!   attempt stored it, and was held up until that one had answered, would count the events
//!   again; so a batch's answer is kept for [`ANSWERED_FOR`] (`penchant_engine::pending`).

use std::time::Duration;

use bytes::Bytes;

use super::{Event, canonical, occurrences};
use crate::Result;

/// How long the arrival of an event without a timestamp is remembered: longer than any client
/// retries a request (Algolia's clients give up on a host after seconds, and on a request
/// after a few hosts), shorter than a user takes to do the same thing again, usually.
pub const RETRY_WINDOW: Duration = Duration::from_secs(10 * 60);

/// How long a batch is remembered as answered: far past any stall of an attempt in flight.
pub const ANSWERED_FOR: Duration = Duration::from_secs(24 * 3600);

/// The identities of events that came without a timestamp (each a column of its user's row of
/// arrivals): a hash of the event as stored with no timestamp, seeded by how many identical
/// ones come before it among `events`.
pub fn arrival_ids(events: &[&Event]) -> Result<Vec<Bytes>> {
    let canonicals = events
        .iter()
        .map(|e| {
            canonical(&Event {
                timestamp: 0,
                ..(*e).clone()
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(canonicals
        .iter()
        .zip(occurrences(&canonicals))
        .map(|(c, n)| {
            let id = xxhash_rust::xxh3::xxh3_64_with_seed(c, n as u64);
            Bytes::copy_from_slice(&id.to_be_bytes())
        })
        .collect())
}

/// An arrival's cell value: ms since the epoch, i64 BE.
pub fn encode_arrival(ms: i64) -> Bytes {
    Bytes::copy_from_slice(&ms.to_be_bytes())
}

/// [`encode_arrival`]'s inverse.
pub fn decode_arrival(value: &[u8]) -> Option<i64> {
    Some(i64::from_be_bytes(value.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::tests::view;

    #[test]
    fn an_arrival_is_named_by_the_event_without_its_timestamp_and_its_occurrence() {
        let (a, b) = (view("u1", "a", 1), view("u1", "b", 1));
        let first = arrival_ids(&[&a, &b, &a]).unwrap();
        assert_ne!(first[0], first[2], "the same view twice: two events");
        // Retried later (another stamp), reordered, or cut: the same identities.
        let (a2, b2) = (view("u1", "a", 99), view("u1", "b", 99));
        let again = arrival_ids(&[&b2, &a2, &a2]).unwrap();
        assert_eq!(
            again,
            [first[1].clone(), first[0].clone(), first[2].clone()]
        );
        assert_eq!(arrival_ids(&[&a2]).unwrap(), [first[0].clone()]);
        assert_ne!(arrival_ids(&[&view("u2", "a", 1)]).unwrap()[0], first[0]);
        assert_eq!(decode_arrival(&encode_arrival(-7)), Some(-7));
        assert_eq!(decode_arrival(b"short"), None);
    }
}
