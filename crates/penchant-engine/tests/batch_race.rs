//! A batch recompute racing with the streaming path: an event arrives (and its refresh writes
//! the user's profile) after the batch read the user's events but before the batch writes. The
//! batch's older profile must not replace the fresher one.

mod common;

use std::sync::Arc;

use common::{Gate, Hooked, Op};
use penchant_engine::events::{Event, EventType, Target};
use penchant_engine::profiles::{PROFILES_TABLE, Source};
use penchant_engine::strategy::{EventScoring, FacetScoring, Strategy};
use penchant_engine::{Engine, EngineConfig};

const APP: &str = "APP";
const USER: &str = "u1";

fn strategy(brand_score: u32) -> Strategy {
    Strategy {
        events_scoring: vec![EventScoring {
            event_name: "Viewed".into(),
            event_type: EventType::View,
            score: 10,
        }],
        facets_scoring: vec![FacetScoring {
            facet_name: "brand".into(),
            score: brand_score,
        }],
        personalization_impact: 50,
    }
}

fn view(brand: &str, timestamp: i64) -> Event {
    Event {
        event_type: EventType::View,
        event_subtype: None,
        event_name: "Viewed".into(),
        index: "items".into(),
        user_token: USER.into(),
        authenticated_user_token: None,
        timestamp,
        target: Target::Filters(vec![("brand".into(), brand.into())]),
        query_id: None,
        positions: None,
        object_data: None,
        value: None,
        currency: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_during_a_batch_is_not_overwritten() {
    for source in [Source::Raw, Source::Aggregates] {
        // The batch's write of profiles waits at the gate.
        let store = Arc::new(Hooked {
            inner: Default::default(),
            hook: Gate::new(Op::WriteRows, PROFILES_TABLE),
        });
        let engine = Engine::open(store.clone(), EngineConfig::default())
            .await
            .unwrap();
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
        // Meanwhile an event: its streaming refresh writes the profile first.
        engine.push_events(APP, &[view("b", now)]).await.unwrap();
        go.send(()).unwrap();
        batch.await.unwrap().unwrap();

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
}
