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

mod convert;
#[cfg(feature = "emulator")]
pub mod emulator;
mod merge;
mod retry;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use parking_lot::Mutex;
use penchant_store::validate::{self, now_micros};
use penchant_store::{
    FamilyChange, GcRule, KeySample, Mutation, ReadModifyWriteRule, ReadRows, Result, Row,
    RowFilter, RowMutation, RowStream, Store, StoreError, TableSchema, Workload,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

pub use retry::RetryPolicy;

use crate::convert::ReadPlan;
use crate::merge::RowMerger;

pub(crate) mod proto {
    pub use googleapis_tonic_google_bigtable_admin_v2::google::bigtable::admin::v2 as admin;
    pub use googleapis_tonic_google_bigtable_v2::google::bigtable::v2;
}

use proto::admin::bigtable_table_admin_client::BigtableTableAdminClient;
use proto::v2::bigtable_client::BigtableClient;

const DATA_ENDPOINT: &str = "https://bigtable.googleapis.com";
const ADMIN_ENDPOINT: &str = "https://bigtableadmin.googleapis.com";
const SCOPES: &[&str] = &["https://www.googleapis.com/auth/cloud-platform"];
/// The largest response message accepted (tonic's default is 4 MiB; a cell can hold 100 MiB).
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// Where the tables live and how calls behave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BigtableConfig {
    /// Google Cloud project ID.
    pub project: String,
    /// Bigtable instance ID.
    pub instance: String,
    /// Prepended to every table name, so several deployments can share an instance.
    pub table_prefix: String,
    /// Data API endpoint, e.g. `http://127.0.0.1:8086` for an emulator. Unset: the emulator named
    /// by `BIGTABLE_EMULATOR_HOST` if that is set, else Google's endpoint. `https://` endpoints
    /// authenticate with Application Default Credentials; `http://` ones send no credentials.
    pub endpoint: Option<String>,
    /// Admin API endpoint; unset: as `endpoint` (an emulator serves both).
    pub admin_endpoint: Option<String>,
    /// App profile for serving traffic ("" = the instance's default profile).
    pub app_profile: String,
    /// App profile for batch jobs, so they run on their own cluster or priority.
    pub batch_app_profile: String,
    /// Deadline of each unary call attempt, in milliseconds.
    pub call_timeout_ms: u64,
    /// Deadline of each read-stream attempt, in milliseconds (a stream past it resumes).
    pub scan_timeout_ms: u64,
    /// How long a table's schema (families and GC rules) is cached, in milliseconds: a change
    /// made through another node is seen by this one within this interval.
    pub schema_ttl_ms: u64,
    pub retry: RetryPolicy,
}

impl Default for BigtableConfig {
    fn default() -> Self {
        Self {
            project: "penchant".into(),
            instance: "penchant".into(),
            table_prefix: String::new(),
            endpoint: None,
            admin_endpoint: None,
            app_profile: String::new(),
            batch_app_profile: String::new(),
            call_timeout_ms: 20_000,
            scan_timeout_ms: 300_000,
            schema_ttl_ms: 10_000,
            retry: RetryPolicy::default(),
        }
    }
}

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

fn channel(url: &str) -> Result<Channel> {
    let bad = |e: tonic::transport::Error| {
        StoreError::InvalidArgument(format!("Bigtable endpoint `{url}`: {e}"))
    };
    let mut endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(bad)?
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    if url.starts_with("https://") {
        endpoint = endpoint
            .tls_config(ClientTlsConfig::new().with_native_roots())
            .map_err(bad)?;
    }
    Ok(endpoint.connect_lazy())
}

/// `table_name=…&app_profile_id=…` for the routing header, percent-encoded.
fn routing_params(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(k);
        out.push('=');
        for b in v.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

impl BigtableStore {
    /// Connect (lazily: the first call opens the connection).
    pub async fn connect(config: BigtableConfig) -> Result<Self> {
        let emulator = std::env::var("BIGTABLE_EMULATOR_HOST")
            .ok()
            .filter(|h| !h.is_empty())
            .map(|h| format!("http://{h}"));
        let data_url = config
            .endpoint
            .clone()
            .or(emulator)
            .unwrap_or_else(|| DATA_ENDPOINT.to_owned());
        let admin_url = match (&config.admin_endpoint, &config.endpoint) {
            (Some(a), _) => a.clone(),
            (None, None) if data_url == DATA_ENDPOINT => ADMIN_ENDPOINT.to_owned(),
            (None, _) => data_url.clone(),
        };
        let auth = if data_url.starts_with("https://") {
            Some(gcp_auth::provider().await.map_err(|e| {
                StoreError::Unavailable(format!(
                    "no Google Cloud credentials for Bigtable (Application Default Credentials): \
                     {e}"
                ))
            })?)
        } else {
            None
        };
        let data = BigtableClient::new(channel(&data_url)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let admin = BigtableTableAdminClient::new(channel(&admin_url)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let instance = format!("projects/{}/instances/{}", config.project, config.instance);
        tracing::info!(%data_url, %instance, prefix = %config.table_prefix, "Bigtable store");
        let profile = Arc::from(config.app_profile.as_str());
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                instance,
                data,
                admin,
                emulated: data_url.starts_with("http://"),
                auth,
                schemas: Mutex::new(HashMap::new()),
            }),
            profile,
        })
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &BigtableConfig {
        &self.inner.config
    }

    /// The app profile this view's calls carry.
    pub fn app_profile(&self) -> &str {
        &self.profile
    }

    fn table_path(&self, table: &str) -> String {
        format!(
            "{}/tables/{}{}",
            self.inner.instance, self.inner.config.table_prefix, table
        )
    }

    fn policy(&self) -> &RetryPolicy {
        &self.inner.config.retry
    }

    fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.inner.config.call_timeout_ms)
    }

    /// A request with its deadline, credentials and routing header.
    async fn request<T>(
        &self,
        message: T,
        timeout: Duration,
        routing: &[(&str, &str)],
    ) -> Result<tonic::Request<T>, tonic::Status> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(timeout);
        let metadata = request.metadata_mut();
        if let Some(auth) = &self.inner.auth {
            let token = auth
                .token(SCOPES)
                .await
                .map_err(|e| tonic::Status::unauthenticated(format!("Google credentials: {e}")))?;
            let value = format!("Bearer {}", token.as_str())
                .parse()
                .map_err(|_| tonic::Status::unauthenticated("unusable access token"))?;
            metadata.insert("authorization", value);
        }
        if !routing.is_empty()
            && let Ok(value) = routing_params(routing).parse()
        {
            metadata.insert("x-goog-request-params", value);
        }
        Ok(request)
    }

    /// Run an idempotent call, retrying transient failures.
    async fn retry<T, F, Fut>(&self, table: &str, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let mut retries = 0;
        loop {
            match call().await {
                Ok(v) => return Ok(v),
                Err(status)
                    if retry::is_transient(&status) && retries + 1 < self.policy().max_attempts =>
                {
                    tracing::debug!(table, retries, %status, "retrying Bigtable call");
                    tokio::time::sleep(self.policy().backoff(retries)).await;
                    retries += 1;
                }
                Err(status) => return Err(self.error(table, &status)),
            }
        }
    }

    fn error(&self, table: &str, status: &tonic::Status) -> StoreError {
        if status.code() == tonic::Code::NotFound {
            self.inner.schemas.lock().remove(table);
        }
        convert::status_error(table, status)
    }

    /// A table's schema, from the cache unless it is older than the TTL or `fresh` is asked.
    async fn schema(&self, table: &str, fresh: bool) -> Result<Arc<TableSchema>> {
        let ttl = Duration::from_millis(self.inner.config.schema_ttl_ms);
        if !fresh
            && let Some((at, schema)) = self.inner.schemas.lock().get(table)
            && at.elapsed() < ttl
        {
            return Ok(Arc::clone(schema));
        }
        let name = self.table_path(table);
        let t = self
            .retry(table, || async {
                let request = proto::admin::GetTableRequest {
                    name: name.clone(),
                    view: proto::admin::table::View::SchemaView as i32,
                };
                let request = self.request(request, self.call_timeout(), &[]).await?;
                self.inner.admin.clone().get_table(request).await
            })
            .await?
            .into_inner();
        let schema = Arc::new(self.schema_of(table, &t));
        self.inner
            .schemas
            .lock()
            .insert(table.to_owned(), (Instant::now(), Arc::clone(&schema)));
        Ok(schema)
    }

    fn schema_of(&self, table: &str, t: &proto::admin::Table) -> TableSchema {
        TableSchema {
            name: table.to_owned(),
            families: t
                .column_families
                .iter()
                .map(|(name, cf)| (name.clone(), convert::gc_rule_from(cf.gc_rule.as_ref())))
                .collect(),
        }
    }

    /// The schema, checked by `check`; a family the cached schema lacks may have been created
    /// through another node, so that failure is checked again against a fresh schema.
    async fn checked_schema(
        &self,
        table: &str,
        check: impl Fn(&TableSchema) -> Result<()>,
    ) -> Result<Arc<TableSchema>> {
        let schema = self.schema(table, false).await?;
        match check(&schema) {
            Ok(()) => Ok(schema),
            Err(StoreError::FamilyNotFound { .. }) => {
                let schema = self.schema(table, true).await?;
                check(&schema)?;
                Ok(schema)
            }
            Err(e) => Err(e),
        }
    }

    fn forget_schema(&self, table: &str) {
        self.inner.schemas.lock().remove(table);
    }

    /// Stream a read into `tx`, resuming after the last delivered row when the stream breaks.
    async fn scan(
        self,
        table: String,
        request: ReadRows,
        plan: ReadPlan,
        tx: mpsc::Sender<Result<Row>>,
    ) {
        let table_name = self.table_path(&table);
        let mut sent = 0u64;
        let mut last_key: Option<Bytes> = None;
        let mut retries = 0;
        let timeout = Duration::from_millis(self.inner.config.scan_timeout_ms);
        loop {
            let rows = match &last_key {
                None => request.rows.clone(),
                Some(key) => match convert::rows_after(&request.rows, key) {
                    Some(rows) => rows,
                    None => return,
                },
            };
            // A row limit is Bigtable's to apply only when no filter runs here after it.
            let rows_limit = match (request.limit, &plan.client) {
                (Some(limit), None) => i64::try_from(limit - sent).unwrap_or(i64::MAX),
                _ => 0,
            };
            let message = proto::v2::ReadRowsRequest {
                table_name: table_name.clone(),
                app_profile_id: self.profile.to_string(),
                rows: Some(convert::row_set(&rows)),
                filter: plan.server.clone(),
                rows_limit,
                ..Default::default()
            };
            let attempt = async {
                let routing = [
                    ("table_name", table_name.as_str()),
                    ("app_profile_id", &self.profile),
                ];
                let call = self.request(message, timeout, &routing).await?;
                let mut stream = self.inner.data.clone().read_rows(call).await?.into_inner();
                let mut merger = RowMerger::default();
                while let Some(response) = stream.message().await? {
                    for chunk in response.chunks {
                        let row = merger
                            .push(chunk)
                            .map_err(|e| tonic::Status::internal(e.to_string()))?;
                        let Some(mut row) = row else { continue };
                        last_key = Some(row.key.clone());
                        retries = 0;
                        sort_cells(&mut row);
                        if let Some(client) = &plan.client {
                            row.cells = client.apply(&row.key, std::mem::take(&mut row.cells));
                            if row.cells.is_empty() {
                                continue;
                            }
                        }
                        if tx.send(Ok(row)).await.is_err() {
                            return Ok(true); // The reader went away.
                        }
                        sent += 1;
                        if request.limit.is_some_and(|l| sent >= l) {
                            return Ok(true);
                        }
                    }
                }
                merger
                    .finish()
                    .map_err(|e| tonic::Status::internal(e.to_string()))?;
                Ok::<bool, tonic::Status>(true)
            }
            .await;
            match attempt {
                Ok(_) => return,
                Err(status)
                    if retry::is_transient(&status) && retries + 1 < self.policy().max_attempts =>
                {
                    tracing::debug!(table, retries, %status, "resuming Bigtable read stream");
                    tokio::time::sleep(self.policy().backoff(retries)).await;
                    retries += 1;
                }
                Err(status) => {
                    let _ = tx.send(Err(self.error(&table, &status))).await;
                    return;
                }
            }
        }
    }

    /// Send one MutateRows request for `entries` (all valid), retrying the entries that fail
    /// transiently. Returns one status per entry.
    async fn mutate_valid(
        &self,
        table: &str,
        entries: Vec<proto::v2::mutate_rows_request::Entry>,
    ) -> Result<Vec<Result<()>>> {
        let table_name = self.table_path(table);
        let mut statuses: Vec<Option<Result<()>>> = (0..entries.len()).map(|_| None).collect();
        let mut pending: Vec<usize> = (0..entries.len()).collect();
        let mut retries = 0;
        loop {
            let message = proto::v2::MutateRowsRequest {
                table_name: table_name.clone(),
                app_profile_id: self.profile.to_string(),
                entries: pending.iter().map(|&i| entries[i].clone()).collect(),
                ..Default::default()
            };
            let mut again = Vec::new();
            let outcome = async {
                let routing = [
                    ("table_name", table_name.as_str()),
                    ("app_profile_id", &self.profile),
                ];
                let request = self.request(message, self.call_timeout(), &routing).await?;
                let mut stream = self
                    .inner
                    .data
                    .clone()
                    .mutate_rows(request)
                    .await?
                    .into_inner();
                while let Some(response) = stream.message().await? {
                    for entry in response.entries {
                        let Some(&i) = usize::try_from(entry.index)
                            .ok()
                            .and_then(|k| pending.get(k))
                        else {
                            continue;
                        };
                        let status = entry.status.unwrap_or_default();
                        let code = tonic::Code::from_i32(status.code);
                        let status = tonic::Status::new(code, status.message);
                        if retry::is_transient(&status) {
                            again.push(i);
                        }
                        statuses[i] = Some(if code == tonic::Code::Ok {
                            Ok(())
                        } else {
                            Err(self.error(table, &status))
                        });
                    }
                }
                Ok::<(), tonic::Status>(())
            }
            .await;
            if let Err(status) = outcome {
                if !retry::is_transient(&status)
                    && retries == 0
                    && statuses.iter().all(Option::is_none)
                {
                    return Err(self.error(table, &status));
                }
                // Entries the broken stream never reported on are retried (or fail) with it.
                for &i in &pending {
                    if statuses[i].is_none() {
                        statuses[i] = Some(Err(self.error(table, &status)));
                        if retry::is_transient(&status) {
                            again.push(i);
                        }
                    }
                }
            }
            if again.is_empty() || retries + 1 >= self.policy().max_attempts {
                break;
            }
            tokio::time::sleep(self.policy().backoff(retries)).await;
            retries += 1;
            again.sort_unstable();
            again.dedup();
            pending = again;
        }
        Ok(statuses
            .into_iter()
            .map(|s| s.unwrap_or_else(|| Err(StoreError::Backend("no status for an entry".into()))))
            .collect())
    }

    /// Delete every cell of one family, row by row (emulators only: see `modify_families`).
    async fn delete_family_cells(&self, table: &str, family: &str) -> Result<()> {
        let request = ReadRows::default().filter(
            RowFilter::Family(family.to_owned())
                .and(RowFilter::CellsPerRowLimit(1))
                .and(RowFilter::StripValue),
        );
        let rows = self.read_all(table, request).await?;
        for chunk in rows.chunks(1000) {
            let entries = chunk
                .iter()
                .map(|row| {
                    RowMutation::new(
                        row.key.clone(),
                        vec![Mutation::DeleteFromFamily {
                            family: family.to_owned(),
                        }],
                    )
                })
                .collect();
            for status in self.mutate_rows(table, entries).await? {
                status?;
            }
        }
        Ok(())
    }

    /// A FailedPrecondition naming the first column an increment rule would apply to a cell that
    /// is not a 64-bit integer, if there is one.
    async fn non_integer_column(
        &self,
        table: &str,
        row_key: &Bytes,
        rules: &[ReadModifyWriteRule],
    ) -> Option<StoreError> {
        let columns: Vec<RowFilter> = rules
            .iter()
            .filter(|r| matches!(r.op, penchant_store::ReadModifyWriteOp::Increment(_)))
            .map(|r| RowFilter::column(r.family.clone(), r.qualifier.clone()))
            .collect();
        if columns.is_empty() {
            return None;
        }
        let filter = RowFilter::Interleave(columns).and(RowFilter::CellsPerColumnLimit(1));
        let row = self
            .read_row(table, row_key.clone(), Some(filter))
            .await
            .ok()??;
        let c = row.cells.iter().find(|c| c.value.len() != 8)?;
        Some(StoreError::FailedPrecondition(format!(
            "cannot increment column `{}:{}`: its value is {} bytes, not a 64-bit big-endian \
             integer",
            c.family,
            String::from_utf8_lossy(&c.qualifier),
            c.value.len()
        )))
    }

    /// Run an admin call that changes a table (never retried blindly: creating or modifying
    /// twice is not the same as once).
    async fn admin_once<T, Fut>(&self, table: &str, call: Fut) -> Result<T>
    where
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let result = call.await.map(tonic::Response::into_inner);
        self.forget_schema(table);
        result.map_err(|status| self.error(table, &status))
    }
}

/// Cells in the store's order: family, qualifier, newest first (Bigtable orders columns within a
/// family, but not the families).
fn sort_cells(row: &mut Row) {
    row.cells.sort_by(|a, b| {
        (&a.family, &a.qualifier, std::cmp::Reverse(a.timestamp)).cmp(&(
            &b.family,
            &b.qualifier,
            std::cmp::Reverse(b.timestamp),
        ))
    });
}

#[async_trait]
impl Store for BigtableStore {
    async fn create_table(&self, name: &str, families: BTreeMap<String, GcRule>) -> Result<()> {
        penchant_store::check_new_table(name, &families)?;
        let id = format!("{}{name}", self.inner.config.table_prefix);
        validate::check_table_name(&id).map_err(|_| {
            StoreError::InvalidArgument(format!(
                "table name `{name}` with the prefix `{}` is longer than Bigtable allows ({} \
                 characters)",
                self.inner.config.table_prefix,
                validate::MAX_TABLE_NAME
            ))
        })?;
        let table = proto::admin::Table {
            column_families: families
                .iter()
                .map(|(f, rule)| (f.clone(), convert::column_family(rule)))
                .collect(),
            ..Default::default()
        };
        let message = proto::admin::CreateTableRequest {
            parent: self.inner.instance.clone(),
            table_id: id,
            table: Some(table),
            initial_splits: Vec::new(),
        };
        let request = self
            .request(message, self.call_timeout(), &[])
            .await
            .map_err(|s| self.error(name, &s))?;
        self.admin_once(name, self.inner.admin.clone().create_table(request))
            .await
            .map(drop)
    }

    async fn modify_families(
        &self,
        table: &str,
        changes: Vec<FamilyChange>,
    ) -> Result<TableSchema> {
        // Check the whole list first, against the table as it is now: a failing list changes
        // nothing.
        let current = self.schema(table, true).await?;
        let wanted = penchant_store::change_families(&current, &changes)?;
        // Bigtable deletes a dropped family's cells; older emulators (Go's bttest before 2021)
        // keep them and show them again if the family is created anew. Against an emulator,
        // delete them first.
        if self.inner.emulated {
            for change in &changes {
                if let FamilyChange::Drop { family } = change {
                    self.delete_family_cells(table, family).await?;
                }
            }
        }
        use proto::admin::modify_column_families_request::{Modification, modification::Mod};
        let modifications = changes
            .iter()
            .map(|c| match c {
                FamilyChange::Create { family, gc_rule } => Modification {
                    id: family.clone(),
                    r#mod: Some(Mod::Create(convert::column_family(gc_rule))),
                    ..Default::default()
                },
                FamilyChange::Update { family, gc_rule } => Modification {
                    id: family.clone(),
                    r#mod: Some(Mod::Update(convert::column_family(gc_rule))),
                    ..Default::default()
                },
                FamilyChange::Drop { family } => Modification {
                    id: family.clone(),
                    r#mod: Some(Mod::Drop(true)),
                    ..Default::default()
                },
            })
            .collect();
        let message = proto::admin::ModifyColumnFamiliesRequest {
            name: self.table_path(table),
            modifications,
            ignore_warnings: true,
        };
        let request = self
            .request(message, self.call_timeout(), &[])
            .await
            .map_err(|s| self.error(table, &s))?;
        let t = self
            .admin_once(
                table,
                self.inner.admin.clone().modify_column_families(request),
            )
            .await?;
        let schema = self.schema_of(table, &t);
        Ok(
            if schema.families.is_empty() && !wanted.families.is_empty() {
                wanted
            } else {
                schema
            },
        )
    }

    async fn get_table(&self, table: &str) -> Result<TableSchema> {
        Ok(self.schema(table, true).await?.as_ref().clone())
    }

    async fn list_tables(&self) -> Result<Vec<TableSchema>> {
        let prefix = format!(
            "{}/tables/{}",
            self.inner.instance, self.inner.config.table_prefix
        );
        let mut out = Vec::new();
        let mut page_token = String::new();
        loop {
            let response = self
                .retry("", || async {
                    let message = proto::admin::ListTablesRequest {
                        parent: self.inner.instance.clone(),
                        view: proto::admin::table::View::SchemaView as i32,
                        page_size: 0,
                        page_token: page_token.clone(),
                    };
                    let request = self.request(message, self.call_timeout(), &[]).await?;
                    self.inner.admin.clone().list_tables(request).await
                })
                .await?
                .into_inner();
            for t in &response.tables {
                if let Some(name) = t.name.strip_prefix(&prefix) {
                    out.push(self.schema_of(name, t));
                }
            }
            if response.next_page_token.is_empty() {
                break;
            }
            page_token = response.next_page_token;
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn delete_table(&self, table: &str) -> Result<()> {
        let message = proto::admin::DeleteTableRequest {
            name: self.table_path(table),
        };
        let request = self
            .request(message, self.call_timeout(), &[])
            .await
            .map_err(|s| self.error(table, &s))?;
        self.admin_once(table, self.inner.admin.clone().delete_table(request))
            .await
    }

    async fn drop_row_range(&self, table: &str, prefix: &[u8]) -> Result<()> {
        use proto::admin::drop_row_range_request::Target;
        let target = if prefix.is_empty() {
            Target::DeleteAllDataFromTable(true)
        } else {
            Target::RowKeyPrefix(Bytes::copy_from_slice(prefix))
        };
        let name = self.table_path(table);
        // Dropping a range twice is dropping it once: retried like a delete.
        self.retry(table, || async {
            let message = proto::admin::DropRowRangeRequest {
                name: name.clone(),
                target: Some(target.clone()),
            };
            let request = self.request(message, self.call_timeout(), &[]).await?;
            self.inner.admin.clone().drop_row_range(request).await
        })
        .await
        .map(drop)
    }

    async fn mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        mutations: Vec<Mutation>,
    ) -> Result<()> {
        self.checked_schema(table, |s| {
            validate::check_mutations(s, &row_key, &mutations)
        })
        .await?;
        let now = now_micros();
        let table_name = self.table_path(table);
        let routing = [
            ("table_name", table_name.as_str()),
            ("app_profile_id", &*self.profile),
        ];
        let message = proto::v2::MutateRowRequest {
            table_name: table_name.clone(),
            app_profile_id: self.profile.to_string(),
            row_key,
            mutations: convert::mutations(&mutations, now),
            ..Default::default()
        };
        self.retry(table, || async {
            let request = self
                .request(message.clone(), self.call_timeout(), &routing)
                .await?;
            self.inner.data.clone().mutate_row(request).await
        })
        .await
        .map(drop)
    }

    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        penchant_store::check_batch_size(&entries)?;
        let schema = self.schema(table, false).await?;
        let now = now_micros();
        let mut statuses: Vec<Option<Result<()>>> = Vec::with_capacity(entries.len());
        let mut valid = Vec::new();
        let mut fresh: Option<Arc<TableSchema>> = None;
        for (i, e) in entries.iter().enumerate() {
            let mut check = validate::check_mutations(&schema, &e.row_key, &e.mutations);
            if let Err(StoreError::FamilyNotFound { .. }) = check {
                if fresh.is_none() {
                    fresh = Some(self.schema(table, true).await?);
                }
                if let Some(s) = &fresh {
                    check = validate::check_mutations(s, &e.row_key, &e.mutations);
                }
            }
            match check {
                Ok(()) => {
                    statuses.push(None);
                    valid.push((
                        i,
                        proto::v2::mutate_rows_request::Entry {
                            row_key: e.row_key.clone(),
                            mutations: convert::mutations(&e.mutations, now),
                            idempotency: None,
                        },
                    ));
                }
                Err(err) => statuses.push(Some(Err(err))),
            }
        }
        if !valid.is_empty() {
            let (indices, protos): (Vec<usize>, Vec<_>) = valid.into_iter().unzip();
            let results = self.mutate_valid(table, protos).await?;
            for (i, r) in indices.into_iter().zip(results) {
                statuses[i] = Some(r);
            }
        }
        Ok(statuses.into_iter().map(|s| s.unwrap_or(Ok(()))).collect())
    }

    async fn read_rows(&self, table: &str, request: ReadRows) -> Result<RowStream> {
        let schema = self.schema(table, false).await?;
        let plan = ReadPlan::new(&schema, request.filter.as_ref(), now_micros())?;
        if request.limit == Some(0) {
            return Ok(futures::stream::empty().boxed());
        }
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(self.clone().scan(table.to_owned(), request, plan, tx));
        Ok(tokio_stream::wrappers::ReceiverStream::new(rx).boxed())
    }

    async fn check_and_mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        predicate: Option<RowFilter>,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        let schema = self
            .checked_schema(table, |s| {
                penchant_store::check_conditional(s, &row_key, &on_match, &on_no_match)
            })
            .await?;
        let now = now_micros();
        let table_name = self.table_path(table);
        let message = proto::v2::CheckAndMutateRowRequest {
            table_name: table_name.clone(),
            app_profile_id: self.profile.to_string(),
            row_key,
            predicate_filter: convert::predicate(&schema, predicate.as_ref(), now)?,
            true_mutations: convert::mutations(&on_match, now),
            false_mutations: convert::mutations(&on_no_match, now),
            ..Default::default()
        };
        let routing = [
            ("table_name", table_name.as_str()),
            ("app_profile_id", &*self.profile),
        ];
        let request = self
            .request(message, self.call_timeout(), &routing)
            .await
            .map_err(|s| self.error(table, &s))?;
        let response = self
            .inner
            .data
            .clone()
            .check_and_mutate_row(request)
            .await
            .map_err(|s| self.error(table, &s))?;
        Ok(response.into_inner().predicate_matched)
    }

    async fn read_modify_write_row(
        &self,
        table: &str,
        row_key: Bytes,
        rules: Vec<ReadModifyWriteRule>,
    ) -> Result<Row> {
        self.checked_schema(table, |s| validate::check_rmw_rules(s, &row_key, &rules))
            .await?;
        let table_name = self.table_path(table);
        let message = proto::v2::ReadModifyWriteRowRequest {
            table_name: table_name.clone(),
            app_profile_id: self.profile.to_string(),
            row_key: row_key.clone(),
            rules: rules.iter().map(convert::rmw_rule).collect(),
            ..Default::default()
        };
        let routing = [
            ("table_name", table_name.as_str()),
            ("app_profile_id", &*self.profile),
        ];
        let request = self
            .request(message, self.call_timeout(), &routing)
            .await
            .map_err(|s| self.error(table, &s))?;
        // The emulator applies rules one by one and stops at a bad increment, leaving the
        // earlier rules applied; Bigtable applies all or nothing. Against the emulator, check the
        // increment columns first.
        if self.inner.emulated
            && let Some(e) = self.non_integer_column(table, &row_key, &rules).await
        {
            return Err(e);
        }
        // Never retried: an increment applied twice counts twice.
        let response = match self.inner.data.clone().read_modify_write_row(request).await {
            Ok(response) => response,
            Err(status) => {
                let error = self.error(table, &status);
                if matches!(error, StoreError::Unavailable(_)) {
                    return Err(error);
                }
                // Bigtable's message and code for a bad increment differ from the emulator's:
                // name the column the same way on every backend.
                return Err(self
                    .non_integer_column(table, &row_key, &rules)
                    .await
                    .unwrap_or(error));
            }
        };
        let row = response.into_inner().row.unwrap_or_default();
        let mut out = Row {
            key: row_key,
            cells: row
                .families
                .into_iter()
                .flat_map(|f| {
                    let family = penchant_store::FamilyName::from(f.name);
                    f.columns.into_iter().flat_map(move |c| {
                        let family = family.clone();
                        c.cells.into_iter().map(move |cell| penchant_store::Cell {
                            family: family.clone(),
                            qualifier: c.qualifier.clone(),
                            timestamp: cell.timestamp_micros,
                            value: cell.value,
                        })
                    })
                })
                .collect(),
        };
        sort_cells(&mut out);
        Ok(out)
    }

    async fn sample_row_keys(&self, table: &str) -> Result<Vec<KeySample>> {
        self.schema(table, false).await?;
        let table_name = self.table_path(table);
        let samples = self
            .retry(table, || async {
                let message = proto::v2::SampleRowKeysRequest {
                    table_name: table_name.clone(),
                    app_profile_id: self.profile.to_string(),
                    ..Default::default()
                };
                let routing = [
                    ("table_name", table_name.as_str()),
                    ("app_profile_id", &*self.profile),
                ];
                let request = self.request(message, self.call_timeout(), &routing).await?;
                let mut stream = self
                    .inner
                    .data
                    .clone()
                    .sample_row_keys(request)
                    .await?
                    .into_inner();
                let mut out = Vec::new();
                while let Some(s) = stream.message().await? {
                    out.push(KeySample {
                        row_key: s.row_key,
                        offset_bytes: u64::try_from(s.offset_bytes).unwrap_or(0),
                    });
                }
                Ok(out)
            })
            .await?;
        // The emulator returns sampled rows in no order, and the end of the table among them.
        Ok(penchant_store::normalize_samples(samples))
    }

    async fn flush(&self) -> Result<()> {
        // Bigtable acknowledges a write once it is durable: nothing is buffered here.
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_header_is_percent_encoded() {
        assert_eq!(
            routing_params(&[
                ("table_name", "projects/p/instances/i/tables/t"),
                ("app_profile_id", "")
            ]),
            "table_name=projects%2Fp%2Finstances%2Fi%2Ftables%2Ft&app_profile_id="
        );
    }
}
