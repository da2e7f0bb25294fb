//! Schedules: what keeps an app's models fresh without anyone running them by hand.
//!
//! Per app (table `jobs`, column `schedules`: the settings and when each task last started):
//!
//! | task | default | what it starts |
//! |---|---|---|
//! | `training` | every 24 h | an ALS training ([`crate::vectors::training`]) with the app's last training's settings (the defaults the first time) |
//! | `foldIn` | every 60 min | a fold-in of the users and items the last training did not see (once a training has run) |
//! | `build` | every 60 min | the co-interaction lists, then every user's queues ([`crate::recommend::build`]) |
//! | `rank` | every 24 h | the ranker job of an index with learned queues ([`crate::recommend::ranker`]), with its last settings: the index whose ranker is oldest (once a learned queue is defined) |
//!
//! and `queueStaleAfterMinutes` (default 60): a `recommended-for-you` answer from a user's
//! queue built before the user's latest event and longer ago than this rebuilds the queue in
//! the background (the answer is the queue as it was). Trending counts are live; a user the
//! last training did not see is folded in when first asked for.
//!
//! A task is due when it never ran and the app has events, or its interval has passed since
//! it last started; [`crate::Engine::run_schedules`] starts the due ones of every app (one node
//! at a time, under a lease; each job under its own, as when started by hand). Time is the
//! engine's clock, so tests advance it instead of sleeping. An interval of 0 turns a task off.

use serde::{Deserialize, Serialize};

use crate::{EngineError, Result};

/// How often a node looks for due tasks.
pub const ROUND_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The column of table `jobs` holding an app's schedules.
pub(crate) const COLUMN: &[u8] = b"schedules";

/// An app's schedule settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Schedules {
    /// Hours between ALS trainings (0: never).
    pub train_every_hours: u32,
    /// Minutes between fold-ins (0: never).
    pub fold_in_every_minutes: u32,
    /// Minutes between builds of the co-interaction lists and queues (0: never).
    pub build_every_minutes: u32,
    /// Hours between trainings of the learned ranker, and writes of its queues (0: never).
    pub rank_every_hours: u32,
    /// A user's queue older than this and than their latest event is rebuilt when read
    /// (0: never).
    pub queue_stale_after_minutes: u32,
}

impl Default for Schedules {
    fn default() -> Self {
        Self {
            train_every_hours: 24,
            fold_in_every_minutes: 60,
            build_every_minutes: 60,
            rank_every_hours: 24,
            queue_stale_after_minutes: 60,
        }
    }
}

/// Longest interval of any task: a year.
const MAX_MINUTES: u32 = 366 * 24 * 60;

impl Schedules {
    pub fn check(&self) -> Result<()> {
        for (name, minutes) in [
            ("trainEveryHours", self.train_every_hours.saturating_mul(60)),
            ("foldInEveryMinutes", self.fold_in_every_minutes),
            ("buildEveryMinutes", self.build_every_minutes),
            ("rankEveryHours", self.rank_every_hours.saturating_mul(60)),
            ("queueStaleAfterMinutes", self.queue_stale_after_minutes),
        ] {
            if minutes > MAX_MINUTES {
                return Err(EngineError::Invalid(format!(
                    "{name} must be at most a year (0 turns it off)"
                )));
            }
        }
        Ok(())
    }

    /// Each task's interval in ms (`None`: off).
    pub fn interval(&self, task: Task) -> Option<i64> {
        let minutes = match task {
            Task::Training => self.train_every_hours.saturating_mul(60),
            Task::FoldIn => self.fold_in_every_minutes,
            Task::Build => self.build_every_minutes,
            Task::Rank => self.rank_every_hours.saturating_mul(60),
        };
        (minutes > 0).then_some(i64::from(minutes) * 60_000)
    }
}

/// A scheduled task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Task {
    Training,
    FoldIn,
    Build,
    Rank,
}

impl Task {
    pub const ALL: [Task; 4] = [Task::Training, Task::FoldIn, Task::Build, Task::Rank];
}

/// What is stored: the settings, and when each task last started (ms).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stored {
    #[serde(default)]
    pub settings: Schedules,
    #[serde(default)]
    pub last_started: std::collections::BTreeMap<Task, i64>,
}

/// One task's state for the API and the dashboard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    pub task: Task,
    /// Its interval in minutes (`None`: off).
    pub every_minutes: Option<i64>,
    pub last_started_at: Option<i64>,
    /// When it runs next (ms): `None` when off, or never run and nothing to run on yet (it
    /// starts once the app has events).
    pub next_run_at: Option<i64>,
}

impl Stored {
    /// When `task` is due next (`None`: off; never run: now if the app has events).
    pub fn next(&self, task: Task, now: i64, has_events: bool) -> Option<i64> {
        let interval = self.settings.interval(task)?;
        match self.last_started.get(&task) {
            Some(last) => Some(last + interval),
            None => has_events.then_some(now),
        }
    }

    pub fn views(&self, now: i64, has_events: bool) -> Vec<TaskView> {
        Task::ALL
            .iter()
            .map(|&task| TaskView {
                task,
                every_minutes: self.settings.interval(task).map(|ms| ms / 60_000),
                last_started_at: self.last_started.get(&task).copied(),
                next_run_at: self.next(task, now, has_events),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_fall_due_after_their_interval_and_never_when_off() {
        let mut s = Stored::default();
        assert_eq!(
            s.next(Task::Build, 1000, false),
            None,
            "nothing to build on"
        );
        assert_eq!(s.next(Task::Build, 1000, true), Some(1000));
        s.last_started.insert(Task::Build, 1000);
        assert_eq!(s.next(Task::Build, 5000, true), Some(1000 + 3_600_000));
        s.settings.build_every_minutes = 0;
        assert_eq!(s.next(Task::Build, 5000, true), None);
        assert_eq!(
            s.next(Task::Training, 7, true),
            Some(7),
            "first training at once"
        );
        let bad = Schedules {
            train_every_hours: 10_000,
            ..Schedules::default()
        };
        assert!(
            bad.check()
                .unwrap_err()
                .to_string()
                .contains("trainEveryHours")
        );
    }
}
