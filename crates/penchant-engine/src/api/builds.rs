//! Recommendation builds: started, taken over, and their steps ([`crate::recommend::build`]
//! holds the job and its status).

use crate::jobs::{JobState, Progress, Run};
use crate::recommend::QueueDefinition;
use crate::recommend::build::{Build, BuildStatus, Phase, USERS_AT_ONCE};
use crate::{Engine, EngineError, Result, keys};
use futures::{StreamExt, TryStreamExt};
use penchant_store::{ReadRows, RowFilter, RowSet, Workload};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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

    pub(crate) fn build(&self) -> Arc<Build> {
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

    pub(crate) async fn build_steps(&self, run: &Run<Build>) -> Result<()> {
        let (app, events) = (run.app(), run.counter());
        let window = self.tenancy.retention(app).await?;
        let since = self.now_ms() - window.as_millis() as i64;
        if run.lock().phase == Phase::Lists {
            let stamp = self.now_ms() * 1000;
            let skipped = AtomicU64::new(0);
            let negative = self.seen.settings(app).await?.negative_event_names.clone();
            let lists = crate::recommend::related::build(
                &self.store,
                app,
                &negative,
                since,
                stamp,
                &events,
                &skipped,
            )
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
