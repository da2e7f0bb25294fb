//! Impressions: what a tracked answer served. A Recommend or re-ranking answer with
//! `clickAnalytics` for a user carries a `queryID`; the engine logs the objectIDs it served, in
//! order, under that queryID, so that the clicks and conversions sent back with it say which of the served items
//! were taken and which were passed over — the examples a learned ranker trains from
//! ([`super::ranker`]).
//!
//! Table `impressions`, family `i`, row `app 0 · user 0 · time ms (u64 BE) · queryID`: cell
//! `i:served` ([`Impression`], JSON) stamped with the time it was served. The rows are the
//! user's (they move with the user's placement and go when the user is deleted) and are kept
//! as long as raw events. An impression is written without waiting for the disk: it is a log
//! for training, not acknowledged data, and a crash may lose the last ones.

use bytes::Bytes;
use futures::TryStreamExt;
use penchant_store::{
    Mutation, ReadRows, RowFilter, RowMutation, RowSet, Store, TableMutation, TimeRange, Timestamp,
    Workload,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use crate::{EngineError, Result, internal, keys};
use penchant_model::tables::IMPRESSIONS_FAMILY as FAMILY;
pub use penchant_model::tables::{IMPRESSIONS, IMPRESSIONS_TABLE};

pub(crate) const SERVED: &[u8] = b"served";

/// One tracked answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Impression {
    pub index: String,
    #[serde(rename = "queryID")]
    pub query_id: String,
    pub user: String,
    /// Unix ms.
    pub at: i64,
    /// The items served, first first.
    #[serde(rename = "objectIDs")]
    pub object_ids: Vec<String>,
}

/// The write that logs an impression.
pub(crate) fn write(app: &str, impression: &Impression) -> Result<TableMutation> {
    let value = serde_json::to_vec(impression).map_err(|e| internal("impression", e))?;
    let key = keys::impression(app, &impression.user, impression.at, &impression.query_id);
    let cell = Mutation::SetCell {
        family: FAMILY.into(),
        qualifier: Bytes::from_static(SERVED),
        timestamp: Timestamp::Micros(impression.at.saturating_mul(1000)),
        value: value.into(),
    };
    Ok(TableMutation::new(
        IMPRESSIONS_TABLE,
        RowMutation::new(key, vec![cell]),
    ))
}

/// Log an impression (not waiting for the disk, on a store with a log of its own).
pub(crate) async fn log(store: &dyn Store, app: &str, impression: &Impression) -> Result<()> {
    let write = write(app, impression)?;
    if store.atomic_writes() {
        store.mutate_atomically_deferred(vec![write]).await?;
    } else {
        let TableMutation { table, row } = write;
        store.mutate_row(table, row.row_key, row.mutations).await?;
    }
    Ok(())
}

/// The longest queryID an impression takes (Algolia's are 32 hex digits).
pub(crate) const MAX_QUERY_ID_BYTES: usize = 64;

/// Refuse an impression whose user, queryID or items could not be keyed or matched.
pub(crate) fn check(impression: &Impression) -> Result<()> {
    if !keys::user_token_ok(&impression.user) {
        return Err(EngineError::Invalid(keys::USER_TOKEN_MESSAGE.into()));
    }
    let id = &impression.query_id;
    if id.is_empty() || id.len() > MAX_QUERY_ID_BYTES || id.contains('\0') {
        return Err(EngineError::Invalid(format!(
            "queryID must be 1 to {MAX_QUERY_ID_BYTES} bytes"
        )));
    }
    for id in &impression.object_ids {
        crate::catalog::check_object_id(id)?;
    }
    Ok(())
}

/// An index's impressions served since `since` (ms), in no particular order.
pub(crate) async fn read(
    store: &Arc<dyn Store>,
    app: &str,
    index: &str,
    since: i64,
) -> Result<Vec<Impression>> {
    let store = penchant_store::for_workload(store, Workload::Batch);
    let filter = RowFilter::column(FAMILY, Bytes::from_static(SERVED)).and(
        RowFilter::TimestampRange(TimeRange::new(since.saturating_mul(1000), i64::MAX)),
    );
    let request = ReadRows::new(RowSet::prefix(keys::app(app))).filter(filter);
    let mut rows = store.read_rows(IMPRESSIONS_TABLE, request).await?;
    let mut out = Vec::new();
    while let Some(row) = rows.try_next().await? {
        let Some(cell) = row.latest(FAMILY, SERVED) else {
            continue;
        };
        let impression: Impression =
            serde_json::from_slice(&cell.value).map_err(|e| internal("corrupt impression", e))?;
        if impression.index == index {
            out.push(impression);
        }
    }
    Ok(out)
}
