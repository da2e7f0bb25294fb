//! The runtime of the engine's background work: checkpointed jobs and periodic tasks.
//!
//! **Jobs.** A job kind ([`Job`]) is a small type beside its domain — the profile recompute
//! ([`crate::profiles::job`]), the ALS training ([`crate::vectors::training`]), the
//! recommendation build ([`crate::recommend::build`]), the event layout migration
//! ([`crate::events::migration`]) and the placement move ([`crate::residency`]) — that says how
//! to run one app's job from the checkpoint in its status. The [`Runner`] of a kind does the
//! rest, the same way for all:
//!
//! - **one node per job**: a job runs on the node holding its lease (per app and kind,
//!   [`crate::leases`]), claimed when it starts, renewed at every save, released at its end;
//! - **checkpoints**: its status (row `app` of table `jobs`, the kind's column) is saved when it
//!   starts, every half second while it runs (with the work counted so far, [`Run::counter`]),
//!   and at its end: done, failed (with the error), or superseded;
//! - **take-over**: a node that stops saves the status once more, releases the lease and drops
//!   the job's work where it stands ([`Run::cancelled`] tells blocking work to stop); a node
//!   that dies stops renewing the lease. Every node looks for running jobs whose lease is free
//!   ([`Runner::take_over`], at start and then every half lease) and resumes them from their
//!   checkpoints.
//!
//! Steps wait by the engine's clock ([`Run::wait_until`]), so a test with a manual clock moves
//! a job on by moving the clock.
//!
//! **Periodic tasks** ([`every`]): the repair of interrupted ingestions with the take-over of
//! orphaned jobs, the reload of placements, the flush of traffic counts, the retention purge.
//! Each runs on every node under the supervisor; those that must run on one node at a time
//! take a global lease themselves ([`crate::leases::Leases::run`]).

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use parking_lot::Mutex;
use penchant_store::{Mutation, ReadRows, RowFilter, RowSet, Store};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::leases::{Claims, Leases};
use crate::supervisor::Supervisor;
use crate::{EngineError, Result, internal, keys};
pub(crate) use penchant_model::tables::JOBS_FAMILY as FAMILY;
pub use penchant_model::tables::{JOBS, JOBS_TABLE};

/// How often a running job's status is saved and its lease renewed.
const SAVE_EVERY: Duration = Duration::from_millis(500);

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum JobState {
    Running,
    Done,
    Superseded,
    Failed,
}

/// How far a job is, in the same shape for every kind (field `progress` of each status): what
/// the CLI's progress bars and the dashboard show.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// The phase it is in (as the status names it), or its one step ("recompute", "train").
    pub phase: String,
    /// The phase's place among the kind's phases (from 1), and how many there are.
    pub step: usize,
    pub steps: usize,
    /// Work done in the phase, in `unit`s, out of `total` when that is known beforehand.
    pub done: u64,
    pub total: Option<u64>,
    pub unit: String,
}

impl Progress {
    /// Progress in phase `phase` (a value of the kind's phase enum) among `phases`.
    pub fn of<P: Serialize + PartialEq>(phase: &P, phases: &[P], done: u64, unit: &str) -> Self {
        let at = phases
            .iter()
            .position(|p| p == phase)
            .unwrap_or(phases.len());
        let name = serde_json::to_value(phase)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        Self {
            phase: name,
            step: (at + 1).min(phases.len()),
            steps: phases.len(),
            done,
            total: None,
            unit: unit.to_owned(),
        }
    }

    /// Progress of a job in one step.
    pub fn single(phase: &str, done: u64, total: Option<u64>, unit: &str) -> Self {
        Self {
            phase: phase.to_owned(),
            step: 1,
            steps: 1,
            done,
            total,
            unit: unit.to_owned(),
        }
    }
}

/// A job's status as saved: the kind's own fields (its checkpoint, its counts), the state the
/// runtime sets, and its [`Progress`].
pub trait Status: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {
    fn state(&self) -> JobState;
    /// The job ended in `state` (done, failed with `error`, superseded) at `now` (Unix ms).
    fn end(&mut self, state: JobState, now: i64, error: Option<String>);
    /// What the job's steps counted so far ([`Run::counter`]), copied in before each save.
    fn count(&mut self, _counted: u64) {}
    /// How far the job is, from the status's other fields.
    fn measure(&self) -> Progress;
    /// Set the status's `progress` field from [`Status::measure`] (before each save).
    fn report(&mut self);
}

/// Implement [`Status`] for a status with fields `state`, `finished_at`, `error` and
/// `progress`, and an inherent `measure` (and maybe other items of the trait, such as
/// [`Status::count`]).
macro_rules! status {
    ($status:ty $(, $item:item)*) => {
        impl $crate::jobs::Status for $status {
            fn state(&self) -> $crate::jobs::JobState {
                self.state
            }

            fn end(&mut self, state: $crate::jobs::JobState, now: i64, error: Option<String>) {
                self.state = state;
                self.finished_at = Some(now);
                self.error = error;
            }

            fn measure(&self) -> $crate::jobs::Progress {
                Self::measure(self)
            }

            fn report(&mut self) {
                self.progress = Self::measure(self);
            }

            $($item)*
        }
    };
}
pub(crate) use status;

/// A kind of job: how to run one app's job from the checkpoint in its status.
pub(crate) trait Job: Send + Sync + Sized + 'static {
    type Status: Status;
    /// The kind's column in table `jobs` and the name of its lease.
    const KEY: &'static str;
    /// What the kind is called in messages and logs ("a {NAME} of this app is running").
    const NAME: &'static str;
    /// Whether a job saved while another of the app ran on this node starts when that one
    /// ends (a recompute: a newer strategy's).
    const STARTS_NEWER: bool = false;

    /// Run the job from its checkpoint to its end, keeping its status up to date (the runtime
    /// saves it). Returns the state it ended in: `Done`, `Superseded`, or `Running` when it
    /// stopped for another node to resume. Dropped where it stands when this node stops or
    /// loses the job's lease.
    fn steps(&self, run: &Run<Self>) -> impl Future<Output = Result<JobState>> + Send;

    /// Save the job's status (by default in its column, whatever is there).
    fn save(
        &self,
        store: &Arc<dyn Store>,
        app: &str,
        status: &Self::Status,
    ) -> impl Future<Output = Result<()>> + Send {
        save_status(store, app, Self::KEY.as_bytes(), status)
    }

    /// A running job that no node runs, claimed by this one: the status to resume it from, or
    /// `None` to leave it (having saved its end).
    fn resume(
        &self,
        _app: &str,
        status: Self::Status,
    ) -> impl Future<Output = Result<Option<Self::Status>>> + Send {
        async { Ok(Some(status)) }
    }

    /// Whether jobs of this kind can run on this node at all (moves need several targets).
    fn enabled(&self) -> bool {
        true
    }
}

/// Told of every checkpoint a job's steps save ([`Run::save`]: a phase done, a change made),
/// after it is stored; the job waits for it. Tests hold a job at a checkpoint with it, to stop
/// a node there or look at what the job did so far, instead of sleeping.
#[async_trait::async_trait]
pub trait JobHook: Send + Sync + std::fmt::Debug + 'static {
    async fn checkpoint(&self, kind: &'static str, app: &str, progress: &Progress);
}

/// A running job, as its steps see it: its app, its status (the checkpoint they move on), and
/// the runtime's signals.
pub(crate) struct Run<J: Job> {
    app: String,
    status: Arc<Mutex<J::Status>>,
    job: Arc<J>,
    store: Arc<dyn Store>,
    clock: Clock,
    hook: Option<Arc<dyn JobHook>>,
    cancelled: Arc<AtomicBool>,
    counter: Arc<AtomicU64>,
}

impl<J: Job> Run<J> {
    pub fn app(&self) -> &str {
        &self.app
    }

    /// The status as the steps left it.
    pub fn status(&self) -> J::Status {
        self.status.lock().clone()
    }

    /// The status, to read or change (changes are saved at the next save).
    pub fn lock(&self) -> parking_lot::MutexGuard<'_, J::Status> {
        self.status.lock()
    }

    /// Change the status (not saved until the next save).
    pub fn update<T>(&self, change: impl FnOnce(&mut J::Status) -> T) -> T {
        change(&mut self.status.lock())
    }

    /// Save the status now (a checkpoint that must be stored before the next step), and tell
    /// the hook, if any.
    pub async fn save(&self) -> Result<()> {
        let progress = self.persist().await?;
        if let Some(hook) = &self.hook {
            hook.checkpoint(J::KEY, &self.app, &progress).await;
        }
        Ok(())
    }

    /// Save the status as it stands (what the runtime does every half second); its progress.
    async fn persist(&self) -> Result<Progress> {
        let snapshot = self.snapshot();
        self.job.save(&self.store, &self.app, &snapshot).await?;
        Ok(snapshot.measure())
    }

    fn snapshot(&self) -> J::Status {
        let mut status = self.status.lock();
        status.count(self.counter.load(Ordering::Relaxed));
        status.report();
        status.clone()
    }

    /// Set once this node left the job: blocking work the steps started stops at its next
    /// check.
    pub fn cancelled(&self) -> Arc<AtomicBool> {
        self.cancelled.clone()
    }

    /// What the steps count as they go (events read, iterations done), copied into the status
    /// at each save ([`Status::count`]).
    pub fn counter(&self) -> Arc<AtomicU64> {
        self.counter.clone()
    }

    /// Now, by the engine's clock (Unix ms).
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Make a change every node must see before the job goes on (of an app's layouts, of a
    /// placement) once, then wait until they all have: `settle` after it was made. `made` is
    /// when it was, from the checkpoint (`None`: not yet); `mark` records that time in the
    /// status, which is saved before the wait.
    pub async fn change_and_settle(
        &self,
        made: Option<i64>,
        settle: Duration,
        change: impl Future<Output = Result<()>>,
        mark: impl FnOnce(&mut J::Status, i64),
    ) -> Result<()> {
        let made = match made {
            Some(at) => at,
            None => {
                change.await?;
                // Saved after the change: the wait starts no earlier than it.
                let now = self.now_ms();
                mark(&mut self.lock(), now);
                self.save().await?;
                now
            }
        };
        self.wait_until(made + settle.as_millis() as i64).await;
        Ok(())
    }

    /// Wait until `at` (Unix ms) by the engine's clock.
    pub async fn wait_until(&self, at: i64) {
        loop {
            let left = at - self.clock.now_ms();
            if left <= 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(left.min(100) as u64)).await;
        }
    }
}

/// What the jobs of every kind share on a node.
#[derive(Debug, Clone)]
pub struct Runtime {
    store: Arc<dyn Store>,
    leases: Leases,
    supervisor: Arc<Supervisor>,
    clock: Clock,
    hook: Option<Arc<dyn JobHook>>,
}

impl Runtime {
    pub fn new(
        store: Arc<dyn Store>,
        leases: Leases,
        supervisor: Arc<Supervisor>,
        clock: Clock,
    ) -> Self {
        Self {
            store,
            leases,
            supervisor,
            clock,
            hook: None,
        }
    }

    /// Tell `hook` of every job's checkpoints.
    pub fn with_hook(mut self, hook: Option<Arc<dyn JobHook>>) -> Self {
        self.hook = hook;
        self
    }

    /// The runner of a kind of job (one per kind and node: it knows which run here).
    pub(crate) fn runner<J: Job>(&self) -> Runner<J> {
        Runner {
            rt: self.clone(),
            claims: Arc::new(Claims::new(self.leases.clone(), J::KEY)),
            kind: PhantomData,
        }
    }

    /// Run `task` every `interval` until the node stops (first at once if `now`); a failed
    /// round is logged as `what` failing and the next one runs as usual.
    pub fn every<F>(
        &self,
        what: &'static str,
        interval: Duration,
        now: bool,
        task: impl Fn() -> F + Send + 'static,
    ) where
        F: Future<Output = Result<()>> + Send,
    {
        let supervisor = self.supervisor.clone();
        self.supervisor.spawn(async move {
            let mut first = now;
            loop {
                if !first {
                    let stopped = supervisor.stopped();
                    tokio::select! {
                        () = tokio::time::sleep(interval) => {}
                        () = stopped => return,
                    }
                }
                first = false;
                if let Err(e) = task().await {
                    tracing::warn!(error = %e, "{what} failed");
                }
            }
        });
    }
}

/// Runs the jobs of one kind on this node.
#[derive(Debug)]
pub(crate) struct Runner<J> {
    rt: Runtime,
    /// The apps whose job of this kind runs here.
    claims: Arc<Claims>,
    kind: PhantomData<fn() -> J>,
}

impl<J> Clone for Runner<J> {
    fn clone(&self) -> Self {
        Self {
            rt: self.rt.clone(),
            claims: self.claims.clone(),
            kind: PhantomData,
        }
    }
}

impl<J: Job> Runner<J> {
    /// Start a job of `app` from `status`, in the background; refused while a job of this kind
    /// of the app runs. Returns the status it starts from (saved).
    pub async fn submit(
        &self,
        job: &Arc<J>,
        app: &str,
        mut status: J::Status,
    ) -> Result<J::Status> {
        status.report();
        if !self.claim_after_end(app).await? {
            return Err(EngineError::Refused(format!(
                "a {} of this app is running: wait for it to end",
                J::NAME
            )));
        }
        if let Err(e) = job.save(&self.rt.store, app, &status).await {
            self.release(app).await;
            return Err(e);
        }
        self.launch(job, app.to_owned(), status.clone());
        Ok(status)
    }

    /// Run a saved job of `app` from `status` if this node can claim it now; otherwise the
    /// node that can runs it (see [`Job::STARTS_NEWER`]). Returns whether it runs here.
    pub async fn launch_if_free(&self, job: &Arc<J>, app: &str, status: J::Status) -> Result<bool> {
        let claimed = self.claims.claim(app).await?;
        if claimed {
            self.launch(job, app.to_owned(), status);
        }
        Ok(claimed)
    }

    /// The app's latest job of this kind, as last saved (by whichever node runs it).
    pub async fn status(&self, app: &str) -> Result<Option<J::Status>> {
        saved_status(&self.rt.store, app, J::KEY.as_bytes()).await
    }

    /// How many jobs of this kind run on this node.
    pub fn running(&self) -> usize {
        self.claims.count()
    }

    /// Resume every running job of this kind whose lease no node holds (none at all after a
    /// restart, or one whose node died and whose lease expired), from its checkpoint. Returns
    /// how many this node resumed.
    pub async fn take_over(&self, job: &Arc<J>) -> Result<usize> {
        if self.rt.supervisor.stopping() || !job.enabled() {
            return Ok(0);
        }
        let running = running::<J::Status>(&self.rt.store, J::KEY.as_bytes()).await?;
        let mut resumed = 0;
        for (app, status) in running {
            if !self.claims.claim(&app).await? {
                continue;
            }
            let mut status = match job.resume(&app, status).await {
                Ok(Some(status)) => status,
                Ok(None) => {
                    self.release(&app).await;
                    continue;
                }
                Err(e) => {
                    self.release(&app).await;
                    return Err(e);
                }
            };
            status.report();
            if let Err(e) = job.save(&self.rt.store, &app, &status).await {
                self.release(&app).await;
                return Err(e);
            }
            tracing::info!(%app, node = self.claims.node(), "resuming a {}", J::NAME);
            self.launch(job, app, status);
            resumed += 1;
        }
        Ok(resumed)
    }

    /// Claim `app`'s job of this kind. A job that just ended saves its last status before it
    /// gives its claim up: while the saved status says it ended, the claim is tried again for
    /// up to a second, so that a caller who saw it end can start the next one at once.
    async fn claim_after_end(&self, app: &str) -> Result<bool> {
        for _ in 0..20 {
            if self.claims.claim(app).await? {
                return Ok(true);
            }
            match self.status(app).await? {
                Some(saved) if saved.state() != JobState::Running => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await
                }
                _ => return Ok(false),
            }
        }
        Ok(false)
    }

    async fn release(&self, app: &str) {
        if let Err(e) = self.claims.release(app).await {
            tracing::warn!(%app, error = %e, "cannot release the {}'s lease", J::NAME);
        }
    }

    /// Run a claimed job in the background; at its end, give the claim up.
    fn launch(&self, job: &Arc<J>, app: String, status: J::Status) {
        let (runner, job) = (self.clone(), job.clone());
        self.rt.supervisor.spawn(async move {
            let ended = runner.run(&job, app.clone(), status).await;
            runner.release(&app).await;
            // A job saved meanwhile could not start here while this one ran.
            if J::STARTS_NEWER
                && ended
                && let Err(e) = runner.take_over(&job).await
            {
                tracing::warn!(%app, error = %e, "cannot start the newer {}", J::NAME);
            }
        });
    }

    /// Drive a claimed job's steps to their end: every half second, renew its lease (a lost
    /// lease leaves the job at once) and save its status; on shutdown, save it once more and
    /// leave it to another node. Returns whether the job ended (rather than being left).
    async fn run(&self, job: &Arc<J>, app: String, status: J::Status) -> bool {
        let run = Run {
            app,
            status: Arc::new(Mutex::new(status)),
            job: job.clone(),
            store: self.rt.store.clone(),
            clock: self.rt.clock.clone(),
            hook: self.rt.hook.clone(),
            cancelled: Arc::default(),
            counter: Arc::default(),
        };
        let app = run.app();
        let started = std::time::Instant::now();
        tracing::info!(%app, "{} job started", J::NAME);
        let steps = job.steps(&run);
        tokio::pin!(steps);
        let mut stopped = Box::pin(self.rt.supervisor.stopped());
        let outcome = loop {
            tokio::select! {
                outcome = &mut steps => break outcome,
                () = tokio::time::sleep(SAVE_EVERY) => {
                    if !self.claims.renew(app).await.unwrap_or(false) {
                        tracing::warn!(%app, "lost the {}'s lease: stopping", J::NAME);
                        run.cancelled.store(true, Ordering::Relaxed);
                        return false;
                    }
                    if let Err(e) = run.persist().await {
                        tracing::warn!(%app, error = %e, "cannot save the {}'s status", J::NAME);
                    }
                }
                () = &mut stopped => {
                    run.cancelled.store(true, Ordering::Relaxed);
                    if let Err(e) = run.persist().await {
                        tracing::warn!(%app, error = %e, "cannot save the {}'s status", J::NAME);
                    }
                    tracing::info!(%app, "{} left at shutdown, to resume from its checkpoint",
                        J::NAME);
                    return false;
                }
            }
        };
        // As the steps left it: their counter counted work in progress.
        let mut status = run.status();
        let now = self.rt.clock.now_ms();
        match outcome {
            Ok(JobState::Running) => return false,
            Ok(state) => status.end(state, now, None),
            Err(e) => {
                tracing::error!(%app, error = %e, "{} failed", J::NAME);
                status.end(JobState::Failed, now, Some(e.to_string()));
            }
        }
        status.report();
        if let Err(e) = job.save(&self.rt.store, app, &status).await {
            tracing::error!(%app, error = %e, "cannot save the {}'s end", J::NAME);
        }
        let seconds = started.elapsed().as_secs_f64();
        tracing::info!(%app, state = ?status.state(), seconds, "{} job ended", J::NAME);
        true
    }
}

/// An app's job status in `column` of table `jobs`, as last saved by whichever node runs the
/// job.
async fn saved_status<T: DeserializeOwned>(
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
        .map_err(|e| internal("corrupt job status", e))
}

/// Save an app's job status in `column` of table `jobs`.
async fn save_status<T: Serialize>(
    store: &Arc<dyn Store>,
    app: &str,
    column: &[u8],
    status: &T,
) -> Result<()> {
    let json = serde_json::to_vec(status).map_err(|e| internal("serialization", e))?;
    let cell = Mutation::set_now(FAMILY, column.to_vec(), json);
    store
        .mutate_row(JOBS_TABLE, keys::app(app), vec![cell])
        .await?;
    Ok(())
}

/// The apps whose job status in `column` of table `jobs` is running, with that status
/// (statuses that do not parse are left out).
async fn running<T: Status>(store: &Arc<dyn Store>, column: &[u8]) -> Result<Vec<(String, T)>> {
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
        if let Some(status) = status.filter(|s| s.state() == JobState::Running) {
            out.push((app.to_owned(), status));
        }
    }
    Ok(out)
}

/// The phase after `phase` in `phases` (the last one stays).
pub(crate) fn next_phase<P: Copy + PartialEq>(phases: &[P], phase: P) -> P {
    let at = phases.iter().position(|p| *p == phase).unwrap_or(0);
    phases[(at + 1).min(phases.len() - 1)]
}

/// A row key as a checkpoint in a job's status (hex).
pub(crate) fn hex(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// The row key of a checkpoint written by [`hex`].
pub(crate) fn unhex(text: &str) -> Result<Bytes> {
    let corrupt = || internal("corrupt job checkpoint", text);
    if !text.len().is_multiple_of(2) {
        return Err(corrupt());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(text.get(i..i + 2).ok_or_else(corrupt)?, 16).map_err(|_| corrupt())
        })
        .collect::<Result<Vec<u8>>>()
        .map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::{Semaphore, watch};

    #[test]
    fn checkpoints_round_trip() {
        let key = b"app\0user\0\x00\xff\x10";
        assert_eq!(&unhex(&hex(key)).unwrap()[..], key);
        assert!(unhex("abc").is_err());
        assert!(unhex("zz").is_err());
    }

    /// A kind of job that counts to `to`, a checkpoint at each step.
    #[derive(Debug, Default)]
    struct Count {
        /// Steps this node ran.
        ran: AtomicU64,
    }

    #[derive(Debug, Clone, Serialize, Deserialize)]
    struct Counted {
        state: JobState,
        at: u64,
        to: u64,
        finished_at: Option<i64>,
        error: Option<String>,
        #[serde(default)]
        progress: Progress,
    }

    impl Counted {
        fn measure(&self) -> Progress {
            Progress::single("count", self.at, Some(self.to), "steps")
        }
    }

    status!(Counted);

    impl Job for Count {
        type Status = Counted;
        const KEY: &'static str = "count";
        const NAME: &'static str = "count";

        async fn steps(&self, run: &Run<Self>) -> Result<JobState> {
            while run.status().at < run.status().to {
                run.lock().at += 1;
                self.ran.fetch_add(1, Ordering::SeqCst);
                run.save().await?;
            }
            Ok(JobState::Done)
        }
    }

    /// Holds each checkpoint until the test lets one more pass; says which it reached.
    #[derive(Debug)]
    struct Gate {
        pass: Semaphore,
        reached: watch::Sender<u64>,
    }

    #[async_trait::async_trait]
    impl JobHook for Gate {
        async fn checkpoint(&self, _: &'static str, _: &str, progress: &Progress) {
            self.reached.send_replace(progress.done);
            self.pass.acquire().await.unwrap().forget();
        }
    }

    /// A node: its own supervisor and leases, on the shared store.
    fn node(store: &Arc<dyn Store>, hook: Option<Arc<dyn JobHook>>) -> (Runtime, Runner<Count>) {
        let clock = Clock::default();
        let leases = Leases::new(store.clone(), clock.clone(), Duration::ZERO);
        let rt = Runtime::new(store.clone(), leases, Arc::default(), clock).with_hook(hook);
        let runner = rt.runner();
        (rt, runner)
    }

    /// A job held at a checkpoint by the hook (no sleeping to get there) is refused a second
    /// start; its node stops there, and another node resumes it from that checkpoint to its end.
    #[tokio::test]
    async fn a_job_stopped_at_a_checkpoint_is_resumed_there_by_another_node() {
        let store: Arc<dyn Store> = Arc::new(penchant_store::MemStore::new());
        crate::tables::create(&*store, &[JOBS, crate::leases::LEASES])
            .await
            .unwrap();
        let gate = Arc::new(Gate {
            pass: Semaphore::new(2),
            reached: watch::channel(0).0,
        });
        let (rt_a, a) = node(&store, Some(gate.clone()));
        let (_rt_b, b) = node(&store, None);
        let (count_a, count_b) = (Arc::new(Count::default()), Arc::new(Count::default()));
        let start = Counted {
            state: JobState::Running,
            at: 0,
            to: 10,
            finished_at: None,
            error: None,
            progress: Progress::default(),
        };
        let started = a.submit(&count_a, "APP", start.clone()).await.unwrap();
        assert_eq!(
            started.progress,
            Progress::single("count", 0, Some(10), "steps")
        );
        // Two checkpoints pass; the third is held, saved.
        let mut reached = gate.reached.subscribe();
        reached.wait_for(|at| *at == 3).await.unwrap();
        let err = a.submit(&count_a, "APP", start.clone()).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "a count of this app is running: wait for it to end"
        );
        assert_eq!(b.take_over(&count_b).await.unwrap(), 0, "A holds the lease");
        rt_a.supervisor.shutdown().await;
        let left = a.status("APP").await.unwrap().unwrap();
        assert_eq!((left.state, left.at), (JobState::Running, 3));
        assert_eq!(a.running(), 0, "A gave its claim up");
        assert_eq!(b.take_over(&count_b).await.unwrap(), 1);
        let mut done = None;
        for _ in 0..1000 {
            let status = b.status("APP").await.unwrap().unwrap();
            if status.state != JobState::Running {
                done = Some(status);
                break;
            }
            tokio::task::yield_now().await;
        }
        let done = done.expect("B finished the job");
        assert_eq!((done.state, done.at), (JobState::Done, 10));
        assert!(done.finished_at.is_some());
        assert_eq!(
            done.progress,
            Progress::single("count", 10, Some(10), "steps")
        );
        assert_eq!(count_a.ran.load(Ordering::SeqCst), 3);
        assert_eq!(
            count_b.ran.load(Ordering::SeqCst),
            7,
            "B went on from A's checkpoint"
        );
    }
}
