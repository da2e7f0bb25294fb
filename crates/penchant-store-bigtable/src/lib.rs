//! Penchant's store on Google Cloud Bigtable, over its gRPC v2 Data and Admin APIs.
//!
//! [`BigtableStore`] implements [`penchant_store::Store`] with the same semantics as the embedded
//! backend (the conformance suite runs unchanged against the Bigtable emulator). Where Bigtable is
//! lazier than the trait, this backend closes the gap:
//!
//! - **GC rules** are applied by Bigtable at compaction, days later; every read and every
//!   check-and-mutate predicate is chained after a filter that keeps only the cells the family's
//!   rule keeps now ([`convert::visibility`]).
//! - **Server timestamps** are resolved here (the client's clock, millisecond-granular, one
//!   reading per row mutation), so every mutation sent is idempotent and can be retried.
//! - **Families** come back from Bigtable in no promised order; cells are sorted into the store's
//!   order (family, qualifier, newest first), and filters that depend on that order (row-level
//!   limits and offsets, conditions, interleaves) and regexes run here, after Bigtable has
//!   applied everything before them in the chain.
//!
//! Retries: reads, sample-row-keys and mutations (all idempotent, see above) are retried on
//! transient codes with exponential backoff and full jitter; a broken read stream resumes after
//! the last row it delivered. Read-modify-write and check-and-mutate are never retried: a
//! transient error from them is returned as [`StoreError::Unavailable`], and the write may or
//! may not have happened. Every call carries a deadline.
//!
//! [`StoreError::Unavailable`]: penchant_store::StoreError::Unavailable

mod admin;
mod client;
mod convert;
#[cfg(feature = "emulator")]
pub mod emulator;
mod merge;
mod read;
mod retry;
mod schema;
mod write;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use penchant_store::{
    FamilyChange, GcRule, KeySample, Mutation, ReadModifyWriteRule, ReadRows, Result, Row,
    RowFilter, RowMutation, RowStream, Store, TableSchema, Workload,
};
use tonic::transport::Channel;

pub use client::BigtableConfig;
pub use retry::RetryPolicy;

/// The store to serve from: `store` itself without `clusters` in its configuration, else an
/// [`AffineStore`] over one view of it per cluster app profile (same connection, each call
/// routed to that cluster), whose `Workload::Batch` view is the store's batch view
/// (`batch_app_profile`, e.g. multi-cluster routing).
///
/// [`AffineStore`]: penchant_store::AffineStore
pub fn with_affinity(store: BigtableStore) -> Arc<dyn Store> {
    let profiles = &store.config().clusters;
    if profiles.is_empty() {
        return Arc::new(store);
    }
    tracing::info!(clusters = ?profiles, "row affinity over the instance's clusters");
    let clusters = profiles
        .iter()
        .map(|p| Arc::new(store.with_app_profile(p)) as Arc<dyn Store>)
        .collect();
    let batch = store.workload_view(Workload::Batch);
    Arc::new(penchant_store::AffineStore::new(clusters, batch))
}

pub(crate) mod proto {
    pub use googleapis_tonic_google_bigtable_admin_v2::google::bigtable::admin::v2 as admin;
    pub use googleapis_tonic_google_bigtable_v2::google::bigtable::v2;
}

use proto::admin::bigtable_table_admin_client::BigtableTableAdminClient;
use proto::v2::bigtable_client::BigtableClient;

/// A [`Store`] on Cloud Bigtable. Cloning is cheap; clones share one connection.
#[derive(Clone)]
pub struct BigtableStore {
    inner: Arc<Inner>,
    /// The app profile of this view's calls.
    profile: Arc<str>,
}

struct Inner {
    config: BigtableConfig,
    /// `projects/{project}/instances/{instance}`.
    instance: String,
    data: BigtableClient<Channel>,
    admin: BigtableTableAdminClient<Channel>,
    auth: Option<Arc<dyn gcp_auth::TokenProvider>>,
    /// Plain-HTTP endpoint: an emulator (see `read_modify_write_row`).
    emulated: bool,
    schemas: Mutex<HashMap<String, (Instant, Arc<TableSchema>)>>,
}

impl std::fmt::Debug for BigtableStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BigtableStore")
            .field("instance", &self.inner.instance)
            .field("table_prefix", &self.inner.config.table_prefix)
            .field("app_profile", &self.profile)
            .field("authenticated", &self.inner.auth.is_some())
            .finish()
    }
}

#[async_trait]
impl Store for BigtableStore {
    async fn create_table(&self, name: &str, families: BTreeMap<String, GcRule>) -> Result<()> {
        admin::create_table(self, name, families).await
    }

    async fn modify_families(
        &self,
        table: &str,
        changes: Vec<FamilyChange>,
    ) -> Result<TableSchema> {
        admin::modify_families(self, table, changes).await
    }

    async fn get_table(&self, table: &str) -> Result<TableSchema> {
        admin::get_table(self, table).await
    }

    async fn list_tables(&self) -> Result<Vec<TableSchema>> {
        admin::list_tables(self).await
    }

    async fn delete_table(&self, table: &str) -> Result<()> {
        admin::delete_table(self, table).await
    }

    async fn drop_row_range(&self, table: &str, prefix: &[u8]) -> Result<()> {
        admin::drop_row_range(self, table, prefix).await
    }

    async fn mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        mutations: Vec<Mutation>,
    ) -> Result<()> {
        write::mutate_row(self, table, row_key, mutations).await
    }

    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        write::mutate_rows(self, table, entries).await
    }

    async fn read_rows(&self, table: &str, request: ReadRows) -> Result<RowStream> {
        read::read_rows(self, table, request).await
    }

    async fn check_and_mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        predicate: Option<RowFilter>,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        write::check_and_mutate_row(self, table, row_key, predicate, on_match, on_no_match).await
    }

    async fn read_modify_write_row(
        &self,
        table: &str,
        row_key: Bytes,
        rules: Vec<ReadModifyWriteRule>,
    ) -> Result<Row> {
        write::read_modify_write_row(self, table, row_key, rules).await
    }

    async fn sample_row_keys(&self, table: &str) -> Result<Vec<KeySample>> {
        read::sample_row_keys(self, table).await
    }

    async fn flush(&self) -> Result<()> {
        // Bigtable acknowledges a write once it is durable: nothing is buffered here.
        Ok(())
    }

    async fn checkpoint(&self, _dest: &std::path::Path) -> Result<()> {
        Err(penchant_store::StoreError::FailedPrecondition(format!(
            "a Bigtable instance is backed up by Bigtable: gcloud bigtable backups create \
             BACKUP --instance={} --cluster=CLUSTER --table=TABLE --retention-period=7d, \
             one per table (see docs/BIGTABLE.md); `penchant apps export` copies one app",
            self.inner.config.instance
        )))
    }

    fn workload_view(&self, workload: Workload) -> Option<Arc<dyn Store>> {
        let profile = match workload {
            Workload::Serving => &self.inner.config.app_profile,
            Workload::Batch => &self.inner.config.batch_app_profile,
        };
        Some(Arc::new(Self {
            inner: Arc::clone(&self.inner),
            profile: Arc::from(profile.as_str()),
        }))
    }
}
