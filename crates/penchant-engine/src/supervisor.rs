//! The owner of the engine's background work: recompute jobs, the retention purge, the repair
//! of interrupted ingestions. Every background task is spawned here; [`Supervisor::shutdown`]
//! tells them to stop (they stop at their next checkpoint, saving where they are) and waits for
//! them, so that the store is flushed only once nothing writes any more.

use std::future::Future;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Background tasks, and the signal that tells them to stop.
#[derive(Debug)]
pub struct Supervisor {
    tasks: Mutex<JoinSet<()>>,
    stop: watch::Sender<bool>,
}

impl Default for Supervisor {
    fn default() -> Self {
        Self {
            tasks: Mutex::new(JoinSet::new()),
            stop: watch::channel(false).0,
        }
    }
}

impl Supervisor {
    /// Run `task` in the background, owned by this supervisor.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut tasks = self.tasks.lock();
        // Reap what has finished, so a long-lived node does not accumulate handles.
        while tasks.try_join_next().is_some() {}
        tasks.spawn(task);
    }

    /// Whether shutdown has begun: tasks check this at each checkpoint.
    pub fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Resolves when shutdown begins (for tasks that wait between rounds).
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.stop.subscribe();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }

    /// Tell every task to stop and wait until all have (tasks spawned meanwhile included).
    pub async fn shutdown(&self) {
        self.stop.send_replace(true);
        loop {
            let mut tasks = std::mem::take(&mut *self.tasks.lock());
            if tasks.is_empty() {
                return;
            }
            while let Some(result) = tasks.join_next().await {
                if let Err(e) = result
                    && e.is_panic()
                {
                    tracing::error!(error = %e, "a background task panicked");
                }
            }
        }
    }

    /// Stop every task where it stands, without letting it save or release anything: what a
    /// killed node does (for tests of another node taking over).
    pub fn abort(&self) {
        // Aborted first: a task woken by the stop signal before its abort would save and
        // release what a killed node never does.
        self.tasks.lock().abort_all();
        self.stop.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn shutdown_waits_for_tasks_to_finish_their_step() {
        let supervisor = Arc::new(Supervisor::default());
        let saved = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let (s, saved) = (supervisor.clone(), saved.clone());
            supervisor.spawn(async move {
                s.stopped().await;
                // Work after the signal (saving a checkpoint) still completes.
                tokio::time::sleep(Duration::from_millis(20)).await;
                saved.fetch_add(1, Ordering::SeqCst);
            });
        }
        assert!(!supervisor.stopping());
        supervisor.shutdown().await;
        assert!(supervisor.stopping());
        assert_eq!(saved.load(Ordering::SeqCst), 3);
    }
}
