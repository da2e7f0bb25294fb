//! The shared conformance suite on a fresh RocksDB store in a temporary folder.

use penchant_store::conformance::Harness;
use penchant_store_rocksdb::{RocksOptions, RocksStore};

async fn fresh() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = RocksStore::open(dir.path(), RocksOptions::default()).unwrap();
    Harness::new(store, dir)
}

penchant_store::conformance_suite!(fresh);
