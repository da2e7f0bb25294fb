//! The store conformance suite, unchanged, on Bigtable.

use penchant_store::conformance::Harness;
use penchant_store_bigtable::BigtableStore;
use penchant_store_bigtable::emulator::Emulator;

async fn fresh() -> Harness {
    let emulator = Emulator::start();
    let store = BigtableStore::connect(emulator.config("")).await.unwrap();
    Harness::new(store, emulator)
}

penchant_store::conformance_suite!(fresh);
