//! The Bigtable backend (an emulator) under what a day's aggregate does to it: many requests at
//! once for the same few users and days, and each day's aggregate still sums exactly its raw
//! events. The emulator was seen returning some cells of such a row twice, which folds counted
//! twice (issue 15); and the two guarantees folds rely on — value regexes match whole values, a
//! check-and-mutate is atomic against concurrent writes to its row — hold there.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use penchant_engine::events::{Event, EventType, Target};
use penchant_engine::{Engine, EngineConfig, aggregates, keys};
use penchant_store::{ReadRows, RowSet, Store};
use penchant_store_bigtable::BigtableStore;
use penchant_store_bigtable::emulator::Emulator;

const APP: &str = "APP";

fn event(user: u64, brand: u64, timestamp: i64) -> Event {
    Event {
        event_type: EventType::View,
        event_subtype: None,
        event_name: "Viewed".into(),
        index: "items".into(),
        user_token: format!("u{user}"),
        authenticated_user_token: None,
        timestamp,
        target: Target::Filters(vec![("brand".into(), format!("b{brand}"))]),
        query_id: None,
        positions: None,
        object_data: None,
        value: None,
        currency: None,
    }
}

type Sums = BTreeMap<(Bytes, Bytes), u64>;

fn add(sums: &mut Sums, row: Bytes, qualifier: &[u8], value: &[u8]) {
    let counts: BTreeMap<String, u64> = serde_json::from_slice(value).unwrap();
    *sums
        .entry((row, Bytes::copy_from_slice(qualifier)))
        .or_default() += counts.values().sum::<u64>();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_of_the_same_days_count_every_event_once_on_bigtable() {
    let emulator = Emulator::start();
    let store: Arc<dyn Store> =
        Arc::new(BigtableStore::connect(emulator.config("")).await.unwrap());
    let engine = Engine::open(store.clone(), EngineConfig::default())
        .await
        .unwrap();
    let now = penchant_store::validate::now_micros() / 1000;
    let mut seed = 7u64;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let events: Vec<Event> = (0..6_000)
        .map(|_| {
            let user = next(2);
            let at = now - next(3 * 86_400_000) as i64;
            event(user, next(20), at)
        })
        .collect();
    let batches: Vec<Vec<Event>> = events.chunks(100).map(<[Event]>::to_vec).collect();
    let queue = Arc::new(tokio::sync::Mutex::new(batches));
    let mut tasks = tokio::task::JoinSet::new();
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
    let all = || ReadRows::new(RowSet::all());
    let mut aggregated = Sums::new();
    for row in store.read_all("aggregates", all()).await.unwrap() {
        for cell in &row.cells {
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
    assert_eq!(rows, events.len());
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
}

#[tokio::test]
async fn value_regexes_match_whole_values_on_bigtable() {
    use penchant_store::{GcRule, Mutation, RowFilter};
    let emulator = Emulator::start();
    let store = BigtableStore::connect(emulator.config("")).await.unwrap();
    let families = BTreeMap::from([("f".to_owned(), GcRule::MaxVersions(1))]);
    store.create_table("t", families).await.unwrap();
    let row = Bytes::from_static(b"r");
    store
        .mutate_row("t", row.clone(), vec![Mutation::set_now("f", "v", "15")])
        .await
        .unwrap();
    let version = |v: &str| RowFilter::column("f", "v").and(RowFilter::ValueRegex(v.into()));
    for (pattern, matches) in [("15", true), ("1", false), ("5", false), ("1.", true)] {
        let matched = store
            .check_and_mutate_row(
                "t",
                row.clone(),
                Some(version(pattern)),
                vec![],
                vec![Mutation::set_now("f", "other", "x")],
            )
            .await
            .unwrap();
        assert_eq!(matched, matches, "{pattern}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_and_mutate_is_atomic_against_concurrent_writes_on_bigtable() {
    use penchant_store::{GcRule, Mutation, RowFilter};
    let emulator = Emulator::start();
    let store = Arc::new(BigtableStore::connect(emulator.config("")).await.unwrap());
    let families = BTreeMap::from([(
        "a".to_owned(),
        GcRule::MaxAge(std::time::Duration::from_secs(90 * 86_400)),
    )]);
    store.create_table("t", families).await.unwrap();
    let row = Bytes::from_static(b"r");
    let ts = penchant_store::validate::now_micros() / 1000 * 1000;
    // Writers add delta cells; folders move them into a sum under a version, as a fold does.
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..4u64 {
        let (store, row) = (store.clone(), row.clone());
        tasks.spawn(async move {
            for i in 0..300u64 {
                let q = format!("d{w}-{i}");
                store
                    .mutate_row("t", row.clone(), vec![Mutation::set("a", q, ts, "1")])
                    .await
                    .unwrap();
            }
        });
    }
    for _ in 0..4 {
        let (store, row) = (store.clone(), row.clone());
        tasks.spawn(async move {
            for _ in 0..150 {
                let read = store.read_row("t", row.clone(), None).await.unwrap();
                let Some(read) = read else { continue };
                let cell = |q: &[u8]| {
                    read.latest("a", q)
                        .map(|c| String::from_utf8_lossy(&c.value).to_string())
                };
                let v: u64 = cell(b"v").and_then(|v| v.parse().ok()).unwrap_or(0);
                let sum: u64 = cell(b"sum").and_then(|v| v.parse().ok()).unwrap_or(0);
                let deltas: Vec<Bytes> = read
                    .cells
                    .iter()
                    .filter(|c| c.qualifier.starts_with(b"d"))
                    .map(|c| c.qualifier.clone())
                    .collect();
                let mut muts: Vec<Mutation> = deltas
                    .iter()
                    .map(|q| Mutation::delete_column("a", q.clone()))
                    .collect();
                muts.push(Mutation::delete_column("a", "sum"));
                muts.push(Mutation::set(
                    "a",
                    "sum",
                    ts,
                    (sum + deltas.len() as u64).to_string(),
                ));
                muts.push(Mutation::delete_column("a", "v"));
                muts.push(Mutation::set("a", "v", ts, (v + 1).to_string()));
                let column = RowFilter::column("a", "v");
                if v == 0 {
                    store
                        .check_and_mutate_row("t", row.clone(), Some(column), vec![], muts)
                        .await
                        .unwrap();
                } else {
                    let same = column.and(RowFilter::ValueRegex(v.to_string()));
                    store
                        .check_and_mutate_row("t", row.clone(), Some(same), muts, vec![])
                        .await
                        .unwrap();
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let read = store
        .read_row("t", row.clone(), None)
        .await
        .unwrap()
        .unwrap();
    let sum: u64 = read
        .latest("a", b"sum")
        .map_or(0, |c| String::from_utf8_lossy(&c.value).parse().unwrap());
    let deltas = read
        .cells
        .iter()
        .filter(|c| c.qualifier.starts_with(b"d"))
        .count() as u64;
    assert_eq!(sum + deltas, 1200, "sum {sum} + {deltas} deltas left");
}
