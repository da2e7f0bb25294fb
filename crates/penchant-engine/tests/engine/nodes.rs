//! Two nodes (engines) on one store: background work runs on exactly one, a dead node's job is
//! taken over from its checkpoint once its lease expires, and an ingestion a node died in the
//! middle of is finished by the next node that starts.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use penchant_engine::clock::Clock;
use penchant_engine::events::{Event, EventType, Target};
use penchant_engine::jobs::JobState;
use penchant_engine::strategy::Strategy;
use penchant_engine::{Engine, EngineConfig};
use penchant_store::Store;

use crate::support::{self, Hooked, Op, Stall};

const APP: &str = "APP";
const USERS: usize = 300;

fn strategy() -> Strategy {
    support::views(10, 10)
}

fn view(user: String, brand: String, timestamp: i64) -> Event {
    support::view(&user, &brand, timestamp)
}

fn user(i: usize) -> String {
    format!("u{i:03}")
}

fn config(clock: &Clock) -> EngineConfig {
    EngineConfig {
        recompute_parallelism: 1,
        clock: clock.clone(),
        lease_ttl: Duration::from_secs(10),
        ..EngineConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_job_is_taken_over_from_its_checkpoint_once_its_lease_expires() {
    let clock = Clock::manual(penchant_store::validate::now_micros());
    // Node A dies after writing its first chunk of profiles.
    let hooked = Arc::new(Hooked::new(Stall::new("profiles", Op::WriteRows, 1)));
    let store: Arc<dyn Store> = hooked.clone();
    let a = Engine::open(store.clone(), config(&clock)).await.unwrap();
    let b = Engine::open(store, config(&clock)).await.unwrap();
    let now = clock.now_ms();
    let events: Vec<Event> = (0..USERS)
        .map(|i| view(user(i), format!("b{}", i % 7), now - 1000))
        .collect();
    a.push_events(APP, &events).await.unwrap();

    hooked.hook.closed.store(true, Ordering::SeqCst);
    let version = a.set_strategy(APP, strategy()).await.unwrap().version;
    // A saves its checkpoint (every half second), then stalls on its next chunk.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let checkpoint = loop {
        assert!(std::time::Instant::now() < deadline, "no checkpoint saved");
        let status = b.recompute_status(APP).await.unwrap().unwrap();
        if let Some(after) = status.ranges[0].range.after.clone() {
            break after;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        b.take_over_jobs().await.unwrap(),
        0,
        "A holds the job's lease: B leaves it alone"
    );
    a.kill_background();
    hooked.hook.closed.store(false, Ordering::SeqCst);
    clock.advance(Duration::from_secs(9));
    assert_eq!(
        b.take_over_jobs().await.unwrap(),
        0,
        "the lease has 1 s left"
    );
    clock.advance(Duration::from_secs(2));
    assert_eq!(
        b.take_over_jobs().await.unwrap(),
        1,
        "expired: B takes over"
    );
    let done = loop {
        assert!(std::time::Instant::now() < deadline, "the job did not end");
        let status = b.recompute_status(APP).await.unwrap().unwrap();
        if status.state != JobState::Running {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(done.state, JobState::Done, "{done:?}");
    // A's part counted once, B's part: B scanned only the users after A's checkpoint (a user
    // scanned twice would count twice, as skipped the second time).
    let left = (0..USERS).filter(|&i| user(i) > checkpoint).count();
    assert!(left < USERS, "A got somewhere: {checkpoint}");
    let range = &done.ranges[0].stats;
    assert_eq!(range.users + range.skipped, USERS as u64, "{done:?}");
    for i in 0..USERS {
        let (_, v) = b
            .profiles()
            .stored_profile(APP, &user(i))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(v, version, "{}", user(i));
    }
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingestion_a_node_died_in_is_finished_by_the_next_node() {
    let clock = Clock::system();
    // The node dies once the events are stored, before their aggregates are written.
    let hooked = Arc::new(Hooked::new(Stall::new("aggregates", Op::WriteRows, 0)));
    let store: Arc<dyn Store> = hooked.clone();
    let a = Engine::open(store.clone(), config(&clock)).await.unwrap();
    a.create_app(Some(APP), "shop", 90, Default::default())
        .await
        .unwrap();
    a.set_strategy(APP, strategy()).await.unwrap();
    let now = clock.now_ms();
    a.push_events(APP, &[view(user(1), "early".into(), now - 2000)])
        .await
        .unwrap();
    hooked.hook.closed.store(true, Ordering::SeqCst);
    let events: Vec<Event> = (0..20)
        .map(|i| view(user(i), "late".into(), now - 1000))
        .collect();
    let push = tokio::spawn({
        let a = a.clone();
        async move { a.push_events(APP, &events).await }
    });
    // The events are stored; the node is killed while it writes their aggregates.
    let stored = |u: String| {
        let store = store.clone();
        async move {
            let request = penchant_store::ReadRows::new(penchant_store::RowSet::prefix(
                penchant_engine::keys::user(APP, &u),
            ));
            store.read_all("events", request).await.unwrap().len()
        }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while stored(user(19)).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the events were not stored"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    push.abort();
    a.kill_background();
    hooked.hook.closed.store(false, Ordering::SeqCst);

    let late = |engine: Engine, u: String| async move {
        let profile = engine.profiles().stored_profile(APP, &u).await.unwrap();
        profile.is_some_and(|(p, _)| p.scores["brand"].contains_key("late"))
    };
    assert!(
        !late(a.clone(), user(1)).await,
        "the profile missed the event"
    );
    // The next node to start finishes the work (the engine's start-up repair).
    let b = Engine::open(store.clone(), config(&clock)).await.unwrap();
    assert_eq!(b.repair(Duration::ZERO).await.unwrap(), 20);
    for i in 0..20 {
        assert!(late(b.clone(), user(i)).await, "{}", user(i));
    }
    let profile = b
        .profile(APP, &user(1), penchant_engine::Consistency::Eventual)
        .await
        .unwrap()
        .unwrap();
    assert!(profile.scores["brand"].contains_key("early"));
    assert_eq!(b.repair(Duration::ZERO).await.unwrap(), 0, "nothing left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_recommendation_build_is_resumed_after_its_checkpoint() {
    use penchant_engine::catalog::Write;
    use penchant_engine::recommend::{QueueDefinition, Source};
    let clock = Clock::manual(penchant_store::validate::now_micros());
    let hooked = Arc::new(Hooked::new(Stall::new("queues", Op::Write, 40)));
    let store: Arc<dyn Store> = hooked.clone();
    let a = Engine::open(store.clone(), config(&clock)).await.unwrap();
    let b = Engine::open(store, config(&clock)).await.unwrap();
    let records: Vec<(String, Write)> = (0..5)
        .map(|i| {
            let record = serde_json::json!({"objectID": format!("i{i}")});
            (
                "items".to_owned(),
                Write::Put(record.as_object().unwrap().clone()),
            )
        })
        .collect();
    a.write_records(APP, records).await.unwrap();
    // Items bought again (consumables): only views mark them seen, so every queue holds the
    // three most converted items.
    let views_only = penchant_engine::seen::SeenSettings {
        event_types: vec![EventType::View],
        ..Default::default()
    };
    a.set_seen_settings(APP, views_only).await.unwrap();
    let now = clock.now_ms();
    let events: Vec<Event> = (0..USERS)
        .map(|i| Event {
            event_type: EventType::Conversion,
            target: Target::ObjectIds(vec![format!("i{}", i % 5)]),
            ..view(user(i), String::new(), now - 1000)
        })
        .collect();
    a.push_events(APP, &events).await.unwrap();
    // A's trending counts reach the store at its next flush (every 5 s), long before it dies.
    a.flush().await.unwrap();
    let def = QueueDefinition {
        index_name: "items".into(),
        size: 3,
        sources: vec![Source::Trending { weight: 1.0 }],
        ranker: Default::default(),
    };
    a.define_queue(APP, "for-you", &def).await.unwrap();

    // A writes 40 users' queues, saves its checkpoint, then stalls.
    hooked.hook.closed.store(true, Ordering::SeqCst);
    a.start_build(APP).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let checkpoint = loop {
        assert!(std::time::Instant::now() < deadline, "no checkpoint saved");
        let status = b.build_status(APP).await.unwrap().unwrap();
        if let Some(after) = status.after.clone() {
            break (after, status.users);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        checkpoint.1 > 0 && checkpoint.1 < USERS as u64,
        "{checkpoint:?}"
    );
    let status = b.build_status(APP).await.unwrap().unwrap();
    assert_eq!(status.state, JobState::Running, "{status:?}");
    a.kill_background();
    hooked.hook.closed.store(false, Ordering::SeqCst);
    assert_eq!(b.take_over_jobs().await.unwrap(), 0, "A's lease holds");
    clock.advance(Duration::from_secs(11));
    assert_eq!(
        b.take_over_jobs().await.unwrap(),
        1,
        "expired: B takes over"
    );
    let done = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the build did not end"
        );
        let status = b.build_status(APP).await.unwrap().unwrap();
        if status.state != JobState::Running {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(done.state, JobState::Done, "{done:?}");
    // Users up to the checkpoint counted once, by A; B went on after it.
    assert_eq!(done.users, USERS as u64, "{done:?}");
    for i in 0..USERS {
        let queue = b.stored_queue(APP, "for-you", &user(i)).await.unwrap();
        assert_eq!(queue.items.len(), 3, "{}", user(i));
        assert_eq!(queue.items[0].0, "i0", "the most converted first");
    }
    b.shutdown().await.unwrap();
}

/// A node dies while it counts the events that waited for a record (after writing their new
/// counts, before refreshing profiles and forgetting the marks): the next node's repair
/// finishes it — the profile counts the item, and no mark says the event still waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_a_node_died_in_is_finished_by_the_repair() {
    use penchant_engine::catalog::Write;
    let clock = Clock::manual(penchant_store::validate::now_micros());
    let mem = Arc::new(penchant_store::MemStore::new());
    // Node A stalls on its first profile write once closed: a node that dies there.
    let hooked = Arc::new(Hooked::on(
        mem.clone(),
        Stall::new("profiles", Op::WriteRows, 0),
    ));
    let a = Engine::open(hooked.clone(), config(&clock)).await.unwrap();
    a.create_app(Some(APP), "shop", 90, Default::default())
        .await
        .unwrap();
    a.set_strategy(APP, strategy()).await.unwrap();
    let now = clock.now_ms();
    // A view of an item with no record yet: it waits.
    let event = Event {
        target: Target::ObjectIds(vec!["x".into()]),
        ..support::event(EventType::View, "Viewed", "u1", now - 1000, &[])
    };
    a.push_events(APP, &[event]).await.unwrap();
    let waiting = |engine: Engine| async move {
        engine
            .profile(APP, "u1", penchant_engine::Consistency::Eventual)
            .await
            .unwrap()
            .map(|p| (p.waiting_events, p.scores.get("brand").cloned()))
    };
    assert_eq!(waiting(a.clone()).await, Some((1, None)));

    hooked.hook.closed.store(true, Ordering::SeqCst);
    let record = serde_json::json!({"objectID": "x", "brand": "Xeno"});
    let write = tokio::spawn({
        let a = a.clone();
        let record = (
            "items".to_owned(),
            Write::Put(record.as_object().unwrap().clone()),
        );
        async move { a.write_records(APP, vec![record]).await }
    });
    // The event's counts are written (its waiting list is gone), then A stalls.
    let counted = || {
        let mem = mem.clone();
        async move {
            let request = penchant_store::ReadRows::new(penchant_store::RowSet::prefix(
                penchant_engine::keys::user(APP, "u1"),
            ));
            let rows = mem.read_all("events", request).await.unwrap();
            rows.iter().any(|r| r.latest("e", b"event").is_some())
                && rows.iter().all(|r| r.latest("e", b"waiting").is_none())
        }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !counted().await {
        assert!(
            std::time::Instant::now() < deadline,
            "the counts were not written"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!write.is_finished(), "A is stalled");
    write.abort();
    a.kill_background();

    let b = Engine::open(mem.clone(), config(&clock)).await.unwrap();
    assert_eq!(b.repair(Duration::ZERO).await.unwrap(), 1);
    let (waits, brands) = waiting(b.clone()).await.expect("a profile");
    assert_eq!(waits, 0, "the event waits for nothing");
    assert!(
        brands.is_some_and(|b| b.contains_key("Xeno")),
        "the item counts"
    );
    let index = mem
        .read_all(
            "waiting",
            penchant_store::ReadRows::new(penchant_store::RowSet::all()),
        )
        .await
        .unwrap();
    assert!(index.is_empty(), "index rows left: {index:?}");
    assert_eq!(b.repair(Duration::ZERO).await.unwrap(), 0, "nothing left");
}

/// An index's trending items as a node answers them: (objectID, score), best first.
async fn trending(engine: &Engine) -> Vec<(String, f64)> {
    use penchant_engine::recommend::{RecommendHit, RecommendRequest};
    let request: RecommendRequest = serde_json::from_value(
        serde_json::json!({"indexName": "products", "model": "trending-items", "threshold": 0}),
    )
    .unwrap();
    let answer = engine.recommendations(APP, &[request]).await.unwrap();
    answer[0]
        .hits
        .iter()
        .filter_map(|h| match h {
            RecommendHit::Item { record, score, .. } => {
                Some((record["objectID"].as_str()?.to_owned(), *score))
            }
            RecommendHit::Facet { .. } => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trending_counts_stay_in_memory_until_a_flush_adds_them_up_across_nodes() {
    use penchant_engine::catalog::Write;
    let clock = Clock::manual(penchant_store::validate::now_micros());
    let store: Arc<dyn Store> = Arc::new(penchant_store::MemStore::new());
    let config = EngineConfig {
        strategy_cache_ttl: Duration::ZERO,
        ..config(&clock)
    };
    let a = Engine::open(store.clone(), config.clone()).await.unwrap();
    let b = Engine::open(store.clone(), config).await.unwrap();
    a.tenancy().create_app(Some(APP), "shop").await.unwrap();
    let records = ["a", "b", "c", "d"]
        .map(|id| {
            let record = serde_json::json!({"objectID": id});
            (
                "products".to_owned(),
                Write::Put(record.as_object().unwrap().clone()),
            )
        })
        .to_vec();
    a.write_records(APP, records).await.unwrap();
    let now = clock.now_ms();
    let event = |kind: EventType, u: usize, id: &str| Event {
        index: "products".into(),
        target: Target::ObjectIds(vec![id.to_owned()]),
        ..support::event(kind, "e", &user(u), now - 1000, &[])
    };
    // Scores are percents of the best (f32 inside): compared to 1e-3.
    let same = |got: Vec<(String, f64)>, expected: &[(&str, f64)]| {
        let close = got.len() == expected.len()
            && got
                .iter()
                .zip(expected)
                .all(|((id, s), (e, t))| id == e && (s - t).abs() < 1e-3);
        assert!(close, "{got:?} is not {expected:?}");
    };
    let stored_rows = |store: Arc<dyn Store>| async move {
        let prefix = penchant_engine::keys::app(APP);
        let request = penchant_store::ReadRows::new(penchant_store::RowSet::prefix(prefix));
        let table = penchant_engine::recommend::trending::TRENDING_TABLE;
        store.read_all(table, request).await.unwrap().len()
    };

    // A conversion of a (10) and three clicks of b (1 each); a view counts nothing.
    let mut events = vec![
        event(EventType::Conversion, 1, "a"),
        event(EventType::View, 1, "c"),
    ];
    events.extend((2..5).map(|u| event(EventType::Click, u, "b")));
    a.push_events(APP, &events).await.unwrap();
    let expected = [("a", 100.0), ("b", 30.0)];
    same(trending(&a).await, &expected); // A counts its own events at once,
    assert_eq!(
        stored_rows(store.clone()).await,
        0,
        "nothing written per batch"
    );
    assert!(
        trending(&b).await.is_empty(),
        "B sees A's counts once A flushes"
    );

    a.flush().await.unwrap();
    same(trending(&b).await, &expected);
    same(trending(&a).await, &expected); // flushed counts are not counted twice,
    a.flush().await.unwrap();
    same(trending(&b).await, &expected); // and a flush with nothing new adds nothing.

    // Eight clicks of b on B: b now leads on both nodes once B flushes.
    let events: Vec<Event> = (5..13).map(|u| event(EventType::Click, u, "b")).collect();
    b.push_events(APP, &events).await.unwrap();
    b.flush().await.unwrap();
    let expected = [("b", 100.0), ("a", 100.0 / 1.1)];
    same(trending(&a).await, &expected);
    same(trending(&b).await, &expected);

    // Counts not yet flushed of a deleted index are forgotten, not written back by a flush.
    a.push_events(APP, &[event(EventType::Conversion, 20, "d")])
        .await
        .unwrap();
    a.delete_index(APP, "products").await.unwrap();
    a.flush().await.unwrap();
    assert_eq!(
        stored_rows(store).await,
        0,
        "the index's counters went with it"
    );
}
