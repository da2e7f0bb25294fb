//! This node's locks on the event path: the attempts of one request, and users.
//!
//! Who takes which (one list, so that no two holders wait on each other): the ingestion of a
//! batch on a shared store holds its users shared from its raw write until its deltas are
//! written ([`crate::ingest`]'s `intents.rs`); on the embedded store a batch takes its request's
//! turn ([`Attempts`]) and then holds its users alone from the read of which of its events are
//! stored to its write (`atomic.rs`); a rebuild of a user's days holds the user alone
//! (`repair.rs`); and a profile refresh that rebuilds states holds its users alone
//! ([`crate::profiles`]).

use penchant_model::keys;

/// Stripes of locks on batch ids, on this node: the attempts of one request written one at a
/// time where a batch is written atomically, so a later attempt finds the events stored.
#[derive(Debug)]
pub struct Attempts {
    stripes: Vec<tokio::sync::Mutex<()>>,
}

impl Default for Attempts {
    fn default() -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
        }
    }
}

impl Attempts {
    /// Hold the stripe of a batch.
    pub async fn lock(&self, batch: u64) -> tokio::sync::MutexGuard<'_, ()> {
        self.stripes[(batch % STRIPES as u64) as usize].lock().await
    }
}

/// Stripes of [`Attempts`]: two batches share one with odds 1 in this.
const STRIPES: usize = 256;

/// Per-user locks on this node: ingestion on Bigtable holds its users shared, a rebuild of a
/// user's days holds the user alone, and on the embedded store a batch holds its users alone
/// from the read of which of its events are stored to its write. A holder takes all its users
/// at once or waits for all of them (never some while it waits for others): two holders never
/// wait on each other in a cycle, and a batch waits only for the batches that share a user with it — rarely any, among
/// a million users — not for a queue of batches each holding part of what the next one needs.
#[derive(Debug, Default)]
pub struct UserLocks {
    /// Per held user (by hash): how many hold it shared, or [`ALONE`].
    held: parking_lot::Mutex<std::collections::HashMap<u64, isize>>,
    released: tokio::sync::Notify,
}

/// A user held alone.
const ALONE: isize = -1;

/// Users held in [`UserLocks`], let go when dropped.
#[derive(Debug)]
pub struct Held<'a> {
    locks: &'a UserLocks,
    users: Vec<u64>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        {
            let mut held = self.locks.held.lock();
            for user in &self.users {
                if let Some(n) = held.get_mut(user) {
                    if *n > 1 {
                        *n -= 1;
                    } else {
                        held.remove(user);
                    }
                }
            }
        }
        self.locks.released.notify_waiters();
    }
}

impl UserLocks {
    fn users<'u>(app: &str, users: impl IntoIterator<Item = &'u str>) -> Vec<u64> {
        let mut out: Vec<u64> = users
            .into_iter()
            .map(|u| xxhash_rust::xxh3::xxh3_64(&keys::user(app, u)))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Take every one of `users` at once (alone or shared), waiting until none is held in a
    /// way that excludes it.
    async fn take(&self, users: Vec<u64>, alone: bool) -> Held<'_> {
        loop {
            // Registered before the check, so a release between the two is not missed.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            {
                let mut held = self.held.lock();
                let free = users.iter().all(|u| match held.get(u) {
                    None => true,
                    Some(&n) => !alone && n != ALONE,
                });
                if free {
                    for u in &users {
                        if alone {
                            held.insert(*u, ALONE);
                        } else {
                            *held.entry(*u).or_insert(0) += 1;
                        }
                    }
                    return Held { locks: self, users };
                }
            }
            released.await;
        }
    }

    /// Hold these users shared (an ingestion of their events, on Bigtable).
    pub async fn shared<'u>(
        &self,
        app: &str,
        users: impl IntoIterator<Item = &'u str>,
    ) -> Held<'_> {
        self.take(Self::users(app, users), false).await
    }

    /// Hold these users alone (a batch that updates their states, or a refresh that rebuilds
    /// them).
    pub async fn exclusive_many<'u>(
        &self,
        app: &str,
        users: impl IntoIterator<Item = &'u str>,
    ) -> Held<'_> {
        self.take(Self::users(app, users), true).await
    }

    /// Hold a user alone (a rebuild of the user's days).
    pub async fn exclusive(&self, app: &str, user: &str) -> Held<'_> {
        self.exclusive_many(app, [user]).await
    }
}

#[cfg(test)]
mod user_locks {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn holders_of_disjoint_users_never_wait_and_sharers_exclude_an_alone_holder() {
        let locks = UserLocks::default();
        let a = locks.exclusive_many("app", ["u1", "u2"]).await;
        // Other users: at once.
        let b = locks.exclusive_many("app", ["u3"]).await;
        let same = tokio::time::timeout(Duration::from_millis(50), locks.shared("app", ["u2"]));
        assert!(same.await.is_err(), "u2 is held alone");
        drop(a);
        let s1 = locks.shared("app", ["u2", "u1"]).await;
        let s2 = locks.shared("app", ["u2"]).await;
        let alone = tokio::time::timeout(Duration::from_millis(50), locks.exclusive("app", "u2"));
        assert!(alone.await.is_err(), "u2 is held shared");
        drop(s1);
        drop(s2);
        let _u2 = locks.exclusive("app", "u2").await;
        drop(b);
        let _u3 = locks.exclusive("app", "u3").await;
        assert!(locks.held.lock().len() == 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_is_woken_by_the_release_it_waits_for() {
        let locks = std::sync::Arc::new(UserLocks::default());
        let held = locks.exclusive("app", "u1").await;
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move {
                let _g = locks.exclusive_many("app", ["u0", "u1"]).await;
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
        assert!(locks.held.lock().is_empty());
    }
}
