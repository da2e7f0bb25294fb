//! Reads: `ReadRows` streams, resumed after the last delivered row when they break, with the
//! part of the filter Bigtable cannot run applied here; cells put in the store's order; sampled
//! row keys.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use penchant_store::validate::now_micros;
use penchant_store::{KeySample, ReadRows, Result, Row, RowFilter, RowStream};
use tokio::sync::mpsc;

use crate::convert::{self, ReadPlan};
use crate::merge::RowMerger;
use crate::{BigtableStore, proto, retry};

impl BigtableStore {
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
        let once = !request.filter.as_ref().is_some_and(may_repeat);
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
                        if once {
                            row.cells.dedup_by(|a, b| {
                                a.timestamp == b.timestamp
                                    && a.qualifier == b.qualifier
                                    && a.family == b.family
                            });
                        }
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
}

/// Whether a filter may yield one cell more than once: an interleave whose branches overlap
/// does, in Bigtable as in Penchant's model. Through any other filter, a row holds one cell per
/// column and timestamp — yet the emulator (Google Cloud CLI's `cbtemulator`) was seen, under
/// concurrent writes and conditional deletes of a row, returning some cells of it twice, which a
/// day's aggregate fold then counted twice (issue 15): such reads keep one.
fn may_repeat(filter: &RowFilter) -> bool {
    match filter {
        RowFilter::Interleave(fs) => fs.len() > 1,
        RowFilter::Chain(fs) => fs.iter().any(may_repeat),
        RowFilter::Condition {
            predicate,
            on_match,
            on_no_match,
        } => may_repeat(predicate) || may_repeat(on_match) || may_repeat(on_no_match),
        _ => false,
    }
}

/// Cells in the store's order: family, qualifier, newest first (Bigtable orders columns within a
/// family, but not the families).
pub(crate) fn sort_cells(row: &mut Row) {
    row.cells.sort_by(|a, b| {
        (&a.family, &a.qualifier, std::cmp::Reverse(a.timestamp)).cmp(&(
            &b.family,
            &b.qualifier,
            std::cmp::Reverse(b.timestamp),
        ))
    });
}

pub(crate) async fn read_rows(
    store: &BigtableStore,
    table: &str,
    request: ReadRows,
) -> Result<RowStream> {
    let schema = store.schema(table, false).await?;
    let plan = ReadPlan::new(&schema, request.filter.as_ref(), now_micros())?;
    if request.limit == Some(0) {
        return Ok(futures::stream::empty().boxed());
    }
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(store.clone().scan(table.to_owned(), request, plan, tx));
    Ok(tokio_stream::wrappers::ReceiverStream::new(rx).boxed())
}

pub(crate) async fn sample_row_keys(store: &BigtableStore, table: &str) -> Result<Vec<KeySample>> {
    store.schema(table, false).await?;
    let table_name = store.table_path(table);
    let samples = store
        .retry(table, || async {
            let message = proto::v2::SampleRowKeysRequest {
                table_name: table_name.clone(),
                app_profile_id: store.profile.to_string(),
                ..Default::default()
            };
            let routing = [
                ("table_name", table_name.as_str()),
                ("app_profile_id", &*store.profile),
            ];
            let request = store
                .request(message, store.call_timeout(), &routing)
                .await?;
            let mut stream = store
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
