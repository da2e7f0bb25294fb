//! Users' states on a node alone on a store with atomic writes: a batch updates its users'
//! profiles from their states, in its one write, without reading their aggregates; a store
//! written before states existed keeps its profiles, and its users gain states as their events
//! arrive, and all of them in a pass over the app's users.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use penchant_engine::aggregates::AGGREGATES_TABLE;
use penchant_engine::events::{Event, EventType};
use penchant_engine::jobs::JobState;
use penchant_engine::profiles::STATES_TABLE;
use penchant_engine::{Engine, EngineConfig};
use penchant_store::testing::{Hook, Hooked, Op};
use penchant_store::{MemStore, Store};

use crate::support;

const APP: &str = "APP";

/// Every data operation, by table.
#[derive(Debug, Default, Clone)]
struct Log(Arc<Mutex<Vec<(Op, String)>>>);

#[async_trait]
impl Hook for Log {
    async fn before(&self, op: Op, table: &str) -> penchant_store::Result<()> {
        if op.is_data() {
            self.0.lock().push((op, table.to_owned()));
        }
        Ok(())
    }
}

impl Log {
    fn take(&self) -> Vec<(Op, String)> {
        std::mem::take(&mut *self.0.lock())
    }
}

fn config(alone: bool) -> EngineConfig {
    EngineConfig {
        exclusive_store: alone,
        ..EngineConfig::default()
    }
}

fn events(users: &[&str], at: i64, brand: &str) -> Vec<Event> {
    users
        .iter()
        .enumerate()
        .flat_map(|(i, u)| {
            [
                support::event(
                    EventType::View,
                    "Viewed",
                    u,
                    at + i as i64,
                    &[("brand", brand)],
                ),
                support::event(
                    EventType::Conversion,
                    "Bought",
                    u,
                    at + 7,
                    &[("brand", "b")],
                ),
            ]
        })
        .collect()
}

/// Wait for the strategy's recompute (started as the app was given its strategy) to end: its
/// reads are no batch's.
async fn idle(engine: &Engine) {
    support::wait_until(
        "the recompute to end",
        Duration::from_secs(10),
        async || {
            let status = engine.recomputes().status(APP).await.unwrap();
            status.is_none_or(|s| s.state != JobState::Running)
        },
    )
    .await;
}

/// Every user's stored profile is what a full recompute from raw events gives.
async fn check(engine: &Engine, users: &[&str]) {
    for user in users {
        let full = engine.profiles().recompute_one(APP, user).await.unwrap();
        let stored = engine.profiles().stored_profile(APP, user).await.unwrap();
        assert_eq!(stored.map(|(p, _)| p), full, "{user}");
    }
}

fn reads_of(log: &[(Op, String)], table: &str) -> usize {
    log.iter()
        .filter(|(op, t)| *op == Op::Read && t == table)
        .count()
}

/// The reads of `table` before a batch's atomic write: the batch's own. (After it, one event
/// in `aggregates::FOLD_EVERY`, by its key's hash, folds its day's row: a read of aggregates
/// that is no profile's.)
fn batch_reads(log: &[(Op, String)], table: &str) -> usize {
    let write = log.iter().position(|(op, _)| *op == Op::Atomic);
    reads_of(&log[..write.expect("one atomic write")], table)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_updates_profiles_from_states_in_its_one_write() {
    let log = Log::default();
    let store: Arc<dyn Store> = Arc::new(Hooked::new(log.clone()));
    let engine =
        support::engine_with_app(store, config(true), APP, support::views_and_purchases()).await;
    let now = penchant_store::validate::now_micros() / 1000;
    let users = ["u1", "u2", "u3"];
    engine
        .push_events(APP, &events(&users, now - 60_000, "a"))
        .await
        .unwrap();
    check(&engine, &users).await;
    idle(&engine).await;
    log.take();
    // Known users and a new one: states read, no aggregate read, one atomic write.
    engine
        .push_events(APP, &events(&["u1", "u2", "u4"], now - 30_000, "c"))
        .await
        .unwrap();
    let ops = log.take();
    assert_eq!(batch_reads(&ops, AGGREGATES_TABLE), 0, "{ops:?}");
    assert_eq!(reads_of(&ops, STATES_TABLE), 1, "{ops:?}");
    // Profiles, states, seen marks: in the batch's atomic write only; no intent (every state
    // answered), so nothing to forget after.
    for table in [
        penchant_engine::profiles::PROFILES_TABLE,
        STATES_TABLE,
        penchant_engine::seen::SEEN_TABLE,
        penchant_engine::events::EVENTS_TABLE,
    ] {
        assert!(
            !ops.iter()
                .any(|(op, t)| t == table && !matches!(op, Op::Atomic | Op::Read)),
            "{table} is written in the batch's atomic write only: {ops:?}"
        );
    }

    check(&engine, &["u1", "u2", "u3", "u4"]).await;
    let profile = engine.profiles().get(APP, "u1").await.unwrap().unwrap();
    assert!(profile.scores["brand"].contains_key("c"), "{profile:?}");
    // A deletion: the state forgets what it counted before it, as a recompute does.
    engine
        .profiles()
        .delete_profile(APP, "u1", now - 1)
        .await
        .unwrap();
    engine
        .push_events(APP, &events(&["u1"], now + 1, "d"))
        .await
        .unwrap();
    check(&engine, &["u1"]).await;
    let profile = engine.profiles().get(APP, "u1").await.unwrap().unwrap();
    assert!(
        !profile.scores["brand"].contains_key("c"),
        "a deleted event counts: {profile:?}"
    );
    // An item viewed: marked seen in the batch's write, not in a write of its own.
    let mut view = support::event(EventType::View, "Viewed", "u4", now + 2, &[]);
    view.target = penchant_engine::events::Target::ObjectIds(vec!["item".into()]);
    idle(&engine).await;
    log.take();
    engine.push_events(APP, &[view]).await.unwrap();
    let ops = log.take();
    let seen_writes: Vec<_> = ops
        .iter()
        .filter(|(op, t)| t == penchant_engine::seen::SEEN_TABLE && *op != Op::Read)
        .collect();
    assert_eq!(seen_writes, [&(Op::Atomic, "seen".to_owned())], "{ops:?}");
    let seen = engine
        .seen()
        .exists(APP, "u4", &["item"], penchant_store::Consistency::Strong)
        .await
        .unwrap();
    assert_eq!(seen, [true], "the view's item is seen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_written_before_states_keeps_its_profiles_and_users_gain_states() {
    let log = Log::default();
    let inner = Arc::new(MemStore::new());
    let now = penchant_store::validate::now_micros() / 1000;
    // Written by a node without states (as the previous release wrote every store).
    let old: Arc<dyn Store> = Arc::new(Hooked::on(inner.clone(), ()));
    let before =
        support::engine_with_app(old, config(false), APP, support::views_and_purchases()).await;
    before
        .push_events(APP, &events(&["u1", "u2"], now - 60_000, "a"))
        .await
        .unwrap();
    before.shutdown().await.unwrap();
    let store: Arc<dyn Store> = Arc::new(Hooked::on(inner, log.clone()));
    let engine = Engine::open(store, config(true)).await.unwrap();
    check(&engine, &["u1", "u2"]).await;
    // u1's first batch since: no state yet, the profile is refreshed from the aggregates.
    log.take();
    engine
        .push_events(APP, &events(&["u1", "u5"], now - 30_000, "c"))
        .await
        .unwrap();
    assert!(reads_of(&log.take(), AGGREGATES_TABLE) > 0);
    check(&engine, &["u1", "u2", "u5"]).await;
    // Its next one: from the state built then.
    engine
        .push_events(APP, &events(&["u1"], now - 20_000, "d"))
        .await
        .unwrap();
    assert_eq!(batch_reads(&log.take(), AGGREGATES_TABLE), 0);
    check(&engine, &["u1", "u2", "u5"]).await;
    // A new user of an app without states for all: refreshed from the (empty) aggregates.
    engine
        .push_events(APP, &events(&["u6"], now - 15_000, "a"))
        .await
        .unwrap();
    assert!(reads_of(&log.take(), AGGREGATES_TABLE) > 0);
    // The pass over the app's users gives u2 (and only u2) a state and marks the app complete.
    let built = engine.profiles().build_states(APP).await.unwrap();
    assert_eq!(built, Some(1));
    assert_eq!(engine.profiles().build_states(APP).await.unwrap(), None);
    log.take();
    engine
        .push_events(APP, &events(&["u2", "u7"], now - 12_000, "f"))
        .await
        .unwrap();
    assert_eq!(batch_reads(&log.take(), AGGREGATES_TABLE), 0);
    check(&engine, &["u1", "u2", "u5", "u6", "u7"]).await;
    // A strategy change: states weighed with the old one no longer answer.
    engine
        .set_strategy(APP, support::views(3, 20))
        .await
        .unwrap();
    engine
        .push_events(APP, &events(&["u1"], now - 10_000, "e"))
        .await
        .unwrap();
    check(&engine, &["u1"]).await;
}
