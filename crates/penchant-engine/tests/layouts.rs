//! Event layouts: an app's events move from the wide layout to the narrow one (and back) while
//! events keep arriving, the node running the move dies half-way and another finishes it; no
//! event is lost or counted twice, and profiles equal those of an app that was narrow from the
//! start. Tables made before the narrow layout existed get its families.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use common::{Hook, Hooked, Op};
use penchant_engine::events::migration::{MigrationStatus, Phase};
use penchant_engine::events::{Event, EventType, Facets, Layout, Target};
use penchant_engine::jobs::JobState;
use penchant_engine::strategy::{EventScoring, FacetScoring, Strategy};
use penchant_engine::{Engine, EngineConfig, EngineError, keys};
use penchant_store::{GcRule, MemStore, ReadRows, RowSet, Store};

const APP: &str = "APP";
/// Fed the same events, narrow from the start.
const CONTROL: &str = "CTRL";
const USERS: usize = 200;
const BRANDS: [&str; 5] = ["a", "b", "c", "d", "e"];

/// Once closed, stalls every `events` batch write after the first `allow`, like a node that
/// dies.
#[derive(Debug)]
struct Stall {
    allow: usize,
    seen: AtomicUsize,
    closed: AtomicBool,
}

#[async_trait]
impl Hook for Stall {
    async fn before(&self, op: Op, table: &str) {
        if op == Op::WriteRows
            && table == "events"
            && self.closed.load(Ordering::SeqCst)
            && self.seen.fetch_add(1, Ordering::SeqCst) >= self.allow
        {
            std::future::pending::<()>().await;
        }
    }
}

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
        // `size` is in the events but not weighed.
        facets_scoring: vec![
            FacetScoring {
                facet_name: "brand".into(),
                score: 10,
            },
            FacetScoring {
                facet_name: "color".into(),
                score: 40,
            },
        ],
        personalization_impact: 50,
    }
}

/// The `n`th event of the test, the same for every app.
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
        target: Target::Filters(vec![
            ("brand".into(), BRANDS[n % BRANDS.len()].into()),
            ("color".into(), format!("c{}", n % 3)),
            ("size".into(), format!("s{}", n % 4)),
        ]),
        query_id: None,
        positions: None,
        object_data: None,
        value: None,
        currency: None,
    }
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

async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn finished(engine: &Engine, app: &str) -> MigrationStatus {
    let mut last = None;
    wait_until("the migration to end", async || {
        last = engine.layout_migration(app).await.unwrap();
        last.as_ref().is_some_and(|s| s.state != JobState::Running)
    })
    .await;
    last.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_move_to_the_narrow_layout_while_they_arrive_and_a_dead_nodes_move_is_finished() {
    let mem = Arc::new(MemStore::new());
    // Node A runs the migration and dies on its third batch of rewritten rows.
    let hooked = Arc::new(Hooked {
        inner: mem.clone(),
        hook: Stall {
            allow: 2,
            seen: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        },
    });
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
    for chunk in (0..initial).collect::<Vec<_>>().chunks(250) {
        let events: Vec<Event> = chunk.iter().map(|&n| event(n, now)).collect();
        for app in [APP, CONTROL] {
            b.push_events(app, &events).await.unwrap();
        }
    }

    // A writer keeps sending the same events to both apps, through B, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (b, stop) = (b.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = initial;
            while !stop.load(Ordering::SeqCst) {
                let events: Vec<Event> = (n..n + 7).map(|i| event(i, now)).collect();
                for app in [APP, CONTROL] {
                    b.push_events(app, &events).await.unwrap();
                }
                n += 7;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            n
        })
    };

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
    wait_until("a backfill checkpoint", async || {
        checkpoint = b
            .layout_migration(APP)
            .await
            .unwrap()
            .filter(|s| s.phase == Phase::Backfill && s.after.is_some());
        checkpoint.is_some()
    })
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
    wait_until("B to take the migration over", async || {
        b.take_over_jobs().await.unwrap() == 1
    })
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
