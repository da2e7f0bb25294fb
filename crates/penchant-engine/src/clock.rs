//! The engine's one clock: the system's, or, in tests, one that is set by hand (so a test moves
//! time on instead of sleeping).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Now, in microseconds since the Unix epoch: the system's time, or a manual one.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    manual: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Self::default()
    }

    /// A clock that stands at `micros` until [`Clock::set`] or [`Clock::advance`] moves it.
    pub fn manual(micros: i64) -> Self {
        Self {
            manual: Some(Arc::new(AtomicI64::new(micros))),
        }
    }

    /// Microseconds since the epoch.
    pub fn now_micros(&self) -> i64 {
        match &self.manual {
            Some(t) => t.load(Ordering::SeqCst),
            None => penchant_store::validate::now_micros(),
        }
    }

    /// Milliseconds since the epoch.
    pub fn now_ms(&self) -> i64 {
        self.now_micros().div_euclid(1000)
    }

    /// Move a manual clock on (no effect on the system clock).
    pub fn advance(&self, by: Duration) {
        if let Some(t) = &self.manual {
            t.fetch_add(by.as_micros() as i64, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = Clock::manual(5_000_000);
        assert_eq!(clock.now_ms(), 5_000);
        clock.advance(Duration::from_secs(2));
        assert_eq!(clock.now_ms(), 7_000);
        assert!(Clock::system().now_ms() > 1_700_000_000_000);
    }
}
