//! Penchant's engine: everything between the HTTP layer and the store.
//!
//! The engine reads and writes rows through [`penchant_store::Store`] only, so it runs unchanged
//! on every backend. Its modules follow the data flow of the product brief; most are filled in by
//! the issues that build each system.

pub mod bloom;
pub mod catalog;
pub mod events;
pub mod jobs;
pub mod keys;
pub mod profiles;
pub mod recommend;
pub mod rerank;
pub mod strategy;
pub mod vectors;

use std::sync::Arc;

use penchant_store::Store;

/// What can go wrong in the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] penchant_store::StoreError),
}

/// The engine's result type.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// The engine: one per process, shared by every request.
#[derive(Debug, Clone)]
pub struct Engine {
    store: Arc<dyn Store>,
}

impl Engine {
    /// An engine over a store.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// The store the engine writes to.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Make every acknowledged write durable (on shutdown).
    pub async fn flush(&self) -> Result<()> {
        Ok(self.store.flush().await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn engine_flushes_its_store() {
        let store = Arc::new(penchant_store::MemStore::new());
        let engine = Engine::new(store);
        engine.flush().await.unwrap();
        assert!(engine.store().list_tables().await.unwrap().is_empty());
    }
}
