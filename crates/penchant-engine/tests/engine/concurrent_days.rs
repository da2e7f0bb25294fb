//! Many requests at once for the same few users and days, on a store whose every operation takes
//! a random while (as a remote store's do): each day's aggregate still sums exactly its raw
//! events — folds racing with deltas and with each other count no event twice and lose none;
//! and each user's stored profile is the one a recompute gives, on a node sharing its store and
//! on a node alone on it (which trusts its own counters of changes instead of reading again).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use penchant_engine::events::Event;
use penchant_engine::{Engine, EngineConfig, aggregates, keys};
use penchant_store::{ReadRows, RowSet, Store};
use rand::{Rng, SeedableRng};

use crate::support::{self, Hook, Hooked, Op};

const APP: &str = "APP";

/// Every operation waits 0 to 3 ms first.
#[derive(Debug, Default)]
pub struct Jitter;

#[async_trait]
impl Hook for Jitter {
    async fn before(&self, op: Op, _: &str) -> penchant_store::Result<()> {
        if op.is_data() {
            let wait = rand::rng().random_range(0..3_000);
            tokio::time::sleep(Duration::from_micros(wait)).await;
        }
        Ok(())
    }
}

/// [`Jitter`], and one profile write in three held back 10 to 30 ms: a refresh that read
/// before another batch's deltas then writes after that batch's own refresh.
#[derive(Debug, Default)]
struct SlowProfiles;

#[async_trait]
impl Hook for SlowProfiles {
    async fn before(&self, op: Op, table: &str) -> penchant_store::Result<()> {
        if !op.is_data() {
            return Ok(());
        }
        let wait = if table == "profiles" && op == Op::WriteRows && rand::rng().random_ratio(1, 3) {
            rand::rng().random_range(10_000..30_000)
        } else {
            rand::rng().random_range(0..3_000)
        };
        tokio::time::sleep(Duration::from_micros(wait)).await;
        Ok(())
    }
}

fn event(user: usize, brand: usize, timestamp: i64) -> Event {
    support::view(&format!("u{user}"), &format!("b{brand}"), timestamp)
}

type Sums = BTreeMap<(bytes::Bytes, bytes::Bytes), u64>;

fn add(sums: &mut Sums, row: bytes::Bytes, qualifier: &[u8], value: &[u8]) {
    let counts: BTreeMap<String, u64> = serde_json::from_slice(value).unwrap();
    *sums
        .entry((row, bytes::Bytes::copy_from_slice(qualifier)))
        .or_default() += counts.values().sum::<u64>();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_of_the_same_days_count_every_event_once() {
    every_event_counts_once(Arc::new(Hooked::new(Jitter))).await;
}

/// Many requests at once for the same few users and days on `store` (a jittered MemStore, a
/// Bigtable emulator): each day's aggregate sums exactly its raw events.
pub async fn every_event_counts_once(store: Arc<dyn Store>) {
    let engine = Engine::open(store.clone(), EngineConfig::default())
        .await
        .unwrap();
    let now = penchant_store::validate::now_micros() / 1000;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    // 2 users, 3 days, 6,000 events in batches of 100, 8 batches in flight.
    let events: Vec<Event> = (0..6_000)
        .map(|_| {
            let user = rng.random_range(0..2);
            let at = now - rng.random_range(0..3 * 86_400_000);
            event(user, rng.random_range(0..20), at)
        })
        .collect();
    let batches: Vec<Vec<Event>> = events.chunks(100).map(<[Event]>::to_vec).collect();
    let mut tasks = tokio::task::JoinSet::new();
    let queue = Arc::new(tokio::sync::Mutex::new(batches));
    for _ in 0..8 {
        let (engine, queue) = (engine.clone(), queue.clone());
        tasks.spawn(async move {
            loop {
                let Some(batch) = queue.lock().await.pop() else {
                    return;
                };
                engine.push_events(APP, &batch).await.unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }

    assert_days_sum_their_raw_events(&*store, events.len()).await;
}

/// Each day's aggregate in `store` sums exactly its raw events (of which there are `rows`): no
/// event counted twice, none lost.
pub async fn assert_days_sum_their_raw_events(store: &dyn Store, rows_expected: usize) {
    let all = || ReadRows::new(RowSet::all());
    let mut aggregated = Sums::new();
    for row in store.read_all("aggregates", all()).await.unwrap() {
        for cell in row.family(aggregates::FAMILY) {
            if cell.qualifier.contains(&b',') {
                let q = keys::aggregate_delta_base(&cell.qualifier).unwrap_or(&cell.qualifier);
                add(&mut aggregated, row.key.clone(), q, &cell.value);
            }
        }
    }
    let mut raw = Sums::new();
    let mut rows = 0;
    for row in store.read_all("events", all()).await.unwrap() {
        let Some(user) = keys::user_of(APP, &row.key) else {
            continue;
        };
        rows += 1;
        let ms = u64::from_be_bytes(row.key[row.key.len() - 16..][..8].try_into().unwrap());
        let day = keys::day(APP, user, aggregates::day_of(ms as i64));
        for cell in row.cells.iter().filter(|c| c.qualifier.contains(&b',')) {
            add(&mut raw, day.clone(), &cell.qualifier, &cell.value);
        }
    }
    assert_eq!(rows, rows_expected);
    let differ: Vec<_> = raw
        .iter()
        .filter(|(k, v)| aggregated.get(*k) != Some(*v))
        .map(|(k, v)| (k.0.clone(), *v, aggregated.get(k).copied()))
        .collect();
    assert!(
        differ.is_empty(),
        "days whose aggregate differs (raw, aggregate): {differ:?}"
    );
    assert_eq!(aggregated.len(), raw.len());
    assert_eq!(aggregated, raw);
}

/// Rounds of 16 batches at once for 3 users over one hour, on a jittered store whose profile
/// writes are sometimes slow: once a round
/// is answered, every stored profile equals a recompute from the raw events.
async fn profiles_converge(config: EngineConfig) {
    let store = Arc::new(Hooked::new(SlowProfiles));
    let engine = support::engine_with_app(store, config, APP, support::views(10, 10)).await;
    let now = penchant_store::validate::now_micros() / 1000;
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for round in 0..30 {
        let users = [3 * round, 3 * round + 1, 3 * round + 2];
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..16 {
            // Skewed brands, so that scores differ and a missed event shows.
            let batch: Vec<Event> = (0..20)
                .map(|_| {
                    let brand = rng.random_range(0..6) * rng.random_range(0..4);
                    let at = now - rng.random_range(0..3_600_000);
                    event(users[rng.random_range(0..3)], brand, at)
                })
                .collect();
            let engine = engine.clone();
            tasks.spawn(async move { engine.push_events(APP, &batch).await.unwrap() });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
        for user in users {
            let user = format!("u{user}");
            let (stored, _) = engine
                .profiles()
                .stored_profile(APP, &user)
                .await
                .unwrap()
                .expect("a profile");
            let recomputed = engine
                .profiles()
                .recompute_one(APP, &user)
                .await
                .unwrap()
                .expect("a profile");
            assert_eq!(stored, recomputed, "round {round}, {user}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_leave_every_profile_as_a_recompute_would() {
    profiles_converge(EngineConfig::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_leave_every_profile_as_a_recompute_would_on_a_store_of_its_own() {
    profiles_converge(EngineConfig {
        exclusive_store: true,
        ..EngineConfig::default()
    })
    .await;
}
