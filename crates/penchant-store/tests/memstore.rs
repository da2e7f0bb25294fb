//! The conformance suite against the in-memory reference model: the model itself must meet the
//! contract the backends are compared with.

use penchant_store::MemStore;
use penchant_store::conformance::Harness;

async fn fresh() -> Harness {
    Harness::new(MemStore::new(), ())
}

penchant_store::conformance_suite!(fresh);
