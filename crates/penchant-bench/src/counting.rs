//! A [`Store`] that counts what goes through it, for the `mixed` suite's store operations per
//! event and per profile read: calls by operation kind, rows read (rows the read streams
//! yield), cells read, rows mutated and mutations (cells) written.
//!
//! The counts are taken at the [`Store`] trait, so they do not depend on the backend below: on
//! Bigtable each call is one RPC (a read is one `ReadRows`, however many rows it streams), which
//! is how the figures convert to Bigtable nodes. The trait's provided methods (`read_row`,
//! `read_all`, `mutate_all`, `delete_prefix`, `delete_read`) are not forwarded: they run the
//! trait's default bodies on this wrapper, so their `read_rows` and `mutate_rows` are counted
//! (no backend overrides them). A workload view of the inner store (Bigtable's batch profile)
//! is wrapped too, its operations counted in the same counters.
//!
//! The same counts are kept by table ([`CountingStore::tables`]): which tables a batch of
//! events reads and writes, and how much of each.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use parking_lot::Mutex;
use penchant_store::{
    FamilyChange, GcRule, KeySample, Mutation, ReadModifyWriteRule, ReadRows, Result, Row,
    RowFilter, RowMutation, RowStream, Store, TableSchema, Workload,
};

/// The kinds of operation counted apart; everything else (table administration, split
/// points, flushes) is [`Op::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    ReadRows,
    MutateRow,
    MutateRows,
    CheckAndMutateRow,
    ReadModifyWriteRow,
    Other,
}

impl Op {
    pub(crate) const ALL: [Op; 6] = [
        Op::ReadRows,
        Op::MutateRow,
        Op::MutateRows,
        Op::CheckAndMutateRow,
        Op::ReadModifyWriteRow,
        Op::Other,
    ];

    /// The operation's name, as the trait's method.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::ReadRows => "read_rows",
            Op::MutateRow => "mutate_row",
            Op::MutateRows => "mutate_rows",
            Op::CheckAndMutateRow => "check_and_mutate_row",
            Op::ReadModifyWriteRow => "read_modify_write_row",
            Op::Other => "other",
        }
    }
}

/// The shared counters of a [`CountingStore`] and of its workload views.
#[derive(Debug, Default)]
struct Counters {
    calls: [AtomicU64; Op::ALL.len()],
    rows_read: AtomicU64,
    cells_read: AtomicU64,
    rows_mutated: AtomicU64,
    mutations: AtomicU64,
    tables: Mutex<BTreeMap<String, TableOps>>,
}

impl Counters {
    fn call(&self, op: Op, table: &str) {
        self.calls[op as usize].fetch_add(1, Ordering::Relaxed);
        self.table(table, |t| t.calls += 1.0);
    }

    fn mutated(&self, table: &str, rows: usize, mutations: usize) {
        self.rows_mutated.fetch_add(rows as u64, Ordering::Relaxed);
        self.mutations
            .fetch_add(mutations as u64, Ordering::Relaxed);
        self.table(table, |t| {
            t.rows_mutated += rows as f64;
            t.mutations += mutations as f64;
        });
    }

    fn read(&self, table: &str, cells: usize) {
        self.rows_read.fetch_add(1, Ordering::Relaxed);
        self.cells_read.fetch_add(cells as u64, Ordering::Relaxed);
        self.table(table, |t| t.rows_read += 1.0);
    }

    fn table(&self, table: &str, f: impl FnOnce(&mut TableOps)) {
        let mut tables = self.tables.lock();
        match tables.get_mut(table) {
            Some(t) => f(t),
            None => f(tables.entry(table.to_owned()).or_default()),
        }
    }
}

/// The counts of one table: data-plane calls, rows read, rows mutated, mutations (as [`Ops`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct TableOps {
    pub(crate) calls: f64,
    pub(crate) rows_read: f64,
    pub(crate) rows_mutated: f64,
    pub(crate) mutations: f64,
}

/// [`TableOps`] by table.
pub(crate) type Tables = BTreeMap<String, TableOps>;

/// What happened to each table between two snapshots, `per` unit of work; tables untouched
/// in between are left out.
pub(crate) fn tables_since(after: &Tables, before: &Tables, per: f64) -> Tables {
    let per = per.max(1.0);
    after
        .iter()
        .map(|(name, a)| {
            let b = before.get(name).copied().unwrap_or_default();
            let d = TableOps {
                calls: (a.calls - b.calls) / per,
                rows_read: (a.rows_read - b.rows_read) / per,
                rows_mutated: (a.rows_mutated - b.rows_mutated) / per,
                mutations: (a.mutations - b.mutations) / per,
            };
            (name.clone(), d)
        })
        .filter(|(_, d)| *d != TableOps::default())
        .collect()
}

/// Counts of store operations: a snapshot of a [`CountingStore`]'s counters, or the difference
/// of two, or such a difference per unit of work (hence floating point; counts stay exact up to
/// 2^53).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Ops {
    /// Calls, by [`Op`] (indexed by `op as usize`).
    pub(crate) calls: [f64; Op::ALL.len()],
    /// Rows yielded by read streams.
    pub(crate) rows_read: f64,
    /// Cells of those rows.
    pub(crate) cells_read: f64,
    /// Rows of `mutate_rows` entries, and one per `mutate_row`, `check_and_mutate_row` and
    /// `read_modify_write_row`.
    pub(crate) rows_mutated: f64,
    /// Mutations (cells set or deleted) applied; for `check_and_mutate_row`, those of the
    /// branch taken; for `read_modify_write_row`, its rules.
    pub(crate) mutations: f64,
}

impl Ops {
    /// Data-plane calls: every call but [`Op::Other`].
    pub(crate) fn calls(&self) -> f64 {
        Op::ALL
            .iter()
            .filter(|op| **op != Op::Other)
            .map(|op| self.calls[*op as usize])
            .sum()
    }

    /// `f` of each count of `self` and the same count of `other`.
    fn zip(&self, other: &Ops, f: impl Fn(f64, f64) -> f64) -> Ops {
        Ops {
            calls: std::array::from_fn(|i| f(self.calls[i], other.calls[i])),
            rows_read: f(self.rows_read, other.rows_read),
            cells_read: f(self.cells_read, other.cells_read),
            rows_mutated: f(self.rows_mutated, other.rows_mutated),
            mutations: f(self.mutations, other.mutations),
        }
    }

    /// `self - other * times`, count by count (never below zero: an estimate subtracted can
    /// overshoot).
    pub(crate) fn minus(&self, other: &Ops, times: f64) -> Ops {
        self.zip(other, |a, b| (a - b * times).max(0.0))
    }

    /// What happened since `before` (a snapshot taken earlier).
    pub(crate) fn since(&self, before: &Ops) -> Ops {
        self.minus(before, 1.0)
    }

    /// Every count divided by `n` (per batch, per event, per request); zeros for no work.
    pub(crate) fn per(&self, n: f64) -> Ops {
        if n <= 0.0 {
            return Ops::default();
        }
        self.zip(self, |a, _| a / n)
    }

    /// The calls by kind, as `2 read_rows + 3 mutate_rows`, each with `digits` decimals; kinds
    /// never called are left out.
    pub(crate) fn breakdown(&self, digits: usize) -> String {
        let parts: Vec<String> = Op::ALL
            .iter()
            .filter(|op| self.calls[**op as usize] > 0.0)
            .map(|op| format!("{:.digits$} {}", self.calls[*op as usize], op.name()))
            .collect();
        if parts.is_empty() {
            "no calls".to_owned()
        } else {
            parts.join(" + ")
        }
    }
}

/// `inner`, with its operations counted ([`CountingStore::snapshot`]).
#[derive(Debug)]
pub(crate) struct CountingStore {
    inner: Arc<dyn Store>,
    counters: Arc<Counters>,
}

impl CountingStore {
    pub(crate) fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            counters: Arc::default(),
        }
    }

    /// The counts so far.
    pub(crate) fn snapshot(&self) -> Ops {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64;
        let c = &self.counters;
        Ops {
            calls: std::array::from_fn(|i| load(&c.calls[i])),
            rows_read: load(&c.rows_read),
            cells_read: load(&c.cells_read),
            rows_mutated: load(&c.rows_mutated),
            mutations: load(&c.mutations),
        }
    }

    /// The counts so far, by table.
    pub(crate) fn tables(&self) -> Tables {
        self.counters.tables.lock().clone()
    }

    fn other(&self) {
        self.counters.calls[Op::Other as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// An atomic write: one call, counted once in all and once for each table it writes.
    fn count_atomic(&self, writes: &[penchant_store::TableMutation]) {
        self.counters.calls[Op::MutateRows as usize].fetch_add(1, Ordering::Relaxed);
        let mut tables: Vec<&'static str> = Vec::new();
        for w in writes {
            self.counters.mutated(w.table, 1, w.row.mutations.len());
            if !tables.contains(&w.table) {
                tables.push(w.table);
            }
        }
        for table in tables {
            self.counters.table(table, |t| t.calls += 1.0);
        }
    }
}

#[async_trait]
impl Store for CountingStore {
    async fn create_table(&self, name: &str, families: BTreeMap<String, GcRule>) -> Result<()> {
        self.other();
        self.inner.create_table(name, families).await
    }
    async fn modify_families(
        &self,
        table: &str,
        changes: Vec<FamilyChange>,
    ) -> Result<TableSchema> {
        self.other();
        self.inner.modify_families(table, changes).await
    }
    async fn get_table(&self, table: &str) -> Result<TableSchema> {
        self.other();
        self.inner.get_table(table).await
    }
    async fn list_tables(&self) -> Result<Vec<TableSchema>> {
        self.other();
        self.inner.list_tables().await
    }
    async fn delete_table(&self, table: &str) -> Result<()> {
        self.other();
        self.inner.delete_table(table).await
    }
    async fn drop_row_range(&self, table: &str, prefix: &[u8]) -> Result<()> {
        self.other();
        self.inner.drop_row_range(table, prefix).await
    }
    async fn mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        mutations: Vec<Mutation>,
    ) -> Result<()> {
        self.counters.call(Op::MutateRow, table);
        self.counters.mutated(table, 1, mutations.len());
        self.inner.mutate_row(table, row_key, mutations).await
    }
    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        self.counters.call(Op::MutateRows, table);
        let mutations = entries.iter().map(|e| e.mutations.len()).sum();
        self.counters.mutated(table, entries.len(), mutations);
        self.inner.mutate_rows(table, entries).await
    }
    async fn read_rows(&self, table: &str, request: ReadRows) -> Result<RowStream> {
        self.counters.call(Op::ReadRows, table);
        let rows = self.inner.read_rows(table, request).await?;
        let (counters, table) = (self.counters.clone(), table.to_owned());
        Ok(Box::pin(rows.inspect(move |row| {
            if let Ok(row) = row {
                counters.read(&table, row.cells.len());
            }
        })))
    }
    async fn check_and_mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        predicate: Option<RowFilter>,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        self.counters.call(Op::CheckAndMutateRow, table);
        let (if_match, if_not) = (on_match.len(), on_no_match.len());
        let matched = self
            .inner
            .check_and_mutate_row(table, row_key, predicate, on_match, on_no_match)
            .await?;
        self.counters
            .mutated(table, 1, if matched { if_match } else { if_not });
        Ok(matched)
    }
    async fn read_modify_write_row(
        &self,
        table: &str,
        row_key: Bytes,
        rules: Vec<ReadModifyWriteRule>,
    ) -> Result<Row> {
        self.counters.call(Op::ReadModifyWriteRow, table);
        self.counters.mutated(table, 1, rules.len());
        self.inner
            .read_modify_write_row(table, row_key, rules)
            .await
    }
    async fn sample_row_keys(&self, table: &str) -> Result<Vec<KeySample>> {
        self.other();
        self.inner.sample_row_keys(table).await
    }
    async fn flush(&self) -> Result<()> {
        self.other();
        self.inner.flush().await
    }
    fn gauges(&self) -> Vec<penchant_store::Gauge> {
        self.inner.gauges()
    }
    fn atomic_writes(&self) -> bool {
        self.inner.atomic_writes()
    }
    async fn mutate_atomically(&self, writes: Vec<penchant_store::TableMutation>) -> Result<()> {
        self.count_atomic(&writes);
        self.inner.mutate_atomically(writes).await
    }
    async fn mutate_atomically_deferred(
        &self,
        writes: Vec<penchant_store::TableMutation>,
    ) -> Result<()> {
        self.count_atomic(&writes);
        self.inner.mutate_atomically_deferred(writes).await
    }
    async fn sync(&self) -> Result<()> {
        self.inner.sync().await
    }
    fn workload_view(&self, workload: Workload) -> Option<Arc<dyn Store>> {
        let view = self.inner.workload_view(workload)?;
        Some(Arc::new(CountingStore {
            inner: view,
            counters: self.counters.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use penchant_store::{MemStore, ReadModifyWriteOp, RowSet};

    fn set(qualifier: &'static str) -> Mutation {
        Mutation::set_now(
            "f",
            Bytes::from_static(qualifier.as_bytes()),
            Bytes::from_static(b"1"),
        )
    }

    #[tokio::test]
    async fn every_operation_is_counted() {
        let store = CountingStore::new(Arc::new(MemStore::new()));
        let families = BTreeMap::from([("f".to_owned(), GcRule::MaxVersions(1))]);
        store.create_table("t", families).await.unwrap();
        let start = store.snapshot();

        store
            .mutate_row("t", Bytes::from_static(b"a"), vec![set("x"), set("y")])
            .await
            .unwrap();
        let entries = ["b", "c", "d"]
            .map(|k| RowMutation::new(Bytes::from_static(k.as_bytes()), vec![set("x")]));
        store.mutate_rows("t", entries.to_vec()).await.unwrap();
        // The row has cells: the match branch (one mutation) is applied.
        let matched = store
            .check_and_mutate_row(
                "t",
                Bytes::from_static(b"a"),
                None,
                vec![set("z")],
                vec![set("z"), set("w")],
            )
            .await
            .unwrap();
        assert!(matched);
        let rule = ReadModifyWriteRule {
            family: "f".into(),
            qualifier: Bytes::from_static(b"n"),
            op: ReadModifyWriteOp::Increment(1),
        };
        store
            .read_modify_write_row("t", Bytes::from_static(b"e"), vec![rule])
            .await
            .unwrap();
        let rows: Vec<Row> = store
            .read_rows("t", ReadRows::new(RowSet::all()))
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(rows.len(), 5);
        // A provided method goes through the counted primitives.
        let one = store.read_row("t", Bytes::from_static(b"b"), None).await;
        assert!(one.unwrap().is_some());
        store.flush().await.unwrap();

        let ops = store.snapshot().since(&start);
        let calls = |op: Op| ops.calls[op as usize];
        assert_eq!(calls(Op::ReadRows), 2.0);
        assert_eq!(calls(Op::MutateRow), 1.0);
        assert_eq!(calls(Op::MutateRows), 1.0);
        assert_eq!(calls(Op::CheckAndMutateRow), 1.0);
        assert_eq!(calls(Op::ReadModifyWriteRow), 1.0);
        assert_eq!(calls(Op::Other), 1.0);
        assert_eq!(ops.calls(), 6.0);
        assert_eq!(ops.rows_read, 6.0);
        // a: x, y, z; b, c, d: x; e: n; then b again.
        assert_eq!(ops.cells_read, 7.0 + 1.0);
        assert_eq!(ops.rows_mutated, 1.0 + 3.0 + 1.0 + 1.0);
        assert_eq!(ops.mutations, 2.0 + 3.0 + 1.0 + 1.0);
        assert_eq!(
            ops.breakdown(0),
            "2 read_rows + 1 mutate_row + 1 mutate_rows + 1 check_and_mutate_row + 1 \
             read_modify_write_row + 1 other"
        );
    }

    #[test]
    fn ops_divide_and_subtract() {
        let mut ops = Ops {
            rows_read: 10.0,
            rows_mutated: 4.0,
            ..Ops::default()
        };
        ops.calls[Op::ReadRows as usize] = 6.0;
        let per = ops.per(2.0);
        assert_eq!(per.rows_read, 5.0);
        assert_eq!(per.calls(), 3.0);
        assert_eq!(ops.per(0.0), Ops::default());
        let less = ops.minus(&per, 2.0);
        assert_eq!(less, Ops::default());
        // Never below zero.
        assert_eq!(per.minus(&ops, 1.0).rows_read, 0.0);
        assert_eq!(Ops::default().breakdown(1), "no calls");
        assert_eq!(per.breakdown(1), "3.0 read_rows");
    }
}
