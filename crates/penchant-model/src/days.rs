//! Days, as aggregates, trending and retention count them: since the epoch, in UTC.

/// A day in ms.
pub const DAY_MS: i64 = 86_400_000;

/// The day (since the epoch) of a time in ms.
pub fn day_of(ms: i64) -> i64 {
    ms.div_euclid(DAY_MS)
}
