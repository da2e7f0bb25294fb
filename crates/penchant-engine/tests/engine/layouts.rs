//! Event layouts: an app's events move from the wide layout to the narrow one (and back) while
//! events keep arriving, the node running the move dies half-way and another finishes it; no
//! event is lost or counted twice, and profiles equal those of an app that was narrow from the
//! start. Tables made before the narrow layout existed get its families.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use penchant_engine::events::migration::{MigrationStatus, Phase};
use penchant_engine::events::{Event, EventType, Facets, Layout};
use penchant_engine::jobs::JobState;
use penchant_engine::strategy::Strategy;
use penchant_engine::{Engine, EngineConfig, EngineError, keys};
use penchant_store::{GcRule, MemStore, ReadRows, RowSet, Store};

use crate::support::{self, Hooked, Op, Stall, wait_until};

const APP: &str = "APP";
/// Fed the same events, narrow from the start.
const CONTROL: &str = "CTRL";
const USERS: usize = 200;
const BRANDS: [&str; 5] = ["a", "b", "c", "d", "e"];

fn strategy() -> Strategy {
    // `size` is in the events but not weighed.
    support::strategy(
        &[
            ("Viewed", EventType::View, 10),
            ("Bought", EventType::Conversion, 50),
        ],
        &[("brand", 10), ("color", 40)],
    )
}

/// The `n`th event of the test, the same for every app.
fn event(n: usize, now: i64) -> Event {
    let (color, size) = (format!("c{}", n % 3), format!("s{}", n % 4));
    let filters = [
        ("brand", BRANDS[n % BRANDS.len()]),
        ("color", &color),
        ("size", &size),
    ];
    support::nth(n, now, USERS, &filters)
}

fn config() -> EngineConfig {
    EngineConfig {
        lease_ttl: Duration::from_secs(1),
        ..EngineConfig::default()
    }
}

/// Every event row of an app: its key after the app, and its counts in each layout.
type Counted = BTreeMap<Bytes, (Option<Facets>, Option<Facets>)>;

async fn counted(store: &dyn Store, app: &str) -> Counted {
    let rows = store
        .read_all("events", ReadRows::new(RowSet::prefix(keys::app(app))))
        .await
        .unwrap();
    let app_len = keys::app(app).len();
    rows.into_iter()
        .filter(|r| keys::user_of(app, &r.key).is_some())
        .map(|r| {
            let counts = |layout: Layout| layout.read_counts(&r).unwrap().map(|(_, _, c)| c);
            (
                r.key.slice(app_len..),
                (counts(Layout::Wide), counts(Layout::Narrow)),
            )
        })
        .collect()
}

async fn finished(engine: &Engine, app: &str) -> MigrationStatus {
    let mut last = None;
    wait_until(
        "the migration to end",
        Duration::from_secs(60),
        async || {
            last = engine.layout_migration(app).await.unwrap();
            last.as_ref().is_some_and(|s| s.state != JobState::Running)
        },
    )
    .await;
    last.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_move_to_the_narrow_layout_while_they_arrive_and_a_dead_nodes_move_is_finished() {
    let mem = Arc::new(MemStore::new());
    // Node A runs the migration and dies on its third batch of rewritten rows.
    let hooked = Arc::new(Hooked::on(
        mem.clone(),
        Stall::new("events", Op::WriteRows, 2),
    ));
    let a = Engine::open(hooked.clone(), config()).await.unwrap();
    let b = Engine::open(mem.clone(), config()).await.unwrap();
    b.create_app(Some(APP), "moved", 90, Layout::Wide)
        .await
        .unwrap();
    b.create_app(Some(CONTROL), "control", 90, Layout::Narrow)
        .await
        .unwrap();
    for app in [APP, CONTROL] {
        b.set_strategy(app, strategy()).await.unwrap();
    }
    let now = b.now_ms();
    let initial = 3_000;
    support::feed(&b, &[APP, CONTROL], initial, 250, |n| event(n, now)).await;

    // A writer keeps sending the same events to both apps, through B, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let pace = (initial, 7, Duration::from_millis(5));
    let writer = support::writer(
        b.clone(),
        [APP, CONTROL],
        pace,
        move |i| event(i, now),
        stop.clone(),
    );

    hooked.hook.closed.store(true, Ordering::SeqCst);
    let started = a.migrate_layout(APP, Layout::Narrow).await.unwrap();
    assert_eq!(
        (started.from, started.to, started.phase),
        (Layout::Wide, Layout::Narrow, Phase::DualWrite)
    );
    let refused = b.migrate_layout(APP, Layout::Narrow).await.unwrap_err();
    assert!(
        matches!(&refused, EngineError::Refused(m) if m.contains("running")),
        "{refused}"
    );
    // A saves a checkpoint in the backfill, then stalls.
    let mut checkpoint = None;
    wait_until(
        "a backfill checkpoint",
        Duration::from_secs(60),
        async || {
            checkpoint = b
                .layout_migration(APP)
                .await
                .unwrap()
                .filter(|s| s.phase == Phase::Backfill && s.after.is_some());
            checkpoint.is_some()
        },
    )
    .await;
    let checkpoint = checkpoint.unwrap();
    // While dual-writing, reads still use the wide layout: the app says so.
    let app = b.app(APP).await.unwrap().unwrap();
    assert_eq!(
        (app.event_layout, app.also_written),
        (Layout::Wide, Some(Layout::Narrow))
    );
    a.kill_background();
    assert_eq!(b.take_over_jobs().await.unwrap(), 0, "A's lease holds");
    wait_until(
        "B to take the migration over",
        Duration::from_secs(60),
        async || b.take_over_jobs().await.unwrap() == 1,
    )
    .await;
    let done = finished(&b, APP).await;
    stop.store(true, Ordering::SeqCst);
    let sent = writer.await.unwrap();
    assert_eq!(done.state, JobState::Done, "{done:?}");
    assert_eq!(done.phase, Phase::Done);
    assert!(sent > initial, "events arrived during the migration");

    // B went on from A's checkpoint: it rewrote only rows after it.
    let moved = counted(&*mem, APP).await;
    let after = hex_decode(checkpoint.after.as_deref().unwrap());
    let rest = moved
        .keys()
        .filter(|k| {
            keys::app(APP)
                .iter()
                .chain(k.iter())
                .copied()
                .collect::<Vec<u8>>()
                > after
        })
        .count() as u64;
    assert!(
        done.backfilled - checkpoint.backfilled <= rest,
        "B rewrote {} rows, {rest} were after A's checkpoint",
        done.backfilled - checkpoint.backfilled
    );

    // Every event, once, in the narrow layout only, as the control app has it.
    let control = counted(&*mem, CONTROL).await;
    assert_eq!(moved.len(), sent, "every event stored once");
    assert_eq!(moved, control, "the moved app's rows are the control app's");
    assert!(
        moved
            .values()
            .all(|(wide, narrow)| wide.is_none() && narrow.is_some())
    );
    let app = b.app(APP).await.unwrap().unwrap();
    assert_eq!((app.event_layout, app.also_written), (Layout::Narrow, None));

    // Profiles: streamed, and recomputed from the raw events, equal the control app's.
    for i in 0..USERS {
        let user = format!("u{i:03}");
        let full = b.profiles().recompute_one(APP, &user).await.unwrap();
        let control = b.profiles().recompute_one(CONTROL, &user).await.unwrap();
        assert_eq!(full, control, "{user}");
        let streamed = b.profiles().get(APP, &user).await.unwrap();
        assert_eq!(streamed, full, "{user}");
        assert!(
            full.is_some_and(|p| p.scores.contains_key("color") && !p.scores.contains_key("size"))
        );
    }

    // And back: the wide layout again, on one node, with nothing arriving.
    b.migrate_layout(APP, Layout::Wide).await.unwrap();
    let back = finished(&b, APP).await;
    assert_eq!(back.state, JobState::Done, "{back:?}");
    let moved = counted(&*mem, APP).await;
    assert_eq!(moved.len(), sent);
    assert!(
        moved
            .values()
            .all(|(wide, narrow)| wide.is_some() && narrow.is_none())
    );
    let wide: Vec<_> = moved.values().map(|(w, _)| w.clone()).collect();
    let narrow: Vec<_> = control.values().map(|(_, n)| n.clone()).collect();
    assert_eq!(wide, narrow, "the same counts, in the other layout");
    let refused = b.migrate_layout(APP, Layout::Wide).await.unwrap_err();
    assert!(
        matches!(&refused, EngineError::Refused(m) if m.contains("already")),
        "{refused}"
    );
    b.shutdown().await.unwrap();
}

fn hex_decode(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

#[tokio::test]
async fn an_events_table_made_before_the_narrow_layout_gets_its_families() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let old = BTreeMap::from([(
        "e".to_owned(),
        GcRule::MaxAge(Duration::from_secs(90 * 86_400)),
    )]);
    store.create_table("events", old).await.unwrap();
    let engine = Engine::open(store.clone(), EngineConfig::default())
        .await
        .unwrap();
    let families = store.get_table("events").await.unwrap().families;
    assert_eq!(
        families.keys().map(String::as_str).collect::<Vec<_>>(),
        ["click", "conversion", "e", "view"]
    );
    // A narrow app's events are written there.
    engine
        .create_app(Some(APP), "narrow", 90, Layout::Narrow)
        .await
        .unwrap();
    engine
        .push_events(APP, &[event(1, engine.now_ms())])
        .await
        .unwrap();
    let rows = counted(&*store, APP).await;
    assert_eq!(rows.len(), 1);
    let (wide, narrow) = rows.into_values().next().unwrap();
    assert_eq!(wide, None);
    assert_eq!(narrow.unwrap().len(), 3, "every facet of the event");
    // Opening again changes nothing.
    Engine::open(store.clone(), EngineConfig::default())
        .await
        .unwrap();
}
