//! Vector spaces' names, and how many liked items a similarity search starts from.

use crate::{Result, keys};

/// The longest space name, in bytes.
pub const MAX_SPACE_NAME_BYTES: usize = 64;
/// Most liked items a "similar to the last N liked" search starts from.
pub const MAX_LIKED: usize = 100;

/// Space names: 1 to 64 bytes of letters, digits, `-`, `_` and `.`.
pub fn check_space_name(name: &str) -> Result<()> {
    keys::check_name("space", name, MAX_SPACE_NAME_BYTES)
}
