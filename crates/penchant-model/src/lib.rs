//! Penchant's domain model: the types and pure functions every layer shares, with no I/O —
//! no store calls, no runtime, no clock.
//!
//! | module | holds |
//! |---|---|
//! | [`error`] | [`EngineError`], the one error every layer maps to an answer |
//! | [`keys`] | every row key: encoded, decoded and validated in one place |
//! | [`tables`] | a table's definition: families, GC rules, whose rows |
//! | [`catalog`], [`vectors`] | names and limits: index names, objectIDs, space names |
//! | [`days`] | the day a time falls in |
//! | [`recommend`] | the `filters` syntax, queue definitions and their sources |
//!
//! The engine (`penchant-engine`) builds its services on these; the learning crate
//! (`penchant-learn`) computes on them without a store.

pub mod catalog;
pub mod days;
mod error;
pub mod keys;
pub mod recommend;
pub mod tables;
pub mod vectors;

pub use error::{EngineError, Result, internal};
