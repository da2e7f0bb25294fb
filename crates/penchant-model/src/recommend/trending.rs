//! How trending weighs days.

/// Days a trending read covers (today included).
pub const WINDOW_DAYS: i64 = 7;
/// Days after which a day's counts weigh half.
pub const HALF_LIFE_DAYS: f64 = 2.0;
