//! Retention: the purge of events (and their days' aggregates) older than their app's window.

use penchant_store::{ReadRows, RowFilter, RowSet, Store, TimeRange, Workload, for_workload};
use std::sync::Arc;

use crate::clock::Clock;
use crate::tenancy::{self, Tenancy};
use crate::{Result, keys};
use penchant_model::tables::{AGGREGATES_TABLE, EVENTS_TABLE, WAITING_TABLE};

/// Delete the events (and per-day aggregates) of every app that are older than the app's
/// retention window: they stopped counting already; the store's own 90-day rule would remove
/// them only later. Returns how many event rows and aggregate rows it deleted.
pub async fn purge_all(
    store: &Arc<dyn Store>,
    tenancy: &Tenancy,
    clock: &Clock,
) -> Result<(u64, u64)> {
    let mut deleted = (0, 0);
    for app in tenancy.list_apps().await? {
        if app.retention_days >= tenancy::MAX_RETENTION_DAYS {
            continue;
        }
        let window = tenancy.retention(&app.app_id).await?;
        let cutoff = clock.now_micros() - window.as_micros() as i64;
        deleted.0 += purge_before(store, EVENTS_TABLE, &app.app_id, cutoff).await?;
        deleted.1 += purge_before(store, AGGREGATES_TABLE, &app.app_id, cutoff).await?;
        // Events gone need not be found when their items arrive.
        purge_before(store, WAITING_TABLE, &app.app_id, cutoff).await?;
    }
    Ok(deleted)
}

/// Delete an app's rows of `table` whose cells are all older than `cutoff` (µs). Events and
/// aggregates stamp every cell of a row with the same time (the event's; the day's latest), so
/// a row with a cell newer than the cutoff is kept whole.
async fn purge_before(store: &Arc<dyn Store>, table: &str, app: &str, cutoff: i64) -> Result<u64> {
    let store = for_workload(store, Workload::Batch);
    // Rows with a cell in the window, then the others: keys only.
    let newer = RowFilter::TimestampRange(TimeRange::new(cutoff, i64::MAX));
    let old_only = RowFilter::Condition {
        predicate: Box::new(newer),
        on_match: Box::new(RowFilter::BlockAll),
        on_no_match: Box::new(RowFilter::StripValue.and(RowFilter::CellsPerRowLimit(1))),
    };
    let request = ReadRows::new(RowSet::prefix(keys::app(app))).filter(old_only);
    Ok(store.delete_read(table, request).await?)
}
