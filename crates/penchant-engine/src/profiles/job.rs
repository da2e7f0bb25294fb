//! The recompute job: every profile of an app recomputed after a strategy change.
//!
//! A job splits the app's users into ranges (from the store's split points) and recomputes them
//! in parallel, as a batch workload, from the per-day aggregates; then it recomputes the profiles
//! of users without events. Its status — per range: the last user done — is its checkpoint; the
//! job runtime ([`crate::jobs`]) saves it, holds the lease and hands the job over.
//!
//! A newer strategy supersedes a running job: it stops within half a second, and a job of the
//! newer strategy saved meanwhile starts when it ends. Saves are conditional on the job's
//! strategy version, so a superseded job's last save never hides the newer job's status; the
//! row keeps the last 20 jobs as history.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use penchant_store::{Mutation, RowFilter, Store};
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::clock::Clock;
use crate::jobs::{Job, JobState, Progress, Run, Runner, Runtime, Status};
use crate::keys;
use crate::profiles::{Profiles, RecomputeStats, Source, UserRange};
use crate::strategy::{Strategies, Versioned};
use penchant_model::tables::{JOBS_FAMILY as FAMILY, JOBS_TABLE};

/// The job's column in table `jobs`, and its lease.
const KEY: &str = "recompute";
/// The strategy version of the job in `KEY` (what saves are conditional on).
const VERSION: &[u8] = b"version";
/// Past recomputes, one column each: this prefix, then the job's strategy version (i64 BE).
const HISTORY: &[u8] = b"recompute/";
/// How many past recomputes an app keeps.
const HISTORY_KEPT: usize = 20;
/// How often a running job looks for a newer strategy.
const CHECK_EVERY: Duration = Duration::from_millis(500);

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
pub struct RecomputeStatus {
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
    /// How far it is (every kind's status has one, in the same shape).
    #[serde(default)]
    pub progress: Progress,
}

impl RecomputeStatus {
    fn measure(&self) -> Progress {
        let total = Some(self.ranges.len() as u64);
        Progress::single("recompute", self.ranges_done as u64, total, "ranges")
    }
}

impl RecomputeStatus {
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

crate::jobs::status!(RecomputeStatus);

/// Profile recomputes of every app.
#[derive(Debug)]
pub struct Recomputes {
    store: Arc<dyn Store>,
    profiles: Profiles,
    strategies: Arc<Strategies>,
    parallelism: usize,
    clock: Clock,
    runner: Runner<Self>,
    /// Users and rows (per-day aggregates) this node's jobs recomputed since it started.
    recomputed_users: AtomicU64,
    recomputed_events: AtomicU64,
}

impl Recomputes {
    pub fn new(
        runtime: &Runtime,
        store: Arc<dyn Store>,
        profiles: Profiles,
        strategies: Arc<Strategies>,
        parallelism: usize,
        clock: Clock,
    ) -> Self {
        Self {
            store,
            profiles,
            strategies,
            parallelism: parallelism.max(1),
            clock,
            runner: runtime.runner(),
            recomputed_users: AtomicU64::new(0),
            recomputed_events: AtomicU64::new(0),
        }
    }

    /// Jobs running on this node, and the users and events they recomputed since it started.
    pub fn progress(&self) -> (u64, u64, u64) {
        (
            self.runner.running() as u64,
            self.recomputed_users.load(Ordering::Relaxed),
            self.recomputed_events.load(Ordering::Relaxed),
        )
    }

    /// Count a range's progress from `before` to `now`.
    fn count(&self, before: &RecomputeStats, now: &RecomputeStats) {
        let users = (now.users + now.skipped).saturating_sub(before.users + before.skipped);
        self.recomputed_users.fetch_add(users, Ordering::Relaxed);
        let events = now.events.saturating_sub(before.events);
        self.recomputed_events.fetch_add(events, Ordering::Relaxed);
    }

    /// The latest recompute job of an app, as last saved (by whichever node runs it).
    pub async fn status(&self, app: &str) -> Result<Option<RecomputeStatus>> {
        self.runner.status(app).await
    }

    /// Resume the running recomputes that no node runs. Returns how many.
    pub async fn take_over(self: &Arc<Self>) -> Result<usize> {
        self.runner.take_over(self).await
    }

    /// The app's recomputes, newest first: the current or last one, then past ones (at most
    /// 20 of those).
    pub async fn history(&self, app: &str) -> Result<Vec<RecomputeStatus>> {
        let (current, past) = self.saved(app).await?;
        Ok(current.into_iter().chain(past).collect())
    }

    /// The job in the row, and the past ones, newest first.
    async fn saved(&self, app: &str) -> Result<(Option<RecomputeStatus>, Vec<RecomputeStatus>)> {
        let Some(row) = self
            .store
            .read_row(JOBS_TABLE, keys::app(app), None)
            .await?
        else {
            return Ok((None, Vec::new()));
        };
        let parse = |v: &[u8]| {
            serde_json::from_slice::<RecomputeStatus>(v)
                .map_err(|e| crate::internal("corrupt job", e))
        };
        let current = row
            .latest(FAMILY, KEY.as_bytes())
            .map(|c| parse(&c.value))
            .transpose()?;
        let mut past = row
            .family(FAMILY)
            .filter(|c| c.qualifier.starts_with(HISTORY))
            .map(|c| parse(&c.value))
            .collect::<Result<Vec<_>>>()?;
        past.sort_by_key(|j| std::cmp::Reverse(j.strategy_version));
        past.dedup_by_key(|j| j.strategy_version);
        Ok((current, past))
    }

    fn cells(status: &RecomputeStatus) -> Result<Vec<Mutation>> {
        let json = serde_json::to_vec(status).map_err(|e| crate::internal("serialization", e))?;
        Ok(vec![
            Mutation::set_now(FAMILY, KEY, json),
            Mutation::set_now(FAMILY, VERSION, status.strategy_version.to_string()),
        ])
    }

    /// Start recomputing every profile of `app` under `strategy`, in the background (on this
    /// node if it gets the job's lease, else on the node that takes the job over).
    pub async fn start(self: &Arc<Self>, app: &str, strategy: Arc<Versioned>) -> Result<()> {
        let ranges = self.profiles.plan_ranges(app, self.parallelism).await?;
        let mut status = RecomputeStatus {
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
            started_at: self.clock.now_ms(),
            finished_at: None,
            error: None,
            progress: Progress::default(),
        };
        status.report();
        // The newest strategy's job replaces whatever job the row held, which joins the
        // history (a job still running is superseded by this one).
        let (previous, past) = self.saved(app).await?;
        let mut cells = Self::cells(&status)?;
        if let Some(mut previous) = previous {
            if previous.state == JobState::Running {
                previous.state = JobState::Superseded;
                previous.finished_at = Some(status.started_at);
            }
            let json =
                serde_json::to_vec(&previous).map_err(|e| crate::internal("serialization", e))?;
            let mut qualifier = HISTORY.to_vec();
            qualifier.extend_from_slice(&previous.strategy_version.to_be_bytes());
            cells.push(Mutation::set_now(FAMILY, qualifier, json));
            for old in past.iter().skip(HISTORY_KEPT - 1) {
                let mut qualifier = HISTORY.to_vec();
                qualifier.extend_from_slice(&old.strategy_version.to_be_bytes());
                cells.push(Mutation::delete_column(FAMILY, qualifier));
            }
        }
        self.store
            .mutate_row(JOBS_TABLE, keys::app(app), cells)
            .await?;
        // A job of the app still running here starts this one when it ends.
        self.runner.launch_if_free(self, app, status).await?;
        Ok(())
    }

    /// Recompute every profile of an app under `strategy` now, in the foreground, from `source`:
    /// up to `parallelism` ranges of users at once, then the profiles of users without events —
    /// what a job does, without its status, checkpoints and lease (for benchmarks and tests).
    pub async fn recompute_now(
        &self,
        app: &str,
        strategy: &Versioned,
        source: Source,
        parallelism: usize,
    ) -> Result<RecomputeStats> {
        let ranges = self.profiles.plan_ranges(app, parallelism).await?;
        // A task per range: ranges score on several cores.
        let tasks: Vec<_> = ranges
            .into_iter()
            .map(|range| {
                let (profiles, app, strategy) =
                    (self.profiles.clone(), app.to_owned(), strategy.clone());
                tokio::spawn(async move {
                    profiles
                        .recompute_range(&app, &strategy, source, &range, |_, _| true)
                        .await
                })
            })
            .collect();
        let mut stats = RecomputeStats::default();
        for task in tasks {
            // A range's panic is this call's panic.
            let range = task
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
            stats.events += range.events;
            stats.users += range.users;
            stats.skipped += range.skipped;
        }
        stats.users += self.profiles.recompute_stale(app, strategy).await?.users;
        Ok(stats)
    }

    /// Resolves once the app's strategy is no longer `version`.
    async fn superseded(&self, app: &str, version: i64) {
        loop {
            tokio::time::sleep(CHECK_EVERY).await;
            if let Ok(Some(s)) = self.strategies.fresh(app).await
                && s.version != version
            {
                return;
            }
        }
    }

    /// Recompute the ranges not done yet, each from its checkpoint, then the users without
    /// events.
    async fn ranges(&self, run: &Run<Self>, strategy: &Versioned) -> Result<()> {
        let app = run.app();
        let pending: Vec<usize> =
            run.update(|s| (0..s.ranges.len()).filter(|&i| !s.ranges[i].done).collect());
        let work = pending.into_iter().map(|i| async move {
            let (range, base) =
                run.update(|s| (s.ranges[i].range.clone(), s.ranges[i].stats.clone()));
            let mut counted = RecomputeStats::default();
            self.profiles
                .recompute_range(app, strategy, Source::Aggregates, &range, |user, stats| {
                    self.count(&counted, stats);
                    counted = stats.clone();
                    run.update(|s| {
                        let r = &mut s.ranges[i];
                        r.range.after = Some(user.to_owned());
                        r.stats = RecomputeStats {
                            users: base.users + stats.users,
                            events: base.events + stats.events,
                            skipped: base.skipped + stats.skipped,
                        };
                        s.total();
                    });
                    true
                })
                .await?;
            run.update(|s| {
                s.ranges[i].done = true;
                s.total();
            });
            Ok::<_, crate::EngineError>(())
        });
        futures::future::try_join_all(work).await?;
        let stale = self.profiles.recompute_stale(app, strategy).await?;
        run.update(|s| s.stats.users += stale.users);
        Ok(())
    }
}

impl Job for Recomputes {
    type Status = RecomputeStatus;
    const KEY: &'static str = KEY;
    const NAME: &'static str = "profile recompute";
    const STARTS_NEWER: bool = true;

    async fn steps(&self, run: &Run<Self>) -> Result<JobState> {
        let (app, version) = (run.app(), run.status().strategy_version);
        let strategy = match self.strategies.fresh(app).await? {
            Some(s) if s.version == version => s,
            _ => return Ok(JobState::Superseded),
        };
        tokio::select! {
            outcome = self.ranges(run, &strategy) => outcome.map(|()| JobState::Done),
            () = self.superseded(app, version) => Ok(JobState::Superseded),
        }
    }

    /// Saved only while the row is still this job's (same strategy version).
    async fn save(
        &self,
        store: &Arc<dyn Store>,
        app: &str,
        status: &RecomputeStatus,
    ) -> Result<()> {
        let same = RowFilter::column(FAMILY, VERSION).and(RowFilter::ValueRegex(format!(
            "^{}$",
            status.strategy_version
        )));
        store
            .check_and_mutate_row(
                JOBS_TABLE,
                keys::app(app),
                Some(same),
                Self::cells(status)?,
                vec![],
            )
            .await?;
        Ok(())
    }

    /// A job whose strategy is no longer current is marked superseded.
    async fn resume(
        &self,
        app: &str,
        mut status: RecomputeStatus,
    ) -> Result<Option<RecomputeStatus>> {
        match self.strategies.fresh(app).await? {
            Some(s) if s.version == status.strategy_version => Ok(Some(status)),
            _ => {
                status.end(JobState::Superseded, self.clock.now_ms(), None);
                self.save(&self.store, app, &status).await?;
                Ok(None)
            }
        }
    }
}
