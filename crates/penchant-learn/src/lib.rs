//! Penchant's learned ranker, as pure computation: the candidates every queue source proposes
//! computed in memory from a shop's events ([`offline`]), the features that describe each
//! candidate ([`offline::FEATURES`]), the training examples drawn from the history or from
//! logged impressions, and learning and ranking with LambdaMART ([`learned`]).
//!
//! Nothing here reads or writes a store or runs on an async runtime: the engine's ranker job
//! reads the events, calls [`learned::learn`], and stores the model; serving hands this crate
//! the stored snapshot. So a feature can be changed and tested (`cargo test -p penchant-learn`)
//! without building the engine.

pub mod learned;
pub mod offline;
