//! Data residency: a [`Store`] that sends each row to the store its key prefix is placed in.
//!
//! Every row key of an app starts with that app's prefix, so placing an app in a region is
//! routing its prefix to that region's store (a Bigtable instance there). [`PlacedStore`] holds a
//! default store and a list of `(prefix, store)` placements: a row goes to the store of the
//! longest placed prefix it starts with, else to the default. An app's rows are written only to
//! its placement. Reads of keys go to their stores; a range read goes to every store whose part of
//! the key space it touches, and the streams are merged in key order. Tables are created,
//! changed and deleted in every store; their schemas are read from the default one.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;

use crate::{
    FamilyChange, GcRule, KeySample, Mutation, ReadModifyWriteRule, ReadRows, Result, Row,
    RowFilter, RowMutation, RowRange, RowSet, RowStream, Store, TableSchema, Workload,
    check_batch_size,
};

/// A store routing rows by key prefix. See the module documentation.
#[derive(Debug, Clone)]
pub struct PlacedStore {
    default: Arc<dyn Store>,
    /// Placed prefixes, longest first, with their stores.
    placements: Vec<(Bytes, Arc<dyn Store>)>,
}

impl PlacedStore {
    /// Rows starting with a placed prefix go to its store (the longest prefix wins); the rest
    /// go to `default`.
    pub fn new(default: Arc<dyn Store>, placements: Vec<(Bytes, Arc<dyn Store>)>) -> Self {
        let mut placements = placements;
        placements.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        Self {
            default,
            placements,
        }
    }

    /// Every distinct store, the default first, as (index, store); index 0 is the default and
    /// index `i + 1` the store of placement `i`.
    fn stores(&self) -> impl Iterator<Item = (usize, &Arc<dyn Store>)> {
        std::iter::once(&self.default)
            .chain(self.placements.iter().map(|(_, s)| s))
            .enumerate()
    }

    fn store(&self, index: usize) -> &Arc<dyn Store> {
        match index {
            0 => &self.default,
            i => &self.placements[i - 1].1,
        }
    }

    /// The index of the store a row key belongs to.
    fn route(&self, key: &[u8]) -> usize {
        self.placements
            .iter()
            .position(|(prefix, _)| key.starts_with(prefix))
            .map_or(0, |i| i + 1)
    }

    /// The stores a row set touches, each with the part of the set it should read.
    fn split(&self, rows: &RowSet) -> Vec<(usize, RowSet)> {
        let mut out: BTreeMap<usize, RowSet> = BTreeMap::new();
        for key in &rows.keys {
            out.entry(self.route(key))
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
            let mut covered = false;
            for (i, (prefix, _)) in self.placements.iter().enumerate() {
                let region = RowRange::prefix(prefix.clone());
                if let Some(part) = intersect(range, &region) {
                    covered |= part == *range;
                    out.entry(i + 1).or_default().ranges.push(part);
                }
            }
            if !covered {
                out.entry(0).or_default().ranges.push(range.clone());
            }
        }
        out.into_iter().collect()
    }
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

/// Merge streams, each in key order, into one in key order. A key several streams return (an
/// overlap) comes out once, from the first of them.
pub(crate) fn merge(streams: Vec<RowStream>) -> RowStream {
    if streams.len() == 1 {
        return streams
            .into_iter()
            .next()
            .unwrap_or_else(|| futures::stream::empty().boxed());
    }
    let heads: Vec<Option<Row>> = streams.iter().map(|_| None).collect();
    let live: Vec<bool> = streams.iter().map(|_| true).collect();
    futures::stream::unfold(
        (streams, heads, live),
        |(mut streams, mut heads, mut live)| async move {
            for i in 0..streams.len() {
                if heads[i].is_none() && live[i] {
                    match streams[i].next().await {
                        Some(Ok(row)) => heads[i] = Some(row),
                        Some(Err(e)) => {
                            live.iter_mut().for_each(|l| *l = false);
                            heads.iter_mut().for_each(|h| *h = None);
                            return Some((Err(e), (streams, heads, live)));
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
            for head in heads.iter_mut().skip(next + 1) {
                if head.as_ref().is_some_and(|h| h.key == row.key) {
                    *head = None;
                }
            }
            Some((Ok(row), (streams, heads, live)))
        },
    )
    .boxed()
}

#[async_trait]
impl Store for PlacedStore {
    async fn create_table(&self, name: &str, families: BTreeMap<String, GcRule>) -> Result<()> {
        for (_, store) in self.stores() {
            store.create_table(name, families.clone()).await?;
        }
        Ok(())
    }

    async fn modify_families(
        &self,
        table: &str,
        changes: Vec<FamilyChange>,
    ) -> Result<TableSchema> {
        let schema = self.default.modify_families(table, changes.clone()).await?;
        for (_, store) in self.stores().skip(1) {
            store.modify_families(table, changes.clone()).await?;
        }
        Ok(schema)
    }

    async fn get_table(&self, table: &str) -> Result<TableSchema> {
        self.default.get_table(table).await
    }

    async fn list_tables(&self) -> Result<Vec<TableSchema>> {
        self.default.list_tables().await
    }

    async fn delete_table(&self, table: &str) -> Result<()> {
        self.default.delete_table(table).await?;
        for (_, store) in self.stores().skip(1) {
            store.delete_table(table).await?;
        }
        Ok(())
    }

    async fn drop_row_range(&self, table: &str, prefix: &[u8]) -> Result<()> {
        let rows = RowSet::prefix(Bytes::copy_from_slice(prefix));
        for (i, _) in self.split(&rows) {
            self.store(i).drop_row_range(table, prefix).await?;
        }
        Ok(())
    }

    async fn mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        mutations: Vec<Mutation>,
    ) -> Result<()> {
        self.store(self.route(&row_key))
            .mutate_row(table, row_key, mutations)
            .await
    }

    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        check_batch_size(&entries)?;
        let mut groups: BTreeMap<usize, (Vec<usize>, Vec<RowMutation>)> = BTreeMap::new();
        for (i, e) in entries.into_iter().enumerate() {
            let group = groups.entry(self.route(&e.row_key)).or_default();
            group.0.push(i);
            group.1.push(e);
        }
        let total = groups.values().map(|g| g.0.len()).sum();
        let mut out: Vec<Option<Result<()>>> = (0..total).map(|_| None).collect();
        for (store, (indices, batch)) in groups {
            let statuses = self.store(store).mutate_rows(table, batch).await?;
            for (i, s) in indices.into_iter().zip(statuses) {
                out[i] = Some(s);
            }
        }
        Ok(out.into_iter().map(|s| s.unwrap_or(Ok(()))).collect())
    }

    async fn read_rows(&self, table: &str, request: ReadRows) -> Result<RowStream> {
        let parts = self.split(&request.rows);
        let mut streams = Vec::with_capacity(parts.len());
        for (i, rows) in parts {
            let part = ReadRows {
                rows,
                filter: request.filter.clone(),
                limit: request.limit,
                consistency: request.consistency,
            };
            let stream = self.store(i).read_rows(table, part).await?;
            // A row outside the store's part of the key space (left from before a placement
            // changed) is not its to return.
            let this = self.clone();
            streams.push(
                stream
                    .filter(move |r| {
                        let keep = r.as_ref().map_or(true, |row| this.route(&row.key) == i);
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
        self.store(self.route(&row_key))
            .check_and_mutate_row(table, row_key, predicate, on_match, on_no_match)
            .await
    }

    async fn read_modify_write_row(
        &self,
        table: &str,
        row_key: Bytes,
        rules: Vec<ReadModifyWriteRule>,
    ) -> Result<Row> {
        self.store(self.route(&row_key))
            .read_modify_write_row(table, row_key, rules)
            .await
    }

    async fn sample_row_keys(&self, table: &str) -> Result<Vec<KeySample>> {
        let mut samples = Vec::new();
        for (_, store) in self.stores() {
            samples.extend(store.sample_row_keys(table).await?);
        }
        Ok(crate::normalize_samples(samples))
    }

    async fn flush(&self) -> Result<()> {
        for (_, store) in self.stores() {
            store.flush().await?;
        }
        Ok(())
    }

    fn workload_view(&self, workload: Workload) -> Option<Arc<dyn Store>> {
        Some(Arc::new(Self {
            default: crate::for_workload(&self.default, workload),
            placements: self
                .placements
                .iter()
                .map(|(p, s)| (p.clone(), crate::for_workload(s, workload)))
                .collect(),
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

    #[tokio::test]
    async fn rows_go_to_their_placement_and_reads_merge() {
        let default: Arc<dyn Store> = Arc::new(MemStore::new());
        let eu: Arc<dyn Store> = Arc::new(MemStore::new());
        let placed = PlacedStore::new(default.clone(), vec![(b("eu|"), eu.clone())]);
        let families = BTreeMap::from([("f".to_owned(), GcRule::None)]);
        placed.create_table("t", families).await.unwrap();
        let set = |k: &str| RowMutation::new(b(k), vec![Mutation::set("f", b("q"), 0, b(k))]);
        let statuses = placed
            .mutate_rows("t", vec![set("us|1"), set("eu|1"), set("eu|0"), set("zz")])
            .await
            .unwrap();
        assert!(statuses.iter().all(Result::is_ok));
        placed
            .mutate_row("t", b("eu|2"), vec![Mutation::set("f", b("q"), 0, b("x"))])
            .await
            .unwrap();
        let keys = |rows: Vec<Row>| rows.into_iter().map(|r| r.key).collect::<Vec<_>>();
        assert_eq!(
            keys(eu.read_all("t", ReadRows::default()).await.unwrap()),
            vec![b("eu|0"), b("eu|1"), b("eu|2")]
        );
        assert_eq!(
            keys(default.read_all("t", ReadRows::default()).await.unwrap()),
            vec![b("us|1"), b("zz")]
        );
        assert_eq!(
            keys(placed.read_all("t", ReadRows::default()).await.unwrap()),
            vec![b("eu|0"), b("eu|1"), b("eu|2"), b("us|1"), b("zz")]
        );
        let some = ReadRows::new(RowSet {
            keys: vec![b("zz"), b("eu|1")],
            ranges: vec![RowRange::closed(b("a"), b("eu|0"))],
        })
        .limit(2);
        assert_eq!(
            keys(placed.read_all("t", some).await.unwrap()),
            vec![b("eu|0"), b("eu|1")]
        );
        placed.drop_row_range("t", b"eu|").await.unwrap();
        assert!(
            eu.read_all("t", ReadRows::default())
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            default
                .read_all("t", ReadRows::default())
                .await
                .unwrap()
                .len(),
            2
        );
    }
}
