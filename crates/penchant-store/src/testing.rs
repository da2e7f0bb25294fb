//! [`Hooked`]: a store that forwards every operation to a [`MemStore`] (which other stores may
//! share), calling a [`Hook`] first. Tests stage races (a gate), faults (a cluster that cannot be
//! reached), slow stores (jitter) and observe reads with it, writing only the hook.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::{
    FamilyChange, GcRule, KeySample, MemStore, Mutation, ReadModifyWriteRule, ReadRows, Result,
    Row, RowFilter, RowMutation, RowStream, Store, TableSchema,
};

/// The operations a hook sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `read_rows` (and so every read).
    Read,
    /// `mutate_row`.
    Write,
    /// `mutate_rows`.
    WriteRows,
    /// `check_and_mutate_row`.
    Conditional,
    /// `read_modify_write_row`.
    Increment,
    /// `mutate_atomically` (the hook is called once per table the write names).
    Atomic,
    /// Tables and their families: create, modify, get, list (table `""`), delete, drop a row
    /// range, sample row keys.
    Schema,
    /// `flush` (table `""`).
    Flush,
}

impl Op {
    /// Whether the operation reads or writes rows (not [`Op::Schema`] nor [`Op::Flush`]).
    pub fn is_data(self) -> bool {
        !matches!(self, Op::Schema | Op::Flush)
    }
}

/// Called by [`Hooked`] before every operation.
#[async_trait]
pub trait Hook: Send + Sync + std::fmt::Debug + 'static {
    /// Before operation `op` on `table`; an error is the operation's answer (the inner store is
    /// not called).
    async fn before(&self, op: Op, table: &str) -> Result<()>;

    /// Before a read, with its request: by default [`Hook::before`] with [`Op::Read`].
    async fn before_read(&self, table: &str, request: &ReadRows) -> Result<()> {
        let _ = request;
        self.before(Op::Read, table).await
    }

    /// The stream a read answers, given the inner store's: by default that one.
    fn answer(&self, stream: RowStream) -> RowStream {
        stream
    }
}

/// No hook: a plain forwarding store.
#[async_trait]
impl Hook for () {
    async fn before(&self, _: Op, _: &str) -> Result<()> {
        Ok(())
    }
}

/// A [`MemStore`] (which other stores may share) that calls `hook` before each operation.
#[derive(Debug, Default)]
pub struct Hooked<H> {
    pub inner: Arc<MemStore>,
    pub hook: H,
}

impl<H> Hooked<H> {
    /// A new MemStore behind `hook`.
    pub fn new(hook: H) -> Self {
        Self::on(Arc::default(), hook)
    }

    /// `inner` (shared) behind `hook`.
    pub fn on(inner: Arc<MemStore>, hook: H) -> Self {
        Self { inner, hook }
    }
}

#[async_trait]
impl<H: Hook> Store for Hooked<H> {
    async fn create_table(&self, name: &str, families: BTreeMap<String, GcRule>) -> Result<()> {
        self.hook.before(Op::Schema, name).await?;
        self.inner.create_table(name, families).await
    }
    async fn modify_families(
        &self,
        table: &str,
        changes: Vec<FamilyChange>,
    ) -> Result<TableSchema> {
        self.hook.before(Op::Schema, table).await?;
        self.inner.modify_families(table, changes).await
    }
    async fn get_table(&self, table: &str) -> Result<TableSchema> {
        self.hook.before(Op::Schema, table).await?;
        self.inner.get_table(table).await
    }
    async fn list_tables(&self) -> Result<Vec<TableSchema>> {
        self.hook.before(Op::Schema, "").await?;
        self.inner.list_tables().await
    }
    async fn delete_table(&self, table: &str) -> Result<()> {
        self.hook.before(Op::Schema, table).await?;
        self.inner.delete_table(table).await
    }
    async fn drop_row_range(&self, table: &str, prefix: &[u8]) -> Result<()> {
        self.hook.before(Op::Schema, table).await?;
        self.inner.drop_row_range(table, prefix).await
    }
    async fn mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        mutations: Vec<Mutation>,
    ) -> Result<()> {
        self.hook.before(Op::Write, table).await?;
        self.inner.mutate_row(table, row_key, mutations).await
    }
    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        self.hook.before(Op::WriteRows, table).await?;
        self.inner.mutate_rows(table, entries).await
    }
    async fn read_rows(&self, table: &str, request: ReadRows) -> Result<RowStream> {
        self.hook.before_read(table, &request).await?;
        let stream = self.inner.read_rows(table, request).await?;
        Ok(self.hook.answer(stream))
    }
    async fn check_and_mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        predicate: Option<RowFilter>,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        self.hook.before(Op::Conditional, table).await?;
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
        self.hook.before(Op::Increment, table).await?;
        self.inner
            .read_modify_write_row(table, row_key, rules)
            .await
    }
    async fn sample_row_keys(&self, table: &str) -> Result<Vec<KeySample>> {
        self.hook.before(Op::Schema, table).await?;
        self.inner.sample_row_keys(table).await
    }
    async fn flush(&self) -> Result<()> {
        self.hook.before(Op::Flush, "").await?;
        self.inner.flush().await
    }
    fn atomic_writes(&self) -> bool {
        self.inner.atomic_writes()
    }
    async fn mutate_atomically(&self, writes: Vec<crate::TableMutation>) -> Result<()> {
        self.before_atomic(&writes).await?;
        self.inner.mutate_atomically(writes).await
    }
    async fn mutate_atomically_deferred(&self, writes: Vec<crate::TableMutation>) -> Result<()> {
        self.before_atomic(&writes).await?;
        self.inner.mutate_atomically_deferred(writes).await
    }
    async fn sync(&self) -> Result<()> {
        self.inner.sync().await
    }
}

impl<H: Hook> Hooked<H> {
    /// The hook, once per table an atomic write names.
    async fn before_atomic(&self, writes: &[crate::TableMutation]) -> Result<()> {
        let tables: std::collections::BTreeSet<&'static str> =
            writes.iter().map(|w| w.table).collect();
        for table in tables {
            self.hook.before(Op::Atomic, table).await?;
        }
        Ok(())
    }
}

/// A hook that answers `Unavailable` to every operation but [`Op::Flush`] while `down`, as a
/// cluster that cannot be reached does.
#[derive(Debug, Default)]
pub struct Down {
    pub down: std::sync::atomic::AtomicBool,
}

impl Down {
    /// Whether it is down now.
    pub fn is_down(&self) -> bool {
        self.down.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Bring it down (`true`) or up.
    pub fn set(&self, down: bool) {
        self.down.store(down, std::sync::atomic::Ordering::SeqCst);
    }
}

#[async_trait]
impl Hook for Down {
    async fn before(&self, op: Op, _: &str) -> Result<()> {
        if op != Op::Flush && self.is_down() {
            return Err(crate::StoreError::Unavailable("cluster unreachable".into()));
        }
        Ok(())
    }
}
