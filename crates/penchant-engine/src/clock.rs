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

    /// Set a manual clock (no effect on the system clock).
    pub fn set(&self, micros: i64) {
        if let Some(t) = &self.manual {
            t.store(micros, Ordering::SeqCst);
        }
    }

    /// Move a manual clock on (no effect on the system clock).
    pub fn advance(&self, by: Duration) {
        if let Some(t) = &self.manual {
            t.fetch_add(by.as_micros() as i64, Ordering::SeqCst);
        }
    }

    /// Wait until this clock passes `ms`: sleeps on the system clock; a manual clock is moved
    /// there at once (nothing else would move it).
    pub async fn wait_past_ms(&self, ms: i64) {
        if let Some(t) = &self.manual {
            t.fetch_max((ms + 1) * 1000, Ordering::SeqCst);
            return;
        }
        while self.now_ms() <= ms {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_manual_clock_moves_only_when_told() {
        let clock = Clock::manual(5_000_000);
        assert_eq!(clock.now_ms(), 5_000);
        clock.advance(Duration::from_secs(2));
        assert_eq!(clock.now_ms(), 7_000);
        clock.wait_past_ms(9_000).await;
        assert_eq!(clock.now_ms(), 9_001);
        let system = Clock::system();
        let before = system.now_ms();
        system.wait_past_ms(before).await;
        assert!(system.now_ms() > before);
    }
}
