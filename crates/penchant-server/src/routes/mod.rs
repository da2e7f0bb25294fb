//! Routes, one module per resource.

pub mod apps;
pub mod health;
pub mod indexes;
pub mod keys;
