//! The co-interaction lists' sizes (`related-products`, `bought-together`).

/// Items kept in each item's list.
pub const NEIGHBOURS: usize = 100;
/// Items of one user (or user-day) that pair up: the latest ones.
pub const MAX_ITEMS_PER_USER: usize = 50;
