//! The build job: an app's co-interaction lists ([`super::related`]), then every user's queues.
//!
//! One node at a time runs an app's build (the holder of its lease, like a training); its
//! status (`j:recommend` in table `jobs`, row `app 0`) is saved every half second with its
//! checkpoint: the phase and the last user whose queues are done. A node that stops or dies
//! leaves it `running`; the node that takes it over resumes from the checkpoint, so users already done are not rebuilt (a user rebuilt twice is harmless).
//! Users are those with events in the app's retention window (their per-day aggregate rows),
//! in key order, [`USERS_AT_ONCE`] at a time. A queue ordered by a learned ranker is left to
//! the ranker job ([`super::ranker`]) once its index has a model.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::{StreamExt, TryStreamExt};
use penchant_store::{ReadRows, RowFilter, RowSet, Workload};
use serde::{Deserialize, Serialize};

use super::QueueDefinition;
use crate::jobs::{Job, JobState, Progress, Run, Status};
use crate::{Engine, EngineError, Result, keys};

/// Users whose queues are rebuilt at once.
const USERS_AT_ONCE: usize = 16;

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
    fn measure(&self) -> Progress {
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
pub(crate) struct Build(Engine);

impl Job for Build {
    type Status = BuildStatus;
    const KEY: &'static str = "recommend";
    const NAME: &'static str = "build";

    async fn steps(&self, run: &Run<Self>) -> Result<JobState> {
        self.0.build_steps(run).await.map(|()| JobState::Done)
    }
}

impl Engine {
    /// Start building the app's lists and every user's queues in the background; refused while
    /// a build of the app runs.
    pub async fn start_build(&self, app: &str) -> Result<BuildStatus> {
        let queues = self.recommend.queues.definitions(app).await?;
        let expected = match self.recommend.builds.status(app).await? {
            Some(last) if last.state == JobState::Done => Some((last.events, last.users)),
            _ => None,
        };
        let status = BuildStatus {
            state: JobState::Running,
            phase: Phase::Lists,
            queues: queues.into_iter().map(|(name, _)| name).collect(),
            events: 0,
            lists: 0,
            skipped: 0,
            users: 0,
            after: None,
            started_at: self.now_ms(),
            finished_at: None,
            error: None,
            expected,
            progress: Progress::default(),
        };
        self.recommend
            .builds
            .submit(&self.build(), app, status)
            .await
    }

    fn build(&self) -> Arc<Build> {
        Arc::new(Build(self.clone()))
    }

    /// The app's latest build, as last saved.
    pub async fn build_status(&self, app: &str) -> Result<Option<BuildStatus>> {
        self.recommend.builds.status(app).await
    }

    /// Resume every running build whose lease no node holds, from its checkpoint. Returns how
    /// many.
    pub(crate) async fn take_over_builds(&self) -> Result<usize> {
        self.recommend.builds.take_over(&self.build()).await
    }

    async fn build_steps(&self, run: &Run<Build>) -> Result<()> {
        let (app, events) = (run.app(), run.counter());
        let window = self.tenancy.retention(app).await?;
        let since = self.now_ms() - window.as_millis() as i64;
        if run.lock().phase == Phase::Lists {
            let stamp = self.now_ms() * 1000;
            let skipped = AtomicU64::new(0);
            let negative = self.seen.settings(app).await?.negative_event_names.clone();
            let lists =
                super::related::build(&self.store, app, &negative, since, stamp, &events, &skipped)
                    .await?;
            let skipped = skipped.load(Ordering::Relaxed);
            if skipped > 0 {
                tracing::warn!(%app, items = skipped,
                    "items of events left out of the lists: objectID or index name too long");
            }
            let mut status = run.lock();
            status.lists = lists;
            status.skipped = skipped;
            status.events = events.load(Ordering::Relaxed);
            status.phase = Phase::Queues;
        }
        let (names, after) = {
            let status = run.lock();
            (status.queues.clone(), status.after.clone())
        };
        let mut queues: Vec<(String, QueueDefinition)> = Vec::new();
        for name in names {
            match self.recommend.queues.definition(app, &name).await {
                // A learned queue whose index has a ranker: the ranker job writes it.
                Ok(def) if self.ranked_by_job(app, &def).await? => {}
                Ok(def) => queues.push((name, def)),
                Err(EngineError::NotFound(_)) => {} // deleted since
                Err(e) => return Err(e),
            }
        }
        if queues.is_empty() {
            return Ok(());
        }
        let batch = penchant_store::for_workload(&self.store, Workload::Batch);
        let keys_only = RowFilter::StripValue.and(RowFilter::CellsPerRowLimit(1));
        let range = keys::users_between(app, None, after.as_deref(), None);
        let request = ReadRows::new(RowSet::range(range)).filter(keys_only);
        let rows = batch
            .read_rows(crate::aggregates::AGGREGATES_TABLE, request)
            .await?;
        // A user's days are consecutive rows: one user per run of keys.
        let mut users = rows
            .map_ok(|row| keys::user_of(app, &row.key).map(str::to_owned))
            .try_filter_map(|user| async move { Ok(user) })
            .boxed();
        let mut last: Option<String> = None;
        let mut chunk: Vec<String> = Vec::with_capacity(USERS_AT_ONCE);
        loop {
            let next = users.try_next().await?;
            if let Some(user) = next.as_ref() {
                if last.as_ref() != Some(user) {
                    last = Some(user.clone());
                    chunk.push(user.clone());
                }
                if chunk.len() < USERS_AT_ONCE {
                    continue;
                }
            }
            if chunk.is_empty() && next.is_none() {
                return Ok(());
            }
            let work: Vec<_> = chunk
                .iter()
                .flat_map(|user| {
                    queues
                        .iter()
                        .map(move |(name, def)| self.rebuild_with(app, name, def, user, None))
                })
                .collect();
            futures::stream::iter(work)
                .buffer_unordered(USERS_AT_ONCE)
                .try_for_each(|_| async { Ok(()) })
                .await?;
            {
                let mut status = run.lock();
                status.users += chunk.len() as u64;
                status.after = chunk.last().cloned();
            }
            chunk.clear();
            if next.is_none() {
                return Ok(());
            }
        }
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
