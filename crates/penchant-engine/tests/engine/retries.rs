//! A retry sent while its first attempt is still in flight (a client whose timeout is shorter
//! than the answer, a load balancer that retries on another node). Staged: the first attempt
//! stops before storing its events, the retry is answered, the day folds, the first goes on —
//! its deltas must not land on a base that already holds them. Then at random: both attempts of
//! every batch at the same moment, on one node or on two nodes of one store, on a store whose
//! every operation takes a random while. Every event counts once in its day's aggregate and
//! every stored profile is the one a recompute gives.

use std::sync::Arc;

use penchant_engine::events::Event;
use penchant_engine::{Engine, EngineConfig};
use penchant_store::Store;
use rand::SeedableRng;
use rand::seq::SliceRandom;

use crate::concurrent_days::{Jitter, assert_days_sum_their_raw_events};
use crate::support::{self, Gate, Hooked, Op};

const APP: &str = "APP";
const USERS: usize = 100;
const EVENTS_PER_USER: usize = 99;

/// 100 users × 99 views (the same day, skewed brands), shuffled, in 56 batches.
fn batches() -> Vec<Vec<Event>> {
    let now = penchant_store::validate::now_micros() / 1000;
    let mut rng = rand::rngs::StdRng::seed_from_u64(43);
    let mut events: Vec<Event> = (0..USERS)
        .flat_map(|u| (0..EVENTS_PER_USER).map(move |n| (u, n)))
        .map(|(u, n)| {
            let brand = (u + n * n) % 7;
            support::view(
                &format!("u{u:03}"),
                &format!("b{brand}"),
                now - 60_000 + n as i64,
            )
        })
        .collect();
    events.shuffle(&mut rng);
    let size = events.len().div_ceil(56);
    events.chunks(size).map(<[Event]>::to_vec).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_answered_before_its_first_attempt_stores_anything_counts_once_across_a_fold() {
    use penchant_engine::{aggregates, events, keys};
    // Two nodes of one store; node A's first write of raw events waits at the gate.
    let store = Arc::new(Hooked::new(Gate::new(Op::WriteRows, events::EVENTS_TABLE)));
    let a = support::engine_with_app(store.clone(), config(), APP, support::views(10, 10)).await;
    let b = Engine::open(store.clone(), config()).await.unwrap();
    let now = penchant_store::validate::now_micros() / 1000;
    let start = now - now.rem_euclid(86_400_000);
    let events: Vec<Event> = (0..40)
        .map(|i| support::view("u1", "a", (start + i).min(now - 60_000 + i)))
        .collect();
    // The first attempt, on A, checks its events are new and stops before storing them.
    let (first_waits, go) = store.hook.arm().await;
    let first = {
        let (a, events) = (a.clone(), events.clone());
        tokio::spawn(async move { a.push_events(APP, &events).await })
    };
    first_waits.await.unwrap();
    // The client gave up on it and retried on B, which answers.
    b.push_events(APP, &events).await.unwrap();
    // A profile read (or a later event) folds the day's deltas into its base.
    let day = keys::day(APP, "u1", aggregates::day_of(events[0].timestamp));
    b.aggregates().fold(day).await.unwrap();
    // The first attempt goes on: stores the events and writes their deltas again.
    go.send(()).unwrap();
    first.await.unwrap().unwrap();
    let counts = a.aggregates().counts(APP, "u1").await.unwrap();
    let brand = events::qualifier(events::EventType::View, "Viewed", "brand");
    assert_eq!(
        counts.get(&brand).and_then(|c| c.get("a")),
        Some(&40),
        "each of the 40 events counted once"
    );
    let stored = a.profiles().refresh(APP, "u1").await.unwrap();
    assert_eq!(stored, a.profiles().recompute_one(APP, "u1").await.unwrap());
}

/// Send every batch twice at once, `a` taking one attempt and `b` the other, four batches in
/// flight; then check every day against its raw events and every profile against a recompute.
pub async fn both_attempts_count_once(store: Arc<dyn Store>, a: Engine, b: Engine) {
    let batches = batches();
    let queue = Arc::new(tokio::sync::Mutex::new(batches.clone()));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (a, b, queue) = (a.clone(), b.clone(), queue.clone());
        tasks.spawn(async move {
            loop {
                let Some(batch) = queue.lock().await.pop() else {
                    return;
                };
                let (first, second) =
                    tokio::join!(a.push_events(APP, &batch), b.push_events(APP, &batch));
                first.unwrap();
                second.unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    // The last attempt of each batch forgot its intent: nothing is left to the repair.
    support::intents_forgotten(&*store, APP).await;
    assert_days_sum_their_raw_events(&*store, USERS * EVENTS_PER_USER).await;
    let mut differ = Vec::new();
    for u in 0..USERS {
        let user = format!("u{u:03}");
        let stored = a.profiles().stored_profile(APP, &user).await.unwrap();
        let recomputed = a.profiles().recompute_one(APP, &user).await.unwrap();
        if stored.map(|s| s.0) != recomputed {
            differ.push(user);
        }
    }
    assert!(differ.is_empty(), "profiles unlike a recompute: {differ:?}");
}

fn config() -> EngineConfig {
    EngineConfig::default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_in_flight_with_its_first_attempt_counts_once() {
    let store: Arc<dyn Store> = Arc::new(Hooked::new(Jitter));
    let engine =
        support::engine_with_app(store.clone(), config(), APP, support::views(10, 10)).await;
    both_attempts_count_once(store, engine.clone(), engine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_in_flight_on_another_node_counts_once() {
    let store: Arc<dyn Store> = Arc::new(Hooked::new(Jitter));
    let a = support::engine_with_app(store.clone(), config(), APP, support::views(10, 10)).await;
    let b = Engine::open(store.clone(), config()).await.unwrap();
    both_attempts_count_once(store, a, b).await;
}

/// A node alone on a store with atomic writes (the embedded store): a batch's events, deltas
/// and intent in one write.
fn alone() -> EngineConfig {
    EngineConfig {
        exclusive_store: true,
        ..EngineConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_in_flight_counts_once_where_a_batch_is_written_atomically() {
    let store: Arc<dyn Store> = Arc::new(Hooked::new(Jitter));
    let engine =
        support::engine_with_app(store.clone(), alone(), APP, support::views(10, 10)).await;
    both_attempts_count_once(store, engine.clone(), engine).await;
}

/// The node dies the moment its first operation `op` on `table` is done: every store call
/// after it fails.
#[derive(Debug)]
struct DiesAfter {
    op: Op,
    table: &'static str,
    done: std::sync::atomic::AtomicBool,
}

impl DiesAfter {
    fn new(op: Op, table: &'static str) -> Self {
        Self {
            op,
            table,
            done: Default::default(),
        }
    }
}

#[async_trait::async_trait]
impl support::Hook for DiesAfter {
    async fn before(&self, op: Op, table: &str) -> penchant_store::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        // (An atomic write calls the hook once per table it names.)
        if op == self.op && (table == self.table || op == Op::Atomic) {
            if table == self.table {
                self.done.store(true, SeqCst);
            }
            return Ok(());
        }
        if self.done.load(SeqCst) && op.is_data() {
            return Err(penchant_store::StoreError::Unavailable("dead".into()));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_written_atomically_is_finished_by_the_repair_from_its_own_events() {
    use penchant_engine::events::{self, EventType, Target};
    // A first batch lands whole (a heavy day of the user's); then the node dies right after
    // writing a second one.
    let store = Arc::new(Hooked::new(DiesAfter::new(
        Op::Atomic,
        events::EVENTS_TABLE,
    )));
    let now = penchant_store::validate::now_micros() / 1000;
    let bought = |user: &str, item: usize, at: i64| Event {
        target: Target::ObjectIds(vec![format!("item{item}")]),
        ..support::event(EventType::Conversion, "Bought", user, at, &[])
    };
    let heavy: Vec<Event> = (0..300)
        .map(|i| support::view("u1", &format!("b{}", i % 3), now - 60_000 + i))
        .collect();
    let batch: Vec<Event> = (0..20)
        .map(|i| {
            let user = ["u1", "u2"][i % 2];
            if i % 4 < 2 {
                bought(user, i, now - 30_000 + i as i64)
            } else {
                support::view(user, "b9", now - 30_000 + i as i64)
            }
        })
        .collect();
    {
        let shop: Arc<dyn Store> = Arc::new(Hooked::on(store.inner.clone(), ()));
        let engine =
            support::engine_with_app(shop.clone(), alone(), APP, support::views(10, 10)).await;
        engine.push_events(APP, &heavy).await.unwrap();
        support::intents_forgotten(&*shop, APP).await;
        // A new strategy (its recompute not run): u1's state no longer answers, so the
        // next batch owes u1's refresh; u2 is new, its profile comes in the batch's write.
        engine
            .strategies()
            .set(APP, support::views(10, 20))
            .await
            .unwrap();
    }
    let dying = Engine::open(store.clone(), alone()).await.unwrap();
    let died = dying.push_events(APP, &batch).await;
    assert!(died.is_err(), "the node died after its write: {died:?}");
    drop(dying);
    // The restarted node: counted already (seen marks too), the batch owes u1's profile.
    let engine = Engine::open(Arc::new(Hooked::on(store.inner.clone(), ())), alone())
        .await
        .unwrap();
    let brand = events::qualifier(EventType::View, "Viewed", "brand");
    let u1 = engine.aggregates().counts(APP, "u1").await.unwrap();
    assert_eq!(u1.get(&brand).and_then(|c| c.get("b9")), Some(&5));
    let (stale, _) = engine
        .profiles()
        .stored_profile(APP, "u1")
        .await
        .unwrap()
        .unwrap();
    assert_ne!(
        Some(stale),
        engine.profiles().recompute_one(APP, "u1").await.unwrap()
    );
    assert_eq!(engine.repair(std::time::Duration::ZERO).await.unwrap(), 1);
    assert_eq!(engine.repair(std::time::Duration::ZERO).await.unwrap(), 0);
    for user in ["u1", "u2"] {
        let stored = engine.profiles().stored_profile(APP, user).await.unwrap();
        let recomputed = engine.profiles().recompute_one(APP, user).await.unwrap();
        assert_eq!(stored.map(|s| s.0), recomputed, "{user}");
    }
    // Each event counted once, the repair included.
    let u1 = engine.aggregates().counts(APP, "u1").await.unwrap();
    assert_eq!(u1.get(&brand).and_then(|c| c.get("b9")), Some(&5));
    assert_eq!(u1.get(&brand).and_then(|c| c.get("b0")), Some(&100));
    let items: Vec<String> = (0..20).map(|i| format!("item{i}")).collect();
    for (user, parity) in [("u1", 0), ("u2", 1)] {
        let seen = engine
            .seen()
            .exists(APP, user, &items, penchant_engine::Consistency::Strong)
            .await
            .unwrap();
        let bought: Vec<bool> = (0..20).map(|i| i % 2 == parity && i % 4 < 2).collect();
        for (i, (seen, bought)) in seen.into_iter().zip(bought).enumerate() {
            if bought {
                assert!(seen, "{user} bought item{i}: seen after the repair");
            }
        }
    }
    assert_days_sum_their_raw_events(&*store.inner, 320).await;
}

/// Two nodes of one store (no atomic writes) on a shop whose heavy user viewed 300 items today:
/// node A's store calls go through `hook`, node B's do not. Returns the hooked store, the
/// shop's store, A, B, and a batch of 20 views for the heavy user and another, still to send.
async fn two_nodes_and_a_heavy_day<H: support::Hook + 'static>(
    hook: H,
) -> (Arc<Hooked<H>>, Arc<dyn Store>, Engine, Engine, Vec<Event>) {
    let store = Arc::new(Hooked::new(hook));
    let shop: Arc<dyn Store> = Arc::new(Hooked::on(store.inner.clone(), ()));
    let b = support::engine_with_app(shop.clone(), config(), APP, support::views(10, 10)).await;
    let now = penchant_store::validate::now_micros() / 1000;
    let heavy: Vec<Event> = (0..300)
        .map(|i| support::view("u1", &format!("b{}", i % 3), now - 60_000 + i))
        .collect();
    b.push_events(APP, &heavy).await.unwrap();
    // B forgets the heavy batch's intent after answering (a spawned task), and a fold leaves
    // its deltas alone until then: wait until a fold takes them in, so that the tests start
    // from the heavy day folded and no intent but the ones they make.
    let at = heavy[0].timestamp;
    let day = penchant_engine::keys::day(APP, "u1", penchant_engine::aggregates::day_of(at));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        b.aggregates().fold(day.clone()).await.unwrap();
        if deltas_of_day(&*shop, "u1", at).await == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the heavy batch's intent stayed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let batch = (0..20)
        .map(|i| support::view(["u1", "u2"][i % 2], "b9", now - 30_000 + i as i64))
        .collect();
    let a = Engine::open(store.clone(), config()).await.unwrap();
    (store, shop, a, b, batch)
}

/// Each of the batch's views counted once (10 of `b9` per user), the heavy day's too, and
/// every profile the one a recompute gives.
async fn assert_counted_once(engine: &Engine, store: &dyn Store) {
    use penchant_engine::events::{self, EventType};
    let brand = events::qualifier(EventType::View, "Viewed", "brand");
    for (user, b9) in [("u1", 10), ("u2", 10)] {
        let counts = engine.aggregates().counts(APP, user).await.unwrap();
        assert_eq!(
            counts.get(&brand).and_then(|c| c.get("b9")),
            Some(&b9),
            "{user}"
        );
        let stored = engine.profiles().stored_profile(APP, user).await.unwrap();
        let recomputed = engine.profiles().recompute_one(APP, user).await.unwrap();
        assert_eq!(stored.map(|s| s.0), recomputed, "{user}");
    }
    assert_days_sum_their_raw_events(store, 320).await;
}

/// The delta cells of a user's day row.
async fn deltas_of_day(store: &dyn Store, user: &str, at: i64) -> usize {
    use penchant_engine::{aggregates, keys};
    let day = keys::day(APP, user, aggregates::day_of(at));
    let row = store
        .read_row(aggregates::AGGREGATES_TABLE, day, None)
        .await
        .unwrap()
        .unwrap();
    row.family(aggregates::FAMILY)
        .filter(|c| keys::aggregate_delta_base(&c.qualifier).is_some())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_left_behind_by_a_node_is_finished_from_its_own_deltas_across_a_fold() {
    use penchant_engine::aggregates;
    // Two nodes of one store (no atomic writes): node A dies right after writing a batch's
    // deltas, before its profiles; node B folds the heavy user's day, then repairs the batch.
    let (_, shop, a, b, batch) =
        two_nodes_and_a_heavy_day(DiesAfter::new(Op::WriteRows, aggregates::AGGREGATES_TABLE))
            .await;
    let died = a.push_events(APP, &batch).await;
    assert!(died.is_err(), "the node died after its deltas: {died:?}");
    drop(a);
    // A profile read folds the day: the batch's deltas, held by its intent, stay deltas.
    let day = penchant_engine::keys::day(APP, "u1", aggregates::day_of(batch[0].timestamp));
    b.aggregates().fold(day).await.unwrap();
    assert_eq!(deltas_of_day(&*shop, "u1", batch[0].timestamp).await, 10);
    // The repair writes the batch's deltas again — the same cells — and no more than them: the
    // 300 events folded before stay in the base, not rebuilt.
    assert_eq!(b.repair(std::time::Duration::ZERO).await.unwrap(), 2);
    assert_eq!(deltas_of_day(&*shop, "u1", batch[0].timestamp).await, 10);
    assert_counted_once(&b, &*shop).await;
    // Forgotten: a fold now takes them in.
    let day = penchant_engine::keys::day(APP, "u1", aggregates::day_of(batch[0].timestamp));
    b.aggregates().fold(day).await.unwrap();
    assert_eq!(deltas_of_day(&*shop, "u1", batch[0].timestamp).await, 0);
    assert_counted_once(&b, &*shop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_attempt_stalled_past_the_repair_rebuilds_its_days_after_its_deltas() {
    use penchant_engine::{aggregates, keys};
    // Node A's first write of deltas waits at the gate past the repair's age; node B repairs
    // the batch (its deltas from the raw rows), forgets it, and folds the day.
    let (store, shop, a, b, batch) =
        two_nodes_and_a_heavy_day(Gate::new(Op::WriteRows, aggregates::AGGREGATES_TABLE)).await;
    let (first_waits, go) = store.hook.arm().await;
    let first = {
        let (a, batch) = (a.clone(), batch.clone());
        tokio::spawn(async move { a.push_events(APP, &batch).await })
    };
    first_waits.await.unwrap();
    assert_eq!(b.repair(std::time::Duration::ZERO).await.unwrap(), 2);
    let day = keys::day(APP, "u1", aggregates::day_of(batch[0].timestamp));
    b.aggregates().fold(day).await.unwrap();
    // The first attempt goes on: its deltas land on a base that holds them, so it rebuilds.
    go.send(()).unwrap();
    first.await.unwrap().unwrap();
    assert_counted_once(&b, &*shop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_read_before_the_first_attempts_intent_counts_once_across_a_fold() {
    use penchant_engine::{aggregates, events, keys};
    // Two nodes of one store; node A's first conditional write on `events` — the record of its
    // intent, right after it read which of its events are stored — waits at the gate.
    let store = Arc::new(Hooked::new(Gate::new(
        Op::Conditional,
        events::EVENTS_TABLE,
    )));
    let a = support::engine_with_app(store.clone(), config(), APP, support::views(10, 10)).await;
    let b = Engine::open(store.clone(), config()).await.unwrap();
    let now = penchant_store::validate::now_micros() / 1000;
    let start = now - now.rem_euclid(86_400_000);
    let events: Vec<Event> = (0..40)
        .map(|i| support::view("u1", "a", (start + i).min(now - 60_000 + i)))
        .collect();
    // The first attempt, on A, finds its events new and stops before its intent.
    let (first_waits, go) = store.hook.arm().await;
    let first = {
        let (a, events) = (a.clone(), events.clone());
        tokio::spawn(async move { a.push_events(APP, &events).await })
    };
    first_waits.await.unwrap();
    // The retry, on B, answers, and its intent goes; a profile read folds the day.
    b.push_events(APP, &events).await.unwrap();
    support::intents_forgotten(&*store, APP).await;
    let day = keys::day(APP, "u1", aggregates::day_of(events[0].timestamp));
    b.aggregates().fold(day).await.unwrap();
    // The first attempt goes on: its intent is recorded afresh, on a day that holds its events.
    go.send(()).unwrap();
    first.await.unwrap().unwrap();
    support::intents_forgotten(&*store, APP).await;
    let counts = a.aggregates().counts(APP, "u1").await.unwrap();
    let brand = events::qualifier(events::EventType::View, "Viewed", "brand");
    assert_eq!(
        counts.get(&brand).and_then(|c| c.get("a")),
        Some(&40),
        "each of the 40 events counted once"
    );
    assert_days_sum_their_raw_events(&*store, 40).await;
    let stored = a.profiles().refresh(APP, "u1").await.unwrap();
    assert_eq!(stored, a.profiles().recompute_one(APP, "u1").await.unwrap());
}

/// [`batches`], each with its first event twice (two events, identical).
fn batches_with_twins() -> Vec<Vec<Event>> {
    let mut batches = batches();
    for batch in &mut batches {
        batch.push(batch[0].clone());
    }
    batches
}

/// A request's events sent again as other requests: reversed, and cut in two other halves —
/// one after the other, alternating `a` and `b`, or all at once (`at_once`) — then every day
/// against its raw events (each event stored once, the twins twice) and every profile against
/// a recompute.
pub async fn other_orders_and_cuts_count_once(
    store: Arc<dyn Store>,
    a: Engine,
    b: Engine,
    at_once: bool,
) {
    let batches = batches_with_twins();
    let total: usize = batches.iter().map(Vec::len).sum();
    for batch in &batches {
        let mut reversed = batch.clone();
        reversed.reverse();
        let (left, right) = batch.split_at(batch.len() / 3);
        if at_once {
            let (r1, r2, r3, r4) = tokio::join!(
                a.push_events(APP, batch),
                a.push_events(APP, &reversed),
                a.push_events(APP, right),
                b.push_events(APP, left),
            );
            for r in [r1, r2, r3, r4] {
                r.unwrap();
            }
        } else {
            a.push_events(APP, batch).await.unwrap();
            b.push_events(APP, &reversed).await.unwrap();
            b.push_events(APP, right).await.unwrap();
            a.push_events(APP, left).await.unwrap();
        }
    }
    support::intents_forgotten(&*store, APP).await;
    assert_days_sum_their_raw_events(&*store, total).await;
    assert_profiles_are_recomputes(&a).await;
}

/// Every user's stored profile is the one a recompute gives.
async fn assert_profiles_are_recomputes(engine: &Engine) {
    let mut differ = Vec::new();
    for u in 0..USERS {
        let user = format!("u{u:03}");
        let stored = engine.profiles().stored_profile(APP, &user).await.unwrap();
        let recomputed = engine.profiles().recompute_one(APP, &user).await.unwrap();
        if stored.map(|s| s.0) != recomputed {
            differ.push(user);
        }
    }
    assert!(differ.is_empty(), "profiles unlike a recompute: {differ:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_in_another_order_or_cut_counts_once_on_two_nodes() {
    let store: Arc<dyn Store> = Arc::new(penchant_store::MemStore::new());
    let a = support::engine_with_app(store.clone(), config(), APP, support::views(10, 10)).await;
    let b = Engine::open(store.clone(), config()).await.unwrap();
    other_orders_and_cuts_count_once(store, a, b, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retries_in_other_orders_and_cuts_at_once_count_once_where_a_batch_is_written_atomically() {
    let store: Arc<dyn Store> = Arc::new(Hooked::new(Jitter));
    let engine =
        support::engine_with_app(store.clone(), alone(), APP, support::views(10, 10)).await;
    other_orders_and_cuts_count_once(store, engine.clone(), engine, true).await;
}

/// Events without a timestamp, as the server stamps them: `events` with `at` for a timestamp,
/// and every position stamped. Each keeps what told it apart from the others, its own time,
/// as a filter (`t:<ms>`): twins stay twins.
fn stamped(events: &[Event], at: i64) -> (Vec<Event>, Vec<usize>) {
    use penchant_engine::events::Target;
    let events: Vec<Event> = events
        .iter()
        .map(|e| {
            let Target::Filters(mut filters) = e.target.clone() else {
                unreachable!("the scenario's events are by filters")
            };
            filters.push(("t".into(), e.timestamp.to_string()));
            Event {
                timestamp: at,
                target: Target::Filters(filters),
                ..e.clone()
            }
        })
        .collect();
    let all = (0..events.len()).collect();
    (events, all)
}

/// Requests of events without a timestamp, each sent twice at once (on `a` and `b`), then again
/// a moment later, reversed, and cut in two: each event takes its first attempt's arrival, so
/// every day holds each event once (the twins twice) and every profile is a recompute.
pub async fn retries_without_timestamps_count_once(store: Arc<dyn Store>, a: Engine, b: Engine) {
    let batches = batches_with_twins();
    let total: usize = batches.iter().map(Vec::len).sum();
    let now = penchant_store::validate::now_micros() / 1000;
    for (n, batch) in batches.iter().enumerate() {
        let first = now - 60_000 + n as i64 * 10;
        let (events, at) = stamped(batch, first);
        let (one, two) = tokio::join!(
            a.push_request(APP, events.clone(), &at),
            b.push_request(APP, events, &at),
        );
        one.unwrap();
        two.unwrap();
        let (events, at) = stamped(batch, first + 1);
        b.push_request(APP, events, &at).await.unwrap();
        let (mut events, at) = stamped(batch, first + 2);
        events.reverse();
        a.push_request(APP, events, &at).await.unwrap();
        let (events, at) = stamped(batch, first + 3);
        let (left, right) = events.split_at(events.len() / 2);
        b.push_request(APP, right.to_vec(), &at[..right.len()])
            .await
            .unwrap();
        a.push_request(APP, left.to_vec(), &at[..left.len()])
            .await
            .unwrap();
    }
    support::intents_forgotten(&*store, APP).await;
    assert_days_sum_their_raw_events(&*store, total).await;
    assert_profiles_are_recomputes(&a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retries_of_events_without_a_timestamp_count_once_on_two_nodes() {
    let store: Arc<dyn Store> = Arc::new(Hooked::new(Jitter));
    let a = support::engine_with_app(store.clone(), config(), APP, support::views(10, 10)).await;
    let b = Engine::open(store.clone(), config()).await.unwrap();
    retries_without_timestamps_count_once(store, a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retries_of_events_without_a_timestamp_count_once_where_a_batch_is_written_atomically() {
    let store: Arc<dyn Store> = Arc::new(Hooked::new(Jitter));
    let engine =
        support::engine_with_app(store.clone(), alone(), APP, support::views(10, 10)).await;
    retries_without_timestamps_count_once(store, engine.clone(), engine).await;
}

#[tokio::test]
async fn an_event_without_a_timestamp_sent_again_past_the_retry_window_is_another_event() {
    use penchant_engine::clock::Clock;
    use penchant_engine::events::retries::RETRY_WINDOW;
    let clock = Clock::manual(penchant_store::validate::now_micros());
    let store: Arc<dyn Store> = Arc::new(penchant_store::MemStore::new());
    let config = EngineConfig {
        clock: clock.clone(),
        ..alone()
    };
    let engine = support::engine_with_app(store.clone(), config, APP, support::views(10, 10)).await;
    let view = [support::view("u1", "b1", clock.now_ms() - 1000)];
    let (events, at) = stamped(&view, clock.now_ms());
    engine.push_request(APP, events, &at).await.unwrap();
    // Within the window: the same event.
    clock.advance(RETRY_WINDOW - std::time::Duration::from_secs(1));
    let (events, at) = stamped(&view, clock.now_ms());
    engine.push_request(APP, events, &at).await.unwrap();
    assert_days_sum_their_raw_events(&*store, 1).await;
    // Past it: the user viewed the item again.
    clock.advance(std::time::Duration::from_secs(2));
    let (events, at) = stamped(&view, clock.now_ms());
    engine.push_request(APP, events, &at).await.unwrap();
    assert_days_sum_their_raw_events(&*store, 2).await;
    // An event with a timestamp of its own is never taken for another.
    engine.push_request(APP, view.to_vec(), &[]).await.unwrap();
    engine.push_request(APP, view.to_vec(), &[]).await.unwrap();
    assert_days_sum_their_raw_events(&*store, 3).await;
}

/// Once armed, holds the next operation `op` on `table` until the test lets it go, lets it
/// through, and then fails every later store call: the node died right after it.
#[derive(Debug)]
struct HeldThenDies {
    op: Op,
    table: &'static str,
    armed: tokio::sync::Mutex<
        Option<(
            tokio::sync::oneshot::Sender<()>,
            tokio::sync::oneshot::Receiver<()>,
        )>,
    >,
    dead: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl support::Hook for HeldThenDies {
    async fn before(&self, op: Op, table: &str) -> penchant_store::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.dead.load(SeqCst) && op.is_data() {
            return Err(penchant_store::StoreError::Unavailable("dead".into()));
        }
        if op == self.op && table == self.table {
            let armed = self.armed.lock().await.take();
            if let Some((waiting, go)) = armed {
                waiting.send(()).unwrap();
                go.await.unwrap();
                self.dead.store(true, SeqCst);
            }
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repair_counts_nothing_again_of_a_late_attempt_that_died_after_its_intent() {
    use penchant_engine::{aggregates, events, keys};
    // As above, but node A dies right after it records the intent afresh (before it reads
    // that the batch was answered): its intent, holding the 40 events, is the repair's.
    let (waiting, waits) = tokio::sync::oneshot::channel();
    let (go, gate) = tokio::sync::oneshot::channel();
    let store = Arc::new(Hooked::new(HeldThenDies {
        op: Op::Conditional,
        table: events::EVENTS_TABLE,
        armed: tokio::sync::Mutex::new(None),
        dead: Default::default(),
    }));
    let shop: Arc<dyn Store> = Arc::new(Hooked::on(store.inner.clone(), ()));
    let b = support::engine_with_app(shop.clone(), config(), APP, support::views(10, 10)).await;
    let a = Engine::open(store.clone(), config()).await.unwrap();
    let now = penchant_store::validate::now_micros() / 1000;
    let start = now - now.rem_euclid(86_400_000);
    let events: Vec<Event> = (0..40)
        .map(|i| support::view("u1", "a", (start + i).min(now - 60_000 + i)))
        .collect();
    *store.hook.armed.lock().await = Some((waiting, gate));
    let first = {
        let (a, events) = (a.clone(), events.clone());
        tokio::spawn(async move { a.push_events(APP, &events).await })
    };
    waits.await.unwrap();
    b.push_events(APP, &events).await.unwrap();
    support::intents_forgotten(&*shop, APP).await;
    let day = keys::day(APP, "u1", aggregates::day_of(events[0].timestamp));
    b.aggregates().fold(day.clone()).await.unwrap();
    go.send(()).unwrap();
    assert!(first.await.unwrap().is_err(), "A died after its intent");
    drop(a);
    assert_eq!(b.repair(std::time::Duration::ZERO).await.unwrap(), 1);
    support::intents_forgotten(&*shop, APP).await;
    b.aggregates().fold(day).await.unwrap();
    let counts = b.aggregates().counts(APP, "u1").await.unwrap();
    let brand = events::qualifier(events::EventType::View, "Viewed", "brand");
    assert_eq!(
        counts.get(&brand).and_then(|c| c.get("a")),
        Some(&40),
        "each of the 40 events counted once, the repair included"
    );
    assert_days_sum_their_raw_events(&*shop, 40).await;
    let stored = b.profiles().stored_profile(APP, "u1").await.unwrap();
    assert_eq!(
        stored.map(|s| s.0),
        b.profiles().recompute_one(APP, "u1").await.unwrap()
    );
}
