//! Routes, one module per resource.

pub mod apps;
pub mod events;
pub mod health;
pub mod indexes;
pub mod keys;
pub mod personalization;
