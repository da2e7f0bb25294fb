//! Retries of idempotent calls: exponential backoff with full jitter.

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

/// How transient failures are retried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The backoff before the first retry, in milliseconds; it doubles at each retry.
    pub initial_backoff_ms: u64,
    /// The longest backoff, in milliseconds.
    pub max_backoff_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 8,
            initial_backoff_ms: 10,
            max_backoff_ms: 2_000,
        }
    }
}

impl RetryPolicy {
    /// The pause before retry number `retry` (0 = the first retry): uniformly random between
    /// zero and the exponential bound ("full jitter"), so that clients that failed together do
    /// not retry together.
    pub fn backoff(&self, retry: u32) -> Duration {
        let cap = self
            .initial_backoff_ms
            .saturating_mul(1u64 << retry.min(32))
            .min(self.max_backoff_ms)
            .max(1);
        Duration::from_millis(rand::rng().random_range(0..=cap))
    }
}

/// Whether a failed call may be retried (when the call itself is idempotent): the codes that
/// mean "try again", as in Google's Bigtable clients, and failures of the connection itself
/// (a reset or a refused connection reaches us as a status with a transport error as its source;
/// statuses the server sends have none).
pub(crate) fn is_transient(status: &tonic::Status) -> bool {
    use tonic::Code;
    match status.code() {
        Code::Unavailable | Code::DeadlineExceeded | Code::Aborted => true,
        Code::Unknown | Code::Internal | Code::Cancelled => {
            std::error::Error::source(status).is_some()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy {
            max_attempts: 5,
            initial_backoff_ms: 10,
            max_backoff_ms: 100,
        };
        for retry in 0..40 {
            let bound = (10u64 << retry.min(32)).min(100);
            for _ in 0..20 {
                assert!(p.backoff(retry) <= Duration::from_millis(bound));
            }
        }
        // Jitter: not always the same pause.
        let pauses: std::collections::BTreeSet<Duration> = (0..50).map(|_| p.backoff(4)).collect();
        assert!(pauses.len() > 1);
        assert!(is_transient(&tonic::Status::unavailable("x")));
        assert!(!is_transient(&tonic::Status::invalid_argument("x")));
        assert!(!is_transient(&tonic::Status::internal(
            "sent by the server"
        )));
        let broken = tonic::Status::from_error(Box::new(std::io::Error::other("reset")));
        assert!(is_transient(&broken));
    }
}
