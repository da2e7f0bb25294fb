//! Leases: so that with several nodes on one store, exactly one runs a piece of background work
//! (an app's profile recompute, the retention purge, the repair sweep).
//!
//! A lease is one cell (table `leases`, row [`keys::lease`], column `l:holder`) whose value is
//! the holder's node id and whose timestamp is when the lease expires. Taking and renewing are
//! check-and-mutate writes, atomic on the row: renew if the cell holds this node's id and has not
//! expired; take if no unexpired cell is there. A holder renews well before expiry while it
//! works and releases the lease when it stops; a holder that dies stops renewing, and another node
//! takes the lease once it has expired — and resumes the work from its last checkpoint.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use penchant_store::{Mutation, RowFilter, Store, TimeRange};

use crate::clock::Clock;
use crate::{Result, keys};
use penchant_model::tables::LEASES_FAMILY as FAMILY;
pub use penchant_model::tables::{LEASES, LEASES_TABLE};

const HOLDER: &[u8] = b"holder";
/// A lease's life without renewal when none is configured.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// The apps whose work of one kind (a recompute, a training) runs on this node. A claim is an
/// app in this node's set and the app's lease of that kind: at most one run per app on this
/// node (a second claim here fails at once, without a store round trip) and one on all nodes.
#[derive(Debug)]
pub struct Claims {
    leases: Leases,
    /// The lease's name.
    name: &'static str,
    running: parking_lot::Mutex<std::collections::HashSet<String>>,
}

impl Claims {
    pub fn new(leases: Leases, name: &'static str) -> Self {
        Self {
            leases,
            name,
            running: parking_lot::Mutex::default(),
        }
    }

    /// Claim an app's work for this node: `false` if it runs here already or another node
    /// holds its lease.
    pub async fn claim(&self, app: &str) -> Result<bool> {
        if !self.running.lock().insert(app.to_owned()) {
            return Ok(false);
        }
        match self.leases.acquire(app, self.name).await {
            Ok(true) => Ok(true),
            other => {
                self.running.lock().remove(app);
                other
            }
        }
    }

    /// Renew a claim's lease: `false` if it was lost.
    pub async fn renew(&self, app: &str) -> Result<bool> {
        self.leases.renew(app, self.name).await
    }

    /// Give a claim up: release the lease, forget the app.
    pub async fn release(&self, app: &str) -> Result<()> {
        let released = self.leases.release(app, self.name).await;
        self.running.lock().remove(app);
        released
    }

    /// How many apps' work runs on this node.
    pub fn count(&self) -> usize {
        self.running.lock().len()
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        self.leases.node()
    }
}

/// This node's leases.
#[derive(Debug, Clone)]
pub struct Leases {
    store: Arc<dyn Store>,
    clock: Clock,
    /// This node's id: random, 16 hex digits.
    node: String,
    ttl: Duration,
}

impl Leases {
    /// Leases over `store`, held for `ttl` (0: [`DEFAULT_TTL`]) after each take or renewal.
    pub fn new(store: Arc<dyn Store>, clock: Clock, ttl: Duration) -> Self {
        Self {
            store,
            clock,
            node: format!("{:016x}", rand::random::<u64>()),
            ttl: if ttl.is_zero() { DEFAULT_TTL } else { ttl },
        }
    }

    /// How long a lease lasts without renewal.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Whole ms, in µs (Bigtable's timestamp granularity).
    fn now(&self) -> i64 {
        self.clock.now_ms() * 1000
    }

    /// An unexpired holder cell.
    fn unexpired(&self) -> RowFilter {
        RowFilter::column(FAMILY, HOLDER).and(RowFilter::TimestampRange(TimeRange {
            start: Some(self.now() + 1000),
            end: None,
        }))
    }

    fn hold(&self) -> Vec<Mutation> {
        let until = self.now() + self.ttl.as_millis() as i64 * 1000;
        vec![
            Mutation::delete_column(FAMILY, HOLDER),
            Mutation::set(FAMILY, HOLDER, until, self.node.clone()),
        ]
    }

    /// Take the lease `name` of `app` ("" for a global one), or renew it if this node holds it.
    /// Returns whether this node holds it now.
    pub async fn acquire(&self, app: &str, name: &str) -> Result<bool> {
        let row = keys::lease(app, name);
        if self.renew_row(row.clone()).await? {
            return Ok(true);
        }
        let taken_by_other = self
            .store
            .check_and_mutate_row(
                LEASES_TABLE,
                row,
                Some(self.unexpired()),
                vec![],
                self.hold(),
            )
            .await?;
        Ok(!taken_by_other)
    }

    /// Renew a lease this node holds; `false` if it does not hold it (any more).
    pub async fn renew(&self, app: &str, name: &str) -> Result<bool> {
        self.renew_row(keys::lease(app, name)).await
    }

    async fn renew_row(&self, row: Bytes) -> Result<bool> {
        let mine = self
            .unexpired()
            .and(RowFilter::ValueRegex(format!("^{}$", self.node)));
        Ok(self
            .store
            .check_and_mutate_row(LEASES_TABLE, row, Some(mine), self.hold(), vec![])
            .await?)
    }

    /// Run `work` under the lease `name` of `app` ("" for a global one): `None` if another
    /// node holds it. The lease is renewed every third of its life while the work runs, and
    /// released after. A renewal that finds the lease lost (this node stalled past its expiry,
    /// and another took it) or cannot reach the store stops the work where it stands, lest two
    /// nodes do it at once: work run so must be safe to stop at any await.
    pub async fn run<T>(
        &self,
        app: &str,
        name: &str,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<Option<T>> {
        if !self.acquire(app, name).await? {
            return Ok(None);
        }
        tokio::pin!(work);
        let outcome = loop {
            tokio::select! {
                outcome = &mut work => break outcome,
                () = tokio::time::sleep(self.ttl / 3) => match self.renew(app, name).await {
                    Ok(true) => {}
                    Ok(false) => {
                        return Err(crate::EngineError::Unavailable(format!(
                            "lease {name:?} lost while its work ran: another node took it"
                        )));
                    }
                    Err(e) => break Err(e),
                },
            }
        };
        self.release(app, name).await?;
        outcome.map(Some)
    }

    /// Give a lease up (if this node holds it), so another node may take it at once.
    pub async fn release(&self, app: &str, name: &str) -> Result<()> {
        let mine = RowFilter::column(FAMILY, HOLDER)
            .and(RowFilter::ValueRegex(format!("^{}$", self.node)));
        self.store
            .check_and_mutate_row(
                LEASES_TABLE,
                keys::lease(app, name),
                Some(mine),
                vec![Mutation::delete_column(FAMILY, HOLDER)],
                vec![],
            )
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_node_holds_a_lease_until_it_expires_or_is_released() {
        let store: Arc<dyn Store> = Arc::new(penchant_store::MemStore::new());
        crate::tables::create(&*store, &[LEASES]).await.unwrap();
        let clock = Clock::manual(1_800_000_000_000_000);
        let ttl = Duration::from_secs(10);
        let a = Leases::new(store.clone(), clock.clone(), ttl);
        let b = Leases::new(store, clock.clone(), ttl);
        assert!(a.acquire("APP", "job").await.unwrap());
        assert!(!b.acquire("APP", "job").await.unwrap(), "held by a");
        assert!(
            b.acquire("APP", "other").await.unwrap(),
            "leases are per name"
        );
        assert!(b.acquire("APP2", "job").await.unwrap(), "and per app");
        clock.advance(Duration::from_secs(9));
        assert!(a.renew("APP", "job").await.unwrap());
        clock.advance(Duration::from_secs(9));
        assert!(!b.acquire("APP", "job").await.unwrap(), "renewed: 1 s left");
        clock.advance(Duration::from_secs(2));
        assert!(!a.renew("APP", "job").await.unwrap(), "expired");
        assert!(b.acquire("APP", "job").await.unwrap(), "taken over");
        assert!(!a.acquire("APP", "job").await.unwrap());
        b.release("APP", "job").await.unwrap();
        a.release("APP", "job").await.unwrap();
        assert!(a.acquire("APP", "job").await.unwrap(), "released");
    }

    #[tokio::test]
    async fn a_lease_is_renewed_while_its_work_runs_and_the_work_stops_once_it_is_lost() {
        let store: Arc<dyn Store> = Arc::new(penchant_store::MemStore::new());
        crate::tables::create(&*store, &[LEASES]).await.unwrap();
        let clock = Clock::manual(1_800_000_000_000_000);
        let ttl = Duration::from_millis(300);
        let a = Leases::new(store.clone(), clock.clone(), ttl);
        let b = Leases::new(store.clone(), clock.clone(), ttl);
        let expiry = || {
            let store = store.clone();
            async move {
                let row = store
                    .read_row(LEASES_TABLE, keys::lease("", "repair"), None)
                    .await
                    .unwrap();
                row.and_then(|r| r.latest(FAMILY, HOLDER).map(|c| c.timestamp))
            }
        };
        let wait_for = |what: &'static str, until: Box<dyn Fn(Option<i64>) -> bool + Send>| async move {
            for _ in 0..1000 {
                if until(expiry().await) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("{what}");
        };
        // The work runs until told to stop (or is dropped).
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn({
            let a = a.clone();
            async move {
                a.run("", "repair", async {
                    let _ = stopped.await;
                    Ok(())
                })
                .await
            }
        });
        wait_for("a takes the lease", Box::new(|e| e.is_some())).await;
        let first = expiry().await.unwrap();
        // The work outlives the lease's first term: a renews it.
        clock.advance(Duration::from_millis(200));
        wait_for("a renews", Box::new(move |e| e > Some(first))).await;
        clock.advance(Duration::from_millis(200));
        assert!(
            !b.acquire("", "repair").await.unwrap(),
            "renewed past its first term"
        );
        // a stalls past the expiry: b takes the lease, and a's work stops where it stands.
        clock.advance(Duration::from_secs(10));
        assert!(b.acquire("", "repair").await.unwrap());
        let outcome = tokio::time::timeout(Duration::from_secs(30), running)
            .await
            .expect("the work stops")
            .unwrap();
        assert!(
            matches!(outcome, Err(crate::EngineError::Unavailable(_))),
            "{outcome:?}"
        );
        assert!(stop.is_closed(), "the work was dropped");
        assert!(!a.renew("", "repair").await.unwrap(), "b holds it");
    }
}
