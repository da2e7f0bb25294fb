//! Data residency: a [`Store`] over several named targets (a Bigtable instance per region, a
//! RocksDB folder each), sending each row to the target its **unit** is placed in, and moving
//! units between targets online.
//!
//! A unit is a key prefix that ends at a boundary: unit `U` holds the row `U` itself and every
//! row starting with `U` and a 0 byte — the key range `[U, U·0x01)`. Every row an app owns
//! starts with its ID and a 0 byte, and every row of one of its users with `app 0 user` (then a
//! 0 byte or the end), so an app is a unit and so is each of its users. A [`Route`] says which
//! target holds a unit and, while the unit moves, which other target is also written. A row
//! belongs to its longest routed unit, else to the default target; routes change at run time
//! ([`PlacedStore::set_routes`]: every node refreshes them from the data that says who lives
//! where).
//!
//! Reads go to the target each row belongs to; a range read goes to every target whose units it
//! touches, keeps from each the rows that belong there, and merges the streams in key order.
//! Writes go to the unit's target and, during a move, to the other one too, with the same cells:
//! server timestamps are resolved here first, a check-and-mutate is decided by the target reads
//! use and its chosen mutations written to both, and a read-modify-write's resulting cells are
//! copied to the other target, so the two hold identical rows for whatever is written during the
//! move. Tables named as pinned (the placement table itself) always stay in the default target.
//! Tables are created, changed and deleted in every target; their schemas are read from the
//! default one.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use parking_lot::RwLock;

use crate::{
    FamilyChange, GcRule, KeySample, Mutation, ReadModifyWriteRule, ReadRows, Result, Row,
    RowFilter, RowMutation, RowRange, RowSet, RowStream, Store, TableSchema, Timestamp, Workload,
    check_batch_size,
};

/// Where a unit's rows are.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route {
    /// The unit: a key prefix ending at a boundary (see the module documentation).
    pub unit: Bytes,
    /// The target reads use (and writes, always).
    pub target: String,
    /// During a move: the other target, written too.
    pub also_written: Option<String>,
    /// The tables the route applies to; `None`: every table. (A user's unit `app 0 user` is
    /// routed in the tables keyed by user only: in the catalog, `app 0 name` is an index.)
    pub tables: Option<Arc<BTreeSet<String>>>,
}

impl Route {
    /// A unit at rest in `target`.
    pub fn at(unit: impl Into<Bytes>, target: impl Into<String>) -> Self {
        Self {
            unit: unit.into(),
            target: target.into(),
            also_written: None,
            tables: None,
        }
    }

    fn applies_to(&self, table: &str) -> bool {
        self.tables.as_ref().is_none_or(|t| t.contains(table))
    }
}

/// The key range of a unit: the row `unit` and the rows starting with `unit · 0`.
pub fn unit_range(unit: &[u8]) -> RowRange {
    let mut end = unit.to_vec();
    end.push(1);
    RowRange::closed_open(Bytes::copy_from_slice(unit), Bytes::from(end))
}

/// The targets and what stays put: shared by a store and its workload views.
#[derive(Debug)]
struct Targets {
    stores: BTreeMap<String, Arc<dyn Store>>,
    default: String,
    pinned: BTreeSet<String>,
}

/// A store routing rows to targets by unit. See the module documentation.
#[derive(Debug, Clone)]
pub struct PlacedStore {
    targets: Arc<Targets>,
    /// Routes by unit; replaced whole when they change.
    routes: Arc<RwLock<Arc<BTreeMap<Bytes, Route>>>>,
}

/// Where one row goes: the target reads use, and the one also written during a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner<'a> {
    target: &'a str,
    also: Option<&'a str>,
}

impl PlacedStore {
    /// A store over named targets, `default` holding every row no route places elsewhere and
    /// the `pinned` tables whole. No unit is routed until [`PlacedStore::set_routes`].
    ///
    /// # Panics
    /// If `default` is not one of the targets.
    pub fn new(
        stores: BTreeMap<String, Arc<dyn Store>>,
        default: &str,
        pinned: impl IntoIterator<Item = String>,
    ) -> Self {
        assert!(stores.contains_key(default), "no target named {default}");
        Self {
            targets: Arc::new(Targets {
                stores,
                default: default.to_owned(),
                pinned: pinned.into_iter().collect(),
            }),
            routes: Arc::default(),
        }
    }

    /// The default target's name.
    pub fn default_target(&self) -> &str {
        &self.targets.default
    }

    /// The targets' names.
    pub fn target_names(&self) -> impl Iterator<Item = &str> {
        self.targets.stores.keys().map(String::as_str)
    }

    /// One target, to read or write it directly (a move's copy; tests).
    pub fn target(&self, name: &str) -> Option<&Arc<dyn Store>> {
        self.targets.stores.get(name)
    }

    /// Replace every route. Routes naming a target this store does not have are refused.
    pub fn set_routes(&self, routes: impl IntoIterator<Item = Route>) -> Result<()> {
        let mut by_unit = BTreeMap::new();
        for route in routes {
            for name in std::iter::once(&route.target).chain(&route.also_written) {
                if !self.targets.stores.contains_key(name) {
                    return Err(crate::StoreError::InvalidArgument(format!(
                        "placement target `{name}` is not configured"
                    )));
                }
            }
            by_unit.insert(route.unit.clone(), route);
        }
        *self.routes.write() = Arc::new(by_unit);
        Ok(())
    }

    /// The routes now, by unit.
    pub fn routes(&self) -> Vec<Route> {
        self.routes.read().values().cloned().collect()
    }

    fn snapshot(&self) -> Arc<BTreeMap<Bytes, Route>> {
        Arc::clone(&self.routes.read())
    }

    fn store(&self, name: &str) -> &Arc<dyn Store> {
        &self.targets.stores[name]
    }

    fn default_owner(&self) -> Owner<'_> {
        Owner {
            target: &self.targets.default,
            also: None,
        }
    }

    /// The longest unit routed in `table` holding `key`.
    fn route_of<'r>(
        routes: &'r BTreeMap<Bytes, Route>,
        table: &str,
        key: &[u8],
    ) -> Option<&'r Route> {
        if routes.is_empty() {
            return None;
        }
        let boundaries = key
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == 0)
            .map(|(i, _)| i);
        std::iter::once(key.len())
            .chain(boundaries.collect::<Vec<_>>().into_iter().rev())
            .find_map(|end| routes.get(&key[..end]).filter(|r| r.applies_to(table)))
    }

    /// The unit a row of `table` belongs to now (`None`: the default target's, unrouted).
    pub fn unit_of(&self, table: &str, key: &[u8]) -> Option<Bytes> {
        if self.targets.pinned.contains(table) {
            return None;
        }
        Self::route_of(&self.snapshot(), table, key).map(|r| r.unit.clone())
    }

    /// Where a row of `table` goes.
    fn owner<'r>(
        &'r self,
        routes: &'r BTreeMap<Bytes, Route>,
        table: &str,
        key: &[u8],
    ) -> Owner<'r> {
        if self.targets.pinned.contains(table) {
            return self.default_owner();
        }
        match Self::route_of(routes, table, key) {
            Some(route) => Owner {
                target: &route.target,
                also: route.also_written.as_deref(),
            },
            None => self.default_owner(),
        }
    }

    /// The targets a row set touches, each with the part of the set it should read.
    fn split(
        &self,
        routes: &BTreeMap<Bytes, Route>,
        table: &str,
        rows: &RowSet,
    ) -> BTreeMap<String, RowSet> {
        let mut out: BTreeMap<String, RowSet> = BTreeMap::new();
        if self.targets.pinned.contains(table) || routes.is_empty() {
            out.insert(self.targets.default.clone(), rows.clone());
            return out;
        }
        for key in &rows.keys {
            let owner = self.owner(routes, table, key);
            out.entry(owner.target.to_owned())
                .or_default()
                .keys
                .push(key.clone());
        }
        let ranges = if rows.is_all() {
            vec![RowRange::all()]
        } else {
            rows.ranges.clone()
        };
        for range in &ranges {
            // The innermost unit holding the whole range reads it whole (else the default
            // target); units inside it placed elsewhere read their part of it.
            let mut base = self.targets.default.as_str();
            let mut parts = Vec::new();
            for route in routes.values().filter(|r| r.applies_to(table)) {
                let region = unit_range(&route.unit);
                let Some(part) = intersect(range, &region) else {
                    continue;
                };
                if part == *range {
                    base = &route.target;
                } else {
                    parts.push((route.target.as_str(), part));
                }
            }
            out.entry(base.to_owned())
                .or_default()
                .ranges
                .push(range.clone());
            for (target, part) in parts {
                if target != base {
                    out.entry(target.to_owned()).or_default().ranges.push(part);
                }
            }
        }
        out
    }

    /// The targets written for `owner`.
    fn written<'o>(owner: &Owner<'o>) -> impl Iterator<Item = &'o str> {
        std::iter::once(owner.target).chain(owner.also)
    }
}

/// The mutations with every server timestamp resolved to now (ms granularity), so that two
/// targets get the same cells.
fn resolved(mutations: Vec<Mutation>, now: i64) -> Vec<Mutation> {
    mutations
        .into_iter()
        .map(|m| match m {
            Mutation::SetCell {
                family,
                qualifier,
                timestamp: Timestamp::Server,
                value,
            } => Mutation::SetCell {
                family,
                qualifier,
                timestamp: Timestamp::Micros(now),
                value,
            },
            other => other,
        })
        .collect()
}

/// Now in microseconds, at millisecond granularity (Bigtable's).
fn now_micros() -> i64 {
    crate::validate::now_micros() / 1000 * 1000
}

fn start_key(b: &Bound<Bytes>) -> (Option<&Bytes>, bool) {
    match b {
        Bound::Included(k) => (Some(k), false),
        Bound::Excluded(k) => (Some(k), true),
        Bound::Unbounded => (None, false),
    }
}

/// The later of two start bounds.
fn max_start(a: &Bound<Bytes>, b: &Bound<Bytes>) -> Bound<Bytes> {
    match (start_key(a), start_key(b)) {
        ((None, _), _) => b.clone(),
        (_, (None, _)) => a.clone(),
        ((Some(x), xo), (Some(y), yo)) => {
            if (x, xo) >= (y, yo) {
                a.clone()
            } else {
                b.clone()
            }
        }
    }
}

/// The earlier of two end bounds.
fn min_end(a: &Bound<Bytes>, b: &Bound<Bytes>) -> Bound<Bytes> {
    // Excluded(k) ends before Included(k).
    let rank = |e: &Bound<Bytes>| match e {
        Bound::Included(k) => Some((k.clone(), 1)),
        Bound::Excluded(k) => Some((k.clone(), 0)),
        Bound::Unbounded => None,
    };
    match (rank(a), rank(b)) {
        (None, _) => b.clone(),
        (_, None) => a.clone(),
        (Some(x), Some(y)) => {
            if x <= y {
                a.clone()
            } else {
                b.clone()
            }
        }
    }
}

/// The intersection of two ranges, if not empty.
fn intersect(a: &RowRange, b: &RowRange) -> Option<RowRange> {
    let start = max_start(&a.start, &b.start);
    let end = min_end(&a.end, &b.end);
    let empty = match (&start, &end) {
        (Bound::Unbounded, _) | (_, Bound::Unbounded) => false,
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s) | Bound::Excluded(s), Bound::Excluded(e))
        | (Bound::Excluded(s), Bound::Included(e)) => s >= e,
    };
    (!empty).then_some(RowRange { start, end })
}

/// Merge streams, each in key order, into one in key order; a key several streams return (two
/// overlapping parts of one read) comes out once.
pub(crate) fn merge(streams: Vec<RowStream>) -> RowStream {
    if streams.len() == 1 {
        return streams
            .into_iter()
            .next()
            .unwrap_or_else(|| futures::stream::empty().boxed());
    }
    let heads: Vec<Option<Row>> = streams.iter().map(|_| None).collect();
    let live: Vec<bool> = streams.iter().map(|_| true).collect();
    let last: Option<Bytes> = None;
    futures::stream::unfold(
        (streams, heads, live, last),
        |(mut streams, mut heads, mut live, mut last)| async move {
            loop {
                for i in 0..streams.len() {
                    if heads[i].is_none() && live[i] {
                        match streams[i].next().await {
                            Some(Ok(row)) => heads[i] = Some(row),
                            Some(Err(e)) => {
                                live.iter_mut().for_each(|l| *l = false);
                                heads.iter_mut().for_each(|h| *h = None);
                                return Some((Err(e), (streams, heads, live, last)));
                            }
                            None => live[i] = false,
                        }
                    }
                }
                let next = heads
                    .iter()
                    .enumerate()
                    .filter_map(|(i, h)| h.as_ref().map(|r| (i, &r.key)))
                    .min_by(|a, b| a.1.cmp(b.1))
                    .map(|(i, _)| i)?;
                let row = heads[next].take()?;
                if last.as_ref() == Some(&row.key) {
                    continue;
                }
                last = Some(row.key.clone());
                return Some((Ok(row), (streams, heads, live, last)));
            }
        },
    )
    .boxed()
}

#[async_trait]
impl Store for PlacedStore {
    async fn create_table(&self, name: &str, families: BTreeMap<String, GcRule>) -> Result<()> {
        for store in self.targets.stores.values() {
            store.create_table(name, families.clone()).await?;
        }
        Ok(())
    }

    async fn modify_families(
        &self,
        table: &str,
        changes: Vec<FamilyChange>,
    ) -> Result<TableSchema> {
        let schema = self
            .store(&self.targets.default)
            .modify_families(table, changes.clone())
            .await?;
        for (name, store) in &self.targets.stores {
            if *name != self.targets.default {
                store.modify_families(table, changes.clone()).await?;
            }
        }
        Ok(schema)
    }

    async fn get_table(&self, table: &str) -> Result<TableSchema> {
        self.store(&self.targets.default).get_table(table).await
    }

    async fn list_tables(&self) -> Result<Vec<TableSchema>> {
        self.store(&self.targets.default).list_tables().await
    }

    async fn delete_table(&self, table: &str) -> Result<()> {
        self.store(&self.targets.default)
            .delete_table(table)
            .await?;
        for (name, store) in &self.targets.stores {
            if *name != self.targets.default {
                store.delete_table(table).await?;
            }
        }
        Ok(())
    }

    async fn drop_row_range(&self, table: &str, prefix: &[u8]) -> Result<()> {
        // Rows of the prefix may be in any target (a unit placed inside it, a move under way).
        for store in self.targets.stores.values() {
            store.drop_row_range(table, prefix).await?;
        }
        Ok(())
    }

    async fn mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        mutations: Vec<Mutation>,
    ) -> Result<()> {
        let routes = self.snapshot();
        let owner = self.owner(&routes, table, &row_key);
        let Some(also) = owner.also else {
            return self
                .store(owner.target)
                .mutate_row(table, row_key, mutations)
                .await;
        };
        let mutations = resolved(mutations, now_micros());
        futures::try_join!(
            self.store(owner.target)
                .mutate_row(table, row_key.clone(), mutations.clone()),
            self.store(also).mutate_row(table, row_key, mutations),
        )?;
        Ok(())
    }

    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        check_batch_size(&entries)?;
        let routes = self.snapshot();
        let now = now_micros();
        let total = entries.len();
        let mut groups: BTreeMap<&str, (Vec<usize>, Vec<RowMutation>)> = BTreeMap::new();
        for (i, entry) in entries.into_iter().enumerate() {
            let owner = self.owner(&routes, table, &entry.row_key);
            let entry = match owner.also {
                Some(_) => RowMutation::new(entry.row_key, resolved(entry.mutations, now)),
                None => entry,
            };
            for target in Self::written(&owner) {
                let group = groups.entry(target).or_default();
                group.0.push(i);
                group.1.push(entry.clone());
            }
        }
        let mut out: Vec<Result<()>> = (0..total).map(|_| Ok(())).collect();
        let work = groups
            .into_iter()
            .map(|(target, (indices, batch))| async move {
                let statuses = self.store(target).mutate_rows(table, batch).await?;
                Ok::<_, crate::StoreError>(indices.into_iter().zip(statuses).collect::<Vec<_>>())
            });
        for statuses in futures::future::try_join_all(work).await? {
            for (i, status) in statuses {
                // An entry written to two targets fails if either write failed.
                if out[i].is_ok() {
                    out[i] = status;
                }
            }
        }
        Ok(out)
    }

    async fn read_rows(&self, table: &str, request: ReadRows) -> Result<RowStream> {
        let routes = self.snapshot();
        let parts = self.split(&routes, table, &request.rows);
        // With several targets, a target may hold rows it does not return (another target's
        // unit): its limit would count them. The streams are lazy, and the merge below stops
        // at the limit.
        let limit = request.limit.filter(|_| parts.len() == 1);
        let mut streams = Vec::with_capacity(parts.len());
        for (target, rows) in parts {
            let part = ReadRows {
                rows,
                filter: request.filter.clone(),
                limit,
                consistency: request.consistency,
            };
            let stream = self.store(&target).read_rows(table, part).await?;
            // A row of another target's unit (left from before a move, or being copied there)
            // is not this target's to return.
            let (this, routes, table) = (self.clone(), Arc::clone(&routes), table.to_owned());
            streams.push(
                stream
                    .filter(move |r| {
                        let keep = r.as_ref().map_or(true, |row| {
                            this.owner(&routes, &table, &row.key).target == target
                        });
                        std::future::ready(keep)
                    })
                    .boxed(),
            );
        }
        let merged = merge(streams);
        Ok(match request.limit {
            Some(limit) => merged
                .take(usize::try_from(limit).unwrap_or(usize::MAX))
                .boxed(),
            None => merged,
        })
    }

    async fn check_and_mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        predicate: Option<RowFilter>,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        let routes = self.snapshot();
        let owner = self.owner(&routes, table, &row_key);
        let Some(also) = owner.also else {
            return self
                .store(owner.target)
                .check_and_mutate_row(table, row_key, predicate, on_match, on_no_match)
                .await;
        };
        // Decided where reads go; the chosen mutations, with the same timestamps, copied.
        let now = now_micros();
        let (on_match, on_no_match) = (resolved(on_match, now), resolved(on_no_match, now));
        let matched = self
            .store(owner.target)
            .check_and_mutate_row(
                table,
                row_key.clone(),
                predicate,
                on_match.clone(),
                on_no_match.clone(),
            )
            .await?;
        let chosen = if matched { on_match } else { on_no_match };
        if !chosen.is_empty() {
            self.store(also).mutate_row(table, row_key, chosen).await?;
        }
        Ok(matched)
    }

    async fn read_modify_write_row(
        &self,
        table: &str,
        row_key: Bytes,
        rules: Vec<ReadModifyWriteRule>,
    ) -> Result<Row> {
        let routes = self.snapshot();
        let owner = self.owner(&routes, table, &row_key);
        let row = self
            .store(owner.target)
            .read_modify_write_row(table, row_key.clone(), rules)
            .await?;
        if let Some(also) = owner.also {
            // The resulting cells, as they are where reads go.
            let cells = row
                .cells
                .iter()
                .map(|c| {
                    Mutation::set(
                        c.family.to_string(),
                        c.qualifier.clone(),
                        c.timestamp,
                        c.value.clone(),
                    )
                })
                .collect();
            self.store(also).mutate_row(table, row_key, cells).await?;
        }
        Ok(row)
    }

    async fn sample_row_keys(&self, table: &str) -> Result<Vec<KeySample>> {
        let mut samples = Vec::new();
        for store in self.targets.stores.values() {
            samples.extend(store.sample_row_keys(table).await?);
        }
        Ok(crate::normalize_samples(samples))
    }

    async fn flush(&self) -> Result<()> {
        for store in self.targets.stores.values() {
            store.flush().await?;
        }
        Ok(())
    }

    /// Each target's copy in `dest/<target name>` (each consistent in itself; the targets are
    /// copied one after the other).
    async fn checkpoint(&self, dest: &std::path::Path) -> Result<()> {
        std::fs::create_dir_all(dest).map_err(|e| {
            crate::StoreError::Backend(format!("cannot create {}: {e}", dest.display()))
        })?;
        for (name, store) in &self.targets.stores {
            store.checkpoint(&dest.join(name)).await?;
        }
        Ok(())
    }

    fn workload_view(&self, workload: Workload) -> Option<Arc<dyn Store>> {
        Some(Arc::new(Self {
            targets: Arc::new(Targets {
                stores: self
                    .targets
                    .stores
                    .iter()
                    .map(|(name, store)| (name.clone(), crate::for_workload(store, workload)))
                    .collect(),
                default: self.targets.default.clone(),
                pinned: self.targets.pinned.clone(),
            }),
            // The views follow the same routes.
            routes: Arc::clone(&self.routes),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemStore;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn intersections() {
        let r = RowRange::closed_open(b("b"), b("d"));
        assert_eq!(
            intersect(&r, &RowRange::prefix(b("c"))),
            Some(RowRange::closed_open(b("c"), b("d")))
        );
        assert_eq!(intersect(&r, &RowRange::prefix(b("d"))), None);
        assert_eq!(intersect(&r, &RowRange::all()), Some(r.clone()));
        assert_eq!(
            intersect(
                &RowRange::closed(b("a"), b("c")),
                &RowRange::closed_open(b("c"), b("e"))
            ),
            Some(RowRange::closed(b("c"), b("c")))
        );
    }

    fn stores(names: &[&str]) -> BTreeMap<String, Arc<dyn Store>> {
        names
            .iter()
            .map(|n| ((*n).to_owned(), Arc::new(MemStore::new()) as Arc<dyn Store>))
            .collect()
    }

    async fn keys_in(store: &Arc<dyn Store>, table: &str) -> Vec<Bytes> {
        let rows = store.read_all(table, ReadRows::default()).await.unwrap();
        rows.into_iter().map(|r| r.key).collect()
    }

    fn set(k: &str) -> RowMutation {
        RowMutation::new(b(k), vec![Mutation::set("f", b("q"), 0, b(k))])
    }

    async fn placed(names: &[&str], routes: Vec<Route>) -> PlacedStore {
        let placed = PlacedStore::new(stores(names), names[0], ["pinned".to_owned()]);
        placed.set_routes(routes).unwrap();
        let families = BTreeMap::from([("f".to_owned(), GcRule::None)]);
        placed.create_table("t", families.clone()).await.unwrap();
        placed.create_table("pinned", families).await.unwrap();
        placed
    }

    #[tokio::test]
    async fn rows_go_to_their_units_target_and_reads_merge() {
        let placed = placed(&["us", "eu"], vec![Route::at(b("eu"), "eu")]).await;
        let (us, eu) = (placed.target("us").unwrap(), placed.target("eu").unwrap());
        let statuses = placed
            .mutate_rows(
                "t",
                vec![
                    set("us\x001"),
                    set("eu\x001"),
                    set("eu\x000"),
                    set("eu"),
                    set("euro\x001"),
                    set("zz"),
                ],
            )
            .await
            .unwrap();
        assert!(statuses.iter().all(Result::is_ok));
        placed
            .mutate_row(
                "t",
                b("eu\x002"),
                vec![Mutation::set("f", b("q"), 0, b("x"))],
            )
            .await
            .unwrap();
        // A unit holds its own key and the keys continuing with a 0 byte, not `euro`'s.
        assert_eq!(
            keys_in(eu, "t").await,
            vec![b("eu"), b("eu\x000"), b("eu\x001"), b("eu\x002")]
        );
        assert_eq!(
            keys_in(us, "t").await,
            vec![b("euro\x001"), b("us\x001"), b("zz")]
        );
        let all = placed.read_all("t", ReadRows::default()).await.unwrap();
        let keys: Vec<Bytes> = all.into_iter().map(|r| r.key).collect();
        assert_eq!(
            keys,
            vec![
                b("eu"),
                b("eu\x000"),
                b("eu\x001"),
                b("eu\x002"),
                b("euro\x001"),
                b("us\x001"),
                b("zz")
            ]
        );
        let some = ReadRows::new(RowSet {
            keys: vec![b("zz"), b("eu\x001")],
            ranges: vec![RowRange::closed(b("a"), b("eu\x000"))],
        })
        .limit(2);
        let keys: Vec<Bytes> = placed
            .read_all("t", some)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.key)
            .collect();
        assert_eq!(keys, vec![b("eu"), b("eu\x000")]);
        // Pinned tables stay in the default target, whatever their keys.
        placed
            .mutate_row(
                "pinned",
                b("eu\x001"),
                vec![Mutation::set("f", b("q"), 0, b("x"))],
            )
            .await
            .unwrap();
        assert_eq!(keys_in(us, "pinned").await, vec![b("eu\x001")]);
        assert!(keys_in(eu, "pinned").await.is_empty());
        placed.drop_row_range("t", b"eu\0").await.unwrap();
        assert_eq!(keys_in(eu, "t").await, vec![b("eu")]);
        assert_eq!(keys_in(us, "t").await.len(), 3);
        // Routes naming an unknown target are refused.
        assert!(placed.set_routes([Route::at(b("x"), "mars")]).is_err());
    }

    #[tokio::test]
    async fn a_user_placed_apart_from_its_app() {
        let user_tables = Some(Arc::new(BTreeSet::from(["t".to_owned()])));
        let bob = Route {
            tables: user_tables,
            ..Route::at(b("app\0bob"), "us")
        };
        let routes = vec![Route::at(b("app"), "eu"), bob];
        let placed = placed(&["home", "eu", "us"], routes).await;
        let writes = [
            "app\0alice\x001",
            "app\0bob",
            "app\0bob\x001",
            "app\0bobby\x001",
            "app\0x",
            "other\x001",
        ];
        placed
            .mutate_rows("t", writes.iter().map(|k| set(k)).collect())
            .await
            .unwrap();
        assert_eq!(
            keys_in(placed.target("us").unwrap(), "t").await,
            vec![b("app\0bob"), b("app\0bob\x001")]
        );
        assert_eq!(
            keys_in(placed.target("eu").unwrap(), "t").await,
            vec![b("app\0alice\x001"), b("app\0bobby\x001"), b("app\0x")]
        );
        assert_eq!(
            keys_in(placed.target("home").unwrap(), "t").await,
            vec![b("other\x001")]
        );
        // Reads of the app, of bob, of everything, and of keys, each in key order.
        let read = |rows: RowSet| {
            let placed = placed.clone();
            async move {
                let rows = placed.read_all("t", ReadRows::new(rows)).await.unwrap();
                rows.into_iter().map(|r| r.key).collect::<Vec<_>>()
            }
        };
        let mut app: Vec<Bytes> = writes[..5].iter().map(|k| b(k)).collect();
        app.sort();
        assert_eq!(read(RowSet::range(unit_range(b"app"))).await, app);
        assert_eq!(
            read(RowSet::range(unit_range(b"app\0bob"))).await,
            vec![b("app\0bob"), b("app\0bob\x001")]
        );
        assert_eq!(read(RowSet::default()).await.len(), 6);
        assert_eq!(
            read(RowSet::keys([b("app\0bob\x001"), b("app\0x"), b("nope")])).await,
            vec![b("app\0bob\x001"), b("app\0x")]
        );
        // A limited read is not cut short by rows a target holds for another target's unit
        // (bob's rows a move left in eu until its drop): eu returns none of them.
        placed
            .target("eu")
            .unwrap()
            .mutate_rows(
                "t",
                vec![set("app\x00bob\x00leftover"), set("app\x00bob\x00zz")],
            )
            .await
            .unwrap();
        let after_bob = ReadRows::new(RowSet::range(RowRange::closed_open(
            b("app\x00bob\x00a"),
            b("app\x01"),
        )))
        .limit(2);
        let keys: Vec<Bytes> = placed
            .read_all("t", after_bob)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.key)
            .collect();
        assert_eq!(keys, vec![b("app\x00bobby\x001"), b("app\x00x")]);
        // In a table the user's route does not apply to, `app 0 bob` is the app's.
        placed
            .mutate_row("pinned", b("x"), vec![])
            .await
            .unwrap_or(());
        assert_eq!(placed.unit_of("t", b"app\0bob\0z"), Some(b("app\0bob")));
        assert_eq!(placed.unit_of("other", b"app\0bob\0z"), Some(b("app")));
        assert_eq!(placed.unit_of("pinned", b"app\0bob\0z"), None);
        assert_eq!(placed.unit_of("t", b"nope"), None);
    }

    /// During a move both targets get the same cells, whatever the write.
    #[tokio::test]
    async fn a_moving_unit_is_written_identically_to_both_targets() {
        let moving = Route {
            also_written: Some("eu".into()),
            ..Route::at(b("app"), "us")
        };
        let placed = placed(&["us", "eu"], vec![moving]).await;
        let key = b("app\0u");
        placed
            .mutate_row(
                "t",
                key.clone(),
                vec![Mutation::set_now("f", b("now"), b("1"))],
            )
            .await
            .unwrap();
        placed
            .mutate_rows(
                "t",
                vec![RowMutation::new(
                    key.clone(),
                    vec![Mutation::set_now("f", b("batch"), b("2"))],
                )],
            )
            .await
            .unwrap();
        let matched = placed
            .check_and_mutate_row(
                "t",
                key.clone(),
                Some(RowFilter::column("f", b("now"))),
                vec![Mutation::set_now("f", b("cam"), b("yes"))],
                vec![Mutation::set_now("f", b("cam"), b("no"))],
            )
            .await
            .unwrap();
        assert!(matched);
        for _ in 0..3 {
            placed
                .read_modify_write_row(
                    "t",
                    key.clone(),
                    vec![ReadModifyWriteRule::increment("f", b("n"), 2)],
                )
                .await
                .unwrap();
        }
        let us = placed
            .target("us")
            .unwrap()
            .read_all("t", ReadRows::default())
            .await
            .unwrap();
        let eu = placed
            .target("eu")
            .unwrap()
            .read_all("t", ReadRows::default())
            .await
            .unwrap();
        assert_eq!(us, eu);
        assert_eq!(
            us[0].latest("f", b"n").unwrap().value,
            6i64.to_be_bytes().to_vec()
        );
        assert_eq!(us[0].latest("f", b"cam").unwrap().value, b("yes"));
        // Reads come from the target reads use only.
        placed
            .target("eu")
            .unwrap()
            .mutate_row(
                "t",
                b("app\0stray"),
                vec![Mutation::set("f", b("q"), 0, b("x"))],
            )
            .await
            .unwrap();
        assert_eq!(placed.read_all("t", ReadRows::default()).await.unwrap(), us);
    }
}
