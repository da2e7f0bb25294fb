//! Catalog records' limits: index names, objectIDs, a record's size.

use crate::{EngineError, Result};

/// The largest record, serialized.
pub const MAX_RECORD_BYTES: usize = 100 * 1024;
/// The longest objectID and index name, in bytes.
pub const MAX_OBJECT_ID_BYTES: usize = 512;
pub const MAX_INDEX_NAME_BYTES: usize = 256;

fn invalid(msg: impl Into<String>) -> EngineError {
    EngineError::Invalid(msg.into())
}

/// Index names: 1 to 256 bytes, no control characters.
pub fn check_index_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_INDEX_NAME_BYTES || name.chars().any(char::is_control) {
        return Err(invalid(format!(
            "index name must be 1 to {MAX_INDEX_NAME_BYTES} bytes without control characters"
        )));
    }
    Ok(())
}

/// objectIDs: 1 to 512 bytes, no 0 byte.
pub fn check_object_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_OBJECT_ID_BYTES || id.contains('\0') {
        return Err(invalid(format!(
            "objectID must be 1 to {MAX_OBJECT_ID_BYTES} bytes"
        )));
    }
    Ok(())
}
