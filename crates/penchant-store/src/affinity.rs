//! Row affinity: a [`Store`] over several clusters of one replicated instance, each row served
//! by its home cluster, with a consistency chosen per read.
//!
//! A replicated Bigtable instance with several clusters in a region replicates every write to
//! every cluster, eventually (typically within seconds). A client that writes through one
//! cluster and reads through another may not see its own write yet. [`AffineStore`] gives each
//! user one preferred cluster, its **home**, so that a user reads what it just wrote: every
//! serving write and every read of the user's rows goes there. In production each cluster is a
//! `BigtableStore` view of the same instance whose app profile routes to that cluster alone
//! (single-cluster routing); the stores here are any [`Store`]s.
//!
//! **Home.** A row's *affinity key* is its key up to (not including) its second 0 byte, or the
//! whole key if it has fewer than two: Penchant's keys are `app 0 user 0 ...`, a profile row
//! `app 0 user`, so every row of a user has the same affinity key `app 0 user`, and
//! `home = xxh3_64(affinity key) % N` (stable: the same on every node and across restarts, as
//! long as the list of clusters does not change).
//!
//! **Writes** (`mutate_row`, `mutate_rows` grouped by home, `check_and_mutate_row`,
//! `read_modify_write_row`) go to the home; if it answers [`StoreError::Unavailable`] they fail
//! over to the next cluster in order (home+1, home+2, ... mod N).
//!
//! **Reads** carry a [`Consistency`]:
//! - [`Consistency::Eventual`] (the default) reads from the home, failing over like writes;
//! - [`Consistency::Strong`] reads from the home only: if it cannot be reached the read fails
//!   with [`StoreError::StrongReadUnavailable`] — never an older answer from another cluster.
//!
//! A read of several keys is split by home (each key read from its own home, the streams merged
//! in key order); a range goes to the home of its start key (a user's prefix: that user's home;
//! a range across users is served by one cluster, strong only for the user it starts with).
//!
//! **What a user may see during a failover** (its home unreachable, eventual reads and writes
//! served by another cluster): a write made just before the home went away, and not yet
//! replicated, may be missing for a moment (until replication catches up); a
//! `read_modify_write_row` or `check_and_mutate_row` that timed out on the home may have been
//! applied there before the failover applies it again on the next cluster (an increment counted
//! twice, an append appended twice): as the backends already say, the outcome of a
//! non-idempotent write that failed with `Unavailable` is unknown. Two clusters may also take
//! conflicting writes of one cell during the failover; replication keeps the one with the later
//! timestamp. Strong reads fail (503 at the HTTP API) until the home is back.
//!
//! Admin calls (tables, families, dropping row ranges, split points) go to cluster 0: every
//! cluster is the same instance. `Workload::Batch` views are the batch store when one is given
//! (in production a multi-cluster-routing app profile), else the clusters' own batch views.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;

use crate::placement::merge;
use crate::{
    Consistency, FamilyChange, Gauge, GcRule, KeySample, Mutation, ReadModifyWriteRule, ReadRows,
    Result, Row, RowFilter, RowMutation, RowRange, RowSet, RowStream, Store, StoreError,
    TableSchema, Workload, check_batch_size,
};

/// How [`StoreError::StrongReadUnavailable`] reads (a strong read whose home cluster cannot be
/// reached), before the home's own error.
pub const STRONG_READ_UNAVAILABLE: &str =
    "strong read: the home cluster of this row is unavailable";

/// The part of a row key that picks its home: up to (not including) the second 0 byte, or the
/// whole key.
pub fn affinity_key(key: &[u8]) -> &[u8] {
    let mut zeros = key.iter().enumerate().filter(|(_, b)| **b == 0);
    match zeros.nth(1) {
        Some((i, _)) => &key[..i],
        None => key,
    }
}

/// A store over several clusters of one instance, each row served by its home cluster. See the
/// module documentation.
#[derive(Debug, Clone)]
pub struct AffineStore {
    clusters: Vec<Arc<dyn Store>>,
    batch: Option<Arc<dyn Store>>,
}

impl AffineStore {
    /// Rows spread over `clusters` by home (their order is part of every row's home: keep it
    /// stable); `Workload::Batch` views are `batch` when given.
    ///
    /// # Panics
    /// When `clusters` is empty.
    pub fn new(clusters: Vec<Arc<dyn Store>>, batch: Option<Arc<dyn Store>>) -> Self {
        assert!(!clusters.is_empty(), "an AffineStore needs a cluster");
        Self { clusters, batch }
    }

    /// How many clusters.
    pub fn len(&self) -> usize {
        self.clusters.len()
    }

    /// Never: there is always a cluster.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The index of a row's home cluster.
    pub fn home(&self, key: &[u8]) -> usize {
        let n = self.clusters.len() as u64;
        (xxhash_rust::xxh3::xxh3_64(affinity_key(key)) % n) as usize
    }

    /// The clusters a call for a row of this home tries, in order: the home, then the next ones.
    fn order(&self, home: usize) -> impl Iterator<Item = &Arc<dyn Store>> {
        let n = self.clusters.len();
        (0..n).map(move |i| &self.clusters[(home + i) % n])
    }

    /// Run a call on the home, then on the next clusters while it answers `Unavailable`.
    async fn failover<'a, T, F, Fut>(&'a self, home: usize, mut call: F) -> Result<T>
    where
        F: FnMut(&'a Arc<dyn Store>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut last = String::new();
        for store in self.order(home) {
            match call(store).await {
                Err(StoreError::Unavailable(m)) => last = m,
                other => return other,
            }
        }
        Err(StoreError::Unavailable(format!(
            "every cluster is unavailable; the last said: {last}"
        )))
    }

    /// The homes a row set touches, each with the part of the set it should read: keys by
    /// their home, ranges by the home of their start key.
    fn split(&self, rows: &RowSet) -> BTreeMap<usize, RowSet> {
        let mut out: BTreeMap<usize, RowSet> = BTreeMap::new();
        for key in &rows.keys {
            out.entry(self.home(key))
                .or_default()
                .keys
                .push(key.clone());
        }
        let ranges = if rows.is_all() {
            vec![RowRange::all()]
        } else {
            rows.ranges.clone()
        };
        for range in ranges {
            let start: &[u8] = match &range.start {
                Bound::Included(k) | Bound::Excluded(k) => k,
                Bound::Unbounded => b"",
            };
            out.entry(self.home(start)).or_default().ranges.push(range);
        }
        out
    }

    /// One home's part of a read: from the home only (strong), or failing over (eventual).
    async fn read_part(&self, table: &str, home: usize, request: ReadRows) -> Result<RowStream> {
        match request.consistency {
            Consistency::Strong => {
                let stream = open(&self.clusters[home], table, request)
                    .await
                    .map_err(strong)?;
                Ok(stream.map(|r| r.map_err(strong)).boxed())
            }
            Consistency::Eventual => {
                self.failover(home, |store| open(store, table, request.clone()))
                    .await
            }
        }
    }
}

/// A strong read's `Unavailable`: its own kind, not served elsewhere.
fn strong(e: StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(m) => StoreError::StrongReadUnavailable(m),
        other => other,
    }
}

/// Start a read and wait for its first row, so that a cluster that cannot be reached (whose
/// stream fails at once) fails the call, and the read can go elsewhere. A stream that breaks
/// after its first row surfaces the error (backends resume broken streams themselves).
async fn open(store: &Arc<dyn Store>, table: &str, request: ReadRows) -> Result<RowStream> {
    let mut stream = store.read_rows(table, request).await?;
    Ok(match stream.next().await {
        None => futures::stream::empty().boxed(),
        Some(Err(e)) => return Err(e),
        Some(Ok(row)) => futures::stream::once(async { Ok(row) })
            .chain(stream)
            .boxed(),
    })
}

#[async_trait]
impl Store for AffineStore {
    async fn create_table(&self, name: &str, families: BTreeMap<String, GcRule>) -> Result<()> {
        self.clusters[0].create_table(name, families).await
    }

    async fn modify_families(
        &self,
        table: &str,
        changes: Vec<FamilyChange>,
    ) -> Result<TableSchema> {
        self.clusters[0].modify_families(table, changes).await
    }

    async fn get_table(&self, table: &str) -> Result<TableSchema> {
        self.clusters[0].get_table(table).await
    }

    async fn list_tables(&self) -> Result<Vec<TableSchema>> {
        self.clusters[0].list_tables().await
    }

    async fn delete_table(&self, table: &str) -> Result<()> {
        self.clusters[0].delete_table(table).await
    }

    async fn drop_row_range(&self, table: &str, prefix: &[u8]) -> Result<()> {
        self.clusters[0].drop_row_range(table, prefix).await
    }

    async fn mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        mutations: Vec<Mutation>,
    ) -> Result<()> {
        let home = self.home(&row_key);
        self.failover(home, |store| {
            store.mutate_row(table, row_key.clone(), mutations.clone())
        })
        .await
    }

    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        check_batch_size(&entries)?;
        let total = entries.len();
        let mut groups: BTreeMap<usize, Vec<(usize, RowMutation)>> = BTreeMap::new();
        for (i, e) in entries.into_iter().enumerate() {
            groups
                .entry(self.home(&e.row_key))
                .or_default()
                .push((i, e));
        }
        let sends = groups
            .into_iter()
            .map(|(home, group)| self.mutate_group(table, home, group));
        let mut out: Vec<Option<Result<()>>> = (0..total).map(|_| None).collect();
        for group in futures::future::join_all(sends).await {
            for (i, status) in group? {
                out[i] = Some(status);
            }
        }
        Ok(out.into_iter().map(|s| s.unwrap_or(Ok(()))).collect())
    }

    async fn read_rows(&self, table: &str, request: ReadRows) -> Result<RowStream> {
        let parts = self.split(&request.rows).into_iter().map(|(home, rows)| {
            let part = ReadRows {
                rows,
                ..request.clone()
            };
            self.read_part(table, home, part)
        });
        let merged = merge(futures::future::try_join_all(parts).await?);
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
        let home = self.home(&row_key);
        self.failover(home, |store| {
            store.check_and_mutate_row(
                table,
                row_key.clone(),
                predicate.clone(),
                on_match.clone(),
                on_no_match.clone(),
            )
        })
        .await
    }

    async fn read_modify_write_row(
        &self,
        table: &str,
        row_key: Bytes,
        rules: Vec<ReadModifyWriteRule>,
    ) -> Result<Row> {
        let home = self.home(&row_key);
        self.failover(home, |store| {
            store.read_modify_write_row(table, row_key.clone(), rules.clone())
        })
        .await
    }

    async fn sample_row_keys(&self, table: &str) -> Result<Vec<KeySample>> {
        self.clusters[0].sample_row_keys(table).await
    }

    async fn flush(&self) -> Result<()> {
        for store in self.clusters.iter().chain(&self.batch) {
            store.flush().await?;
        }
        Ok(())
    }

    /// The clusters of an instance hold the same rows: the first one's checkpoint (Bigtable's
    /// refusal, which names its own backups).
    async fn checkpoint(&self, dest: &std::path::Path) -> Result<()> {
        match self.clusters.first() {
            Some(store) => store.checkpoint(dest).await,
            None => Err(StoreError::FailedPrecondition("no cluster to copy".into())),
        }
    }

    fn gauges(&self) -> Vec<Gauge> {
        self.clusters[0].gauges()
    }

    fn workload_view(&self, workload: Workload) -> Option<Arc<dyn Store>> {
        match (workload, &self.batch) {
            // The clusters as they are: their serving views would drop their routing.
            (Workload::Serving, _) => Some(Arc::new(self.clone())),
            (Workload::Batch, Some(batch)) => Some(Arc::clone(batch)),
            (Workload::Batch, None) => Some(Arc::new(Self {
                clusters: self
                    .clusters
                    .iter()
                    .map(|s| crate::for_workload(s, workload))
                    .collect(),
                batch: None,
            })),
        }
    }
}

impl AffineStore {
    /// One home's entries of a `mutate_rows`, by their index in the request: sent to the home,
    /// and the entries a cluster answers `Unavailable` for (or all of them, when the whole
    /// request is) to the next cluster.
    async fn mutate_group(
        &self,
        table: &str,
        home: usize,
        group: Vec<(usize, RowMutation)>,
    ) -> Result<Vec<(usize, Result<()>)>> {
        let mut done = Vec::with_capacity(group.len());
        let mut pending = group;
        let mut last = String::new();
        for store in self.order(home) {
            if pending.is_empty() {
                break;
            }
            let batch = pending.iter().map(|(_, e)| e.clone()).collect();
            match store.mutate_rows(table, batch).await {
                Err(StoreError::Unavailable(m)) => last = m,
                Err(e) => return Err(e),
                Ok(statuses) => {
                    let mut again = Vec::new();
                    for ((i, entry), status) in pending.into_iter().zip(statuses) {
                        match status {
                            Err(StoreError::Unavailable(m)) => {
                                last = m;
                                again.push((i, entry));
                            }
                            status => done.push((i, status)),
                        }
                    }
                    pending = again;
                }
            }
        }
        done.extend(pending.into_iter().map(|(i, _)| {
            (
                i,
                Err(StoreError::Unavailable(format!(
                    "every cluster is unavailable; the last said: {last}"
                ))),
            )
        }));
        Ok(done)
    }
}

/// `store` with every read made at least as consistent as `consistency`: for a caller whose
/// reads must all be strong (a profile recomputed on a strong read) without passing it to
/// each. `Eventual` gives the store itself.
pub fn with_consistency(store: &Arc<dyn Store>, consistency: Consistency) -> Arc<dyn Store> {
    match consistency {
        Consistency::Eventual => Arc::clone(store),
        Consistency::Strong => Arc::new(Consistent {
            inner: Arc::clone(store),
            consistency,
        }),
    }
}

/// See [`with_consistency`].
#[derive(Debug)]
struct Consistent {
    inner: Arc<dyn Store>,
    consistency: Consistency,
}

#[async_trait]
impl Store for Consistent {
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
        self.inner.mutate_row(table, row_key, mutations).await
    }

    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        self.inner.mutate_rows(table, entries).await
    }

    async fn read_rows(&self, table: &str, mut request: ReadRows) -> Result<RowStream> {
        request.consistency = request.consistency.max(self.consistency);
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

    fn gauges(&self) -> Vec<Gauge> {
        self.inner.gauges()
    }

    fn workload_view(&self, workload: Workload) -> Option<Arc<dyn Store>> {
        self.inner.workload_view(workload)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use futures::TryStreamExt;

    use super::*;
    use crate::MemStore;
    use crate::testing::{Hook, Hooked, Op};

    /// A MemStore that answers `Unavailable` to everything while down, as a cluster that
    /// cannot be reached does; as a remote store's, a read's call starts and its stream fails.
    type Flaky = Hooked<Unreachable>;

    #[derive(Debug, Default)]
    struct Unreachable {
        down: AtomicBool,
    }

    #[async_trait]
    impl Hook for Unreachable {
        async fn before(&self, op: Op, _: &str) -> Result<()> {
            if op != Op::Read && self.down.load(Ordering::SeqCst) {
                return Err(StoreError::Unavailable("connection refused".into()));
            }
            Ok(())
        }
        fn answer(&self, stream: RowStream) -> RowStream {
            if self.down.load(Ordering::SeqCst) {
                futures::stream::once(async { Err(StoreError::Unavailable("refused".into())) })
                    .boxed()
            } else {
                stream
            }
        }
    }

    fn user_key(user: usize, rest: &str) -> Bytes {
        Bytes::from(format!("APP\0u{user}{rest}"))
    }

    fn set(value: &str) -> Vec<Mutation> {
        vec![Mutation::set(
            "f",
            Bytes::from_static(b"q"),
            1000,
            value.to_owned(),
        )]
    }

    /// Two flaky clusters (tables created in both, as replication would) under an AffineStore.
    async fn two() -> (Arc<Flaky>, Arc<Flaky>, AffineStore) {
        let (a, b) = (Arc::new(Flaky::default()), Arc::new(Flaky::default()));
        for s in [&a, &b] {
            s.create_table("t", [("f".to_owned(), GcRule::None)].into())
                .await
                .unwrap();
        }
        let affine = AffineStore::new(vec![a.clone(), b.clone()], None);
        (a, b, affine)
    }

    async fn keys(store: &dyn Store, request: ReadRows) -> Result<Vec<Bytes>> {
        let rows: Vec<Row> = store.read_rows("t", request).await?.try_collect().await?;
        Ok(rows.into_iter().map(|r| r.key).collect())
    }

    /// The first user (from 0) whose home is `home`.
    fn user_at(affine: &AffineStore, home: usize) -> usize {
        (0..)
            .find(|u| affine.home(&user_key(*u, "")) == home)
            .unwrap()
    }

    #[test]
    fn a_users_rows_share_one_home() {
        assert_eq!(affinity_key(b"APP\0user\0day\0x"), b"APP\0user");
        assert_eq!(affinity_key(b"APP\0user"), b"APP\0user");
        assert_eq!(affinity_key(b"APP\0user\0"), b"APP\0user");
        assert_eq!(affinity_key(b"APP"), b"APP");
        assert_eq!(affinity_key(b""), b"");
        let stores: Vec<Arc<dyn Store>> = (0..3)
            .map(|_| Arc::new(MemStore::new()) as Arc<dyn Store>)
            .collect();
        let affine = AffineStore::new(stores, None);
        let mut per_home = [0; 3];
        for u in 0..3000 {
            let home = affine.home(&user_key(u, ""));
            assert_eq!(affine.home(&user_key(u, "\0events\x00123")), home);
            assert_eq!(affine.home(&user_key(u, "\0")), home);
            per_home[home] += 1;
        }
        assert!(
            per_home.iter().all(|n| (900..1100).contains(n)),
            "{per_home:?}"
        );
    }

    #[tokio::test]
    async fn writes_and_reads_go_home() {
        let (a, b, affine) = two().await;
        let (ua, ub) = (user_at(&affine, 0), user_at(&affine, 1));
        affine
            .mutate_row("t", user_key(ua, ""), set("a"))
            .await
            .unwrap();
        let statuses = affine
            .mutate_rows(
                "t",
                vec![
                    RowMutation::new(user_key(ub, "\0e1"), set("b")),
                    RowMutation::new(user_key(ua, "\0e1"), set("a")),
                    RowMutation::new(user_key(ub, ""), set("b")),
                ],
            )
            .await
            .unwrap();
        assert_eq!(statuses.len(), 3);
        assert!(statuses.iter().all(Result::is_ok));
        let matched = affine
            .check_and_mutate_row("t", user_key(ub, "\0c"), None, vec![], set("c"))
            .await
            .unwrap();
        assert!(!matched);
        affine
            .read_modify_write_row(
                "t",
                user_key(ua, "\0n"),
                vec![ReadModifyWriteRule::increment(
                    "f",
                    Bytes::from_static(b"n"),
                    2,
                )],
            )
            .await
            .unwrap();
        let all = || ReadRows::new(RowSet::all());
        assert_eq!(
            keys(&*a, all()).await.unwrap(),
            [user_key(ua, ""), user_key(ua, "\0e1"), user_key(ua, "\0n")]
        );
        assert_eq!(
            keys(&*b, all()).await.unwrap(),
            [user_key(ub, ""), user_key(ub, "\0c"), user_key(ub, "\0e1")]
        );
        // A read of both users' keys and prefixes, split by home and merged in key order (a
        // key in a range too comes out once); the limit holds over the merge.
        let rows = RowSet {
            keys: vec![user_key(ub, ""), user_key(ua, "")],
            ranges: vec![
                RowRange::prefix(user_key(ua, "\0")),
                RowRange::prefix(user_key(ub, "")),
            ],
        };
        let mut want = vec![
            user_key(ua, ""),
            user_key(ua, "\0e1"),
            user_key(ua, "\0n"),
            user_key(ub, ""),
            user_key(ub, "\0c"),
            user_key(ub, "\0e1"),
        ];
        want.sort();
        for consistency in [Consistency::Eventual, Consistency::Strong] {
            let request = ReadRows::new(rows.clone()).consistency(consistency);
            assert_eq!(keys(&affine, request.clone()).await.unwrap(), want);
            assert_eq!(keys(&affine, request.limit(4)).await.unwrap(), want[..4]);
        }
    }

    #[tokio::test]
    async fn eventual_fails_over_and_strong_fails() {
        let (a, b, affine) = two().await;
        let ua = user_at(&affine, 0);
        let key = user_key(ua, "");
        affine
            .mutate_row("t", key.clone(), set("before"))
            .await
            .unwrap();
        a.hook.down.store(true, Ordering::SeqCst);

        // Writes fail over to the next cluster.
        affine
            .mutate_row("t", user_key(ua, "\0e2"), set("during"))
            .await
            .unwrap();
        let statuses = affine
            .mutate_rows(
                "t",
                vec![RowMutation::new(user_key(ua, "\0e3"), set("during"))],
            )
            .await
            .unwrap();
        assert!(statuses[0].is_ok());
        affine
            .read_modify_write_row(
                "t",
                user_key(ua, "\0n"),
                vec![ReadModifyWriteRule::increment(
                    "f",
                    Bytes::from_static(b"n"),
                    1,
                )],
            )
            .await
            .unwrap();
        affine
            .check_and_mutate_row("t", user_key(ua, "\0c"), None, vec![], set("c"))
            .await
            .unwrap();
        assert_eq!(
            keys(&*b, ReadRows::default()).await.unwrap(),
            [
                user_key(ua, "\0c"),
                user_key(ua, "\0e2"),
                user_key(ua, "\0e3"),
                user_key(ua, "\0n")
            ]
        );

        // Eventual reads are served by the next cluster, which (no replication here) has not
        // got the write made before: what a user may see during a failover.
        let user = || ReadRows::new(RowSet::prefix(key.clone()));
        assert_eq!(keys(&affine, user()).await.unwrap().len(), 4);
        assert_eq!(affine.read_row("t", key.clone(), None).await.unwrap(), None);

        // Strong reads refuse, also through a strong view of the store.
        let err = keys(&affine, user().strong()).await.unwrap_err();
        let shared: Arc<dyn Store> = Arc::new(affine.clone());
        let strong_view = with_consistency(&shared, Consistency::Strong);
        assert!(matches!(
            strong_view.read_row("t", key.clone(), None).await,
            Err(StoreError::StrongReadUnavailable(_))
        ));
        assert!(
            matches!(err, StoreError::StrongReadUnavailable(_)),
            "{err:?}"
        );

        // Everything down: Unavailable everywhere, per entry for batches.
        b.hook.down.store(true, Ordering::SeqCst);
        assert!(matches!(
            affine.mutate_row("t", key.clone(), set("x")).await,
            Err(StoreError::Unavailable(_))
        ));
        let statuses = affine
            .mutate_rows("t", vec![RowMutation::new(key.clone(), set("x"))])
            .await
            .unwrap();
        assert!(matches!(statuses[0], Err(StoreError::Unavailable(_))));
        assert!(matches!(
            keys(&affine, user()).await,
            Err(StoreError::Unavailable(_))
        ));

        // Home back: strong reads are served, with what the home has.
        a.hook.down.store(false, Ordering::SeqCst);
        let row = affine
            .read_all("t", ReadRows::new(RowSet::keys([key.clone()])).strong())
            .await
            .unwrap();
        assert_eq!(row[0].cells[0].value, "before");
    }

    #[tokio::test]
    async fn admin_goes_to_cluster_zero_and_batch_to_the_batch_store() {
        let (a, b) = (Arc::new(MemStore::new()), Arc::new(MemStore::new()));
        let batch = Arc::new(MemStore::new());
        let affine: Arc<dyn Store> = Arc::new(AffineStore::new(
            vec![a.clone(), b.clone()],
            Some(batch.clone()),
        ));
        affine
            .create_table("t", [("f".to_owned(), GcRule::None)].into())
            .await
            .unwrap();
        assert_eq!(a.list_tables().await.unwrap().len(), 1);
        assert!(b.list_tables().await.unwrap().is_empty());
        let view = crate::for_workload(&affine, Workload::Batch);
        view.create_table("b", BTreeMap::new()).await.unwrap();
        assert_eq!(batch.list_tables().await.unwrap().len(), 1);
        let serving = crate::for_workload(&affine, Workload::Serving);
        assert_eq!(serving.list_tables().await.unwrap().len(), 1);
    }
}
