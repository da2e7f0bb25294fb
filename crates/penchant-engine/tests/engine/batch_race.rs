//! A batch recompute racing with the streaming path: an event arrives (and its refresh writes
//! the user's profile) after the batch read the user's events but before the batch writes. The
//! batch's older profile must not replace the fresher one.

use std::sync::Arc;

use penchant_engine::events::Event;
use penchant_engine::profiles::{PROFILES_TABLE, Source};
use penchant_engine::strategy::Strategy;
use penchant_engine::{Engine, EngineConfig};

use crate::support::{self, Gate, Hooked, Op};

const APP: &str = "APP";
const USER: &str = "u1";

fn strategy(brand_score: u32) -> Strategy {
    support::views(10, brand_score)
}

fn view(brand: &str, timestamp: i64) -> Event {
    support::view(USER, brand, timestamp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_during_a_batch_is_not_overwritten() {
    for source in [Source::Raw, Source::Aggregates] {
        // The batch's write of profiles waits at the gate.
        let store = Arc::new(Hooked::new(Gate::new(Op::WriteRows, PROFILES_TABLE)));
        let engine = Engine::open(store.clone(), EngineConfig::default())
            .await
            .unwrap();
        race(engine, store, source, false).await;
    }
}

/// On a node alone on its store, users have states: the batch recomputes a chunk of users
/// under their locks, so an event of one of them waits for its write (and then counts on the
/// state the batch wrote, of the new strategy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_during_a_batch_waits_for_its_users() {
    for source in [Source::Raw, Source::Aggregates] {
        let store = Arc::new(Hooked::new(Gate::new(Op::Atomic, PROFILES_TABLE)));
        let config = EngineConfig {
            exclusive_store: true,
            ..EngineConfig::default()
        };
        let engine = Engine::open(store.clone(), config).await.unwrap();
        race(engine, store, source, true).await;
    }
}

async fn race(engine: Engine, store: Arc<Hooked<Gate>>, source: Source, alone: bool) {
    engine
        .tenancy()
        .create_app_with(Some(APP), "test", 30, Default::default())
        .await
        .unwrap();
    let now = penchant_store::validate::now_micros() / 1000;
    engine.strategies().set(APP, strategy(10)).await.unwrap();
    engine
        .push_events(APP, &[view("a", now - 10_000)])
        .await
        .unwrap();

    // A new strategy, recomputed by a batch that stops before it writes.
    let versioned = engine.strategies().set(APP, strategy(20)).await.unwrap();
    let (batch_waits, go) = store.hook.arm().await;
    let batch = {
        let engine = engine.clone();
        tokio::spawn(async move {
            engine
                .recomputes()
                .recompute_now(APP, &versioned, source, 1)
                .await
        })
    };
    batch_waits.await.unwrap();
    // Meanwhile an event: its streaming refresh writes the profile first (or, where the
    // batch holds its user, after the batch's write).
    let push = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.push_events(APP, &[view("b", now)]).await })
    };
    let push = match alone {
        true => {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            assert!(!push.is_finished(), "{source:?}: the event did not wait");
            Some(push)
        }
        false => {
            push.await.unwrap().unwrap();
            None
        }
    };
    go.send(()).unwrap();
    batch.await.unwrap().unwrap();
    if let Some(push) = push {
        push.await.unwrap().unwrap();
    }

    let (stored, _) = engine
        .profiles()
        .stored_profile(APP, USER)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.last_event_at, Some(now), "{source:?}: {stored:?}");
    assert!(stored.scores["brand"].contains_key("b"), "{source:?}");
    let full = engine.profiles().recompute_one(APP, USER).await.unwrap();
    assert_eq!(Some(stored), full, "{source:?}");
}
