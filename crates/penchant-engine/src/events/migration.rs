//! Moving an app's events from one [`Layout`] to the other while events keep arriving: the
//! seed's three steps (dual-write, backfill the retention window, switch reads) and a fourth,
//! dropping the old layout's cells.
//!
//! | phase | the app | the job |
//! |---|---|---|
//! | `dualWrite` | reads `from`, writes both | waits until every node writes both |
//! | `backfill` | same | writes `to`'s cells of every event row in the retention window, from `from`'s |
//! | `switch` | reads `to`, writes both | waits until every node reads `to` |
//! | `stopOld` | reads and writes `to` | waits until no node writes `from` |
//! | `drop` | same | deletes `from`'s cells, row by row |
//!
//! **Nothing lost, nothing counted twice.** An event's cells of both layouts are written in one
//! atomic row mutation with its `e:event` cell, at the event's timestamp; the backfill writes
//! the same cells under the same columns and timestamps, so rewriting a row (dual-written
//! already, or done before a crash) replaces cells, never adds any. A read uses one layout only
//! (the filter of [`Layout::read_filter`]), and every row has that layout's cells whenever
//! reads use it: the backfill starts once no node writes `from` alone, reads switch once it
//! is done, and `from` is dropped once no node reads it. Aggregates (what streaming and the
//! default recompute read) do not depend on the layout.
//!
//! **When nodes see a change.** Nodes cache an app's layouts for the tenancy cache TTL
//! ([`crate::tenancy::TenancyConfig::cache_ttl`]); an ingestion takes at most [`IN_FLIGHT`] from
//! reading them to writing. So each phase that changes the app waits `cache_ttl + IN_FLIGHT`
//! after the change before the next step relies on it.
//!
//! **Resumable.** One node runs an app's migration (the holder of its lease, like a recompute);
//! its status (`j:layout` in table `jobs`, row `app 0`) is saved every half second with the
//! phase, when the phase's change of the app was made, and the last row key done. A node that
//! stops or dies leaves it `running`; the node that takes it over resumes from there: a change
//! is made again (it is idempotent), rows are rewritten from the checkpoint.

use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use penchant_store::{
    ReadRows, RowFilter, RowMutation, RowRange, RowSet, Store, TimeRange, Workload, for_workload,
};
use serde::{Deserialize, Serialize};

use super::Layout;
use crate::clock::Clock;
use crate::jobs::{Job, JobState, Progress, Run, Runner, Runtime, hex, unhex};
use crate::tenancy::Tenancy;
use crate::{EngineError, Result, keys};
use penchant_model::tables::EVENTS_TABLE;

/// Event rows rewritten (or cleared) in one write.
const ROWS_AT_ONCE: usize = 500;
/// The longest an ingestion takes from reading its app's layouts to writing its events.
pub const IN_FLIGHT: Duration = Duration::from_secs(2);

/// Where a migration stands (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    DualWrite,
    Backfill,
    Switch,
    StopOld,
    Drop,
    Done,
}

impl Phase {
    /// The phases in order.
    pub const ALL: [Phase; 6] = [
        Phase::DualWrite,
        Phase::Backfill,
        Phase::Switch,
        Phase::StopOld,
        Phase::Drop,
        Phase::Done,
    ];

    fn next(self) -> Phase {
        crate::jobs::next_phase(&Phase::ALL, self)
    }

    /// The app's layouts in this phase: the one read, and the other one written.
    fn app_layouts(self, from: Layout, to: Layout) -> (Layout, Option<Layout>) {
        match self {
            Phase::DualWrite | Phase::Backfill => (from, Some(to)),
            Phase::Switch => (to, Some(from)),
            Phase::StopOld | Phase::Drop | Phase::Done => (to, None),
        }
    }

    /// Whether this phase changes the app (and then waits for every node to see it).
    fn changes_app(self) -> bool {
        matches!(self, Phase::DualWrite | Phase::Switch | Phase::StopOld)
    }
}

/// A migration's status, saved as it goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationStatus {
    pub state: JobState,
    pub from: Layout,
    pub to: Layout,
    pub phase: Phase,
    /// When the phase's change of the app was made (Unix ms), once made.
    pub changed_at: Option<i64>,
    /// The last event row the backfill (or the drop) finished, hex-encoded: its checkpoint.
    pub after: Option<String>,
    /// Event rows written in the new layout, and rows cleared of the old one.
    pub backfilled: u64,
    pub dropped: u64,
    /// Unix ms.
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub error: Option<String>,
    /// How far it is (every kind's status has one, in the same shape).
    #[serde(default)]
    pub progress: Progress,
}

impl MigrationStatus {
    fn measure(&self) -> Progress {
        let done = match self.phase {
            Phase::Backfill => self.backfilled,
            Phase::Drop => self.dropped,
            _ => 0,
        };
        // Its steps: every phase but `done`.
        Progress::of(
            &self.phase,
            &Phase::ALL[..Phase::ALL.len() - 1],
            done,
            "rows",
        )
    }
}

crate::jobs::status!(MigrationStatus);

/// Layout migrations of every app.
#[derive(Debug)]
pub struct Migrations {
    store: Arc<dyn Store>,
    tenancy: Arc<Tenancy>,
    clock: Clock,
    runner: Runner<Self>,
    /// How long after changing an app every node has seen the change.
    settle: Duration,
}

impl Migrations {
    pub fn new(
        runtime: &Runtime,
        store: Arc<dyn Store>,
        tenancy: Arc<Tenancy>,
        clock: Clock,
        cache_ttl: Duration,
    ) -> Self {
        Self {
            store,
            tenancy,
            clock,
            runner: runtime.runner(),
            settle: cache_ttl + IN_FLIGHT,
        }
    }

    /// Start moving an app's events to layout `to`, in the background; refused while a
    /// migration of the app runs, or if the app has that layout already.
    pub async fn start(self: &Arc<Self>, app: &str, to: Layout) -> Result<MigrationStatus> {
        let current = self
            .tenancy
            .app(app)
            .await?
            .ok_or_else(|| EngineError::NotFound(format!("app `{app}` does not exist")))?;
        if let Some(status) = self.status(app).await?
            && status.state == JobState::Running
        {
            return Err(EngineError::Refused(format!(
                "a migration of this app to the {} layout is running: wait for it to end",
                status.to
            )));
        }
        if current.event_layout == to && current.also_written.is_none() {
            return Err(EngineError::Refused(format!(
                "the app's events are in the {to} layout already"
            )));
        }
        // An app left between layouts by a failed migration starts over from what it reads.
        let status = MigrationStatus {
            state: JobState::Running,
            from: current.event_layout,
            to,
            phase: Phase::DualWrite,
            changed_at: None,
            after: None,
            backfilled: 0,
            dropped: 0,
            started_at: self.clock.now_ms(),
            finished_at: None,
            error: None,
            progress: Progress::default(),
        };
        let status = if current.event_layout == to {
            // Reads use `to` already (a migration failed after its switch): only the old
            // layout's writes and cells are left to stop and drop.
            MigrationStatus {
                from: to.other(),
                phase: Phase::StopOld,
                ..status
            }
        } else {
            status
        };
        self.runner.submit(self, app, status).await
    }

    /// The app's latest migration, as last saved.
    pub async fn status(&self, app: &str) -> Result<Option<MigrationStatus>> {
        self.runner.status(app).await
    }

    /// Resume every running migration whose lease no node holds, from its checkpoint. Returns
    /// how many.
    pub async fn take_over(self: &Arc<Self>) -> Result<usize> {
        self.runner.take_over(self).await
    }

    /// Go through the app's event rows from the checkpoint: write the new layout's cells
    /// (backfill, rows in the retention window) or delete the old layout's (drop).
    async fn rewrite(&self, run: &Run<Self>, step: Step) -> Result<()> {
        let (app, store) = (run.app(), for_workload(&self.store, Workload::Batch));
        let (from, to, after) = run.update(|s| (s.from, s.to, s.after.clone()));
        let start = match after {
            Some(key) => Bound::Excluded(unhex(&key)?),
            None => Bound::Included(keys::app(app)),
        };
        // Event rows only: the app's ingestion intents sort after every user.
        let rows = RowRange {
            start,
            end: Bound::Excluded(keys::intents(app)),
        };
        let filter = match step {
            Step::Backfill => {
                let window = self.tenancy.retention(app).await?;
                let since = (self.clock.now_ms() - window.as_millis() as i64) * 1000;
                from.counts_filter()
                    .and(RowFilter::TimestampRange(TimeRange {
                        start: Some(since),
                        end: None,
                    }))
            }
            Step::Drop => from.counts_filter().and(RowFilter::StripValue),
        };
        let request = ReadRows::new(RowSet::range(rows)).filter(filter);
        let mut stream = store.read_rows(EVENTS_TABLE, request).await?;
        let mut batch: Vec<RowMutation> = Vec::with_capacity(ROWS_AT_ONCE);
        loop {
            let row = stream.try_next().await?;
            if let Some(row) = &row {
                let mutations = match step {
                    Step::Backfill => match from.read_counts(row)? {
                        Some((event_type, name, counts)) => {
                            let ts = row.cells[0].timestamp;
                            to.cells(event_type, &name, &counts, ts)?
                        }
                        None => Vec::new(),
                    },
                    Step::Drop => from.delete_cells(row),
                };
                batch.push(RowMutation::new(row.key.clone(), mutations));
            }
            if batch.len() >= ROWS_AT_ONCE || (row.is_none() && !batch.is_empty()) {
                let last = batch.last().map(|m| m.row_key.clone());
                let n = batch.len() as u64;
                let entries = std::mem::take(&mut batch)
                    .into_iter()
                    .filter(|m| !m.mutations.is_empty())
                    .collect();
                store.mutate_all(EVENTS_TABLE, entries).await?;
                run.update(|s| {
                    s.after = last.map(|k| hex(&k));
                    match step {
                        Step::Backfill => s.backfilled += n,
                        Step::Drop => s.dropped += n,
                    }
                });
            }
            if row.is_none() {
                return Ok(());
            }
        }
    }
}

impl Job for Migrations {
    type Status = MigrationStatus;
    const KEY: &'static str = "layout";
    const NAME: &'static str = "migration";

    /// The phases from where the status stands to the end.
    async fn steps(&self, run: &Run<Self>) -> Result<JobState> {
        loop {
            let status = run.status();
            let (from, to) = (status.from, status.to);
            if status.phase.changes_app() {
                let changed_at = match status.changed_at {
                    Some(at) => at,
                    None => {
                        let (reads, also) = status.phase.app_layouts(from, to);
                        self.tenancy
                            .set_event_layout(run.app(), reads, also)
                            .await?;
                        // Saved after the change: the wait below starts no earlier than it.
                        let now = run.now_ms();
                        run.update(|s| s.changed_at = Some(now));
                        run.save().await?;
                        now
                    }
                };
                // Until every node has seen the change.
                run.wait_until(changed_at + self.settle.as_millis() as i64)
                    .await;
            }
            match status.phase {
                Phase::Backfill => self.rewrite(run, Step::Backfill).await?,
                Phase::Drop => self.rewrite(run, Step::Drop).await?,
                Phase::Done => return Ok(JobState::Done),
                Phase::DualWrite | Phase::Switch | Phase::StopOld => {}
            }
            run.update(|s| {
                s.phase = s.phase.next();
                s.changed_at = None;
                s.after = None;
            });
            run.save().await?;
        }
    }
}

/// What [`Migrations::rewrite`] does to each row.
#[derive(Debug, Clone, Copy)]
enum Step {
    Backfill,
    Drop,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_run_in_order() {
        let mut phase = Phase::DualWrite;
        let mut seen = vec![phase];
        while phase != Phase::Done {
            phase = phase.next();
            seen.push(phase);
        }
        assert_eq!(seen, Phase::ALL);
        // Reads switch only after the backfill, and the old layout is written until reads
        // moved.
        let w = Layout::Wide;
        let n = Layout::Narrow;
        assert_eq!(Phase::Backfill.app_layouts(w, n), (w, Some(n)));
        assert_eq!(Phase::Switch.app_layouts(w, n), (n, Some(w)));
        assert_eq!(Phase::Drop.app_layouts(w, n), (n, None));
    }
}
