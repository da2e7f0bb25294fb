//! A day's fold racing with an event of the same day (two requests for one user at once): the
//! event is added after the fold read the row and before it writes. The fold must keep the
//! event's `_last` time, or the day's aggregate would say the user's last event is older than
//! it is (found by `penchant bench schema`, whose heavy users send concurrent batches).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Gate, Hooked, Op};
use penchant_engine::aggregates::{self, AGGREGATES_TABLE};
use penchant_engine::events::{self, Event, EventType, Target};
use penchant_engine::strategy::{EventScoring, FacetScoring, Strategy};
use penchant_engine::{Engine, EngineConfig};

const APP: &str = "APP";
const USER: &str = "u1";

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
async fn an_event_added_while_its_day_folds_keeps_its_time() {
    // A fold's conditional write waits at the gate.
    let store = Arc::new(Hooked {
        inner: Default::default(),
        hook: Gate::new(Op::Conditional, AGGREGATES_TABLE),
    });
    let engine = Engine::open(store.clone(), EngineConfig::default())
        .await
        .unwrap();
    let strategy = Strategy {
        events_scoring: vec![EventScoring {
            event_name: "Viewed".into(),
            event_type: EventType::View,
            score: 10,
        }],
        facets_scoring: vec![FacetScoring {
            facet_name: "brand".into(),
            score: 10,
        }],
        personalization_impact: 50,
    };
    engine.set_strategy(APP, strategy).await.unwrap();
    // Noon today: the batches below stay in one day.
    let now = penchant_store::validate::now_micros() / 1000;
    let noon = now - now.rem_euclid(86_400_000) + 43_200_000;
    let day = noon.min(now - 60_000);

    // Batches of the day until one folds (one event in 16 does), which the gate stops.
    let (fold_waits, go) = store.hook.arm().await;
    let stop = Arc::new(AtomicBool::new(false));
    let folding = {
        let (engine, stop) = (engine.clone(), stop.clone());
        tokio::spawn(async move {
            // No later fold of the day: it would repair what the staged one did.
            for batch in 0..50 {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let events: Vec<Event> = (0..32)
                    .map(|i| view("a", day - 100_000 - batch * 100 - i))
                    .collect();
                engine.push_events(APP, &events).await.unwrap();
            }
        })
    };
    tokio::time::timeout(Duration::from_secs(30), fold_waits)
        .await
        .expect("no batch folded its day")
        .unwrap();
    stop.store(true, Ordering::SeqCst);
    // While the fold waits: the day's newest event, from another request (one that does not
    // fold the day itself: that fold, after the staged one, would repair what it did).
    let newest = (0..64)
        .map(|i| view("b", day - i))
        .find(|e| !aggregates::folds_day(&events::row_key(APP, e, 0).unwrap()))
        .unwrap();
    let day = newest.timestamp;
    engine.push_events(APP, &[newest]).await.unwrap();
    go.send(()).unwrap();
    folding.await.unwrap();

    let profile = engine.profiles().refresh(APP, USER).await.unwrap().unwrap();
    assert_eq!(profile.last_event_at, Some(day), "{profile:?}");
    let full = engine.profiles().recompute_one(APP, USER).await.unwrap();
    assert_eq!(Some(profile), full);
}
