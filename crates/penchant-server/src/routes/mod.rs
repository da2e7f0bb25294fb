//! Routes, one module per resource.

pub mod health;
