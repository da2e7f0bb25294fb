//! Residency: which target (a Bigtable instance in a region, a RocksDB folder) holds each app's
//! rows and, for an app that asks, each of its users' — as data every node reads — and moving
//! them between targets online (the seed's metadata table and background migration).
//!
//! **Placement as data.** Table `placements` (pinned to the default target) has one row per
//! placed unit ([`penchant_store::PlacedStore`]): an app `A` (its rows `A 0 ...`) or a user
//! `A 0 u` (its rows in the tables keyed by user, [`crate::tables::Rows::User`]), holding `{target,
//! alsoWritten}`. Every node loads the whole table into its store's routes at start and every
//! `refresh` ([`Residency::load`]); the node that changes a placement applies it at once. So a
//! change reaches every node within `refresh`.
//!
//! **Moves.** One node runs a move (the holder of the app's `placement` lease), in phases:
//!
//! | phase | the unit | the job |
//! |---|---|---|
//! | `dualWrite` | read from `from`, written to both | waits until every node writes both |
//! | `copy` | same | copies the unit's rows of every table from `from` to `to` (each row replaced whole, in one atomic write) |
//! | `verify` | same | compares the unit's rows in both, copies again the rows that differ, until a pass finds none |
//! | `switch` | read from `to`, written to both | waits until every node reads `to` |
//! | `stopOld` | read and written in `to` | waits until no node writes `from` |
//! | `drop` | same | deletes the unit's rows from `from` |
//!
//! While both are written, every write reaches both with the same cells (see `PlacedStore`), so
//! a row copied once stays equal unless a write raced with its copy; the verify pass catches
//! those, and a pass that finds no difference proves both hold the same rows from then on.
//! Reads switch only then; `from` is emptied once no node writes it, so once the move ends the
//! unit's rows are in `to` only. The status (`j:placement` in table `jobs`, row `A 0`) is saved
//! every half second with the phase, the table and the last row done; a node that stops or dies
//! leaves it running, and the node that takes the lease over resumes from there.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use penchant_store::{
    Mutation, PlacedStore, ReadRows, Route, Row, RowFilter, RowMutation, RowSet, Store, Workload,
    for_workload, unit_range,
};
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::events::migration::IN_FLIGHT;
use crate::jobs::{Job, JobState, Progress, Run, Runner, Runtime, hex, unhex};
use crate::tables::Rows;
use crate::{EngineError, Result, internal, keys};
use penchant_model::tables::PLACEMENTS_FAMILY as FAMILY;
pub use penchant_model::tables::{PLACEMENTS, PLACEMENTS_TABLE};

/// A placement's column in table `placements`.
const COLUMN: &[u8] = b"placement";
/// Rows copied (or deleted) in one write.
const ROWS_AT_ONCE: usize = 500;
/// Verify passes before a move gives up (each pass after the first only meets rows written
/// while the previous one ran).
const MAX_PASSES: u32 = 10;
/// Times a row seen different is read again from both targets before it is fixed.
const VERIFY_READS: u32 = 5;

/// The tables that never move: who lives where, and the leases that say who moves it.
pub fn pinned_tables() -> Vec<String> {
    crate::tables::named(Rows::Pinned)
        .map(str::to_owned)
        .collect()
}

/// The tables keyed by user (`app 0 user ...`): where a user's own placement applies.
pub fn user_tables() -> BTreeSet<String> {
    crate::tables::named(Rows::User)
        .map(str::to_owned)
        .collect()
}

/// What moves: an app, or one of its users.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    pub app: String,
    pub user: Option<String>,
}

impl Unit {
    pub fn app(app: &str) -> Self {
        Self {
            app: app.to_owned(),
            user: None,
        }
    }

    pub fn user(app: &str, user: &str) -> Self {
        Self {
            app: app.to_owned(),
            user: Some(user.to_owned()),
        }
    }

    /// The unit's key: `app`, or `app 0 user`.
    pub fn key(&self) -> Bytes {
        keys::placement(&self.app, self.user.as_deref())
    }

    fn of_key(key: &[u8]) -> Option<Self> {
        let (app, user) = keys::placement_of(key)?;
        Some(Self {
            app: app.to_owned(),
            user: user.map(str::to_owned),
        })
    }

    fn describe(&self) -> String {
        match &self.user {
            None => format!("app `{}`", self.app),
            Some(user) => format!("user `{user}` of app `{}`", self.app),
        }
    }
}

/// Where a unit's rows are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// The target reads use.
    pub target: String,
    /// During a move: the other target, written too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub also_written: Option<String>,
}

/// Where a move stands (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    DualWrite,
    Copy,
    Verify,
    Switch,
    StopOld,
    Drop,
    Done,
}

impl Phase {
    pub const ALL: [Phase; 7] = [
        Phase::DualWrite,
        Phase::Copy,
        Phase::Verify,
        Phase::Switch,
        Phase::StopOld,
        Phase::Drop,
        Phase::Done,
    ];

    fn next(self) -> Phase {
        crate::jobs::next_phase(&Phase::ALL, self)
    }

    /// The unit's placement in this phase.
    fn placement(self, from: &str, to: &str) -> Placement {
        let (target, also) = match self {
            Phase::DualWrite | Phase::Copy | Phase::Verify => (from, Some(to)),
            Phase::Switch => (to, Some(from)),
            Phase::StopOld | Phase::Drop | Phase::Done => (to, None),
        };
        Placement {
            target: target.to_owned(),
            also_written: also.map(str::to_owned),
        }
    }

    /// Whether this phase changes the placement (and then waits for every node to see it).
    fn changes_placement(self) -> bool {
        matches!(self, Phase::DualWrite | Phase::Switch | Phase::StopOld)
    }
}

/// A move's status, saved as it goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MoveStatus {
    pub state: JobState,
    /// The user moved; `None`: the whole app.
    pub user: Option<String>,
    pub from: String,
    pub to: String,
    pub phase: Phase,
    /// When the phase's placement change was made (Unix ms), once made.
    pub changed_at: Option<i64>,
    /// The table the copy, verify pass or drop is in, and the last row it finished there
    /// (hex): its checkpoint.
    pub table: Option<String>,
    pub after: Option<String>,
    /// Rows copied, rows found different (and copied again) by the verify passes, passes
    /// made, rows deleted from `from`.
    pub copied: u64,
    pub differences: u64,
    pub passes: u32,
    pub dropped: u64,
    /// Bytes of cell values copied.
    pub bytes: u64,
    /// Unix ms.
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub error: Option<String>,
    /// How far it is (every kind's status has one, in the same shape).
    #[serde(default)]
    pub progress: Progress,
}

impl MoveStatus {
    fn measure(&self) -> Progress {
        let done = match self.phase {
            Phase::Copy => self.copied,
            Phase::Verify => self.differences,
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

crate::jobs::status!(MoveStatus);

/// A row written whole: what was there is replaced by `row`'s cells.
fn replace(row: &Row) -> RowMutation {
    let mut mutations = Vec::with_capacity(row.cells.len() + 1);
    mutations.push(Mutation::DeleteFromRow);
    mutations.extend(row.cells.iter().map(|c| {
        Mutation::set(
            c.family.to_string(),
            c.qualifier.clone(),
            c.timestamp,
            c.value.clone(),
        )
    }));
    RowMutation::new(row.key.clone(), mutations)
}

/// Placements and moves. Without a placed store (one target), placements read as the default
/// and moves are refused.
#[derive(Debug)]
pub struct Residency {
    /// The engine's store (placements, job statuses).
    store: Arc<dyn Store>,
    placed: Option<PlacedStore>,
    clock: Clock,
    runner: Runner<Self>,
    /// Every table a unit's rows may be in.
    tables: Vec<String>,
    /// How long after a placement change every node has seen it.
    settle: Duration,
}

impl Residency {
    pub fn new(
        store: Arc<dyn Store>,
        placed: Option<PlacedStore>,
        runtime: &Runtime,
        clock: Clock,
        refresh: Duration,
    ) -> Self {
        Self {
            store,
            placed,
            clock,
            runner: runtime.runner(),
            tables: crate::tables::ALL
                .iter()
                .filter(|t| t.rows != Rows::Pinned)
                .map(|t| t.name.to_owned())
                .collect(),
            settle: refresh + IN_FLIGHT,
        }
    }

    /// Whether the node has placement targets (a placed store over several stores).
    pub fn has_targets(&self) -> bool {
        self.placed.is_some()
    }

    /// The targets' names; the first is the default.
    pub fn targets(&self) -> Vec<String> {
        match &self.placed {
            Some(placed) => {
                let default = placed.default_target().to_owned();
                std::iter::once(default.clone())
                    .chain(
                        placed
                            .target_names()
                            .filter(|n| **n != default)
                            .map(str::to_owned),
                    )
                    .collect()
            }
            None => vec![DEFAULT_TARGET.to_owned()],
        }
    }

    fn placed(&self) -> Result<&PlacedStore> {
        self.placed.as_ref().ok_or_else(|| {
            EngineError::Refused(
                "this node has a single store: placement needs targets ([placement.targets] in \
                 the configuration)"
                    .into(),
            )
        })
    }

    /// Every placed unit, from the store.
    async fn all(&self) -> Result<Vec<(Unit, Placement)>> {
        let rows = self
            .store
            .read_all(PLACEMENTS_TABLE, ReadRows::new(RowSet::all()))
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let (Some(unit), Some(cell)) = (Unit::of_key(&row.key), row.latest(FAMILY, COLUMN))
            else {
                continue;
            };
            let placement: Placement = serde_json::from_slice(&cell.value)
                .map_err(|e| internal("corrupt placement", e))?;
            out.push((unit, placement));
        }
        Ok(out)
    }

    fn route(unit: &Unit, placement: &Placement) -> Route {
        Route {
            also_written: placement.also_written.clone(),
            tables: unit.user.as_ref().map(|_| Arc::new(user_tables())),
            ..Route::at(unit.key(), placement.target.clone())
        }
    }

    /// Load every placement into the store's routes (at start, then every `refresh`).
    pub async fn load(&self) -> Result<()> {
        let Some(placed) = &self.placed else {
            return Ok(());
        };
        let routes: Vec<Route> = self
            .all()
            .await?
            .iter()
            .map(|(unit, placement)| Self::route(unit, placement))
            .collect();
        placed.set_routes(routes)?;
        Ok(())
    }

    /// Place units that have no placement yet (the configuration's `placement.apps`).
    pub async fn seed(&self, apps: &[(String, String)]) -> Result<()> {
        let placed: Vec<Unit> = self.all().await?.into_iter().map(|(u, _)| u).collect();
        for (app, target) in apps {
            let unit = Unit::app(app);
            if !placed.contains(&unit) {
                self.check_target(target)?;
                self.write(
                    &unit,
                    &Placement {
                        target: target.clone(),
                        also_written: None,
                    },
                )
                .await?;
            }
        }
        self.load().await
    }

    fn check_target(&self, target: &str) -> Result<()> {
        if self.targets().iter().any(|t| t == target) {
            Ok(())
        } else {
            Err(EngineError::Invalid(format!(
                "unknown placement target `{target}`; the targets are: {}",
                self.targets().join(", ")
            )))
        }
    }

    async fn write(&self, unit: &Unit, placement: &Placement) -> Result<()> {
        let json = serde_json::to_vec(placement).map_err(|e| internal("serialization", e))?;
        self.store
            .mutate_row(
                PLACEMENTS_TABLE,
                unit.key(),
                vec![Mutation::set_now(FAMILY, COLUMN, json)],
            )
            .await?;
        // This node sees its own change at once.
        self.load().await
    }

    /// Where a unit's rows are: its own placement, else its app's (for a user), else the
    /// default target.
    pub async fn placement(&self, unit: &Unit) -> Result<Placement> {
        let all = self.all().await?;
        let find = |u: &Unit| all.iter().find(|(x, _)| x == u).map(|(_, p)| p.clone());
        Ok(find(unit)
            .or_else(|| unit.user.as_ref().and_then(|_| find(&Unit::app(&unit.app))))
            .unwrap_or_else(|| Placement {
                target: self.targets()[0].clone(),
                also_written: None,
            }))
    }

    /// The users of an app placed on their own, with their placements.
    pub async fn placed_users(&self, app: &str) -> Result<Vec<(String, Placement)>> {
        Ok(self
            .all()
            .await?
            .into_iter()
            .filter(|(u, _)| u.app == app)
            .filter_map(|(u, p)| Some((u.user?, p)))
            .collect())
    }

    /// Place a unit that holds no rows yet (a new app, a new user) in `target`.
    pub async fn place(&self, unit: &Unit, target: &str) -> Result<Placement> {
        self.placed()?;
        self.check_target(target)?;
        if let Some(status) = self.status(&unit.app).await?
            && status.state == JobState::Running
        {
            return Err(EngineError::Refused(
                "a move of this app (or one of its users) is running: wait for it to end".into(),
            ));
        }
        for table in &self.tables_of(unit) {
            let request = ReadRows::new(Self::unit_rows(unit))
                .filter(RowFilter::StripValue)
                .limit(1);
            if !self.store.read_all(table, request).await?.is_empty() {
                return Err(EngineError::Refused(format!(
                    "the {} has rows already (table {table}): move it instead",
                    unit.describe()
                )));
            }
        }
        let placement = Placement {
            target: target.to_owned(),
            also_written: None,
        };
        self.write(unit, &placement).await?;
        Ok(placement)
    }

    /// The tables a unit has rows in: every table of an app's but the pinned ones; a user's
    /// tables keyed by user.
    fn tables_of(&self, unit: &Unit) -> Vec<String> {
        let users = user_tables();
        self.tables
            .iter()
            .filter(|t| unit.user.is_none() || users.contains(*t))
            .cloned()
            .collect()
    }

    /// The unit's rows in one of its tables: its key range.
    fn unit_rows(unit: &Unit) -> RowSet {
        RowSet::range(unit_range(&unit.key()))
    }

    /// Start moving a unit to `to`, in the background; refused while a move of the app (or
    /// one of its users) runs, or if the unit is in `to` already.
    pub async fn start(self: &Arc<Self>, unit: &Unit, to: &str) -> Result<MoveStatus> {
        self.placed()?;
        self.check_target(to)?;
        if let Some(status) = self.status(&unit.app).await?
            && status.state == JobState::Running
        {
            return Err(EngineError::Refused(format!(
                "a move of this app to `{}` is running: wait for it to end",
                status.to
            )));
        }
        let current = self.placement(unit).await?;
        if current.target == to && current.also_written.is_none() {
            return Err(EngineError::Refused(format!(
                "the {} is in `{to}` already",
                unit.describe()
            )));
        }
        let now = self.clock.now_ms();
        let status = MoveStatus {
            state: JobState::Running,
            user: unit.user.clone(),
            from: current.target.clone(),
            to: to.to_owned(),
            phase: Phase::DualWrite,
            changed_at: None,
            table: None,
            after: None,
            copied: 0,
            differences: 0,
            passes: 0,
            dropped: 0,
            bytes: 0,
            started_at: now,
            finished_at: None,
            error: None,
            progress: Progress::default(),
        };
        // A unit left between targets by a failed move whose reads moved already: only the
        // old target's writes and rows are left to stop and drop.
        let status = match &current.also_written {
            Some(other) if current.target == to => MoveStatus {
                from: other.clone(),
                phase: Phase::StopOld,
                ..status
            },
            _ => status,
        };
        self.runner.submit(self, &unit.app, status).await
    }

    /// The app's latest move (of the app or of one of its users), as last saved.
    pub async fn status(&self, app: &str) -> Result<Option<MoveStatus>> {
        self.runner.status(app).await
    }

    /// Resume every running move whose lease no node holds, from its checkpoint.
    pub async fn take_over(self: &Arc<Self>) -> Result<usize> {
        self.runner.take_over(self).await
    }

    /// A target as batch work sees it.
    fn target(&self, name: &str) -> Result<Arc<dyn Store>> {
        let store = self
            .placed()?
            .target(name)
            .ok_or_else(|| internal("unknown placement target", name))?;
        Ok(for_workload(store, Workload::Batch))
    }

    /// The unit's tables from the checkpoint's on, each with the row to start after.
    fn remaining(&self, unit: &Unit, run: &Run<Self>) -> Result<Vec<(String, Option<Bytes>)>> {
        let (table, after) = {
            let s = run.lock();
            (s.table.clone(), s.after.clone())
        };
        let tables = self.tables_of(unit);
        let start = table
            .and_then(|t| tables.iter().position(|x| *x == t))
            .unwrap_or(0);
        let after = after.map(|a| unhex(&a)).transpose()?;
        Ok(tables[start..]
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), if i == 0 { after.clone() } else { None }))
            .collect())
    }

    /// The unit's own rows of `table` in `target`, after `after`: its range, less the rows of
    /// units placed inside it.
    async fn scan(
        &self,
        target: &Arc<dyn Store>,
        table: &str,
        unit: &Unit,
        after: Option<Bytes>,
        filter: Option<RowFilter>,
    ) -> Result<Vec<Row>> {
        let mut rows = Self::unit_rows(unit);
        if let (Some(after), Some(range)) = (after, rows.ranges.first_mut()) {
            range.start = Bound::Excluded(after);
        }
        let mut request = ReadRows::new(rows);
        request.filter = filter;
        let placed = self.placed()?;
        let key = unit.key();
        let rows = target.read_all(table, request).await?;
        Ok(rows
            .into_iter()
            .filter(|r| placed.unit_of(table, &r.key).as_ref() == Some(&key))
            .collect())
    }

    /// Copy the unit's rows of every table from `from` to `to`, each row replaced whole.
    async fn copy(&self, unit: &Unit, run: &Run<Self>) -> Result<()> {
        let (from, to) = {
            let s = run.lock();
            (self.target(&s.from)?, self.target(&s.to)?)
        };
        for (table, after) in self.remaining(unit, run)? {
            let rows = self.scan(&from, &table, unit, after, None).await?;
            for chunk in rows.chunks(ROWS_AT_ONCE) {
                let bytes: usize = chunk
                    .iter()
                    .flat_map(|r| &r.cells)
                    .map(|c| c.value.len())
                    .sum();
                to.mutate_all(&table, chunk.iter().map(replace).collect())
                    .await?;
                let mut s = run.lock();
                s.table = Some(table.clone());
                s.after = chunk.last().map(|r| hex(&r.key));
                s.copied += chunk.len() as u64;
                s.bytes += bytes as u64;
            }
        }
        Ok(())
    }

    /// Compare the unit's rows in both targets and copy again those that differ, until a pass
    /// finds none.
    async fn verify(&self, unit: &Unit, run: &Run<Self>) -> Result<()> {
        let (from, to) = {
            let s = run.lock();
            (self.target(&s.from)?, self.target(&s.to)?)
        };
        loop {
            let pass = run.lock().passes;
            if pass >= MAX_PASSES {
                return Err(EngineError::Unavailable(format!(
                    "the {} still differs between targets after {MAX_PASSES} passes",
                    unit.describe()
                )));
            }
            let mut found = 0;
            for (table, _) in self.remaining(unit, run)? {
                let old = self.scan(&from, &table, unit, None, None).await?;
                let new = self.scan(&to, &table, unit, None, None).await?;
                // Rows the two scans saw differ: the scans ran one after the other while writes
                // kept arriving, so each is looked at again on its own before it is fixed.
                let mut differing = Vec::new();
                let (mut i, mut j) = (0, 0);
                while i < old.len() || j < new.len() {
                    match (old.get(i), new.get(j)) {
                        (Some(o), Some(n)) if o.key == n.key => {
                            if o != n {
                                differing.push(o.key.clone());
                            }
                            i += 1;
                            j += 1;
                        }
                        (Some(o), n) if n.is_none_or(|n| o.key < n.key) => {
                            differing.push(o.key.clone());
                            i += 1;
                        }
                        (_, Some(n)) => {
                            differing.push(n.key.clone());
                            j += 1;
                        }
                        (_, None) => break,
                    }
                }
                let mut fixes = Vec::new();
                for key in differing {
                    if let Some(fix) = self.diverged(&from, &to, &table, key).await? {
                        fixes.push(fix);
                    }
                }
                found += fixes.len() as u64;
                for chunk in fixes.chunks(ROWS_AT_ONCE) {
                    to.mutate_all(&table, chunk.to_vec()).await?;
                }
                run.lock().table = Some(table);
            }
            let mut s = run.lock();
            s.passes += 1;
            s.differences += found;
            s.table = None;
            if found == 0 {
                return Ok(());
            }
        }
    }

    /// Whether a row really differs between the targets, and then the write that makes `to`'s
    /// like `from`'s. Both are written alike while the verify runs, so two rows seen equal once
    /// stay equal; a row is read from both again a few times, a short while apart, and counts as
    /// diverged (a write raced with its copy) only if it never reads equal.
    async fn diverged(
        &self,
        from: &Arc<dyn Store>,
        to: &Arc<dyn Store>,
        table: &str,
        key: Bytes,
    ) -> Result<Option<RowMutation>> {
        let mut old = None;
        for attempt in 0..VERIFY_READS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(5 << attempt)).await;
            }
            old = from.read_row(table, key.clone(), None).await?;
            let new = to.read_row(table, key.clone(), None).await?;
            if old == new {
                return Ok(None);
            }
        }
        Ok(Some(match old {
            Some(row) => replace(&row),
            None => RowMutation::new(key, vec![Mutation::DeleteFromRow]),
        }))
    }

    /// Delete the unit's rows from `from`.
    async fn drop_old(&self, unit: &Unit, run: &Run<Self>) -> Result<()> {
        let from = {
            let s = run.lock();
            self.target(&s.from)?
        };
        for (table, after) in self.remaining(unit, run)? {
            let rows = self
                .scan(&from, &table, unit, after, Some(RowFilter::StripValue))
                .await?;
            for chunk in rows.chunks(ROWS_AT_ONCE) {
                let deletes = chunk
                    .iter()
                    .map(|r| RowMutation::new(r.key.clone(), vec![Mutation::DeleteFromRow]))
                    .collect();
                from.mutate_all(&table, deletes).await?;
                let mut s = run.lock();
                s.table = Some(table.clone());
                s.after = chunk.last().map(|r| hex(&r.key));
                s.dropped += chunk.len() as u64;
            }
        }
        Ok(())
    }
}

impl Job for Residency {
    type Status = MoveStatus;
    const KEY: &'static str = "placement";
    const NAME: &'static str = "move";

    fn enabled(&self) -> bool {
        self.placed.is_some()
    }

    /// The phases from where the status stands to the end.
    async fn steps(&self, run: &Run<Self>) -> Result<JobState> {
        loop {
            let status = run.status();
            let unit = match &status.user {
                Some(user) => Unit::user(run.app(), user),
                None => Unit::app(run.app()),
            };
            if status.phase.changes_placement() {
                let placement = status.phase.placement(&status.from, &status.to);
                let mark = |s: &mut MoveStatus, at| s.changed_at = Some(at);
                let change = self.write(&unit, &placement);
                run.change_and_settle(status.changed_at, self.settle, change, mark)
                    .await?;
            }
            match status.phase {
                Phase::Copy => self.copy(&unit, run).await?,
                Phase::Verify => self.verify(&unit, run).await?,
                Phase::Drop => self.drop_old(&unit, run).await?,
                Phase::Done => return Ok(JobState::Done),
                Phase::DualWrite | Phase::Switch | Phase::StopOld => {}
            }
            {
                let mut s = run.lock();
                s.phase = s.phase.next();
                s.changed_at = None;
                s.table = None;
                s.after = None;
            }
            run.save().await?;
        }
    }
}

/// The default target's name when none is configured.
pub const DEFAULT_TARGET: &str = "default";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_phases() {
        assert_eq!(&Unit::app("A").key()[..], b"A");
        assert_eq!(&Unit::user("A", "bob").key()[..], b"A\0bob");
        assert_eq!(Unit::of_key(b"A\0bob"), Some(Unit::user("A", "bob")));
        assert_eq!(Unit::of_key(b"A"), Some(Unit::app("A")));
        let key = b"A\0bob\0\x00\xff";
        assert_eq!(&unhex(&hex(key)).unwrap()[..], key);
        let mut phase = Phase::DualWrite;
        let mut seen = vec![phase];
        while phase != Phase::Done {
            phase = phase.next();
            seen.push(phase);
        }
        assert_eq!(seen, Phase::ALL);
        // Reads switch only after the verify, and the old target is written until reads moved.
        assert_eq!(Phase::Verify.placement("us", "eu").target, "us");
        assert_eq!(
            Phase::Switch.placement("us", "eu").also_written.as_deref(),
            Some("us")
        );
        assert_eq!(Phase::Drop.placement("us", "eu").also_written, None);
    }
}
