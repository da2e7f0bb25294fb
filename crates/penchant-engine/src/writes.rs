//! How the engine writes what several writers share: cells under a version cell, replaced only
//! if nobody wrote since they were read (optimistic concurrency: set partitions, seen filters,
//! per-day aggregates), and per-user work run a few users at a time, so that their writes share
//! the store's commits.

use bytes::Bytes;
use penchant_store::{Mutation, RowFilter, Store};

use crate::Result;

/// The column holding a row's version, beside the cells it versions.
pub(crate) const VERSION: &[u8] = b"v";

/// Replace a cell-and-version pair if its version is still `version` (0: no cell yet).
/// Returns whether it wrote. The version cell is stamped like the newest cell written with an
/// explicit time (rows whose cells carry their data's time, as a day's aggregate does, keep
/// doing so: the retention purge goes by those times), else with the store's clock. The old
/// version cell is deleted in the same write: stamped otherwise, it would stay beside the new
/// one, and a writer that read it would find its version still there (ABA).
pub(crate) async fn write_if_version(
    store: &dyn Store,
    table: &str,
    row: Bytes,
    family: &str,
    version: u64,
    mut cells: Vec<Mutation>,
) -> Result<bool> {
    let stamp = cells
        .iter()
        .filter_map(|m| match m {
            Mutation::SetCell {
                timestamp: penchant_store::Timestamp::Micros(t),
                ..
            } => Some(*t),
            _ => None,
        })
        .max();
    let next = (version + 1).to_string();
    cells.push(Mutation::delete_column(family, Bytes::from_static(VERSION)));
    cells.push(match stamp {
        Some(t) => Mutation::set(family, Bytes::from_static(VERSION), t, next),
        None => Mutation::set_now(family, Bytes::from_static(VERSION), next),
    });
    let column = RowFilter::column(family, Bytes::from_static(VERSION));
    Ok(if version == 0 {
        !store
            .check_and_mutate_row(table, row, Some(column), vec![], cells)
            .await?
    } else {
        let same = column.and(RowFilter::ValueRegex(version.to_string()));
        store
            .check_and_mutate_row(table, row, Some(same), cells, vec![])
            .await?
    })
}

/// Users whose work an ingested batch does at once (their writes share the store's commits).
const USERS_AT_ONCE: usize = 32;

/// Run per-user work, [`USERS_AT_ONCE`] at a time; the first error wins.
pub(crate) async fn concurrently<T>(
    work: Vec<impl std::future::Future<Output = Result<T>>>,
) -> Result<()> {
    use futures::{StreamExt, TryStreamExt};
    futures::stream::iter(work)
        .buffer_unordered(USERS_AT_ONCE)
        .try_for_each(|_| async { Ok(()) })
        .await
}
