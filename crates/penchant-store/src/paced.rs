//! The background jobs' pace on the store. A store that serves requests and jobs alike (the
//! embedded store; a Bigtable instance without a cluster of its own for batch work, such as the
//! emulator) gives the jobs all it has: a recompute, a build or a training scans as fast as the
//! store answers, and the requests behind it wait. [`PacedStore`] gives the
//! [`Workload::Batch`] view a budget of rows per second (read or written, shared by every job of
//! the node), spent as the rows go; requests are never paced.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::{
    FamilyChange, GcRule, KeySample, Mutation, ReadModifyWriteRule, ReadRows, Result, Row,
    RowFilter, RowMutation, RowStream, Store, TableMutation, TableSchema, Workload, for_workload,
};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;

/// A budget of rows per second, as a generic cell rate: each row moves the theoretical arrival
/// time on by `1 / rate`; a spender waits for the part of it beyond `burst` from now.
#[derive(Debug)]
struct Pace {
    rate: f64,
    burst: Duration,
    next: Mutex<Instant>,
}

/// Waits shorter than this are left owed, not slept: the next spender sleeps them.
const GRANULE: Duration = Duration::from_millis(5);

impl Pace {
    fn new(rows_per_second: u32) -> Self {
        Self {
            rate: f64::from(rows_per_second),
            burst: Duration::from_secs(1),
            next: Mutex::new(Instant::now()),
        }
    }

    /// How long a spender of `rows` waits now.
    fn charge(&self, rows: usize) -> Duration {
        let now = Instant::now();
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        *next = (*next).max(now) + Duration::from_secs_f64(rows as f64 / self.rate);
        next.saturating_duration_since(now)
            .saturating_sub(self.burst)
    }

    async fn spend(&self, rows: usize) {
        let wait = self.charge(rows);
        if wait >= GRANULE {
            tokio::time::sleep(wait).await;
        }
    }
}

/// `inner`, whose [`Workload::Batch`] view spends at most a budget of rows per second.
#[derive(Debug)]
pub struct PacedStore {
    inner: Arc<dyn Store>,
    pace: Arc<Pace>,
    /// Whether this is the batch view (paced), or the store as requests see it.
    paced: bool,
}

impl PacedStore {
    /// `inner` with its jobs paced at `rows_per_second`; `inner` itself when 0 (no budget).
    pub fn wrap(inner: Arc<dyn Store>, rows_per_second: u32) -> Arc<dyn Store> {
        if rows_per_second == 0 {
            return inner;
        }
        Arc::new(Self {
            inner,
            pace: Arc::new(Pace::new(rows_per_second)),
            paced: false,
        })
    }

    async fn spend(&self, rows: usize) {
        if self.paced {
            self.pace.spend(rows).await;
        }
    }
}

#[async_trait]
impl Store for PacedStore {
    async fn create_table(&self, name: &str, families: BTreeMap<String, GcRule>) -> Result<()> {
        self.inner.create_table(name, families).await
    }
    async fn modify_families(
        &self,
        table: &str,
        changes: Vec<FamilyChange>,
    ) -> Result<TableSchema> {
        self.inner.modify_families(table, changes).await
    }
    async fn get_table(&self, table: &str) -> Result<TableSchema> {
        self.inner.get_table(table).await
    }
    async fn list_tables(&self) -> Result<Vec<TableSchema>> {
        self.inner.list_tables().await
    }
    async fn delete_table(&self, table: &str) -> Result<()> {
        self.inner.delete_table(table).await
    }
    async fn drop_row_range(&self, table: &str, prefix: &[u8]) -> Result<()> {
        self.inner.drop_row_range(table, prefix).await
    }
    async fn mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        mutations: Vec<Mutation>,
    ) -> Result<()> {
        self.spend(1).await;
        self.inner.mutate_row(table, row_key, mutations).await
    }
    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        self.spend(entries.len()).await;
        self.inner.mutate_rows(table, entries).await
    }
    fn atomic_writes(&self) -> bool {
        self.inner.atomic_writes()
    }
    async fn mutate_atomically(&self, writes: Vec<TableMutation>) -> Result<()> {
        self.spend(writes.len()).await;
        self.inner.mutate_atomically(writes).await
    }
    async fn mutate_atomically_deferred(&self, writes: Vec<TableMutation>) -> Result<()> {
        self.spend(writes.len()).await;
        self.inner.mutate_atomically_deferred(writes).await
    }
    async fn sync(&self) -> Result<()> {
        self.inner.sync().await
    }
    async fn read_rows(&self, table: &str, request: ReadRows) -> Result<RowStream> {
        let rows = self.inner.read_rows(table, request).await?;
        if !self.paced {
            return Ok(rows);
        }
        // Each row is paid for as it comes: a scan goes at the budget's pace, and the store
        // reads ahead of it no more than a page (the Bigtable backend's reads are paged).
        let pace = Arc::clone(&self.pace);
        Ok(Box::pin(rows.then(move |row| {
            let pace = Arc::clone(&pace);
            async move {
                pace.spend(1).await;
                row
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
        self.spend(1).await;
        self.inner
            .check_and_mutate_row(table, row_key, predicate, on_match, on_no_match)
            .await
    }
    async fn read_modify_write_row(
        &self,
        table: &str,
        row_key: Bytes,
        rules: Vec<ReadModifyWriteRule>,
    ) -> Result<Row> {
        self.spend(1).await;
        self.inner
            .read_modify_write_row(table, row_key, rules)
            .await
    }
    async fn sample_row_keys(&self, table: &str) -> Result<Vec<KeySample>> {
        self.inner.sample_row_keys(table).await
    }
    async fn flush(&self) -> Result<()> {
        self.inner.flush().await
    }
    async fn checkpoint(&self, dest: &std::path::Path) -> Result<()> {
        self.inner.checkpoint(dest).await
    }
    fn gauges(&self) -> Vec<crate::Gauge> {
        self.inner.gauges()
    }
    fn workload_view(&self, workload: Workload) -> Option<Arc<dyn Store>> {
        let inner = for_workload(&self.inner, workload);
        Some(Arc::new(Self {
            inner,
            pace: Arc::clone(&self.pace),
            paced: workload == Workload::Batch,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;

    fn store() -> Arc<dyn Store> {
        Arc::new(crate::MemStore::new())
    }

    async fn table_of(store: &Arc<dyn Store>, rows: usize) {
        let families = BTreeMap::from([("f".to_owned(), GcRule::MaxVersions(1))]);
        store.create_table("t", families).await.unwrap();
        let entries = (0..rows)
            .map(|i| {
                let cell = Mutation::set_now("f", Bytes::from_static(b"q"), Bytes::from("v"));
                RowMutation::new(Bytes::from(format!("r{i:04}")), vec![cell])
            })
            .collect();
        store.mutate_all("t", entries).await.unwrap();
    }

    async fn scan(store: &Arc<dyn Store>) -> (usize, Duration) {
        let started = Instant::now();
        let rows: Vec<Row> = store
            .read_rows("t", ReadRows::default())
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        (rows.len(), started.elapsed())
    }

    #[tokio::test]
    async fn the_batch_view_reads_at_its_budget_and_requests_do_not_spend_it() {
        let paced = Arc::new(PacedStore {
            inner: store(),
            pace: Arc::new(Pace::new(1_000)),
            paced: false,
        });
        let store: Arc<dyn Store> = paced.clone();
        table_of(&store, 3_000).await;
        // Requests are not paced, and leave the budget whole.
        assert_eq!(scan(&store).await.0, 3_000);
        assert!(*paced.pace.next.lock().unwrap() <= Instant::now());
        // Jobs: 3,000 rows at 1,000 a second, the first second's burst free: two seconds
        // at least.
        let batch = for_workload(&store, Workload::Batch);
        let (rows, took) = scan(&batch).await;
        assert_eq!(rows, 3_000);
        assert!(took >= Duration::from_millis(1_950), "{took:?}");
        // Writes spend the budget too, and the batch views of one store share it: the scan
        // left it spent, so 500 rows wait half a second.
        let started = Instant::now();
        let cell = Mutation::set_now("f", Bytes::from_static(b"q"), Bytes::from("w"));
        let entries = (0..500)
            .map(|i| RowMutation::new(Bytes::from(format!("r{i:04}")), vec![cell.clone()]))
            .collect();
        let other = for_workload(&store, Workload::Batch);
        other.mutate_all("t", entries).await.unwrap();
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(480), "{took:?}");
    }

    #[tokio::test]
    async fn no_budget_is_the_store_itself() {
        let inner = store();
        let wrapped = PacedStore::wrap(Arc::clone(&inner), 0);
        assert!(Arc::ptr_eq(&inner, &wrapped));
    }
}
