//! Penchant's domain model: the types and pure functions every layer shares, with no I/O —
//! no store calls, no runtime, no clock.
//!
//! | module | holds |
//! |---|---|
//! | [`error`] | [`EngineError`], the one error every layer maps to an answer |
//! | [`keys`] | every row key: encoded, decoded and validated in one place |
//! | [`tables`] | a table's definition: families, GC rules, whose rows |
//! | [`catalog`] | records: their checks, partial updates, facet values |
//! | [`vectors`] | spaces' settings, a vector's checks and cell value, searches' and trainings' requests |
//! | [`days`] | the day a time falls in |
//! | [`events`] | events: types, row keys, stored form, the two layouts of their counts |
//! | [`strategy`] | the personalization strategy and its checks |
//! | [`profiles`] | profiles, the scoring formula, and a user's state with its binary form |
//! | [`aggregates`] | what reads per-day aggregate rows |
//! | [`seen`] | seen filters' settings and what a user's filter tells |
//! | [`sets`] | key sets: settings, description, rebuilds |
//! | [`tenancy`] | apps, API keys' ACLs and what is stored of them, principals |
//! | [`abtests`] | A/B tests: definitions, variants, status, the users' split |
//! | [`recommend`] | the `filters` syntax, queue definitions and their sources |
//!
//! The engine (`penchant-engine`) builds its services on these; the learning crate
//! (`penchant-learn`) computes on them without a store.

pub mod abtests;
pub mod aggregates;
pub mod catalog;
pub mod days;
mod error;
pub mod events;
pub mod keys;
pub mod profiles;
pub mod recommend;
pub mod seen;
pub mod sets;
pub mod strategy;
pub mod tables;
pub mod tenancy;
pub mod vectors;

pub use error::{EngineError, Result, internal};
