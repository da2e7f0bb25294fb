//! Residency on two targets (two in-memory stores standing for two regions): an app moves from
//! one to the other while events arrive and profiles are read, the node running the move dies
//! half-way and another finishes it; afterwards the app's rows are in the new target only and
//! its profiles equal those of an app that never moved. One user moves apart from its app; a
//! new app is placed before it has rows.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use penchant_engine::events::{Event, Layout};
use penchant_engine::jobs::JobState;
use penchant_engine::residency::{MoveStatus, Phase, Placement};
use penchant_engine::{Consistency, Engine, EngineConfig, EngineError};
use penchant_store::{MemStore, PlacedStore, ReadRows, RowFilter, RowSet, Store, unit_range};

use crate::support::{self, Hooked, Op, Stall, wait_until};

const APP: &str = "SHOP";
/// Fed the same events, never moved.
const CONTROL: &str = "CTRL";
const USERS: usize = 100;
const WITHIN: Duration = Duration::from_secs(90);
const REFRESH: Duration = Duration::from_millis(50);

/// The `n`th event of a scenario of `users` users, the same for every app.
pub fn event(n: usize, now: i64, users: usize) -> Event {
    support::nth(n, now, users, &[("brand", &format!("b{}", n % 7))])
}

/// A node over the two regions' stores (`us` the default), with its own routes, which it
/// refreshes every `refresh`.
pub async fn node(us: Arc<dyn Store>, eu: Arc<dyn Store>, refresh: Duration) -> Engine {
    let targets = BTreeMap::from([("us".to_owned(), us), ("eu".to_owned(), eu)]);
    let placed = PlacedStore::new(targets, "us", penchant_engine::residency::pinned_tables());
    let config = EngineConfig {
        lease_ttl: Duration::from_secs(1),
        placement: Some(placed.clone()),
        placement_refresh: refresh,
        ..EngineConfig::default()
    };
    Engine::open(Arc::new(placed), config).await.unwrap()
}

/// Wide apps (90 days of events) named as their IDs, weighing views and purchases.
pub async fn wide_apps(engine: &Engine, apps: &[&str]) {
    for app in apps {
        engine
            .create_app(Some(app), app, 90, Layout::Wide)
            .await
            .unwrap();
        engine
            .set_strategy(app, support::views_and_purchases())
            .await
            .unwrap();
    }
}

/// The move of `app` once it ended (within `within`).
pub async fn finished(engine: &Engine, app: &str, within: Duration) -> MoveStatus {
    let mut last = None;
    wait_until("the move to end", within, async || {
        last = engine.placement(app, None).await.unwrap().1;
        last.as_ref().is_some_and(|s| s.state != JobState::Running)
    })
    .await;
    last.unwrap()
}

/// How many rows of a unit a store holds, by table.
pub async fn rows_of(store: &dyn Store, unit: &[u8]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for table in store.list_tables().await.unwrap() {
        let request = ReadRows::new(RowSet::range(unit_range(unit))).filter(RowFilter::StripValue);
        let n = store.read_all(&table.name, request).await.unwrap().len();
        if n > 0 && !penchant_engine::residency::pinned_tables().contains(&table.name) {
            out.insert(table.name, n);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_moves_while_events_arrive_and_a_dead_nodes_move_is_finished() {
    let (us, eu) = (Arc::new(MemStore::new()), Arc::new(MemStore::new()));
    // Node A runs the move; its writes to `eu` stall after two batches of copied events.
    let stalled = Arc::new(Hooked::on(
        eu.clone(),
        Stall::new("events", Op::WriteRows, 2),
    ));
    let a = node(us.clone(), stalled.clone(), REFRESH).await;
    let b = node(us.clone(), eu.clone(), REFRESH).await;
    assert_eq!(b.placement_targets(), ["us", "eu"]);
    wide_apps(&b, &[APP, CONTROL]).await;
    let now = b.now_ms();
    let initial = 3_000;
    support::feed(&b, &[APP, CONTROL], initial, 250, |n| event(n, now, USERS)).await;
    assert!(rows_of(&*eu, APP.as_bytes()).await.is_empty());

    // A writer sends the same events to both apps and a reader reads the moving app's profiles,
    // through B, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let pace = (initial, 7, Duration::from_millis(5));
    let writer = support::writer(
        b.clone(),
        [APP, CONTROL],
        pace,
        move |i| event(i, now, USERS),
        stop.clone(),
    );
    let reader = support::reader(b.clone(), APP, USERS, stop.clone());
    a.start_background(None);
    b.start_background(None);

    stalled.hook.closed.store(true, Ordering::SeqCst);
    let started = a.move_placement(APP, None, "eu").await.unwrap();
    assert_eq!(
        (&started.from[..], &started.to[..], started.phase),
        ("us", "eu", Phase::DualWrite)
    );
    let refused = b.move_placement(APP, None, "eu").await.unwrap_err();
    assert!(
        matches!(&refused, EngineError::Refused(m) if m.contains("running")),
        "{refused}"
    );
    // A copies some events, saves its checkpoint, then stalls; it dies there.
    let mut checkpoint = None;
    wait_until("a copy checkpoint in the events", WITHIN, async || {
        checkpoint = b.placement(APP, None).await.unwrap().1.filter(|s| {
            s.phase == Phase::Copy && s.table.as_deref() == Some("events") && s.after.is_some()
        });
        checkpoint.is_some()
    })
    .await;
    let (placement, _) = b.placement(APP, None).await.unwrap();
    assert_eq!(
        placement,
        Placement {
            target: "us".into(),
            also_written: Some("eu".into())
        },
        "reads stay in us while both are written"
    );
    a.kill_background();
    // B's background work takes the move over once A's lease expires, and finishes it.
    let done = finished(&b, APP, WITHIN).await;
    stop.store(true, Ordering::SeqCst);
    let sent = writer.await.unwrap();
    let reads = reader.await.unwrap();
    assert_eq!(done.state, JobState::Done, "{done:?}");
    assert!(sent > initial, "events arrived during the move");
    assert!(reads > 0);
    assert!(
        done.passes >= 1 && done.copied > 0 && done.dropped > 0,
        "{done:?}"
    );
    assert!(
        done.copied < 2 * checkpoint.as_ref().unwrap().copied + 10_000,
        "B went on from A's checkpoint: {done:?}"
    );

    // The app's rows are in eu only, the control app's in us only.
    let (placement, _) = b.placement(APP, None).await.unwrap();
    assert_eq!(placement.target, "eu");
    assert_eq!(placement.also_written, None);
    assert_eq!(rows_of(&*us, APP.as_bytes()).await, BTreeMap::new());
    let in_eu = rows_of(&*eu, APP.as_bytes()).await;
    assert_eq!(in_eu.get("profiles"), Some(&USERS), "{in_eu:?}");
    assert!(rows_of(&*eu, CONTROL.as_bytes()).await.is_empty());
    // Every event once, and the same profiles as the control app's.
    let events = |store: Arc<MemStore>, app: &'static str| async move {
        let rows = store
            .read_all(
                "events",
                ReadRows::new(RowSet::range(unit_range(app.as_bytes()))),
            )
            .await
            .unwrap();
        rows.iter()
            .filter(|r| penchant_engine::keys::user_of(app, &r.key).is_some())
            .count()
    };
    assert_eq!(events(eu.clone(), APP).await, sent);
    assert_eq!(events(us.clone(), CONTROL).await, sent);
    for i in 0..USERS {
        let user = format!("u{i:03}");
        let moved = b
            .profile(APP, &user, Consistency::Eventual)
            .await
            .unwrap()
            .unwrap();
        let control = b
            .profile(CONTROL, &user, Consistency::Eventual)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(moved.scores, control.scores, "{user}");
        assert_eq!(moved.last_event_at, control.last_event_at, "{user}");
    }
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_moves_apart_from_its_app_and_a_new_app_is_placed() {
    let (us, eu) = (Arc::new(MemStore::new()), Arc::new(MemStore::new()));
    let b = node(us.clone(), eu.clone(), REFRESH).await;
    b.start_background(None);
    b.create_app(Some(APP), APP, 90, Layout::Wide)
        .await
        .unwrap();
    b.set_strategy(APP, support::views_and_purchases())
        .await
        .unwrap();
    let now = b.now_ms();
    let events: Vec<Event> = (0..1_000).map(|n| event(n, now, USERS)).collect();
    b.push_events(APP, &events).await.unwrap();
    let before = b.profile(APP, "u007", Consistency::Eventual).await.unwrap();
    b.mark_seen(APP, "u007", &["x1", "x2"]).await.unwrap();

    let started = b.move_placement(APP, Some("u007"), "eu").await.unwrap();
    assert_eq!(started.user.as_deref(), Some("u007"));
    let done = finished(&b, APP, WITHIN).await;
    assert_eq!(done.state, JobState::Done, "{done:?}");
    let unit = b"SHOP\0u007";
    assert_eq!(rows_of(&*us, unit).await, BTreeMap::new());
    let moved = rows_of(&*eu, unit).await;
    for table in ["events", "aggregates", "profiles", "seen"] {
        assert!(moved.contains_key(table), "{table}: {moved:?}");
    }
    // The app's other users, and its other tables, stayed.
    let stayed = rows_of(&*us, APP.as_bytes()).await;
    assert_eq!(stayed.get("profiles"), Some(&(USERS - 1)), "{stayed:?}");
    assert!(stayed.contains_key("apps") && stayed.contains_key("strategies"));
    assert_eq!(
        b.profile(APP, "u007", Consistency::Eventual).await.unwrap(),
        before
    );
    assert!(
        b.has_seen(APP, "u007", &["x1", "x9"], Consistency::Eventual)
            .await
            .unwrap()
            == vec![true, false]
    );
    let users = b.placed_users(APP).await.unwrap();
    assert_eq!(users.len(), 1);
    assert_eq!(
        (users[0].0.as_str(), users[0].1.target.as_str()),
        ("u007", "eu")
    );
    // Events of the moved user land in eu.
    b.push_events(APP, &[event(7, now + 1, USERS)])
        .await
        .unwrap();
    assert_eq!(
        rows_of(&*eu, unit).await.get("events"),
        Some(&(moved["events"] + 1))
    );

    // A new app is placed before it has rows; an app with rows is moved, not placed.
    let unknown = b
        .create_app_in("NEW", "new", 90, Layout::Wide, "mars")
        .await
        .unwrap_err();
    assert!(
        matches!(&unknown, EngineError::Invalid(m) if m.contains("unknown placement target `mars`")),
        "{unknown}"
    );
    b.create_app_in("NEW", "new", 90, Layout::Wide, "eu")
        .await
        .unwrap();
    assert!(b.app("NEW").await.unwrap().is_some());
    assert!(rows_of(&*us, b"NEW").await.is_empty());
    assert!(rows_of(&*eu, b"NEW").await.contains_key("apps"));
    let refused = b.place("NEW", None, "us").await.unwrap_err();
    assert!(
        matches!(&refused, EngineError::Refused(m) if m.contains("move it instead")),
        "{refused}"
    );
    // A user without rows yet is placed at once.
    assert_eq!(
        b.place(APP, Some("newcomer"), "eu").await.unwrap().target,
        "eu"
    );
    b.push_events(
        APP,
        &[Event {
            user_token: "newcomer".into(),
            ..event(1, now, USERS)
        }],
    )
    .await
    .unwrap();
    assert!(
        rows_of(&*eu, b"SHOP\0newcomer")
            .await
            .contains_key("events")
    );
    assert!(rows_of(&*us, b"SHOP\0newcomer").await.is_empty());
    assert!(matches!(
        b.place("NOPE", None, "eu").await.unwrap_err(),
        EngineError::NotFound(_)
    ));
    b.shutdown().await.unwrap();
}
