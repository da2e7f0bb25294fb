//! The connection to Bigtable: configuration, endpoints and channels, credentials, and the
//! plumbing every call goes through (deadline, credentials and routing header on each request;
//! retries of idempotent calls; errors).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use penchant_store::{Result, StoreError};
use serde::{Deserialize, Serialize};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::proto::admin::bigtable_table_admin_client::BigtableTableAdminClient;
use crate::proto::v2::bigtable_client::BigtableClient;
use crate::{BigtableStore, Inner, RetryPolicy, convert, retry};

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
    /// Row affinity: one app profile per cluster of the instance, each with single-cluster
    /// routing to its cluster (keep the order: it is part of every user's home). Serving calls
    /// for a user's rows go to its home cluster, failing over to the next ones; strong reads go
    /// to the home only ([`penchant_store::AffineStore`]). Empty (the default): no affinity,
    /// every call carries `app_profile`.
    pub clusters: Vec<String>,
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
            clusters: Vec::new(),
            call_timeout_ms: 20_000,
            scan_timeout_ms: 300_000,
            schema_ttl_ms: 10_000,
            retry: RetryPolicy::default(),
        }
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

    /// A view of this store (same connection) whose calls carry another app profile.
    pub fn with_app_profile(&self, profile: &str) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            profile: Arc::from(profile),
        }
    }

    pub(crate) fn table_path(&self, table: &str) -> String {
        format!(
            "{}/tables/{}{}",
            self.inner.instance, self.inner.config.table_prefix, table
        )
    }

    pub(crate) fn policy(&self) -> &RetryPolicy {
        &self.inner.config.retry
    }

    pub(crate) fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.inner.config.call_timeout_ms)
    }

    /// A request with its deadline, credentials and routing header.
    pub(crate) async fn request<T>(
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
    pub(crate) async fn retry<T, F, Fut>(&self, table: &str, mut call: F) -> Result<T>
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

    pub(crate) fn error(&self, table: &str, status: &tonic::Status) -> StoreError {
        if status.code() == tonic::Code::NotFound {
            self.inner.schemas.lock().remove(table);
        }
        convert::status_error(table, status)
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
