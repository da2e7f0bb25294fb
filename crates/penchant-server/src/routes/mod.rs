//! Routes, one module per resource.

pub mod apps;
pub mod bloom;
pub mod events;
pub mod health;
pub mod indexes;
pub mod keys;
pub mod personalization;
