//! Penchant's storage abstraction: Cloud Bigtable's data model as a Rust trait.
//!
//! Every table is a sorted map `row key → column family → qualifier → timestamped cells`.
//! [`Store`] offers the operations of Bigtable's v2 Data API (single-row atomic mutations, batched
//! mutations, streamed reads by keys, ranges and prefixes with filters evaluated inside the store,
//! read-modify-write, check-and-mutate, split points) and the table administration Penchant
//! needs (tables, families, garbage-collection rules, dropping row ranges).
//!
//! This crate depends on no backend: backends (`penchant-store-rocksdb`, the embedded default,
//! and the Bigtable backend) depend on it. With the `testsuite` feature it exports the
//! [`conformance`] suite that every backend runs, and [`MemStore`], a small in-memory reference
//! model used by property tests and by unit tests of the layers above, and `testing::Hooked`,
//! a MemStore behind a hook, to stage races and faults.

mod affinity;
mod error;
mod filter;
mod memory;
pub mod metered;
#[cfg(feature = "pace")]
pub mod paced;
mod placement;
mod types;
pub mod validate;

#[cfg(feature = "testsuite")]
pub mod conformance;
#[cfg(any(test, feature = "testsuite"))]
pub mod testing;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

pub use affinity::{AffineStore, STRONG_READ_UNAVAILABLE, affinity_key, with_consistency};
pub use error::{Result, StoreError};
pub use filter::{CompiledFilter, RowFilter, in_bounds};
pub use memory::{
    MemStore, cell_to_mutation, change_families, check_atomic, check_batch_size, check_conditional,
    check_new_table,
};
pub use placement::{PlacedStore, Route, unit_range};
pub use types::{
    Cell, Consistency, FamilyChange, FamilyName, GcRule, KeySample, Mutation, ReadModifyWriteOp,
    ReadModifyWriteRule, ReadRows, Row, RowMutation, RowRange, RowSet, TableSchema, TimeRange,
    Timestamp, prefix_successor,
};

/// Rows streamed in key order.
pub type RowStream = BoxStream<'static, Result<Row>>;

/// A store of Bigtable-model tables. All methods are safe to call concurrently.
///
/// Semantics follow Cloud Bigtable's v2 Data API, with one strengthening: cells that a family's
/// GC rule has expired are never returned, even before they are physically reclaimed.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// Create a table with its column families and their GC rules.
    async fn create_table(&self, name: &str, families: BTreeMap<String, GcRule>) -> Result<()>;

    /// Add, change or drop column families. Dropping a family deletes its cells.
    async fn modify_families(&self, table: &str, changes: Vec<FamilyChange>)
    -> Result<TableSchema>;

    /// A table's schema.
    async fn get_table(&self, table: &str) -> Result<TableSchema>;

    /// Every table, by name.
    async fn list_tables(&self) -> Result<Vec<TableSchema>>;

    /// Delete a table and all its data.
    async fn delete_table(&self, table: &str) -> Result<()>;

    /// Delete every row whose key starts with `prefix` (all rows for an empty prefix).
    async fn drop_row_range(&self, table: &str, prefix: &[u8]) -> Result<()>;

    /// Apply mutations to one row atomically: all or nothing.
    async fn mutate_row(&self, table: &str, row_key: Bytes, mutations: Vec<Mutation>)
    -> Result<()>;

    /// Apply mutations to many rows, each row atomically, returning one status per entry.
    /// The outer error is for failures of the whole request (unknown table, too many mutations).
    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>>;

    /// Whether [`Store::mutate_atomically`] is supported: one write across rows and tables,
    /// all or nothing, durable together (the embedded store; Bigtable has no such write).
    fn atomic_writes(&self) -> bool {
        false
    }

    /// Apply row mutations across tables as one write: every one of them or none, even across a
    /// crash. The same row may be named more than once (its mutations apply in order). Stores
    /// without [`Store::atomic_writes`] refuse with [`StoreError::FailedPrecondition`].
    async fn mutate_atomically(&self, writes: Vec<TableMutation>) -> Result<()> {
        let _ = writes;
        Err(StoreError::FailedPrecondition(
            "this store has no atomic writes across rows".into(),
        ))
    }

    /// Stream the rows of a row set in key order, filtered inside the store.
    async fn read_rows(&self, table: &str, request: ReadRows) -> Result<RowStream>;

    /// Apply `on_match` if `predicate` yields any cell of the row (or, with no predicate, if the
    /// row has any cell), else `on_no_match`; atomically. Returns whether it matched.
    async fn check_and_mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        predicate: Option<RowFilter>,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool>;

    /// Atomically increment or append to the latest cells of some columns, returning the new
    /// cells.
    async fn read_modify_write_row(
        &self,
        table: &str,
        row_key: Bytes,
        rules: Vec<ReadModifyWriteRule>,
    ) -> Result<Row>;

    /// Split points of a table, in key order, for parallel scans.
    async fn sample_row_keys(&self, table: &str) -> Result<Vec<KeySample>>;

    /// [`Store::mutate_atomically`], visible to reads at once but durable only once a
    /// [`Store::sync`] started after it returns: a crash before may lose it, and every write
    /// after it (a store's log keeps its writes in order, so a write made durable makes every
    /// write before it durable too). Writers that hold a lock from a read to their write take
    /// the wait for the disk out of it, and concurrent writers share one wait (group commit).
    /// Stores without a log of their own write durably at once.
    async fn mutate_atomically_deferred(&self, writes: Vec<TableMutation>) -> Result<()> {
        self.mutate_atomically(writes).await
    }

    /// Make every write applied so far durable ([`Store::mutate_atomically_deferred`]'s).
    async fn sync(&self) -> Result<()> {
        Ok(())
    }

    /// Make every acknowledged write durable and persist buffered state (called on shutdown).
    async fn flush(&self) -> Result<()>;

    /// Write a consistent copy of the whole store, as of one moment, into `dest` (a folder that
    /// must not exist yet), while writes go on. Stores with backups of their own (Bigtable's
    /// `gcloud bigtable backups`) refuse with [`StoreError::FailedPrecondition`].
    async fn checkpoint(&self, dest: &std::path::Path) -> Result<()> {
        let _ = dest;
        Err(StoreError::FailedPrecondition(
            "this store has no checkpoints: back it up with its own tools".into(),
        ))
    }

    /// The backend's own gauges worth watching (e.g. RocksDB's memtables, pending compactions,
    /// block cache), read when `/metrics` is scraped. None by default.
    fn gauges(&self) -> Vec<Gauge> {
        Vec::new()
    }

    /// This store as another kind of traffic sees it. Backends that isolate workloads (Bigtable,
    /// with one app profile for serving and one for batch jobs) return a view whose calls are
    /// routed apart; others return `None`: one store serves all. See [`for_workload`].
    fn workload_view(&self, workload: Workload) -> Option<Arc<dyn Store>> {
        let _ = workload;
        None
    }

    /// Read one row, or `None` if the filter leaves no cell of it.
    async fn read_row(
        &self,
        table: &str,
        row_key: Bytes,
        filter: Option<RowFilter>,
    ) -> Result<Option<Row>> {
        let request = ReadRows {
            rows: RowSet::keys([row_key]),
            filter,
            limit: Some(1),
            consistency: Consistency::Eventual,
        };
        let mut stream = self.read_rows(table, request).await?;
        stream.next().await.transpose()
    }

    /// Read every row of a request into memory.
    async fn read_all(&self, table: &str, request: ReadRows) -> Result<Vec<Row>> {
        self.read_rows(table, request).await?.try_collect().await
    }

    /// Apply a batch of row mutations, in batches the backends accept; the first failed entry
    /// is the error (entries before and after it may have been applied: each row is atomic,
    /// not the batch).
    async fn mutate_all(&self, table: &str, entries: Vec<RowMutation>) -> Result<()> {
        let mut batch = Vec::new();
        let mut mutations = 0;
        let mut entries = entries.into_iter().peekable();
        while let Some(entry) = entries.next() {
            mutations += entry.mutations.len();
            batch.push(entry);
            let full = batch.len() >= MUTATE_BATCH
                || entries.peek().is_some_and(|next| {
                    mutations + next.mutations.len() > validate::MAX_MUTATIONS / 2
                });
            if full || entries.peek().is_none() {
                mutations = 0;
                for status in self.mutate_rows(table, std::mem::take(&mut batch)).await? {
                    status?;
                }
            }
        }
        Ok(())
    }

    /// Delete every row whose key starts with `prefix`, row by row (a data operation: unlike
    /// [`Store::drop_row_range`], an admin operation on Bigtable, it is fit for per-request
    /// traffic). Returns how many rows it deleted.
    async fn delete_prefix(&self, table: &str, prefix: Bytes) -> Result<u64> {
        let keys_only = RowFilter::StripValue.and(RowFilter::CellsPerRowLimit(1));
        let request = ReadRows::new(RowSet::prefix(prefix)).filter(keys_only);
        self.delete_read(table, request).await
    }

    /// Delete, row by row, every row that `request` reads (give it a filter that keeps one
    /// small cell of each row to delete, and none of the rows to keep). Returns how many rows it
    /// deleted.
    async fn delete_read(&self, table: &str, request: ReadRows) -> Result<u64> {
        let mut rows = self.read_rows(table, request).await?;
        let mut batch = Vec::new();
        let mut deleted = 0;
        loop {
            let row = rows.try_next().await?;
            if let Some(row) = &row {
                batch.push(RowMutation::new(
                    row.key.clone(),
                    vec![Mutation::DeleteFromRow],
                ));
            }
            if batch.len() >= MUTATE_BATCH || (row.is_none() && !batch.is_empty()) {
                deleted += batch.len() as u64;
                self.mutate_all(table, std::mem::take(&mut batch)).await?;
            }
            if row.is_none() {
                return Ok(deleted);
            }
        }
    }
}

/// One row's mutations in a table, for [`Store::mutate_atomically`].
#[derive(Debug, Clone)]
pub struct TableMutation {
    pub table: &'static str,
    pub row: RowMutation,
}

impl TableMutation {
    pub fn new(table: &'static str, row: RowMutation) -> Self {
        Self { table, row }
    }
}

/// Row mutations [`Store::mutate_all`] sends at once.
const MUTATE_BATCH: usize = 1000;

/// A backend's gauge: a Prometheus-style name (`rocksdb_memtable_bytes`), what it measures, its
/// value now.
#[derive(Debug, Clone, PartialEq)]
pub struct Gauge {
    pub name: &'static str,
    pub help: &'static str,
    pub value: f64,
}

/// The kind of traffic a call belongs to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Workload {
    /// Requests a user waits for: low latency first.
    #[default]
    Serving,
    /// Background jobs (bulk recomputes, rebuilds): throughput first, kept off serving's path.
    Batch,
}

/// `store` as seen by `workload`: its isolated view where the backend has one, else itself.
pub fn for_workload(store: &Arc<dyn Store>, workload: Workload) -> Arc<dyn Store> {
    store
        .workload_view(workload)
        .unwrap_or_else(|| Arc::clone(store))
}

/// Split points as [`Store::sample_row_keys`] promises them, from samples in any order (several
/// sources, or a backend that does not sort them): distinct keys in order, offsets growing with
/// them, and the end of the table (an empty key, at the largest offset seen) last.
pub fn normalize_samples(mut samples: Vec<KeySample>) -> Vec<KeySample> {
    let total = samples.iter().map(|s| s.offset_bytes).max().unwrap_or(0);
    samples.retain(|s| !s.row_key.is_empty());
    samples.sort_by(|a, b| a.row_key.cmp(&b.row_key));
    samples.dedup_by(|a, b| a.row_key == b.row_key);
    let mut offset = 0;
    for s in &mut samples {
        offset = offset.max(s.offset_bytes);
        s.offset_bytes = offset;
    }
    samples.push(KeySample {
        row_key: Bytes::new(),
        offset_bytes: offset.max(total),
    });
    samples
}

/// Key ranges that split a table for `n` parallel scans, from its sampled split points. The
/// ranges are disjoint, in key order, and cover the whole table.
pub fn split_ranges(samples: &[KeySample], n: usize) -> Vec<RowRange> {
    use std::ops::Bound;
    let keys: Vec<&Bytes> = samples
        .iter()
        .map(|s| &s.row_key)
        .filter(|k| !k.is_empty())
        .collect();
    let n = n.max(1).min(keys.len() + 1);
    let mut cuts: Vec<Bytes> = (1..n).map(|i| keys[i * keys.len() / n].clone()).collect();
    cuts.dedup();
    let starts = std::iter::once(Bound::Unbounded).chain(cuts.iter().cloned().map(Bound::Included));
    let ends = cuts
        .iter()
        .cloned()
        .map(Bound::Excluded)
        .chain(std::iter::once(Bound::Unbounded));
    starts
        .zip(ends)
        .map(|(start, end)| RowRange { start, end })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(k: &str) -> KeySample {
        KeySample {
            row_key: Bytes::copy_from_slice(k.as_bytes()),
            offset_bytes: 0,
        }
    }

    #[test]
    fn samples_are_normalized() {
        let raw = vec![
            KeySample {
                row_key: Bytes::from_static(b"m"),
                offset_bytes: 50,
            },
            KeySample {
                row_key: Bytes::new(),
                offset_bytes: 90,
            },
            KeySample {
                row_key: Bytes::from_static(b"c"),
                offset_bytes: 70,
            },
            KeySample {
                row_key: Bytes::from_static(b"m"),
                offset_bytes: 50,
            },
        ];
        let got: Vec<(Bytes, u64)> = normalize_samples(raw)
            .into_iter()
            .map(|s| (s.row_key, s.offset_bytes))
            .collect();
        let want = [("c", 70), ("m", 70), ("", 90)].map(|(k, o)| (Bytes::from(k), o));
        assert_eq!(got, want);
    }

    #[test]
    fn split_ranges_cover_everything_once() {
        assert_eq!(split_ranges(&[sample("")], 4), vec![RowRange::all()]);
        let samples: Vec<KeySample> = ["b", "d", "f", ""].into_iter().map(sample).collect();
        let ranges = split_ranges(&samples, 2);
        assert_eq!(ranges.len(), 2);
        for key in ["a", "b", "c", "d", "e", "f", "g"] {
            let n = ranges.iter().filter(|r| r.contains(key.as_bytes())).count();
            assert_eq!(n, 1, "{key}");
        }
        assert_eq!(split_ranges(&samples, 10).len(), 4);
    }
}
