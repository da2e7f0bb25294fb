//! The build job: an app's co-interaction lists ([`super::related`]), then every user's queues.
//!
//! One node at a time runs an app's build (the holder of its lease, like a training); its
//! status (`j:recommend` in table `jobs`, row `app 0`) is saved every half second with its
//! checkpoint: the phase and the last user whose queues are done. A node that stops or dies
//! leaves it `running`; the node that takes it over resumes from the checkpoint, so users already done are not rebuilt (a user rebuilt twice is harmless).
//! Users are those with events in the app's retention window (their per-day aggregate rows),
//! in key order, [`USERS_AT_ONCE`] at a time. A queue ordered by a learned ranker is left to
//! the ranker job ([`super::ranker`]) once its index has a model.

use serde::{Deserialize, Serialize};

use crate::jobs::{Job, JobState, Progress, Run, Status};
use crate::{Engine, Result};

/// Users whose queues are rebuilt at once.
pub(crate) const USERS_AT_ONCE: usize = 16;

/// Where a build stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// Building the co-interaction lists.
    Lists,
    /// Rebuilding users' queues.
    Queues,
    Done,
}

/// A build's status, saved as it goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildStatus {
    pub state: JobState,
    pub phase: Phase,
    /// The queues rebuilt (every queue of the app when the build started).
    pub queues: Vec<String>,
    /// Events the lists were built from, and lists written.
    pub events: u64,
    pub lists: u64,
    /// Items of events left out of the lists: an objectID (or index name) too long to be part
    /// of a row key, stored before events were checked so.
    #[serde(default)]
    pub skipped: u64,
    /// Users whose queues are rebuilt, and the last of them (the checkpoint).
    pub users: u64,
    pub after: Option<String>,
    /// Unix ms.
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub error: Option<String>,
    /// What the previous finished build counted (events, users): this one's expected totals,
    /// for its progress (the app's events and users change little between two builds, and
    /// counting them first would cost a pass over both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<(u64, u64)>,
    /// How far it is (every kind's status has one, in the same shape).
    #[serde(default)]
    pub progress: Progress,
}

impl BuildStatus {
    pub(crate) fn measure(&self) -> Progress {
        let (done, unit, expected) = match self.phase {
            Phase::Lists => (self.events, "events", self.expected.map(|(e, _)| e)),
            Phase::Queues | Phase::Done => (self.users, "users", self.expected.map(|(_, u)| u)),
        };
        let mut progress = Progress::of(&self.phase, &[Phase::Lists, Phase::Queues], done, unit);
        // An estimate: never less than what is done.
        progress.total = expected.filter(|&t| t > 0).map(|t| t.max(done));
        progress
    }
}

impl Status for BuildStatus {
    fn state(&self) -> JobState {
        self.state
    }

    fn end(&mut self, state: JobState, now: i64, error: Option<String>) {
        self.state = state;
        if state == JobState::Done {
            self.phase = Phase::Done;
        }
        self.finished_at = Some(now);
        self.error = error;
    }

    /// Events read so far by the lists' build.
    fn count(&mut self, events: u64) {
        self.events = self.events.max(events);
    }

    fn measure(&self) -> Progress {
        Self::measure(self)
    }

    fn report(&mut self) {
        self.progress = Self::measure(self);
    }
}

/// The build job, run by the engine whose recommendations it builds.
#[derive(Debug)]
pub(crate) struct Build(pub(crate) Engine);

impl Job for Build {
    type Status = BuildStatus;
    const KEY: &'static str = "recommend";
    const NAME: &'static str = "build";

    async fn steps(&self, run: &Run<Self>) -> Result<JobState> {
        self.0.build_steps(run).await.map(|()| JobState::Done)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::events::{Event, EventType, Target};
    use crate::jobs::JobState;
    use crate::recommend::related::{self, Links};
    use crate::vectors::training::{TrainingConfig, Weights};
    use crate::{Engine, EngineConfig};

    const APP: &str = "APP";

    /// Issue 29: events stored with objectIDs too long to be row keys (5 KB: longer than a row
    /// key; 70 KB: longer than a ranked list's length prefix) failed every build and training
    /// of the app, and left lists that read as corrupt. Their items are left out, counted; the
    /// others' lists and vectors are built.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn builds_and_trainings_skip_items_too_long_to_be_keys() {
        let store: Arc<dyn penchant_store::Store> = Arc::new(penchant_store::MemStore::new());
        let engine = Engine::open(store, EngineConfig::default()).await.unwrap();
        let now = engine.now_ms();
        let (medium, huge) = ("m".repeat(5000), "h".repeat(70_000));
        let events: Vec<Event> = (0..4)
            .map(|u| Event {
                event_type: EventType::Conversion,
                event_subtype: None,
                event_name: "Bought".into(),
                index: "items".into(),
                user_token: format!("u{u}"),
                authenticated_user_token: None,
                timestamp: now - 1000,
                // Below the HTTP validation, as events stored before it.
                target: Target::ObjectIds(vec![
                    "a".into(),
                    medium.clone(),
                    "b".into(),
                    huge.clone(),
                ]),
                query_id: None,
                positions: None,
                object_data: None,
                value: None,
                currency: None,
            })
            .collect();
        engine.push_events(APP, &events).await.unwrap();

        engine.start_build(APP).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let done = loop {
            let status = engine.build_status(APP).await.unwrap().unwrap();
            if status.state != JobState::Running {
                break status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the build did not end"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(done.state, JobState::Done, "{done:?}");
        assert_eq!(done.skipped, 8, "two items of four events: {done:?}");
        for links in [Links::BoughtTogether, Links::Related] {
            let list = related::list(&engine.store, APP, "items", links, "a")
                .await
                .unwrap();
            let ids: Vec<&str> = list.iter().map(|(id, _)| id.as_str()).collect();
            assert_eq!(ids, ["b"], "{links:?}");
        }

        let config = TrainingConfig {
            weights: Some(Weights::new()),
            ..TrainingConfig::default()
        };
        engine.train(APP, config).await.unwrap();
        let trained = loop {
            let status = engine.training_status(APP).await.unwrap().unwrap();
            if status.state != JobState::Running {
                break status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the training did not end"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(trained.state, JobState::Done, "{trained:?}");
        assert_eq!((trained.users, trained.items), (4, 2), "{trained:?}");
    }
}
