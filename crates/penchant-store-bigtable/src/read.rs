//! Reads: `ReadRows` in pages, each read to its end before its rows go on (and retried from its
//! start when it breaks), with the
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

/// Rows one `ReadRows` call asks for: a scan reads in pages, each read to its end before its
/// rows go to the caller.
const PAGE_ROWS: u64 = 1_000;

/// Bytes of cells past which a page stops at the end of a row (and the next page resumes after
/// it), whatever the row count: rows as large as a bot's day of deltas keep pages bounded.
const PAGE_BYTES: usize = 4 << 20;

/// One scan: the request, and what is applied here to what Bigtable returns.
struct Scan<'a> {
    store: &'a BigtableStore,
    table: &'a str,
    table_name: String,
    request: &'a ReadRows,
    plan: &'a ReadPlan,
    /// Whether a cell can come only once through the filter (so repeats are dropped).
    once: bool,
}

/// A page's rows, and the key to resume after when the scan goes on.
#[derive(Default)]
struct Page {
    rows: Vec<Row>,
    resume: Option<Bytes>,
}

impl BigtableStore {
    /// Stream a read into `tx`, a page at a time.
    ///
    /// Why pages: gRPC streams share one HTTP/2 connection, and its flow-control window. A row
    /// the server sent counts against that window until it is read from the stream. A stream
    /// read only as fast as its caller takes rows holds up to a stream window of them (2 MiB)
    /// while the caller waits, and a few such callers (jobs that scan and, per row, read or
    /// write) fill the connection's window: then no call on the connection gets its answer,
    /// including the ones the scanning callers wait on, and the node stops. So each page is
    /// read to its end (or cancelled) before its rows are handed on, and the next page is
    /// fetched while they are.
    async fn scan(
        self,
        table: String,
        request: ReadRows,
        plan: ReadPlan,
        tx: mpsc::Sender<Result<Row>>,
    ) {
        let scan = Scan {
            store: &self,
            table: &table,
            table_name: self.table_path(&table),
            request: &request,
            plan: &plan,
            once: !request.filter.as_ref().is_some_and(may_repeat),
        };
        let mut sent = 0u64;
        let mut page = scan.page(None, 0).await;
        loop {
            let Page { rows, resume } = match page {
                Ok(page) => page,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            let delivered = sent + rows.len() as u64;
            let next = async {
                let key = resume?;
                Some(scan.page(Some(key), delivered).await)
            };
            let hand_on = async {
                for row in rows {
                    if tx.send(Ok(row)).await.is_err() {
                        return false; // The reader went away.
                    }
                }
                true
            };
            let (next, open) = tokio::join!(next, hand_on);
            match (next, open) {
                (Some(next), true) => {
                    page = next;
                    sent = delivered;
                }
                _ => return,
            }
        }
    }
}

impl Scan<'_> {
    /// The page after `after` (from the start with none), `sent` rows having been delivered,
    /// retried from its start on transient failures.
    async fn page(&self, after: Option<Bytes>, sent: u64) -> Result<Page> {
        let rows = match &after {
            None => self.request.rows.clone(),
            Some(key) => match convert::rows_after(&self.request.rows, key) {
                Some(rows) => rows,
                None => return Ok(Page::default()),
            },
        };
        let left = self.request.limit.map(|l| l.saturating_sub(sent));
        if left == Some(0) {
            return Ok(Page::default());
        }
        // A row limit is Bigtable's to apply only when no filter runs here after it.
        let rows_limit = match (left, &self.plan.client) {
            (Some(left), None) => left.min(PAGE_ROWS),
            _ => PAGE_ROWS,
        };
        let message = proto::v2::ReadRowsRequest {
            table_name: self.table_name.clone(),
            app_profile_id: self.store.profile.to_string(),
            rows: Some(convert::row_set(&rows)),
            filter: self.plan.server.clone(),
            rows_limit: i64::try_from(rows_limit).unwrap_or(i64::MAX),
            ..Default::default()
        };
        let mut retries = 0;
        loop {
            match self.read(message.clone(), rows_limit, left).await {
                Ok(page) => return Ok(page),
                Err(status)
                    if retry::is_transient(&status)
                        && retries + 1 < self.store.policy().max_attempts =>
                {
                    tracing::debug!(table = self.table, retries, %status, "retrying a Bigtable read page");
                    tokio::time::sleep(self.store.policy().backoff(retries)).await;
                    retries += 1;
                }
                Err(status) => return Err(self.store.error(self.table, &status)),
            }
        }
    }

    /// One `ReadRows` call, read to its end, or to the first row end past [`PAGE_BYTES`] (the
    /// stream is then cancelled, which gives its window back).
    async fn read(
        &self,
        message: proto::v2::ReadRowsRequest,
        rows_limit: u64,
        left: Option<u64>,
    ) -> Result<Page, tonic::Status> {
        let store = self.store;
        let timeout = Duration::from_millis(store.inner.config.scan_timeout_ms);
        let routing = [
            ("table_name", self.table_name.as_str()),
            ("app_profile_id", &store.profile),
        ];
        let call = store.request(message, timeout, &routing).await?;
        let mut stream = store.inner.data.clone().read_rows(call).await?.into_inner();
        let mut merger = RowMerger::default();
        let mut page = Page::default();
        let (mut returned, mut bytes) = (0u64, 0usize);
        while let Some(response) = stream.message().await? {
            for chunk in response.chunks {
                bytes += chunk.value.len();
                let row = merger
                    .push(chunk)
                    .map_err(|e| tonic::Status::internal(e.to_string()))?;
                let Some(mut row) = row else { continue };
                returned += 1;
                page.resume = Some(row.key.clone());
                sort_cells(&mut row);
                if self.once {
                    row.cells.dedup_by(|a, b| {
                        a.timestamp == b.timestamp
                            && a.qualifier == b.qualifier
                            && a.family == b.family
                    });
                }
                if let Some(client) = &self.plan.client {
                    row.cells = client.apply(&row.key, std::mem::take(&mut row.cells));
                }
                if !row.cells.is_empty() {
                    page.rows.push(row);
                    if left.is_some_and(|l| page.rows.len() as u64 >= l) {
                        page.resume = None;
                        return Ok(page);
                    }
                }
                if bytes >= PAGE_BYTES {
                    return Ok(page);
                }
            }
        }
        merger
            .finish()
            .map_err(|e| tonic::Status::internal(e.to_string()))?;
        if returned < rows_limit {
            page.resume = None; // The range is read to its end.
        }
        Ok(page)
    }
}

/// Whether a filter may yield one cell more than once: an interleave whose branches overlap
/// does, in Bigtable as in Penchant's model. Through any other filter, a row holds one cell per
/// column and timestamp — yet the emulator (Google Cloud CLI's `cbtemulator`) was seen, under
/// concurrent writes and conditional deletes of a row, returning some cells of it twice, which a
/// day's aggregate fold then counted twice: such reads keep one.
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
