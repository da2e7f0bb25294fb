//! Races on a day's aggregate row, staged with a store that stops one operation at a gate:
//!
//! - a fold and an event of the same day (two requests for one user at once): the event is
//!   added after the fold read the row and before it writes. The fold must keep the event's
//!   `_last` time, or the day's aggregate would say the user's last event is older than it is
//!   (found by `penchant bench schema`, whose heavy users send concurrent batches);
//! - a request whose first attempt stopped after its events were stored and before their
//!   deltas (a crash), then retried: every event counts once;
//! - a rebuild of the day (the repair of an interrupted batch) while another event is
//!   half-written (stored, its delta not yet): it counts once;
//! - a fold that read the row before a rebuild and writes after it: it must not write its base
//!   over the rebuilt row.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use penchant_engine::aggregates::{self, AGGREGATES_TABLE};
use penchant_engine::events::{self, Event, EventType};
use penchant_engine::{Engine, EngineConfig};

use crate::support::{self, Gate, Hooked, Op};

const APP: &str = "APP";
const USER: &str = "u1";

/// An engine over a store gated at `op` on the aggregates, with an app and its strategy.
async fn gated(op: Op) -> (Arc<Hooked<Gate>>, Engine) {
    let store = Arc::new(Hooked::new(Gate::new(op, AGGREGATES_TABLE)));
    let engine = support::engine_with_app(
        store.clone(),
        EngineConfig::default(),
        APP,
        support::views(10, 10),
    )
    .await;
    (store, engine)
}

/// Today at 1 am (before now, whatever the time): events of one day.
fn early_today() -> i64 {
    let now = penchant_store::validate::now_micros() / 1000;
    (now - now.rem_euclid(86_400_000) + 3_600_000).min(now - 60_000)
}

/// The user's brand counts as the aggregates hold them, bases and deltas summed.
async fn brands(engine: &Engine) -> std::collections::BTreeMap<String, u64> {
    let counts = engine.aggregates().counts(APP, USER).await.unwrap();
    let brand = events::qualifier(EventType::View, "Viewed", "brand");
    counts.get(&brand).cloned().unwrap_or_default()
}

fn counted(pairs: &[(&str, u64)]) -> std::collections::BTreeMap<String, u64> {
    pairs.iter().map(|(b, n)| ((*b).to_owned(), *n)).collect()
}

/// The stream's profile is the one a full recompute gives.
async fn consistent(engine: &Engine) {
    let profile = engine.profiles().refresh(APP, USER).await.unwrap();
    let full = engine.profiles().recompute_one(APP, USER).await.unwrap();
    assert_eq!(profile, full);
}

fn view(brand: &str, timestamp: i64) -> Event {
    support::view(USER, brand, timestamp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_added_while_its_day_folds_keeps_its_time() {
    // A fold's conditional write waits at the gate.
    let (store, engine) = gated(Op::Conditional).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_request_whose_first_attempt_stopped_before_its_deltas_counts_once() {
    let (store, engine) = gated(Op::WriteRows).await;
    let start = early_today();
    let events: Vec<Event> = (0..10).map(|i| view("a", start + i)).collect();
    // The first attempt stores the events and stops before their deltas: a crash.
    let (deltas_wait, go) = store.hook.arm().await;
    let first = {
        let (engine, events) = (engine.clone(), events.clone());
        tokio::spawn(async move { engine.push_events(APP, &events).await })
    };
    deltas_wait.await.unwrap();
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    drop(go);
    assert_eq!(brands(&engine).await, counted(&[]), "no delta written");
    // The client retries the same events: acknowledged, so counted, once.
    engine.push_events(APP, &events).await.unwrap();
    assert_eq!(brands(&engine).await, counted(&[("a", 10)]));
    engine.push_events(APP, &events).await.unwrap();
    assert_eq!(brands(&engine).await, counted(&[("a", 10)]), "and again");
    consistent(&engine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_while_an_event_is_half_written_counts_it_once() {
    let (store, engine) = gated(Op::WriteRows).await;
    let start = early_today();
    let events: Vec<Event> = (0..5).map(|i| view("a", start + i)).collect();
    engine.push_events(APP, &events).await.unwrap();
    let day = aggregates::day_of(start);
    let row = penchant_engine::keys::day(APP, USER, day);
    engine.aggregates().fold(row.clone()).await.unwrap();
    // An event is stored; its delta waits.
    let (delta_waits, go) = store.hook.arm().await;
    let half = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.push_events(APP, &[view("b", start + 100)]).await })
    };
    delta_waits.await.unwrap();
    // Meanwhile the day is rebuilt from its raw events, which hold the event already.
    let layout = engine.tenancy().events_of(APP).await.unwrap().layout;
    engine
        .aggregates()
        .rebuild_day(APP, USER, day, layout)
        .await
        .unwrap();
    // And folded: the rebuilt delta of the event in flight is held (the rebuild holds what its
    // batch holds), so the delta still to come lands on its own copy, not on a base that has it.
    engine.aggregates().fold(row.clone()).await.unwrap();
    assert_eq!(brands(&engine).await, counted(&[("a", 5), ("b", 1)]));
    go.send(()).unwrap();
    half.await.unwrap().unwrap();
    assert_eq!(brands(&engine).await, counted(&[("a", 5), ("b", 1)]));
    engine.aggregates().fold(row).await.unwrap();
    assert_eq!(
        brands(&engine).await,
        counted(&[("a", 5), ("b", 1)]),
        "folded"
    );
    consistent(&engine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fold_that_read_before_a_rebuild_does_not_write_over_it() {
    let (store, engine) = gated(Op::Conditional).await;
    let start = early_today();
    let day = aggregates::day_of(start);
    let row = penchant_engine::keys::day(APP, USER, day);
    let events: Vec<Event> = (0..5).map(|i| view("a", start + i)).collect();
    engine.push_events(APP, &events).await.unwrap();
    support::intents_forgotten(&*store, APP).await;
    engine.aggregates().fold(row.clone()).await.unwrap();
    let more: Vec<Event> = (0..3).map(|i| view("a", start + 10 + i)).collect();
    engine.push_events(APP, &more).await.unwrap();
    support::intents_forgotten(&*store, APP).await;
    // A fold reads the base and the three deltas, and waits before its conditional write.
    let (fold_waits, go) = store.hook.arm().await;
    let fold = {
        let (engine, row) = (engine.clone(), row.clone());
        tokio::spawn(async move { engine.aggregates().fold(row).await })
    };
    fold_waits.await.unwrap();
    let layout = engine.tenancy().events_of(APP).await.unwrap().layout;
    engine
        .aggregates()
        .rebuild_day(APP, USER, day, layout)
        .await
        .unwrap();
    go.send(()).unwrap();
    assert!(!fold.await.unwrap().unwrap(), "the fold lost the race");
    assert_eq!(brands(&engine).await, counted(&[("a", 8)]));
    consistent(&engine).await;
}
