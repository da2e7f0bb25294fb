//! The Bigtable backend against real Bigtable emulators (started per test, stopped after it).

mod affinity;
mod conformance;
mod faults;
mod folds;
mod placement;
mod streams;
