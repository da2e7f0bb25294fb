//! What reads per-day aggregate rows (table `aggregates`, row `app 0 · user 0 · day`): which
//! cells hold a qualifier's sums, and the row's marker. The engine's `aggregates` writes them.

use bytes::Bytes;
use penchant_store::RowFilter;

use crate::keys;
use crate::tables::AGGREGATES_FAMILY as FAMILY;

/// The qualifier of a day's latest event time (ms).
pub const LAST: &[u8] = b"_last";

/// The cells of these qualifiers in aggregate rows: each one's base and its deltas.
pub fn qualifiers_filter(qualifiers: impl IntoIterator<Item = Bytes>) -> Vec<RowFilter> {
    let qualifiers: Vec<Bytes> = qualifiers.into_iter().collect();
    let mut filters = Vec::with_capacity(qualifiers.len() + 1);
    for q in &qualifiers {
        let (start, end) = keys::aggregate_deltas_of(q);
        filters.push(RowFilter::ColumnRange {
            family: FAMILY.to_owned(),
            start,
            end,
        });
    }
    if !qualifiers.is_empty() {
        filters.push(RowFilter::qualifiers(qualifiers));
    }
    filters
}

/// The marker of an aggregate row: its newest `_last` cell, without its value (the day's latest
/// event, whether the strategy weighs it or not).
pub fn marker() -> RowFilter {
    RowFilter::column(FAMILY, LAST)
        .and(RowFilter::CellsPerColumnLimit(1))
        .and(RowFilter::StripValue)
}
