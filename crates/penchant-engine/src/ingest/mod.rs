//! The event path: one batch of events, from the request to its tallies, in the order it runs.
//!
//! A batch (already valid: the HTTP layer parsed and checked it) goes through these steps, each
//! the function of one file:
//!
//! | step | what it does | file |
//! |---|---|---|
//! | 1. arrive | events without a timestamp take their first attempt's arrival (a request's, [`Ingest::push_request`]) | `arrivals.rs` |
//! | 2. keep | the events in the app's retention window (a short one: those past it are the purge's) | `Ingest::within_retention` |
//! | 3. identify | the batch's id, a hash of the app and its events, the same for every attempt of the request | [`crate::pending::batch_id`] |
//! | 4. find what is stored | the events' row keys (each named by what it says and its occurrence among identical events of the request: [`crate::events::row_key`]), which of them exist (a retry's, in any order or cut), their items' facet values and the items not in the catalog yet | [`crate::events::Events::prepare`] |
//! | 5. commit | **atomically** (the embedded store, one node): the request's turn, its users held alone from step 4, the event rows, their deltas, the seen marks and the users' profiles from their states, in one write and one shared fsync — or **with an intent** (a shared store, Bigtable): the intent first, then the event rows, then the deltas, the users held shared on this node meanwhile | `atomic.rs`, `intents.rs` |
//! | 6. tally | traffic per minute, trends, A/B tests' attribution, waiting events | `tallies.rs` |
//! | 7. settle | the events whose items arrived while they were stored, and the profiles of the users the commit did not update | `settle.rs` |
//! | 8. mark seen | the seen marks of a batch written with an intent; the folds of the filters an atomic write outgrew | `marks.rs` |
//! | 9. let go | the intent, once its work is done (in the background) | `intents.rs`, `atomic.rs` |
//!
//! Steps 7 and 8 run side by side. Whatever stops half-way is finished by the repair
//! (`repair.rs`) from the intent left behind ([`crate::pending`]); the locks each step takes
//! are listed in [`crate::locks`].

mod arrivals;
mod atomic;
mod intents;
mod marks;
mod repair;
mod settle;
mod tallies;

use std::borrow::Cow;
use std::sync::Arc;

use penchant_store::Store;

use crate::abtests::AbTests;
use crate::aggregates::Aggregates;
use crate::catalog::Catalog;
use crate::clock::Clock;
use crate::events::{Event, Events, waiting};
use crate::leases::Leases;
use crate::locks::{Attempts, UserLocks};
use crate::pending::{self, Pending};
use crate::profiles::Profiles;
use crate::recommend::trending::Trends;
use crate::seen::Seen;
use crate::stats::Traffic;
use crate::supervisor::Supervisor;
use crate::tenancy::{AppEvents, MAX_RETENTION_DAYS, Tenancy};
use crate::{Result, latency};

/// What the event path reads and writes: the services a batch passes through, and this
/// node's locks and counts of it.
#[derive(Debug)]
pub struct Ingest {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) tenancy: Arc<Tenancy>,
    pub(crate) catalog: Catalog,
    pub(crate) events: Events,
    pub(crate) aggregates: Aggregates,
    pub(crate) profiles: Profiles,
    pub(crate) seen: Arc<Seen>,
    pub(crate) pending: Pending,
    pub(crate) leases: Leases,
    pub(crate) supervisor: Arc<Supervisor>,
    pub(crate) clock: Clock,
    pub(crate) traffic: Arc<Traffic>,
    pub(crate) trends: Arc<Trends>,
    pub(crate) abtests: Arc<AbTests>,
    /// Ingestion and rebuilds of a user's days kept apart on this node.
    pub(crate) user_locks: Arc<UserLocks>,
    /// Whether a batch of events is written in one atomic write (this node alone on a store
    /// that has them): see [`Ingest::push`].
    pub(crate) atomic: bool,
    /// The attempts of one request, one at a time (when `atomic`).
    pub(crate) attempts: Arc<Attempts>,
    /// Events stored waiting for their items, and counted later, per app.
    pub(crate) waiting_counts: Arc<waiting::Counts>,
    /// How long the streaming refresh of a batch's profiles takes.
    pub(crate) refresh_latency: Arc<latency::Latencies>,
}

impl Ingest {
    /// Store valid events, then add them to their days' aggregates and refresh their users'
    /// profiles from them (the streaming path), while their items are marked seen: a profile
    /// read after this returns reflects the events. Each step is one write for the whole batch,
    /// whichever users it holds. Where the store writes atomically and this node is alone on
    /// it, the batch is written in one write (`atomic.rs`); elsewhere an intent recorded before
    /// the events lets the repair finish the work if this stops half-way, and holds the batch's
    /// deltas out of folds meanwhile, so that an attempt of the request beside this one still
    /// in flight (or dead) writes them again without counting an event twice (`intents.rs`).
    pub async fn push(&self, app: &str, events: &[Event]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let of = self.tenancy.events_of(app).await?;
        let events = &*self.within_retention(of, events);
        if events.is_empty() {
            return Ok(());
        }
        let batch = pending::batch_id(app, events)?;
        let layouts = of.written();
        if self.atomic {
            self.push_atomically(app, batch, events, &layouts).await
        } else {
            self.push_with_intent(app, batch, events, &layouts).await
        }
    }

    /// Store a request's valid events, as [`Ingest::push`] does; those at `stamped` came
    /// without a timestamp and carry the request's arrival: each takes instead the arrival of
    /// the first attempt of the request that brought it within the retry window
    /// (`arrivals.rs`), so that a retry names the same events.
    pub async fn push_request(
        &self,
        app: &str,
        mut events: Vec<Event>,
        stamped: &[usize],
    ) -> Result<()> {
        self.first_arrivals(app, &mut events, stamped).await?;
        self.push(app, &events).await
    }

    /// The events of an app with a short retention window that are still in it: those past it
    /// are not stored (the purge would take them, [`crate::retention`]; a late retry of a
    /// request the purge took would count them again until the next purge).
    fn within_retention<'e>(&self, of: AppEvents, events: &'e [Event]) -> Cow<'e, [Event]> {
        if of.retention_days >= MAX_RETENTION_DAYS {
            return Cow::Borrowed(events);
        }
        let cutoff = self.clock.now_micros() - of.retention().as_micros() as i64;
        let kept = |e: &Event| e.timestamp.saturating_mul(1000) >= cutoff;
        if events.iter().all(kept) {
            Cow::Borrowed(events)
        } else {
            Cow::Owned(events.iter().filter(|e| kept(e)).cloned().collect())
        }
    }

    /// Per app: events stored waiting for their items, and counted later, by this node.
    pub fn waiting_events(&self) -> Vec<(String, u64, u64)> {
        self.waiting_counts.snapshot()
    }

    /// How long the streaming refresh of a batch's profiles took.
    pub fn profile_refresh(&self) -> latency::LatencySnapshot {
        self.refresh_latency.snapshot()
    }
}
