//! Insights events (validated at the edge, `penchant-server`'s `protocol::insights`), stored in
//! the seed's wide schema or its narrow one, per app ([`layout`]).
//!
//! Storage (table `events`, families `e`, `click`, `conversion`, `view`, 90-day age GC): one
//! row per event,
//! [`keys::event`] `app 0 · user 0 · timestamp ms (u64 BE) · discriminator (u64 BE)`, so one user's events
//! are one contiguous key range in time order. The user is the `authenticatedUserToken` when
//! there is one, else the `userToken`. The discriminator is a hash of the event and its place in
//! the request: a retried request whose events carry their `timestamp` names the same rows, which
//! [`Events::prepare`] finds stored and skips (no double counting; an event without one is
//! stamped when it arrives), two identical events of one request stay two. Column `e:event` keeps the event itself; its
//! counts — each facet's values as a JSON object (`{"Apple": 2}`), resolved from the catalog
//! (objectIDs) or the filters when the event arrives — are stored in the app's [`Layout`] (in
//! both during a migration, [`migration`]). Every cell's timestamp is the event's.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{Mutation, ReadRows, RowFilter, RowMutation, RowSet, Store, TableMutation};

use crate::Result;
use crate::catalog::Catalog;

pub mod migration;
pub mod waiting;

pub use penchant_model::events::retries;
pub use penchant_model::events::{
    EVENT_COLUMN, Event, EventType, Facets, Layout, Stored, Target, canonical, layout, occurrences,
    qualifier, row_key, row_key_of, stored_event,
};
pub use penchant_model::tables::{
    EVENTS, EVENTS_FAMILY as FAMILY, EVENTS_RETENTION as RETENTION, EVENTS_TABLE,
};

/// Writes events to the store.
#[derive(Debug, Clone)]
pub struct Events {
    store: Arc<dyn Store>,
    catalog: Catalog,
}

impl Events {
    pub fn new(store: Arc<dyn Store>, catalog: Catalog) -> Self {
        Self { store, catalog }
    }

    /// The facet counts of each event: from the catalog records of its objectIDs (as they are
    /// now), or from its filters; and the objectIDs it names that have no record (yet).
    async fn facets(&self, app: &str, events: &[Event]) -> Result<Vec<(Facets, Vec<String>)>> {
        let mut wanted: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for e in events {
            if let Target::ObjectIds(ids) = &e.target {
                wanted
                    .entry(&e.index)
                    .or_default()
                    .extend(ids.iter().cloned());
            }
        }
        let mut items = BTreeMap::new();
        for (index, mut ids) in wanted {
            ids.sort();
            ids.dedup();
            items.insert(index, self.catalog.facets_many(app, index, &ids).await?);
        }
        Ok(events
            .iter()
            .map(|e| {
                let mut counts = Facets::new();
                let mut add = |facet: String, value: String| {
                    *counts.entry(facet).or_default().entry(value).or_default() += 1;
                };
                let found = items.get(e.index.as_str());
                match &e.target {
                    Target::ObjectIds(ids) => {
                        for id in ids {
                            let item = found.and_then(|r| r.get(id));
                            for (facet, value) in item.iter().flat_map(|f| f.iter()) {
                                add(facet.clone(), value.clone());
                            }
                        }
                    }
                    Target::Filters(filters) => {
                        for (facet, value) in filters {
                            add(facet.clone(), value.clone());
                        }
                    }
                }
                let mut missing = waiting::missing(e, found);
                // An objectID no record can have never arrives.
                missing.retain(|id| crate::catalog::check_object_id(id).is_ok());
                (counts, missing)
            })
            .collect())
    }

    /// Write what [`Events::prepare`] found: the waiting marks, then the event rows.
    pub async fn write(&self, prepared: &mut Prepared<'_>) -> Result<()> {
        let marks = std::mem::take(&mut prepared.marks);
        if !marks.is_empty() {
            marks.write(&*self.store).await?;
        }
        let rows = std::mem::take(&mut prepared.rows);
        self.store.mutate_all(EVENTS_TABLE, rows).await?;
        Ok(())
    }

    /// What storing these events writes: the rows of those not stored yet (one read finds
    /// those a retried request stored already), their counts in each of `layouts` (the app's,
    /// or both during a migration) and their waiting marks. [`Events::write`] writes them, or
    /// the caller does, in one atomic write with their deltas on a store that has one.
    pub async fn prepare<'e>(
        &self,
        app: &str,
        events: &'e [Event],
        layouts: &[Layout],
    ) -> Result<Prepared<'e>> {
        let jsons = events.iter().map(canonical).collect::<Result<Vec<_>>>()?;
        let keys: Vec<Bytes> = events
            .iter()
            .zip(&jsons)
            .zip(occurrences(&jsons))
            .map(|((event, json), occurrence)| row_key_of(app, event, json, occurrence))
            .collect();
        let existing = self.existing(&keys).await?;
        let facets = self.facets(app, events).await?;
        let mut rows = Vec::with_capacity(events.len());
        let mut stored = Vec::with_capacity(events.len());
        let mut marks = waiting::Marks::default();
        for (((event, key), (counts, missing)), json) in
            events.iter().zip(keys).zip(facets).zip(jsons)
        {
            if existing.contains(&key) {
                continue; // Stored by an earlier attempt of the request.
            }
            let ts = event.timestamp * 1000;
            let mut mutations = Vec::with_capacity(counts.len() + 2);
            mutations.push(Mutation::set(FAMILY, EVENT_COLUMN, ts, json));
            for layout in layouts {
                mutations.extend(layout.cells(event.event_type, &event.event_name, &counts, ts)?);
            }
            if !missing.is_empty() {
                marks.add(app, event, &key, &missing, ts);
                mutations.push(waiting::waiting_cell(&missing, ts)?);
            }
            rows.push(RowMutation::new(key.clone(), mutations));
            stored.push(Stored {
                event,
                key,
                counts,
                waiting: missing.len(),
            });
        }
        Ok(Prepared {
            ingested: Ingested { stored },
            rows,
            marks,
        })
    }

    /// Which of these event rows exist (one read, keys only).
    async fn existing(&self, keys: &[Bytes]) -> Result<HashSet<Bytes>> {
        let request = ReadRows::new(RowSet::keys(keys.iter().cloned()))
            .filter(RowFilter::column(FAMILY, EVENT_COLUMN).and(RowFilter::StripValue));
        let rows = self.store.read_all(EVENTS_TABLE, request).await?;
        Ok(rows.into_iter().map(|r| r.key).collect())
    }
}

/// What [`Events::prepare`] found for a batch: the events to store, and the rows to write.
#[derive(Debug)]
pub struct Prepared<'e> {
    pub ingested: Ingested<'e>,
    rows: Vec<RowMutation>,
    marks: waiting::Marks,
}

impl Prepared<'_> {
    /// Its writes (event rows, waiting marks), to make part of one atomic write.
    pub fn writes(&mut self) -> Vec<TableMutation> {
        let mut writes: Vec<TableMutation> = std::mem::take(&mut self.rows)
            .into_iter()
            .map(|row| TableMutation::new(EVENTS_TABLE, row))
            .collect();
        writes.extend(std::mem::take(&mut self.marks).into_writes());
        writes
    }
}

/// What storing a batch stores ([`Events::prepare`]).
#[derive(Debug)]
pub struct Ingested<'e> {
    /// The events stored now.
    pub stored: Vec<Stored<'e>>,
}

impl Ingested<'_> {
    /// The raw rows' keys of the events stored now.
    pub fn keys(&self) -> Vec<Bytes> {
        self.stored.iter().map(|s| s.key.clone()).collect()
    }
}
