//! Residency on real Bigtable emulators, two standing for two regions' instances: an app moves
//! from one to the other while a writer sends events and a reader reads profiles, the node
//! running the move is killed mid-move and another finishes it; then one user of another app
//! moves apart. Afterwards each emulator holds exactly what its placements say, and the moved
//! app's profiles equal those of an app fed the same events that never moved.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use penchant_engine::events::{Event, EventType, Layout, Target};
use penchant_engine::jobs::JobState;
use penchant_engine::residency::{MoveStatus, Phase};
use penchant_engine::strategy::{EventScoring, FacetScoring, Strategy};
use penchant_engine::{Consistency, Engine, EngineConfig, keys};
use penchant_store::{PlacedStore, ReadRows, RowFilter, RowSet, Store, unit_range};
use penchant_store_bigtable::BigtableStore;
use penchant_store_bigtable::emulator::Emulator;

const APP: &str = "SHOP";
const CONTROL: &str = "CTRL";
const USERS: usize = 40;

fn strategy() -> Strategy {
    Strategy {
        events_scoring: vec![
            EventScoring {
                event_name: "Viewed".into(),
                event_type: EventType::View,
                score: 10,
            },
            EventScoring {
                event_name: "Bought".into(),
                event_type: EventType::Conversion,
                score: 50,
            },
        ],
        facets_scoring: vec![FacetScoring {
            facet_name: "brand".into(),
            score: 10,
        }],
        personalization_impact: 50,
    }
}

fn event(n: usize, now: i64) -> Event {
    let bought = n.is_multiple_of(5);
    Event {
        event_type: if bought {
            EventType::Conversion
        } else {
            EventType::View
        },
        event_subtype: None,
        event_name: if bought { "Bought" } else { "Viewed" }.into(),
        index: "items".into(),
        user_token: format!("u{:03}", n % USERS),
        authenticated_user_token: None,
        timestamp: now - 3_600_000 + n as i64,
        target: Target::Filters(vec![("brand".into(), format!("b{}", n % 7))]),
        query_id: None,
        positions: None,
        object_data: None,
        value: None,
        currency: None,
    }
}

async fn connect(emulator: &Emulator) -> Arc<dyn Store> {
    Arc::new(BigtableStore::connect(emulator.config("")).await.unwrap())
}

/// A node over the two emulators (`us` the default), with its own routes.
async fn node(us: &Emulator, eu: &Emulator) -> Engine {
    let targets = BTreeMap::from([
        ("us".to_owned(), connect(us).await),
        ("eu".to_owned(), connect(eu).await),
    ]);
    let placed = PlacedStore::new(targets, "us", penchant_engine::residency::pinned_tables());
    let config = EngineConfig {
        lease_ttl: Duration::from_secs(1),
        placement: Some(placed.clone()),
        placement_refresh: Duration::from_millis(100),
        ..EngineConfig::default()
    };
    Engine::open(Arc::new(placed), config).await.unwrap()
}

async fn finished(engine: &Engine, app: &str) -> MoveStatus {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let status = engine.placement(app, None).await.unwrap().1;
        if let Some(status) = status.filter(|s| s.state != JobState::Running) {
            return status;
        }
        assert!(Instant::now() < deadline, "the move did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The rows of a unit an emulator holds, by table (the pinned tables left out).
async fn rows_of(store: &dyn Store, unit: &[u8]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for table in store.list_tables().await.unwrap() {
        if penchant_engine::residency::pinned_tables().contains(&table.name) {
            continue;
        }
        let request = ReadRows::new(RowSet::range(unit_range(unit))).filter(RowFilter::StripValue);
        let n = store.read_all(&table.name, request).await.unwrap().len();
        if n > 0 {
            out.insert(table.name, n);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_app_and_a_user_move_between_emulators_while_served() {
    let (us, eu) = (Emulator::start(), Emulator::start());
    let a = node(&us, &eu).await;
    let b = node(&us, &eu).await;
    for app in [APP, CONTROL] {
        b.create_app(Some(app), app, 90, Layout::Wide)
            .await
            .unwrap();
        b.set_strategy(app, strategy()).await.unwrap();
    }
    let now = b.now_ms();
    let initial = 1_000;
    for chunk in (0..initial).collect::<Vec<_>>().chunks(200) {
        let events: Vec<Event> = chunk.iter().map(|&n| event(n, now)).collect();
        for app in [APP, CONTROL] {
            b.push_events(app, &events).await.unwrap();
        }
    }

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (b, stop) = (b.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = initial;
            while !stop.load(Ordering::SeqCst) {
                let events: Vec<Event> = (n..n + 5).map(|i| event(i, now)).collect();
                for app in [APP, CONTROL] {
                    b.push_events(app, &events).await.unwrap();
                }
                n += 5;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            n
        })
    };
    let reader = {
        let (b, stop) = (b.clone(), stop.clone());
        tokio::spawn(async move {
            let mut reads = 0;
            while !stop.load(Ordering::SeqCst) {
                let user = format!("u{:03}", reads % USERS);
                let profile = b
                    .profile(APP, &user, Consistency::Eventual)
                    .await
                    .expect("a profile read failed");
                assert!(profile.is_some(), "{user}'s profile went missing");
                reads += 1;
            }
            reads
        })
    };
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
    let done = finished(&b, APP).await;
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
    let done = finished(&b, CONTROL).await;
    assert_eq!(done.state, JobState::Done, "{done:?}");
    let unit = b"CTRL\0u007";
    assert_eq!(rows_of(&*us_store, unit).await, BTreeMap::new());
    assert!(rows_of(&*eu_store, unit).await.contains_key("profiles"));
    let stayed = rows_of(&*us_store, CONTROL.as_bytes()).await;
    assert_eq!(stayed.get("profiles"), Some(&(USERS - 1)), "{stayed:?}");
    b.shutdown().await.unwrap();
}
