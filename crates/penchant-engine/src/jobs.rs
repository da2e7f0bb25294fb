//! Background jobs: the full recompute of an app's profiles after a strategy change.
//!
//! A job splits the app's users into ranges (from the store's split points) and recomputes them
//! in parallel, as a batch workload, from the per-day aggregates; then it recomputes the profiles
//! of users without events. Its status — per range: the last user done — is saved in table
//! `jobs` every half second, so any node can show it.
//!
//! With several nodes on one store exactly one runs a job: the one holding its lease
//! ([`crate::leases`], renewed at each save). A node that stops (shutdown) saves where it is and
//! releases the lease; a node that dies stops renewing it. Every node looks for running jobs
//! whose lease is free ([`Jobs::take_over`], at start and then regularly) and resumes them from
//! their checkpoints. A newer strategy supersedes a running job: it stops at its next chunk of
//! users. Saves are conditional on the job's strategy version, so a superseded job's last save
//! never hides the newer job's status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use penchant_store::{GcRule, Mutation, ReadRows, RowFilter, RowSet, Store};
use serde::{Deserialize, Serialize};

use crate::Result;
use crate::clock::Clock;
use crate::keys;
use crate::leases::{Claims, Leases};
use crate::profiles::{Profiles, RecomputeStats, Source, UserRange};
use crate::strategy::{Strategies, Versioned};
use crate::supervisor::Supervisor;

pub const JOBS_TABLE: &str = "jobs";
pub(crate) const FAMILY: &str = "j";
const COLUMN: &[u8] = b"recompute";
/// The strategy version of the job in `COLUMN` (what saves are conditional on).
const VERSION: &[u8] = b"version";
/// The lease of an app's recompute.
const LEASE: &str = "recompute";
/// Past recomputes, one column each: this prefix, then the job's strategy version (i64 BE).
const HISTORY: &[u8] = b"recompute/";
/// How many past recomputes an app keeps.
const HISTORY_KEPT: usize = 20;
const SAVE_EVERY: Duration = Duration::from_millis(500);

/// The tables this module needs.
pub fn tables() -> Vec<(&'static str, BTreeMap<String, GcRule>)> {
    vec![(
        JOBS_TABLE,
        BTreeMap::from([(FAMILY.to_owned(), GcRule::MaxVersions(1))]),
    )]
}

/// An app's job status in `column` of table `jobs` (a training, a build, a migration), as last
/// saved by whichever node runs the job.
pub(crate) async fn saved_status<T: serde::de::DeserializeOwned>(
    store: &Arc<dyn Store>,
    app: &str,
    column: &[u8],
) -> Result<Option<T>> {
    let filter = RowFilter::column(FAMILY, column.to_vec());
    let row = store
        .read_row(JOBS_TABLE, keys::app(app), Some(filter))
        .await?;
    row.and_then(|r| r.latest(FAMILY, column).map(|c| c.value.clone()))
        .map(|v| serde_json::from_slice(&v))
        .transpose()
        .map_err(|e| crate::internal("corrupt job status", e))
}

/// Save an app's job status in `column` of table `jobs`.
pub(crate) async fn save_status<T: Serialize>(
    store: &Arc<dyn Store>,
    app: &str,
    column: &[u8],
    status: &T,
) -> Result<()> {
    let json = serde_json::to_vec(status).map_err(|e| crate::internal("serialization", e))?;
    let cell = Mutation::set_now(FAMILY, column.to_vec(), json);
    store
        .mutate_row(JOBS_TABLE, keys::app(app), vec![cell])
        .await?;
    Ok(())
}

/// The apps whose job status in `column` of table `jobs` is running, with that status
/// (statuses that do not parse are left out).
pub(crate) async fn running<T: serde::de::DeserializeOwned>(
    store: &Arc<dyn Store>,
    column: &[u8],
    state: impl Fn(&T) -> JobState,
) -> Result<Vec<(String, T)>> {
    let request = ReadRows::new(RowSet::all()).filter(RowFilter::column(FAMILY, column.to_vec()));
    let mut rows = store.read_rows(JOBS_TABLE, request).await?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().await.transpose()? {
        let Some(app) = keys::app_of(&row.key) else {
            continue;
        };
        let status = row
            .latest(FAMILY, column)
            .and_then(|c| serde_json::from_slice::<T>(&c.value).ok());
        if let Some(status) = status.filter(|s| state(s) == JobState::Running) {
            out.push((app.to_owned(), status));
        }
    }
    Ok(out)
}

/// How a checkpointed job's run ended on this node.
pub(crate) enum Ended {
    /// Its steps returned: the job's outcome.
    Finished(Result<()>),
    /// The node stops, or lost the job's lease: the job is left running, for the node that
    /// takes it over from its checkpoint.
    Left,
}

/// Drive a claimed job's `steps` to their end: every half second, renew its lease (`renew`; a
/// lost lease leaves the job at once) and `save` its status; on shutdown, save it once more
/// and leave the job to another node. What migrations, moves and recommendation builds share.
pub(crate) async fn drive<R, S>(
    supervisor: &Supervisor,
    steps: impl std::future::Future<Output = Result<()>>,
    mut renew: impl FnMut() -> R,
    mut save: impl FnMut() -> S,
) -> Ended
where
    R: std::future::Future<Output = bool>,
    S: std::future::Future<Output = ()>,
{
    tokio::pin!(steps);
    let mut stopped = Box::pin(supervisor.stopped());
    loop {
        tokio::select! {
            outcome = &mut steps => return Ended::Finished(outcome),
            () = tokio::time::sleep(SAVE_EVERY) => {
                if !renew().await {
                    return Ended::Left;
                }
                save().await;
            }
            () = &mut stopped => {
                save().await;
                return Ended::Left;
            }
        }
    }
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

/// Recompute jobs, stored in the store.
#[derive(Debug)]
pub struct Jobs {
    store: Arc<dyn Store>,
    profiles: Profiles,
    strategies: Arc<Strategies>,
    parallelism: usize,
    clock: Clock,
    supervisor: Arc<Supervisor>,
    /// Apps whose job runs on this node.
    claims: Claims,
    /// Users and raw events this node's jobs recomputed since it started.
    recomputed_users: AtomicU64,
    recomputed_events: AtomicU64,
}

/// Why a job stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// A newer strategy was saved.
    Superseded,
    /// This node shuts down or lost the lease: the job stays `running`, for a node to resume.
    Handover,
}

impl Jobs {
    /// Jobs running on this node, and the users and events they recomputed since it started.
    pub fn progress(&self) -> (u64, u64, u64) {
        (
            self.claims.count() as u64,
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

    pub fn new(
        store: Arc<dyn Store>,
        profiles: Profiles,
        strategies: Arc<Strategies>,
        parallelism: usize,
        clock: Clock,
        leases: Leases,
        supervisor: Arc<Supervisor>,
    ) -> Self {
        Self {
            store,
            profiles,
            strategies,
            parallelism: parallelism.max(1),
            clock,
            supervisor,
            claims: Claims::new(leases, LEASE),
            recomputed_users: AtomicU64::new(0),
            recomputed_events: AtomicU64::new(0),
        }
    }

    /// The latest recompute job of an app, as last saved (by whichever node runs it).
    pub async fn status(&self, app: &str) -> Result<Option<JobStatus>> {
        let row = self
            .store
            .read_row(JOBS_TABLE, keys::app(app), None)
            .await?;
        row.and_then(|r| r.latest(FAMILY, COLUMN).map(|c| c.value.clone()))
            .map(|v| serde_json::from_slice(&v))
            .transpose()
            .map_err(|e| crate::internal("corrupt job", e))
    }

    /// The app's recomputes, newest first: the current or last one, then past ones (at most
    /// 20 of those).
    pub async fn history(&self, app: &str) -> Result<Vec<JobStatus>> {
        let (current, past) = self.saved(app).await?;
        Ok(current.into_iter().chain(past).collect())
    }

    /// The job in the row, and the past ones, newest first.
    async fn saved(&self, app: &str) -> Result<(Option<JobStatus>, Vec<JobStatus>)> {
        let Some(row) = self
            .store
            .read_row(JOBS_TABLE, keys::app(app), None)
            .await?
        else {
            return Ok((None, Vec::new()));
        };
        let parse = |v: &[u8]| {
            serde_json::from_slice::<JobStatus>(v).map_err(|e| crate::internal("corrupt job", e))
        };
        let current = row
            .latest(FAMILY, COLUMN)
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

    fn cells(status: &JobStatus) -> Result<Vec<Mutation>> {
        let json = serde_json::to_vec(status).map_err(|e| crate::internal("serialization", e))?;
        Ok(vec![
            Mutation::set_now(FAMILY, COLUMN, json),
            Mutation::set_now(FAMILY, VERSION, status.strategy_version.to_string()),
        ])
    }

    /// Save a job's status if the job row is still this job's (same strategy version).
    async fn save(&self, app: &str, status: &JobStatus) -> Result<()> {
        let same = RowFilter::column(FAMILY, VERSION).and(RowFilter::ValueRegex(format!(
            "^{}$",
            status.strategy_version
        )));
        self.store
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

    /// Start recomputing every profile of `app` under `strategy`, in the background (on this
    /// node if it gets the job's lease, else on the node that takes the job over).
    pub async fn start(self: &Arc<Self>, app: &str, strategy: Arc<Versioned>) -> Result<()> {
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
            started_at: self.clock.now_ms(),
            finished_at: None,
            error: None,
        };
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
        if self.claim(app).await? {
            self.launch(app.to_owned(), strategy, status);
        }
        Ok(())
    }

    /// Claim an app's job for this node: no job of the app runs here, and this node holds (or
    /// now took) its lease. A claim is given up by [`Jobs::launch`]'s end, or [`Jobs::unclaim`].
    async fn claim(&self, app: &str) -> Result<bool> {
        self.claims.claim(app).await
    }

    async fn unclaim(&self, app: &str) -> Result<()> {
        self.claims.release(app).await
    }

    /// Run a claimed job in the background; at its end, give the claim up and start a newer job
    /// of the app if one was saved meanwhile.
    fn launch(self: &Arc<Self>, app: String, strategy: Arc<Versioned>, status: JobStatus) {
        let jobs = Arc::clone(self);
        self.supervisor.spawn(async move {
            let state = jobs.run(&app, strategy, status).await;
            if let Err(e) = jobs.unclaim(&app).await {
                tracing::warn!(%app, error = %e, "cannot release the job's lease");
            }
            // A newer strategy's job saved meanwhile could not start while this one ran here.
            if state != JobState::Running
                && let Err(e) = jobs.take_over().await
            {
                tracing::warn!(%app, error = %e, "cannot start the newer job");
            }
        });
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

    /// Resume every running job that no node holds the lease of (none at all after a restart,
    /// or one whose node died and whose lease expired) and whose strategy is still current; a
    /// job whose strategy is not is marked superseded. Returns how many jobs this node resumed.
    pub async fn take_over(self: &Arc<Self>) -> Result<usize> {
        if self.supervisor.stopping() {
            return Ok(0);
        }
        let request = ReadRows::new(RowSet::all()).filter(RowFilter::column(FAMILY, COLUMN));
        let mut rows = self.store.read_rows(JOBS_TABLE, request).await?;
        let mut resumed = 0;
        while let Some(row) = rows.next().await.transpose()? {
            let Some(app) = keys::app_of(&row.key).map(str::to_owned) else {
                continue;
            };
            let Some(cell) = row.latest(FAMILY, COLUMN) else {
                continue;
            };
            let Ok(mut status) = serde_json::from_slice::<JobStatus>(&cell.value) else {
                continue;
            };
            if status.state != JobState::Running || !self.claim(&app).await? {
                continue;
            }
            let current = match self.strategies.fresh(&app).await {
                Ok(current) => current,
                Err(e) => {
                    self.unclaim(&app).await?;
                    return Err(e);
                }
            };
            match current {
                Some(s) if s.version == status.strategy_version => {
                    tracing::info!(%app, node = self.claims.node(), "resuming the profile recompute");
                    self.launch(app, s, status);
                    resumed += 1;
                }
                _ => {
                    status.state = JobState::Superseded;
                    status.finished_at = Some(self.clock.now_ms());
                    let saved = self.save(&app, &status).await;
                    self.unclaim(&app).await?;
                    saved?;
                }
            }
        }
        Ok(resumed)
    }

    /// Run a job to its end (or until it stops); returns the state it saved.
    async fn run(
        self: &Arc<Self>,
        app: &str,
        strategy: Arc<Versioned>,
        status: JobStatus,
    ) -> JobState {
        let shared = Arc::new(Mutex::new(status));
        let stop: Arc<Mutex<Option<Stop>>> = Arc::new(Mutex::new(None));
        let halted = {
            let stop = stop.clone();
            move || stop.lock().is_some()
        };
        let finished = Arc::new(tokio::sync::Notify::new());
        // Save progress regularly, renew the lease, and notice a newer strategy or a shutdown.
        let saver = {
            let (jobs, app, shared, stop, finished) = (
                Arc::clone(self),
                app.to_owned(),
                shared.clone(),
                stop.clone(),
                finished.clone(),
            );
            let version = strategy.version;
            async move {
                loop {
                    let stopped = jobs.supervisor.stopped();
                    tokio::select! {
                        () = tokio::time::sleep(SAVE_EVERY) => {}
                        () = stopped => {
                            stop.lock().get_or_insert(Stop::Handover);
                            return;
                        }
                        () = finished.notified() => return,
                    }
                    if !jobs.claims.renew(&app).await.unwrap_or(false) {
                        tracing::warn!(%app, "lost the job's lease: stopping");
                        stop.lock().get_or_insert(Stop::Handover);
                        return;
                    }
                    let snapshot = shared.lock().clone();
                    if let Err(e) = jobs.save(&app, &snapshot).await {
                        tracing::warn!(%app, error = %e, "cannot save job progress");
                    }
                    if let Ok(Some(s)) = jobs.strategies.fresh(&app).await
                        && s.version != version
                    {
                        stop.lock().get_or_insert(Stop::Superseded);
                    }
                }
            }
        };
        let pending: Vec<usize> = {
            let s = shared.lock();
            (0..s.ranges.len()).filter(|&i| !s.ranges[i].done).collect()
        };
        let work = pending.into_iter().map(|i| {
            let (jobs, strategy, shared, halted) = (&self, &strategy, shared.clone(), &halted);
            async move {
                let (range, base) = {
                    let s = shared.lock();
                    (s.ranges[i].range.clone(), s.ranges[i].stats.clone())
                };
                let mut counted = RecomputeStats::default();
                let result = jobs
                    .profiles
                    .recompute_range(app, strategy, Source::Aggregates, &range, |user, stats| {
                        jobs.count(&counted, stats);
                        counted = stats.clone();
                        let mut s = shared.lock();
                        let r = &mut s.ranges[i];
                        r.range.after = Some(user.to_owned());
                        r.stats = RecomputeStats {
                            users: base.users + stats.users,
                            events: base.events + stats.events,
                            skipped: base.skipped + stats.skipped,
                        };
                        s.total();
                        !halted()
                    })
                    .await;
                if result.is_ok() && !halted() {
                    let mut s = shared.lock();
                    s.ranges[i].done = true;
                    s.total();
                }
                result
            }
        });
        let work = async {
            let results = futures::future::join_all(work).await;
            let mut outcome: Result<()> = results.into_iter().collect::<Result<Vec<_>>>().map(drop);
            if outcome.is_ok() && !halted() {
                outcome = self
                    .profiles
                    .recompute_stale(app, &strategy)
                    .await
                    .map(|stale| shared.lock().stats.users += stale.users);
            }
            // `notify_one` stores a permit: the saver stops even if it is not waiting yet.
            finished.notify_one();
            outcome
        };
        // One task: stopping it (a killed node) stops the saver too, and with it the lease's
        // renewals.
        let ((), outcome) = tokio::join!(saver, work);
        let mut status = shared.lock().clone();
        let stopped = *stop.lock();
        status.state = match (&outcome, stopped) {
            (Err(e), _) => {
                tracing::error!(%app, error = %e, "profile recompute failed");
                status.error = Some(e.to_string());
                JobState::Failed
            }
            (Ok(()), Some(Stop::Handover)) => JobState::Running,
            (Ok(()), Some(Stop::Superseded)) => JobState::Superseded,
            (Ok(()), None) => JobState::Done,
        };
        if status.state != JobState::Running {
            status.finished_at = Some(self.clock.now_ms());
        }
        if let Err(e) = self.save(app, &status).await {
            tracing::error!(%app, error = %e, "cannot save the job's end");
        }
        status.state
    }
}
