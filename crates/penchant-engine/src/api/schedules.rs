//! Schedules ([`crate::schedules`]): their settings, and the round that starts what is due.

use std::sync::Arc;

use penchant_store::{Mutation, ReadRows, RowFilter, RowSet};

use crate::recommend::Ranker;
use crate::recommend::ranker::RankerConfig;
use crate::schedules::{self, Schedules, Stored, Task, TaskView};
use crate::vectors::training::{Mode, TrainingConfig};
use crate::{Engine, Result, internal, keys};
use penchant_model::tables::{JOBS_FAMILY as FAMILY, JOBS_TABLE};

/// The column of table `jobs` holding when each task last started (apart from the settings, so
/// that a round and a change of settings never overwrite each other).
const LAST_COLUMN: &[u8] = b"schedules.last";
/// The global lease of a round.
const LEASE: &str = "schedules";

impl Engine {
    /// An app's schedules: the settings and, per task, when it last started and runs next.
    pub async fn schedules(&self, app: &str) -> Result<(Schedules, Vec<TaskView>)> {
        let stored = self.stored_schedules(app).await?;
        let has_events = self.has_events(app).await?;
        Ok((stored.settings, stored.views(self.now_ms(), has_events)))
    }

    /// Replace an app's schedule settings.
    pub async fn set_schedules(&self, app: &str, settings: Schedules) -> Result<()> {
        settings.check()?;
        let json = serde_json::to_vec(&settings).map_err(|e| internal("serialization", e))?;
        self.store
            .mutate_row(
                JOBS_TABLE,
                keys::app(app),
                vec![Mutation::set_now(FAMILY, schedules::COLUMN, json)],
            )
            .await?;
        self.schedule_cache.remove(&app.to_owned());
        Ok(())
    }

    /// An app's schedule settings as this node last read them (within the strategy cache's
    /// TTL): what serving reads.
    pub(crate) async fn cached_schedules(&self, app: &str) -> Result<Schedules> {
        let key = app.to_owned();
        if let Some(s) = self.schedule_cache.get(&key) {
            return Ok(s);
        }
        let settings = self.stored_schedules(app).await?.settings;
        self.schedule_cache.insert(key, settings);
        Ok(settings)
    }

    async fn stored_schedules(&self, app: &str) -> Result<Stored> {
        let filter = RowFilter::Interleave(vec![
            RowFilter::column(FAMILY, schedules::COLUMN),
            RowFilter::column(FAMILY, LAST_COLUMN),
        ]);
        let row = self
            .store
            .read_row(JOBS_TABLE, keys::app(app), Some(filter))
            .await?;
        let parse = |column: &[u8]| -> Result<Option<serde_json::Value>> {
            row.as_ref()
                .and_then(|r| r.latest(FAMILY, column))
                .map(|c| serde_json::from_slice(&c.value))
                .transpose()
                .map_err(|e| internal("corrupt schedules", e))
        };
        let mut stored = Stored::default();
        if let Some(settings) = parse(schedules::COLUMN)? {
            stored.settings =
                serde_json::from_value(settings).map_err(|e| internal("corrupt schedules", e))?;
        }
        if let Some(last) = parse(LAST_COLUMN)? {
            stored.last_started =
                serde_json::from_value(last).map_err(|e| internal("corrupt schedules", e))?;
        }
        Ok(stored)
    }

    /// Whether the app has stored any event (one key read).
    async fn has_events(&self, app: &str) -> Result<bool> {
        let request = ReadRows::new(RowSet::prefix(keys::app(app)))
            .filter(RowFilter::CellsPerRowLimit(1).and(RowFilter::StripValue))
            .limit(1);
        Ok(!self
            .store
            .read_all(crate::events::EVENTS_TABLE, request)
            .await?
            .is_empty())
    }

    /// One round of schedules, under its lease (one node at a time): start every app's due
    /// tasks. Returns what it started; `None` when another node holds the round's lease.
    pub async fn run_schedules(&self) -> Result<Option<Vec<(String, Task)>>> {
        self.leases.run("", LEASE, self.schedules_round()).await
    }

    async fn schedules_round(&self) -> Result<Vec<(String, Task)>> {
        let mut started = Vec::new();
        for app in self.tenancy.list_apps().await? {
            let app = app.app_id;
            for task in self.run_due(&app).await? {
                started.push((app.clone(), task));
            }
        }
        Ok(started)
    }

    /// Start an app's due tasks; returns those started.
    async fn run_due(&self, app: &str) -> Result<Vec<Task>> {
        let mut stored = self.stored_schedules(app).await?;
        let now = self.now_ms();
        let has_events = self.has_events(app).await?;
        let mut started = Vec::new();
        for task in Task::ALL {
            if stored.next(task, now, has_events).is_none_or(|at| at > now) {
                continue;
            }
            match self.start_task(app, task).await {
                Ok(true) => {
                    tracing::info!(%app, ?task, "started on schedule");
                    stored.last_started.insert(task, now);
                    if task == Task::Training {
                        // A training sees every user and item: no fold-in is owed.
                        stored.last_started.insert(Task::FoldIn, now);
                    }
                    started.push(task);
                }
                Ok(false) => {}
                // Busy (the same job runs, started by hand) or not possible yet: the next
                // round tries again.
                Err(e) => tracing::info!(%app, ?task, error = %e, "a scheduled task did not start"),
            }
        }
        if !started.is_empty() {
            let json = serde_json::to_vec(&stored.last_started)
                .map_err(|e| internal("serialization", e))?;
            self.store
                .mutate_row(
                    JOBS_TABLE,
                    keys::app(app),
                    vec![Mutation::set_now(FAMILY, LAST_COLUMN, json)],
                )
                .await?;
        }
        Ok(started)
    }

    /// Start a task's job; `false` when there is nothing to start it on (a fold-in before
    /// any training, a ranker without a learned queue).
    async fn start_task(&self, app: &str, task: Task) -> Result<bool> {
        match task {
            Task::Training | Task::FoldIn => {
                let last = self.training_status(app).await?;
                let mut config = last
                    .as_ref()
                    .map(|s| s.config.clone())
                    .unwrap_or_else(TrainingConfig::default);
                config.mode = match task {
                    Task::FoldIn if last.is_none() => return Ok(false),
                    Task::FoldIn => Mode::FoldIn,
                    _ => Mode::Train,
                };
                self.train(app, config).await?;
            }
            Task::Build => {
                self.start_build(app).await?;
            }
            Task::Rank => return self.start_scheduled_ranker(app).await,
        }
        Ok(true)
    }

    /// The ranker job of the index with learned queues whose ranker is oldest (never learned
    /// first), with the settings its ranker was last learned with; `false` without a learned
    /// queue.
    async fn start_scheduled_ranker(&self, app: &str) -> Result<bool> {
        let mut indexes: Vec<String> = self
            .queue_definitions(app)
            .await?
            .into_iter()
            .filter(|(_, def)| def.ranker == Ranker::Learned)
            .map(|(_, def)| def.index_name)
            .collect();
        indexes.sort();
        indexes.dedup();
        let mut oldest: Option<(Option<i64>, RankerConfig)> = None;
        for index in indexes {
            let (version, config) = match self.ranker(app, &index).await? {
                Some(stored) => (Some(stored.version), stored.config),
                None => (None, RankerConfig::for_index(&index)),
            };
            if oldest.as_ref().is_none_or(|(v, _)| version < *v) {
                oldest = Some((version, config));
            }
        }
        let Some((_, config)) = oldest else {
            return Ok(false);
        };
        self.start_ranker(app, config).await?;
        Ok(true)
    }
}

/// The cache of apps' schedule settings.
pub(crate) type ScheduleCache = crate::cache::TtlCache<String, Schedules>;

pub(crate) fn schedule_cache(
    ttl: std::time::Duration,
    clock: crate::clock::Clock,
) -> Arc<ScheduleCache> {
    Arc::new(ScheduleCache::new(1024, ttl, clock))
}
