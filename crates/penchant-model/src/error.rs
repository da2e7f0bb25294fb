//! The engine's errors.

use penchant_store::StoreError;

/// What can go wrong in the engine: the caller's mistakes, each with a message saying what was
/// wrong, and the engine's own failures, whose detail is for the log only.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The request is malformed (the message says how).
    #[error("{0}")]
    Invalid(String),
    /// What the request names does not exist.
    #[error("{0}")]
    NotFound(String),
    /// What the request creates exists already.
    #[error("{0}")]
    Exists(String),
    /// The operation ran and was refused, leaving things as they were (the message says why).
    #[error("{0}")]
    Refused(String),
    /// The store cannot serve now (down, or too much contention): retrying later may work.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A strong read cannot be served now: the home cluster of the user's rows is unreachable
    /// (the message is its error), and a strong read is never answered by another cluster.
    #[error("unavailable: {prefix}: {0}", prefix = penchant_store::STRONG_READ_UNAVAILABLE)]
    StrongReadUnavailable(String),
    /// Penchant failed: corrupt stored data, a store error, a failed serialization. Not the
    /// caller's fault; the message names what failed, for the log.
    #[error("internal: {0}")]
    Internal(String),
}

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => EngineError::Unavailable(m),
            StoreError::StrongReadUnavailable(m) => EngineError::StrongReadUnavailable(m),
            other => EngineError::Internal(format!("store: {other}")),
        }
    }
}

/// An internal error about `what` (e.g. "corrupt profile").
pub fn internal(what: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Internal(format!("{what}: {e}"))
}

/// The engine's result type.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
