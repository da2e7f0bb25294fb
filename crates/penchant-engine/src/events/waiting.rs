//! Events that wait for their items: an event naming objectIDs that have no catalog record yet
//! (a shop's catalog sync runs every few minutes or hours, its events all the time) is stored
//! as it came, its known items counted; when a missing record is written, the event's counts
//! gain that item's facet values — from then on, in the streaming path and in a full recompute
//! alike, since both read the raw event's counts.
//!
//! Where it is kept, each cell stamped like its event (so each expires with it):
//!
//! | where | what |
//! |---|---|
//! | the raw event row, `e:waiting` | the objectIDs it still waits for (a JSON array); `e:v`, the row's version once an item arrived ([`crate::writes::write_if_version`]) |
//! | table `waiting` (app rows, family `w`), row `app 0 · index 0 · objectID 0 · event row key` | finds an item's waiting events when its record is written |
//! | the user's profile row, family `w`, a column per waiting event (its row key) | lets a profile read say how many of the user's events wait |
//!
//! The index rows and profile cells are written before the raw rows (no event waits unseen),
//! and deleted once the event has its items. A record's writer looks for waiting events after
//! writing the record, an event's writer looks for its records again after writing the event:
//! whichever comes second sees the other ([`crate::ingest::Ingest::settle_waiting`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{
    Mutation, ReadRows, Row, RowFilter, RowMutation, RowSet, Store, TableMutation,
};

use super::{EVENT_COLUMN, Event, Facets, Layout, Target};
use crate::catalog::Catalog;
use crate::writes::{VERSION, write_if_version};
use crate::{EngineError, Result, keys};
use penchant_model::tables::{
    EVENTS_FAMILY as FAMILY, EVENTS_TABLE, PROFILES_TABLE,
    PROFILES_WAITING_FAMILY as WAITING_FAMILY, WAITING_INDEX_FAMILY as WAITING_FAMILY_INDEX,
};
pub use penchant_model::tables::{WAITING, WAITING_TABLE};

/// The raw event's column listing the objectIDs it waits for.
pub const WAITING_COLUMN: &[u8] = b"waiting";

fn corrupt(e: impl std::fmt::Display) -> EngineError {
    crate::internal("corrupt waiting event", e)
}

/// The rows that mark events as waiting, written before the events: index rows (table
/// `waiting`) and the users' profile cells.
#[derive(Debug, Default)]
pub struct Marks {
    index: Vec<RowMutation>,
    profiles: BTreeMap<Bytes, Vec<Mutation>>,
}

impl Marks {
    /// Mark one event (row `key`, stamped `ts` µs) as waiting for `missing` items.
    pub fn add(&mut self, app: &str, event: &Event, key: &Bytes, missing: &[String], ts: i64) {
        for id in missing {
            self.index.push(RowMutation::new(
                keys::waiting(app, &event.index, id, key),
                vec![Mutation::set(WAITING_FAMILY_INDEX, "e", ts, Vec::new())],
            ));
        }
        self.profiles
            .entry(keys::profile(app, event.user()))
            .or_default()
            .push(Mutation::set(WAITING_FAMILY, key.clone(), ts, Vec::new()));
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Them, as part of an atomic write.
    pub fn into_writes(self) -> Vec<TableMutation> {
        let index = self
            .index
            .into_iter()
            .map(|row| TableMutation::new(WAITING_TABLE, row));
        let profiles = self
            .profiles
            .into_iter()
            .map(|(key, cells)| TableMutation::new(PROFILES_TABLE, RowMutation::new(key, cells)));
        index.chain(profiles).collect()
    }

    /// Write them (both tables at once).
    pub async fn write(self, store: &dyn Store) -> Result<()> {
        let profiles = self
            .profiles
            .into_iter()
            .map(|(key, cells)| RowMutation::new(key, cells))
            .collect();
        futures::try_join!(
            store.mutate_all(WAITING_TABLE, self.index),
            store.mutate_all(PROFILES_TABLE, profiles)
        )?;
        Ok(())
    }
}

/// The cell of a raw event row listing what it waits for.
pub fn waiting_cell(missing: &[String], ts: i64) -> Result<Mutation> {
    let json = serde_json::to_vec(missing).map_err(|e| crate::internal("serialization", e))?;
    Ok(Mutation::set(FAMILY, WAITING_COLUMN, ts, json))
}

/// An event whose items arrived, as [`settle`] wrote it.
#[derive(Debug)]
pub struct Settled {
    pub event: Event,
    pub key: Bytes,
    /// The items counted now.
    pub arrived: Vec<String>,
    /// Whether it waits for nothing more.
    pub done: bool,
}

/// What [`plan`] found: the rows to write and the index entries that are stale.
#[derive(Debug, Default)]
pub struct Plan {
    pub settled: Vec<Settled>,
    writes: Vec<(Bytes, u64, Vec<Mutation>)>,
    /// Events that were given items by another writer since `expected` said they waited
    /// for more: their days are rebuilt all the same.
    pub changed_elsewhere: Vec<Event>,
    /// What each event read waited for, by row key.
    pub waits: HashMap<Bytes, Vec<String>>,
}

/// The raw rows of `keys` with what settling reads: the event, its waiting list and version,
/// and its counts in each of `layouts`.
async fn read_rows(store: &dyn Store, keys: &[Bytes], layouts: &[Layout]) -> Result<Vec<Row>> {
    let mut filters: Vec<RowFilter> = layouts.iter().map(|l| l.counts_filter()).collect();
    filters.extend([
        RowFilter::column(FAMILY, EVENT_COLUMN),
        RowFilter::column(FAMILY, WAITING_COLUMN),
        RowFilter::column(FAMILY, VERSION),
    ]);
    let request =
        ReadRows::new(RowSet::keys(keys.iter().cloned())).filter(RowFilter::Interleave(filters));
    Ok(store.read_all(EVENTS_TABLE, request).await?)
}

/// The events of `keys` (raw event rows) whose waited-for items now have records, with the
/// writes that count them: each event's counts in `layouts` plus the arrived items' facet
/// values, and its shorter waiting list. `expected`: how many items an event waited for when
/// its writer stored it (its writer settles it): fewer now means another writer settled it.
pub async fn plan(
    store: &dyn Store,
    catalog: &Catalog,
    app: &str,
    keys: &[Bytes],
    layouts: &[Layout],
    expected: &HashMap<Bytes, usize>,
) -> Result<Plan> {
    let rows = read_rows(store, keys, layouts).await?;
    let mut waiting = Vec::with_capacity(rows.len());
    let mut wanted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for row in &rows {
        let Some(json) = row.latest(FAMILY, EVENT_COLUMN) else {
            continue;
        };
        let event: Event = serde_json::from_slice(&json.value).map_err(corrupt)?;
        let ids: Vec<String> = match row.latest(FAMILY, WAITING_COLUMN) {
            Some(cell) => serde_json::from_slice(&cell.value).map_err(corrupt)?,
            None => Vec::new(),
        };
        wanted
            .entry(event.index.clone())
            .or_default()
            .extend(ids.iter().cloned());
        waiting.push((row, event, ids));
    }
    let mut found = BTreeMap::new();
    for (index, ids) in wanted {
        let ids: Vec<String> = ids.into_iter().collect();
        found.insert(index.clone(), catalog.facets_many(app, &index, &ids).await?);
    }
    let mut plan = Plan::default();
    for (row, event, ids) in waiting {
        plan.waits.insert(row.key.clone(), ids.clone());
        if expected.get(&row.key).is_some_and(|n| ids.len() < *n) {
            plan.changed_elsewhere.push(event.clone());
        }
        let items = found.get(&event.index);
        let (arrived, rest): (Vec<String>, Vec<String>) = ids
            .into_iter()
            .partition(|id| items.is_some_and(|f| f.contains_key(id)));
        if arrived.is_empty() {
            continue;
        }
        let ts = row.latest(FAMILY, EVENT_COLUMN).map_or(0, |c| c.timestamp);
        let version = row
            .latest(FAMILY, VERSION)
            .and_then(|c| std::str::from_utf8(&c.value).ok()?.parse().ok())
            .unwrap_or(0);
        let mut mutations = Vec::new();
        for layout in layouts {
            let mut counts: Facets = layout
                .read_counts(row)?
                .map(|(_, _, counts)| counts)
                .unwrap_or_default();
            for id in &arrived {
                for (facet, value) in items.and_then(|f| f.get(id)).iter().flat_map(|f| f.iter()) {
                    *counts
                        .entry(facet.clone())
                        .or_default()
                        .entry(value.clone())
                        .or_default() += 1;
                }
            }
            mutations.extend(layout.cells(event.event_type, &event.event_name, &counts, ts)?);
        }
        mutations.push(Mutation::delete_column(FAMILY, WAITING_COLUMN));
        if !rest.is_empty() {
            mutations.push(waiting_cell(&rest, ts)?);
        }
        plan.writes.push((row.key.clone(), version, mutations));
        plan.settled.push(Settled {
            key: row.key.clone(),
            done: rest.is_empty(),
            event,
            arrived,
        });
    }
    Ok(plan)
}

impl Plan {
    /// Write the events' new counts, each only if no other writer changed its row since it
    /// was read (that one counted the items). Returns the events written.
    pub async fn write(&mut self, store: &dyn Store) -> Result<()> {
        let mut written = BTreeSet::new();
        for (key, version, mutations) in std::mem::take(&mut self.writes) {
            if write_if_version(store, EVENTS_TABLE, key.clone(), FAMILY, version, mutations)
                .await?
            {
                written.insert(key);
            }
        }
        self.settled.retain(|s| written.contains(&s.key));
        Ok(())
    }

    /// Forget the marks of what was settled: the index rows of the arrived items, the
    /// profile cells of events that wait for nothing more; and `stale` index rows.
    pub async fn unmark(&self, store: &dyn Store, app: &str, stale: &[Bytes]) -> Result<()> {
        let mut index: Vec<RowMutation> = stale
            .iter()
            .map(|k| RowMutation::new(k.clone(), vec![Mutation::DeleteFromRow]))
            .collect();
        let mut profiles: BTreeMap<Bytes, Vec<Mutation>> = BTreeMap::new();
        for s in &self.settled {
            for id in &s.arrived {
                index.push(RowMutation::new(
                    keys::waiting(app, &s.event.index, id, &s.key),
                    vec![Mutation::DeleteFromRow],
                ));
            }
            if s.done {
                profiles
                    .entry(keys::profile(app, s.event.user()))
                    .or_default()
                    .push(Mutation::delete_column(WAITING_FAMILY, s.key.clone()));
            }
        }
        let profiles = profiles
            .into_iter()
            .map(|(key, cells)| RowMutation::new(key, cells))
            .collect();
        futures::try_join!(
            store.mutate_all(WAITING_TABLE, index),
            store.mutate_all(PROFILES_TABLE, profiles)
        )?;
        Ok(())
    }
}

/// An index row: the item waited for, and the waiting event's row key.
#[derive(Debug, Clone)]
pub struct Entry {
    pub row: Bytes,
    pub object_id: String,
    pub event: Bytes,
}

/// The waiting events of some items of one index (one read).
pub async fn waiting_for(
    store: &dyn Store,
    app: &str,
    index: &str,
    object_ids: &[String],
) -> Result<Vec<Entry>> {
    if object_ids.is_empty() {
        return Ok(Vec::new());
    }
    let ranges = object_ids
        .iter()
        .map(|id| penchant_store::RowRange::prefix(keys::waiting_for(app, index, id)))
        .collect();
    let request = ReadRows::new(RowSet {
        keys: Vec::new(),
        ranges,
    })
    .filter(RowFilter::StripValue);
    let rows = store.read_all(WAITING_TABLE, request).await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let (object_id, event) = keys::waiting_of(app, index, &r.key)?;
            Some(Entry {
                object_id: object_id.to_owned(),
                event: Bytes::copy_from_slice(event),
                row: r.key,
            })
        })
        .collect())
}

/// The index rows of a user's waiting events (to delete with the user), from the event keys
/// their profile row lists.
pub async fn index_rows_of(
    store: &Arc<dyn Store>,
    app: &str,
    event_keys: Vec<Bytes>,
) -> Result<Vec<Bytes>> {
    if event_keys.is_empty() {
        return Ok(Vec::new());
    }
    let rows = read_rows(&**store, &event_keys, &[]).await?;
    let mut out = Vec::new();
    for row in &rows {
        let (Some(event), Some(ids)) = (
            row.latest(FAMILY, EVENT_COLUMN),
            row.latest(FAMILY, WAITING_COLUMN),
        ) else {
            continue;
        };
        let event: Event = serde_json::from_slice(&event.value).map_err(corrupt)?;
        let ids: Vec<String> = serde_json::from_slice(&ids.value).map_err(corrupt)?;
        out.extend(
            ids.iter()
                .map(|id| keys::waiting(app, &event.index, id, &row.key)),
        );
    }
    Ok(out)
}

/// Forget the marks a settlement left behind for one user (it stopped after counting the
/// items, before deleting the marks: the repair calls this): for each event the user's profile
/// row lists as waiting, the index rows of its items it no longer waits for, and the profile
/// cell once it waits for nothing. An event whose raw row is not there (yet: marks are written
/// before the raw rows) keeps its marks. Returns how many events stopped being marked.
pub async fn reconcile(store: &dyn Store, app: &str, user: &str) -> Result<usize> {
    let profile_key = keys::profile(app, user);
    let filter = RowFilter::FamilyRegex(WAITING_FAMILY.to_owned()).and(RowFilter::StripValue);
    let Some(profile) = store
        .read_row(PROFILES_TABLE, profile_key.clone(), Some(filter))
        .await?
    else {
        return Ok(0);
    };
    let marked: Vec<Bytes> = profile
        .family(WAITING_FAMILY)
        .map(|c| c.qualifier.clone())
        .collect();
    if marked.is_empty() {
        return Ok(0);
    }
    let mut index = Vec::new();
    let mut cells = Vec::new();
    for row in read_rows(store, &marked, &[]).await? {
        let Some(json) = row.latest(FAMILY, EVENT_COLUMN) else {
            continue;
        };
        let event: Event = serde_json::from_slice(&json.value).map_err(corrupt)?;
        let waits: Vec<String> = match row.latest(FAMILY, WAITING_COLUMN) {
            Some(cell) => serde_json::from_slice(&cell.value).map_err(corrupt)?,
            None => Vec::new(),
        };
        if let Target::ObjectIds(ids) = &event.target {
            index.extend(ids.iter().filter(|id| !waits.contains(id)).map(|id| {
                RowMutation::new(
                    keys::waiting(app, &event.index, id, &row.key),
                    vec![Mutation::DeleteFromRow],
                )
            }));
        }
        if waits.is_empty() {
            cells.push(Mutation::delete_column(WAITING_FAMILY, row.key.clone()));
        }
    }
    let unmarked = cells.len();
    if !index.is_empty() {
        store.mutate_all(WAITING_TABLE, index).await?;
    }
    if !cells.is_empty() {
        store.mutate_row(PROFILES_TABLE, profile_key, cells).await?;
    }
    Ok(unmarked)
}

/// The objectIDs of an event that have no record among `found` (its index's records).
pub fn missing<T>(event: &Event, found: Option<&BTreeMap<String, T>>) -> Vec<String> {
    let Target::ObjectIds(ids) = &event.target else {
        return Vec::new();
    };
    let mut out: Vec<String> = ids
        .iter()
        .filter(|id| !found.is_some_and(|f| f.contains_key(*id)))
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Per app, how many events this node stored waiting for items, and how many it saw get the
/// last of theirs (for `/metrics`).
#[derive(Debug, Default)]
pub struct Counts(std::sync::Mutex<BTreeMap<String, (u64, u64)>>);

impl Counts {
    pub fn add(&self, app: &str, waiting: u64, counted: u64) {
        if waiting + counted == 0 {
            return;
        }
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let entry = counts.entry(app.to_owned()).or_default();
        entry.0 += waiting;
        entry.1 += counted;
    }

    /// `(app, stored waiting, counted later)` for each app.
    pub fn snapshot(&self) -> Vec<(String, u64, u64)> {
        let counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        counts
            .iter()
            .map(|(a, (w, c))| (a.clone(), *w, *c))
            .collect()
    }
}
