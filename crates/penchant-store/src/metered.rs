//! A [`Store`] that times every operation and tells a [`Meter`] (the server's metrics: latency
//! histograms and error counts by backend and operation). A read is timed until its stream ends (or is dropped),
//! not only until it opens. Workload views (the batch app profile) are metered too, under their
//! own `workload` label, and every operation names its table: what a saturated store spends its
//! time on, and whether the background jobs or the serving paths spend it.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use crate::{
    FamilyChange, GcRule, KeySample, Mutation, ReadModifyWriteRule, ReadRows, Result, Row,
    RowFilter, RowMutation, RowStream, Store, TableSchema, Workload,
};
use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

/// One store operation: what a [`Meter`] is told it took.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub struct StoreOp {
    pub backend: &'static str,
    /// `serving`, or `batch` for the [`Workload::Batch`] view.
    pub workload: &'static str,
    pub op: &'static str,
    /// Its table (`*`: the store, or several tables).
    pub table: String,
}

/// What a [`MeteredStore`] reports to: each operation, its time in seconds and whether it
/// succeeded.
pub trait Meter: Send + Sync + std::fmt::Debug {
    fn store_operation(&self, op: StoreOp, secs: f64, ok: bool);
}

/// `inner`, with its operations timed.
#[derive(Debug)]
pub struct MeteredStore {
    inner: Arc<dyn Store>,
    backend: &'static str,
    /// `serving`, or `batch` for the [`Workload::Batch`] view.
    workload: &'static str,
    metrics: Arc<dyn Meter>,
}

impl MeteredStore {
    pub fn new(inner: Arc<dyn Store>, backend: &'static str, metrics: Arc<dyn Meter>) -> Self {
        Self {
            inner,
            backend,
            workload: "serving",
            metrics,
        }
    }

    fn op(&self, op: &'static str, table: &str) -> StoreOp {
        StoreOp {
            backend: self.backend,
            workload: self.workload,
            op,
            table: table.to_owned(),
        }
    }

    /// `call`, timed as `op` on `table` (`*`: the store, or several tables).
    async fn timed<T>(
        &self,
        op: &'static str,
        table: &str,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        let result = call.await;
        let secs = started.elapsed().as_secs_f64();
        self.metrics
            .store_operation(self.op(op, table), secs, result.is_ok());
        result
    }
}

/// A read's rows, timed until the stream ends or is dropped.
struct TimedStream {
    rows: RowStream,
    started: Instant,
    failed: bool,
    op: Option<StoreOp>,
    metrics: Arc<dyn Meter>,
}

impl Stream for TimedStream {
    type Item = Result<Row>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.rows.as_mut().poll_next(cx);
        if let Poll::Ready(Some(Err(_))) = &next {
            self.failed = true;
        }
        next
    }
}

impl Drop for TimedStream {
    fn drop(&mut self) {
        let secs = self.started.elapsed().as_secs_f64();
        if let Some(op) = self.op.take() {
            self.metrics.store_operation(op, secs, !self.failed);
        }
    }
}

#[async_trait]
impl Store for MeteredStore {
    async fn create_table(&self, name: &str, families: BTreeMap<String, GcRule>) -> Result<()> {
        self.timed(
            "create_table",
            name,
            self.inner.create_table(name, families),
        )
        .await
    }
    async fn modify_families(
        &self,
        table: &str,
        changes: Vec<FamilyChange>,
    ) -> Result<TableSchema> {
        self.timed(
            "modify_families",
            table,
            self.inner.modify_families(table, changes),
        )
        .await
    }
    async fn get_table(&self, table: &str) -> Result<TableSchema> {
        self.timed("get_table", table, self.inner.get_table(table))
            .await
    }
    async fn list_tables(&self) -> Result<Vec<TableSchema>> {
        self.timed("list_tables", "*", self.inner.list_tables())
            .await
    }
    async fn delete_table(&self, table: &str) -> Result<()> {
        self.timed("delete_table", table, self.inner.delete_table(table))
            .await
    }
    async fn drop_row_range(&self, table: &str, prefix: &[u8]) -> Result<()> {
        self.timed(
            "drop_row_range",
            table,
            self.inner.drop_row_range(table, prefix),
        )
        .await
    }
    async fn mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        mutations: Vec<Mutation>,
    ) -> Result<()> {
        self.timed(
            "mutate_row",
            table,
            self.inner.mutate_row(table, row_key, mutations),
        )
        .await
    }
    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        self.timed("mutate_rows", table, self.inner.mutate_rows(table, entries))
            .await
    }
    async fn read_rows(&self, table: &str, request: ReadRows) -> Result<RowStream> {
        let started = Instant::now();
        match self.inner.read_rows(table, request).await {
            Ok(rows) => Ok(Box::pin(TimedStream {
                rows,
                started,
                failed: false,
                op: Some(self.op("read_rows", table)),
                metrics: self.metrics.clone(),
            })),
            Err(e) => {
                let secs = started.elapsed().as_secs_f64();
                self.metrics
                    .store_operation(self.op("read_rows", table), secs, false);
                Err(e)
            }
        }
    }
    async fn check_and_mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        predicate: Option<RowFilter>,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        let call =
            self.inner
                .check_and_mutate_row(table, row_key, predicate, on_match, on_no_match);
        self.timed("check_and_mutate_row", table, call).await
    }
    async fn read_modify_write_row(
        &self,
        table: &str,
        row_key: Bytes,
        rules: Vec<ReadModifyWriteRule>,
    ) -> Result<Row> {
        let call = self.inner.read_modify_write_row(table, row_key, rules);
        self.timed("read_modify_write_row", table, call).await
    }
    async fn sample_row_keys(&self, table: &str) -> Result<Vec<KeySample>> {
        self.timed("sample_row_keys", table, self.inner.sample_row_keys(table))
            .await
    }
    async fn flush(&self) -> Result<()> {
        self.timed("flush", "*", self.inner.flush()).await
    }
    async fn checkpoint(&self, dest: &std::path::Path) -> Result<()> {
        self.timed("checkpoint", "*", self.inner.checkpoint(dest))
            .await
    }
    fn atomic_writes(&self) -> bool {
        self.inner.atomic_writes()
    }
    async fn mutate_atomically(&self, writes: Vec<crate::TableMutation>) -> Result<()> {
        self.timed(
            "mutate_atomically",
            "*",
            self.inner.mutate_atomically(writes),
        )
        .await
    }
    async fn mutate_atomically_deferred(&self, writes: Vec<crate::TableMutation>) -> Result<()> {
        self.timed(
            "mutate_atomically",
            "*",
            self.inner.mutate_atomically_deferred(writes),
        )
        .await
    }
    async fn sync(&self) -> Result<()> {
        self.timed("sync", "*", self.inner.sync()).await
    }
    fn gauges(&self) -> Vec<crate::Gauge> {
        self.inner.gauges()
    }
    fn workload_view(&self, workload: Workload) -> Option<Arc<dyn Store>> {
        // A backend without views serves every workload itself; its batch calls are still
        // labelled as such.
        let view = self.inner.workload_view(workload);
        Some(Arc::new(MeteredStore {
            inner: view.unwrap_or_else(|| Arc::clone(&self.inner)),
            backend: self.backend,
            workload: match workload {
                Workload::Serving => "serving",
                Workload::Batch => "batch",
            },
            metrics: self.metrics.clone(),
        }))
    }
}
