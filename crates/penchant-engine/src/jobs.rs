//! Background jobs: the full recompute of an app's profiles after a strategy change.
//!
//! A job splits the app's users into ranges (from the store's split points) and recomputes them
//! in parallel, as a batch workload, from the per-day aggregates; then it recomputes the profiles
//! of users without events. Its status — per range: the last user done — is saved in table
//! `jobs` every half second, so any node can show it and a restarted node resumes an unfinished
//! job where it stopped ([`Jobs::resume_all`]). A newer strategy supersedes a running job: it
//! stops at its next user.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use parking_lot::Mutex;
use penchant_store::{GcRule, Mutation, ReadRows, RowSet, Store};
use serde::{Deserialize, Serialize};

use crate::layout::app_prefix;
use crate::profiles::{Profiles, RecomputeStats, Source, UserRange};
use crate::strategy::{Strategies, Versioned};
use crate::{EngineError, Result};

pub const JOBS_TABLE: &str = "jobs";
const FAMILY: &str = "j";
const COLUMN: &[u8] = b"recompute";
const SAVE_EVERY: Duration = Duration::from_millis(500);

/// The tables this module needs.
pub fn tables() -> Vec<(&'static str, BTreeMap<String, GcRule>)> {
    vec![(
        JOBS_TABLE,
        BTreeMap::from([(FAMILY.to_owned(), GcRule::MaxVersions(1))]),
    )]
}

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum JobState {
    Running,
    Done,
    Superseded,
    Failed,
}

/// One range of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RangeStatus {
    #[serde(flatten)]
    pub range: UserRange,
    pub done: bool,
    #[serde(flatten)]
    pub stats: RecomputeStats,
}

/// A recompute job's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    pub strategy_version: i64,
    pub state: JobState,
    /// Totals over the ranges (and the users without events, once done).
    #[serde(flatten)]
    pub stats: RecomputeStats,
    pub ranges_done: usize,
    pub ranges: Vec<RangeStatus>,
    /// Unix ms.
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub error: Option<String>,
}

impl JobStatus {
    fn total(&mut self) {
        let mut t = RecomputeStats::default();
        for r in &self.ranges {
            t.users += r.stats.users;
            t.events += r.stats.events;
            t.skipped += r.stats.skipped;
        }
        self.ranges_done = self.ranges.iter().filter(|r| r.done).count();
        self.stats = t;
    }
}

fn now_ms() -> i64 {
    penchant_store::validate::now_micros() / 1000
}

/// Recompute jobs, stored in the store.
#[derive(Debug)]
pub struct Jobs {
    store: Arc<dyn Store>,
    profiles: Profiles,
    strategies: Arc<Strategies>,
    parallelism: usize,
}

impl Jobs {
    pub fn new(
        store: Arc<dyn Store>,
        profiles: Profiles,
        strategies: Arc<Strategies>,
        parallelism: usize,
    ) -> Self {
        Self {
            store,
            profiles,
            strategies,
            parallelism: parallelism.max(1),
        }
    }

    /// The latest recompute job of an app, as last saved (by whichever node runs it).
    pub async fn status(&self, app: &str) -> Result<Option<JobStatus>> {
        let row = self
            .store
            .read_row(JOBS_TABLE, Bytes::from(app_prefix(app)), None)
            .await?;
        row.and_then(|r| r.latest(FAMILY, COLUMN).map(|c| c.value.clone()))
            .map(|v| serde_json::from_slice(&v))
            .transpose()
            .map_err(|e| EngineError::Invalid(format!("corrupt job: {e}")))
    }

    async fn save(&self, app: &str, status: &JobStatus) -> Result<()> {
        let json = serde_json::to_vec(status).map_err(|e| EngineError::Invalid(e.to_string()))?;
        self.store
            .mutate_row(
                JOBS_TABLE,
                Bytes::from(app_prefix(app)),
                vec![Mutation::set_now(FAMILY, COLUMN, json)],
            )
            .await?;
        Ok(())
    }

    /// Start recomputing every profile of `app` under `strategy`, in the background.
    pub async fn start(
        self: &Arc<Self>,
        app: &str,
        strategy: Arc<Versioned>,
    ) -> Result<tokio::task::JoinHandle<()>> {
        let ranges = self.profiles.plan_ranges(app, self.parallelism).await?;
        let status = JobStatus {
            strategy_version: strategy.version,
            state: JobState::Running,
            stats: RecomputeStats::default(),
            ranges_done: 0,
            ranges: ranges
                .into_iter()
                .map(|range| RangeStatus {
                    range,
                    done: false,
                    stats: RecomputeStats::default(),
                })
                .collect(),
            started_at: now_ms(),
            finished_at: None,
            error: None,
        };
        self.save(app, &status).await?;
        Ok(tokio::spawn(Arc::clone(self).run(
            app.to_owned(),
            strategy,
            status,
        )))
    }

    /// Resume every unfinished job whose strategy is still current (at node start). Returns
    /// the resumed jobs' handles.
    pub async fn resume_all(self: &Arc<Self>) -> Result<Vec<tokio::task::JoinHandle<()>>> {
        let mut rows = self
            .store
            .read_rows(JOBS_TABLE, ReadRows::new(RowSet::all()))
            .await?;
        let mut handles = Vec::new();
        while let Some(row) = rows.next().await.transpose()? {
            let Some(cell) = row.latest(FAMILY, COLUMN) else {
                continue;
            };
            let Ok(status) = serde_json::from_slice::<JobStatus>(&cell.value) else {
                continue;
            };
            if status.state != JobState::Running {
                continue;
            }
            let app = String::from_utf8_lossy(row.key.strip_suffix(b"\0").unwrap_or(&row.key))
                .into_owned();
            match self.strategies.fresh(&app).await? {
                Some(s) if s.version == status.strategy_version => {
                    tracing::info!(%app, "resuming the profile recompute");
                    handles.push(tokio::spawn(Arc::clone(self).run(app, s, status)));
                }
                _ => {
                    let mut status = status;
                    status.state = JobState::Superseded;
                    status.finished_at = Some(now_ms());
                    self.save(&app, &status).await?;
                }
            }
        }
        Ok(handles)
    }

    async fn run(self: Arc<Self>, app: String, strategy: Arc<Versioned>, status: JobStatus) {
        let shared = Arc::new(Mutex::new(status));
        let stop = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(tokio::sync::Notify::new());
        // Save progress regularly, and notice a newer strategy.
        let saver = {
            let (jobs, app, shared, stop, finished) = (
                Arc::clone(&self),
                app.clone(),
                shared.clone(),
                stop.clone(),
                finished.clone(),
            );
            let version = strategy.version;
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        () = tokio::time::sleep(SAVE_EVERY) => {}
                        () = finished.notified() => return,
                    }
                    let snapshot = shared.lock().clone();
                    if let Err(e) = jobs.save(&app, &snapshot).await {
                        tracing::warn!(%app, error = %e, "cannot save job progress");
                    }
                    if let Ok(Some(s)) = jobs.strategies.fresh(&app).await
                        && s.version != version
                    {
                        stop.store(true, Ordering::SeqCst);
                    }
                }
            })
        };
        let pending: Vec<usize> = {
            let s = shared.lock();
            (0..s.ranges.len()).filter(|&i| !s.ranges[i].done).collect()
        };
        let work = pending.into_iter().map(|i| {
            let (jobs, app, strategy, shared, stop) =
                (&self, &app, &strategy, shared.clone(), stop.clone());
            async move {
                let (range, base) = {
                    let s = shared.lock();
                    (s.ranges[i].range.clone(), s.ranges[i].stats.clone())
                };
                let result = jobs
                    .profiles
                    .recompute_range(app, strategy, Source::Aggregates, &range, |user, stats| {
                        let mut s = shared.lock();
                        let r = &mut s.ranges[i];
                        r.range.after = Some(user.to_owned());
                        r.stats = RecomputeStats {
                            users: base.users + stats.users,
                            events: base.events + stats.events,
                            skipped: base.skipped + stats.skipped,
                        };
                        s.total();
                        !stop.load(Ordering::SeqCst)
                    })
                    .await;
                if result.is_ok() && !stop.load(Ordering::SeqCst) {
                    let mut s = shared.lock();
                    s.ranges[i].done = true;
                    s.total();
                }
                result
            }
        });
        let results = futures::future::join_all(work).await;
        let mut outcome: Result<()> = results.into_iter().collect::<Result<Vec<_>>>().map(drop);
        if outcome.is_ok() && !stop.load(Ordering::SeqCst) {
            outcome = self
                .profiles
                .recompute_stale(&app, &strategy)
                .await
                .map(|stale| shared.lock().stats.users += stale.users);
        }
        // `notify_one` stores a permit: the saver stops even if it is not waiting yet.
        finished.notify_one();
        let _ = saver.await;
        let mut status = shared.lock().clone();
        status.finished_at = Some(now_ms());
        status.state = match (&outcome, stop.load(Ordering::SeqCst)) {
            (Err(e), _) => {
                tracing::error!(%app, error = %e, "profile recompute failed");
                status.error = Some(e.to_string());
                JobState::Failed
            }
            (Ok(()), true) => JobState::Superseded,
            (Ok(()), false) => JobState::Done,
        };
        if let Err(e) = self.save(&app, &status).await {
            tracing::error!(%app, error = %e, "cannot save the job's end");
        }
    }
}
