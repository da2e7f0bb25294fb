//! Item-to-item lists from co-interaction: `bought-together` (items converted by the same user
//! on the same day) and `related-products` (items clicked or converted by the same user within
//! the app's retention window).
//!
//! Built in one pass over the app's events (a batch job, [`build`]): events come user by user,
//! so each user's items are gathered, paired and forgotten. A pair's score is its count over the
//! geometric mean of its items' counts (`n(a,b) / √(n(a)·n(b))`, the cosine of the items'
//! user columns), in `(0, 1]`, so popular items do not crowd every list. Each user (or
//! user-day) counts its [`MAX_ITEMS_PER_USER`] latest items only, so a bot with 50,000 clicks
//! costs what a person does.
//!
//! Table `related`, family `r`, row [`keys::related`] `app 0 · index 0 · model 0 · objectID`:
//! one cell `r:items`, the item's [`NEIGHBOURS`] best pairs ([`super::encode_ranked`]). A build
//! stamps every cell with one time and then deletes the rows of the app with an older cell:
//! readers see the previous list or the new one, never a mix of half of each.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::TryStreamExt;
use penchant_store::{
    Mutation, ReadRows, RowFilter, RowMutation, RowSet, Store, TimeRange, Workload,
};

use super::{Ranked, decode_ranked, encode_ranked};
use crate::aggregates::day_of;
use crate::events::{self, Event, EventType, Target};
use crate::{Result, internal, keys};
use penchant_model::tables::RELATED_FAMILY as FAMILY;
pub use penchant_model::tables::{RELATED, RELATED_TABLE};

const COLUMN: &[u8] = b"items";
pub use penchant_model::recommend::related::{MAX_ITEMS_PER_USER, NEIGHBOURS};

/// The two co-interaction models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Links {
    /// Converted by the same user on the same day.
    BoughtTogether,
    /// Clicked or converted by the same user.
    Related,
}

impl Links {
    pub fn name(self) -> &'static str {
        match self {
            Links::BoughtTogether => "bought-together",
            Links::Related => "related-products",
        }
    }
}

/// An item's list of a model, best first (empty when it has none).
pub(crate) async fn list(
    store: &Arc<dyn Store>,
    app: &str,
    index: &str,
    links: Links,
    object_id: &str,
) -> Result<Ranked> {
    Ok(list_built(store, app, index, links, object_id).await?.0)
}

/// An item's list of a model, best first, and when the build that wrote it ran (ms; `None`
/// without a list).
pub(crate) async fn list_built(
    store: &Arc<dyn Store>,
    app: &str,
    index: &str,
    links: Links,
    object_id: &str,
) -> Result<(Ranked, Option<i64>)> {
    let key = keys::related(app, index, links.name(), object_id);
    let row = store.read_row(RELATED_TABLE, key, None).await?;
    let Some(cell) = row.as_ref().and_then(|r| r.latest(FAMILY, COLUMN)) else {
        return Ok((Vec::new(), None));
    };
    // A list an older build wrote with an objectID too long for its encoding reads as
    // corrupt: the item has no list (the request falls back) rather than a 500 until a rebuild.
    let list = decode_ranked(&cell.value).unwrap_or_else(|e| {
        tracing::warn!(%app, %index, model = links.name(), error = %e, "unreadable list, ignored");
        Vec::new()
    });
    // A build stamps every list it writes with its start (µs).
    Ok((list, Some(cell.timestamp / 1000)))
}

/// Pair counts of one model, items interned.
#[derive(Debug, Default)]
struct Counts {
    items: HashMap<u32, u32>,
    pairs: HashMap<(u32, u32), u32>,
}

impl Counts {
    /// Count one group (a user's, or a user-day's) of distinct items.
    fn group(&mut self, group: &[u32]) {
        for (i, &a) in group.iter().enumerate() {
            *self.items.entry(a).or_default() += 1;
            for &b in &group[i + 1..] {
                let pair = if a < b { (a, b) } else { (b, a) };
                *self.pairs.entry(pair).or_default() += 1;
            }
        }
    }

    /// Each item's best neighbours.
    fn lists(&self) -> HashMap<u32, Vec<(u32, f32)>> {
        let mut lists: HashMap<u32, Vec<(u32, f32)>> = HashMap::new();
        for (&(a, b), &n) in &self.pairs {
            let (na, nb) = (self.items[&a], self.items[&b]);
            let score = (f64::from(n) / (f64::from(na) * f64::from(nb)).sqrt()) as f32;
            lists.entry(a).or_default().push((b, score));
            lists.entry(b).or_default().push((a, score));
        }
        for list in lists.values_mut() {
            list.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
            list.truncate(NEIGHBOURS);
        }
        lists
    }
}

/// One user's items, as the scan gathers them.
#[derive(Debug, Default)]
struct User {
    /// Clicked or converted, latest last.
    liked: Vec<u32>,
    /// Converted, by day, latest last.
    converted: BTreeMap<i64, Vec<u32>>,
}

/// The latest `MAX_ITEMS_PER_USER` distinct items of a group, sorted.
fn distinct_latest(items: &[u32]) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for &item in items.iter().rev() {
        if out.len() == MAX_ITEMS_PER_USER {
            break;
        }
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out.sort_unstable();
    out
}

/// Rebuild both models' lists of every index of the app from its events since `since` (ms);
/// `events_read` counts the events as they are scanned, `skipped` the items left out because
/// their objectID or index name cannot be part of a row key; events named in `negative` ("not
/// for me") pair nothing. Returns how many lists it wrote.
pub(crate) async fn build(
    store: &Arc<dyn Store>,
    app: &str,
    negative: &[String],
    since: i64,
    stamp: i64,
    events_read: &AtomicU64,
    skipped: &AtomicU64,
) -> Result<u64> {
    let batch = penchant_store::for_workload(store, Workload::Batch);
    // Items are interned as (index, objectID).
    let mut names: Vec<(String, String)> = Vec::new();
    let mut ids: HashMap<(String, String), u32> = HashMap::new();
    let mut bought = Counts::default();
    let mut related = Counts::default();
    let flush = |user: &mut User, bought: &mut Counts, related: &mut Counts| {
        related.group(&distinct_latest(&user.liked));
        for day in user.converted.values() {
            bought.group(&distinct_latest(day));
        }
        *user = User::default();
    };
    let request = ReadRows::new(RowSet::prefix(keys::app(app))).filter(
        RowFilter::column(events::FAMILY, events::EVENT_COLUMN).and(RowFilter::TimestampRange(
            TimeRange::new(since.saturating_mul(1000), i64::MAX),
        )),
    );
    let mut rows = batch.read_rows(events::EVENTS_TABLE, request).await?;
    let mut current: Option<String> = None;
    let mut user = User::default();
    while let Some(row) = rows.try_next().await? {
        let Some(token) = keys::user_of(app, &row.key) else {
            continue;
        };
        let Some(cell) = row.latest(events::FAMILY, events::EVENT_COLUMN) else {
            continue;
        };
        events_read.fetch_add(1, Ordering::Relaxed);
        if current.as_deref() != Some(token) {
            flush(&mut user, &mut bought, &mut related);
            current = Some(token.to_owned());
        }
        let event: Event =
            serde_json::from_slice(&cell.value).map_err(|e| internal("corrupt event", e))?;
        let (Target::ObjectIds(items), EventType::Click | EventType::Conversion) =
            (&event.target, event.event_type)
        else {
            continue;
        };
        if negative.contains(&event.event_name) {
            continue;
        }
        // An item that cannot name a row (an objectID or index name longer than a record's,
        // stored before events were checked so) is skipped, not the build failed.
        if crate::catalog::check_index_name(&event.index).is_err() {
            skipped.fetch_add(items.len() as u64, Ordering::Relaxed);
            continue;
        }
        for item in items {
            if crate::catalog::check_object_id(item).is_err() {
                skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let name = (event.index.clone(), item.clone());
            let id = *ids.entry(name.clone()).or_insert_with(|| {
                names.push(name);
                (names.len() - 1) as u32
            });
            user.liked.push(id);
            if event.event_type == EventType::Conversion {
                let day = day_of(event.timestamp);
                user.converted.entry(day).or_default().push(id);
            }
        }
    }
    flush(&mut user, &mut bought, &mut related);
    let mut written = 0;
    for (links, counts) in [(Links::BoughtTogether, &bought), (Links::Related, &related)] {
        let mut writes = Vec::new();
        for (item, list) in counts.lists() {
            let (index, object_id) = &names[item as usize];
            // Pairs never cross indexes: an item's neighbours are records of its index.
            let ranked: Ranked = list
                .into_iter()
                .filter(|(other, _)| names[*other as usize].0 == *index)
                .map(|(other, score)| (names[other as usize].1.clone(), score))
                .collect();
            if ranked.is_empty() {
                continue;
            }
            let key = keys::related(app, index, links.name(), object_id);
            let cell = Mutation::set(FAMILY, COLUMN, stamp, encode_ranked(&ranked));
            writes.push(RowMutation::new(key, vec![cell]));
        }
        written += writes.len() as u64;
        batch.mutate_all(RELATED_TABLE, writes).await?;
    }
    // Lists the build did not write (items with no pair any more) go.
    let older = RowFilter::TimestampRange(TimeRange::new(0, stamp));
    let request = ReadRows::new(RowSet::prefix(keys::app(app))).filter(
        older
            .and(RowFilter::StripValue)
            .and(RowFilter::CellsPerRowLimit(1)),
    );
    batch.delete_read(RELATED_TABLE, request).await?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_score_by_the_cosine_of_their_counts() {
        let mut counts = Counts::default();
        counts.group(&[1, 2, 3]);
        counts.group(&[1, 2]);
        counts.group(&[1]);
        let lists = counts.lists();
        // n(1) = 3, n(2) = 2, n(3) = 1, n(1,2) = 2, n(1,3) = 1, n(2,3) = 1.
        let close = |a: f32, b: f64| (f64::from(a) - b).abs() < 1e-6;
        assert_eq!(lists[&3][0].0, 2, "{:?}", lists[&3]);
        assert!(close(lists[&3][0].1, 1.0 / 2f64.sqrt()));
        assert_eq!(lists[&2][0].0, 1, "{:?}", lists[&2]);
        assert!(close(lists[&1][0].1, 2.0 / 6f64.sqrt()));
        assert_eq!(lists[&1].len(), 2);
    }

    #[test]
    fn a_group_pairs_its_latest_distinct_items() {
        let items: Vec<u32> = (0..200).chain([5, 5, 5]).collect();
        let group = distinct_latest(&items);
        assert_eq!(group.len(), MAX_ITEMS_PER_USER);
        assert!(group.contains(&5) && group.contains(&199) && !group.contains(&100));
    }
}
