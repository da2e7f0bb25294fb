//! The embedded backend's tests, in one binary: the shared conformance suite, a property test
//! against the reference model, the crash test and RocksDB-specific behaviour.

mod backend;
mod conformance;
mod crash;
mod model;
