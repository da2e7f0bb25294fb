//! Events: ingestion ([`crate::ingest`]), the repair of interrupted batches, the retention
//! purge ([`crate::retention`]), and what the dashboard shows of them.

use crate::{Engine, Result, events, keys, retention, stats};

/// The global lease of the purge.
const PURGE_LEASE: &str = "purge";

/// Events.
impl Engine {
    /// Store valid events and count them: a profile read after this returns reflects them
    /// ([`crate::ingest::Ingest::push`]).
    pub async fn push_events(&self, app: &str, events: &[events::Event]) -> Result<()> {
        self.ingest.push(app, events).await
    }

    /// Store a request's valid events, those at `stamped` stamped with its arrival (they came
    /// without a timestamp): each takes the arrival of the first attempt of the request that
    /// brought it, within the retry window ([`crate::ingest::Ingest::push_request`]).
    pub async fn push_request(
        &self,
        app: &str,
        events: Vec<events::Event>,
        stamped: &[usize],
    ) -> Result<()> {
        self.ingest.push_request(app, events, stamped).await
    }

    /// Finish the work of event batches that stopped half-way more than `age` ago
    /// ([`crate::ingest::Ingest::repair`]). Returns how many it finished.
    pub async fn repair(&self, age: std::time::Duration) -> Result<usize> {
        self.ingest.repair(age).await
    }

    /// One repair round under the repair lease (one node at a time): whether it ran.
    pub async fn repair_once(&self, age: std::time::Duration) -> Result<bool> {
        self.ingest.repair_once(age).await
    }

    /// Delete the events (and per-day aggregates) of every app that are older than the app's
    /// retention window ([`retention::purge_all`]). Returns how many event rows and aggregate
    /// rows it deleted, or `None` when another node holds the purge's lease (it is purging).
    pub async fn purge_expired(&self) -> Result<Option<(u64, u64)>> {
        let purge = retention::purge_all(&self.store, &self.tenancy, &self.clock);
        self.leases.run("", PURGE_LEASE, purge).await
    }

    /// An app's events per minute by type over the last `hours` (1–48), as received.
    pub async fn events_per_minute(&self, app: &str, hours: u32) -> Result<stats::EventsPerMinute> {
        self.traffic.flush().await?;
        stats::events_per_minute(&self.store, app, hours, self.clock.now_ms()).await
    }

    /// A user's latest events (at most `limit`), newest first, as stored.
    pub async fn recent_events(
        &self,
        app: &str,
        user: &str,
        limit: usize,
    ) -> Result<Vec<events::Event>> {
        keys::check_user_token(user)?;
        self.profiles.recent_events(app, user, limit).await
    }
}
