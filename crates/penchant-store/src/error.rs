//! The store's error type.

/// What can go wrong in a store operation. Backends map their own failures onto these.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("table `{0}` does not exist")]
    TableNotFound(String),
    #[error("table `{0}` already exists")]
    TableExists(String),
    #[error("column family `{family}` does not exist in table `{table}`")]
    FamilyNotFound { table: String, family: String },
    #[error("column family `{family}` already exists in table `{table}`")]
    FamilyExists { table: String, family: String },
    /// The request itself is malformed: nothing was applied.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The request is well formed but the data does not allow it (e.g. incrementing a cell that
    /// is not a 64-bit integer): nothing was applied.
    #[error("failed precondition: {0}")]
    FailedPrecondition(String),
    /// A transient failure: the operation may be retried.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A strong read ([`crate::Consistency::Strong`]) refused: the home cluster of its rows
    /// cannot be reached, and a strong read is never answered by another cluster. Retrying
    /// later may work. The message is the home cluster's error.
    #[error("{prefix}: {0}", prefix = crate::STRONG_READ_UNAVAILABLE)]
    StrongReadUnavailable(String),
    /// A failure inside the backend.
    #[error("storage backend error: {0}")]
    Backend(String),
}

/// The store's result type.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
