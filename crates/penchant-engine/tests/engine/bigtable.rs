//! The engine's scenarios on the Bigtable backend (real emulators, started per test): the
//! emulator was seen returning some cells of a day's aggregate row twice, which folds counted
//! twice; and residency between two emulators standing for two regions' instances.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use penchant_engine::events::Event;
use penchant_engine::jobs::JobState;
use penchant_engine::residency::Phase;
use penchant_engine::{Consistency, keys};
use penchant_store::{ReadRows, RowSet, Store, unit_range};
use penchant_store_bigtable::BigtableStore;
use penchant_store_bigtable::emulator::Emulator;

use crate::residency::{finished, node, rows_of, wide_apps};
use crate::{concurrent_days, support};

async fn connect(emulator: &Emulator) -> Arc<dyn Store> {
    Arc::new(BigtableStore::connect(emulator.config("")).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_of_the_same_days_count_every_event_once_on_bigtable() {
    let emulator = Emulator::start();
    concurrent_days::every_event_counts_once(connect(&emulator).await).await;
}

/// Two nodes on one emulator (`APP` weighing views): the retries' scenarios.
async fn two_nodes(
    emulator: &Emulator,
) -> (
    Arc<dyn Store>,
    penchant_engine::Engine,
    penchant_engine::Engine,
) {
    let store = connect(emulator).await;
    let config = penchant_engine::EngineConfig::default;
    let a = support::engine_with_app(store.clone(), config(), "APP", support::views(10, 10)).await;
    let b = penchant_engine::Engine::open(store.clone(), config())
        .await
        .unwrap();
    (store, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_in_another_order_or_cut_counts_once_on_bigtable() {
    let emulator = Emulator::start();
    let (store, a, b) = two_nodes(&emulator).await;
    crate::retries::other_orders_and_cuts_count_once(store, a, b, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retries_of_events_without_a_timestamp_count_once_on_bigtable() {
    let emulator = Emulator::start();
    let (store, a, b) = two_nodes(&emulator).await;
    crate::retries::retries_without_timestamps_count_once(store, a, b).await;
}

/// The ranker job on the emulator: learned, stored, its queues written, taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_ranker_job_learns_and_writes_its_queues_on_bigtable() {
    let emulator = Emulator::start();
    crate::ranker::ranker_job_on(connect(&emulator).await).await;
}

const APP: &str = "SHOP";
const CONTROL: &str = "CTRL";
const USERS: usize = 40;
const WITHIN: Duration = Duration::from_secs(180);
const REFRESH: Duration = Duration::from_millis(100);

fn event(n: usize, now: i64) -> Event {
    crate::residency::event(n, now, USERS)
}

/// An app moves from one emulator to the other while a writer sends events and a reader reads
/// profiles, the node running the move is killed mid-move and another finishes it; then one user
/// of another app moves apart. Afterwards each emulator holds exactly what its placements say,
/// and the moved app's profiles equal those of an app fed the same events that never moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_app_and_a_user_move_between_emulators_while_served() {
    let (us, eu) = (Emulator::start(), Emulator::start());
    let a = node(connect(&us).await, connect(&eu).await, REFRESH).await;
    let b = node(connect(&us).await, connect(&eu).await, REFRESH).await;
    wide_apps(&b, &[APP, CONTROL]).await;
    let now = b.now_ms();
    let initial = 1_000;
    support::feed(&b, &[APP, CONTROL], initial, 200, |n| event(n, now)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let pace = (initial, 5, Duration::from_millis(20));
    let writer = support::writer(
        b.clone(),
        [APP, CONTROL],
        pace,
        move |i| event(i, now),
        stop.clone(),
    );
    let reader = support::reader(b.clone(), APP, USERS, stop.clone());
    a.start_background(None);
    b.start_background(None);
    a.move_placement(APP, None, "eu").await.unwrap();
    // A dies once the move has copied rows (or later): B takes it over.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = b.placement(APP, None).await.unwrap().1.unwrap();
        if status.phase > Phase::Copy || status.copied > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the copy did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.kill_background();
    let done = finished(&b, APP, WITHIN).await;
    stop.store(true, Ordering::SeqCst);
    let sent = writer.await.unwrap();
    let reads = reader.await.unwrap();
    assert_eq!(done.state, JobState::Done, "{done:?}");
    assert!(sent > initial && reads > 0);

    let (us_store, eu_store) = (connect(&us).await, connect(&eu).await);
    assert_eq!(rows_of(&*us_store, APP.as_bytes()).await, BTreeMap::new());
    assert!(rows_of(&*eu_store, CONTROL.as_bytes()).await.is_empty());
    let events = eu_store
        .read_all(
            "events",
            ReadRows::new(RowSet::range(unit_range(APP.as_bytes()))),
        )
        .await
        .unwrap();
    let events = events
        .iter()
        .filter(|r| keys::user_of(APP, &r.key).is_some())
        .count();
    assert_eq!(events, sent, "every event once, in eu");
    for i in 0..USERS {
        let user = format!("u{i:03}");
        let moved = b.profile(APP, &user, Consistency::Eventual).await.unwrap();
        let control = b
            .profile(CONTROL, &user, Consistency::Eventual)
            .await
            .unwrap();
        assert_eq!(moved, control, "{user}");
    }

    // One user of the control app moves to eu; the app's other users stay.
    b.move_placement(CONTROL, Some("u007"), "eu").await.unwrap();
    let done = finished(&b, CONTROL, WITHIN).await;
    assert_eq!(done.state, JobState::Done, "{done:?}");
    let unit = b"CTRL\0u007";
    assert_eq!(rows_of(&*us_store, unit).await, BTreeMap::new());
    assert!(rows_of(&*eu_store, unit).await.contains_key("profiles"));
    let stayed = rows_of(&*us_store, CONTROL.as_bytes()).await;
    assert_eq!(stayed.get("profiles"), Some(&(USERS - 1)), "{stayed:?}");
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_in_flight_on_another_node_counts_once_on_bigtable() {
    let emulator = Emulator::start();
    let store = connect(&emulator).await;
    let config = penchant_engine::EngineConfig::default;
    let a = support::engine_with_app(store.clone(), config(), "APP", support::views(10, 10)).await;
    let b = penchant_engine::Engine::open(store.clone(), config())
        .await
        .unwrap();
    crate::retries::both_attempts_count_once(store, a, b).await;
}
