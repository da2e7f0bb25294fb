//! A store that calls a hook before each operation, to stage races.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;
use penchant_store::{
    FamilyChange, GcRule, KeySample, MemStore, Mutation, ReadModifyWriteRule, ReadRows, Result,
    Row, RowFilter, RowMutation, RowStream, Store, TableSchema,
};
use tokio::sync::oneshot;

/// The operations a hook sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)]
pub enum Op {
    Read,
    Write,
    WriteRows,
    Conditional,
    Increment,
}

/// Once armed, stops the next operation `op` on `table` until the test lets it go.
#[derive(Debug)]
#[allow(dead_code)]
pub struct Gate {
    op: Op,
    table: &'static str,
    /// (tells the test the operation is waiting, lets it go on).
    armed: tokio::sync::Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
}

#[allow(dead_code)]
impl Gate {
    pub fn new(op: Op, table: &'static str) -> Self {
        Self {
            op,
            table,
            armed: tokio::sync::Mutex::new(None),
        }
    }

    /// Arm the gate: the first receiver hears when the operation waits, the sender lets it go.
    pub async fn arm(&self) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (waiting, waits) = oneshot::channel();
        let (go, gate) = oneshot::channel();
        *self.armed.lock().await = Some((waiting, gate));
        (waits, go)
    }
}

#[async_trait]
impl Hook for Gate {
    async fn before(&self, op: Op, table: &str) {
        if op == self.op && table == self.table {
            let gate = self.armed.lock().await.take();
            if let Some((waiting, go)) = gate {
                waiting.send(()).unwrap();
                go.await.unwrap();
            }
        }
    }
}

/// Called before every data operation on a table.
#[async_trait]
pub trait Hook: Send + Sync + std::fmt::Debug + 'static {
    async fn before(&self, op: Op, table: &str);
}

/// A [`MemStore`] (which other stores may share) that calls `hook` before each read and write.
#[derive(Debug, Default)]
pub struct Hooked<H> {
    pub inner: std::sync::Arc<MemStore>,
    pub hook: H,
}

#[async_trait]
impl<H: Hook> Store for Hooked<H> {
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
        self.hook.before(Op::Write, table).await;
        self.inner.mutate_row(table, row_key, mutations).await
    }
    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        self.hook.before(Op::WriteRows, table).await;
        self.inner.mutate_rows(table, entries).await
    }
    async fn read_rows(&self, table: &str, request: ReadRows) -> Result<RowStream> {
        self.hook.before(Op::Read, table).await;
        self.inner.read_rows(table, request).await
    }
    async fn check_and_mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        predicate: Option<RowFilter>,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        self.hook.before(Op::Conditional, table).await;
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
        self.hook.before(Op::Increment, table).await;
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
}
