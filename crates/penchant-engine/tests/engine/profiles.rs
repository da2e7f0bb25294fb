//! Streaming equals batch: after any sequence of events (some older than the app's 7-day
//! retention window; bursts of them, so that days' aggregates fold; retried requests; events
//! on catalog items whose records are written later, or changed), repairs, profile deletions
//! and strategy changes (each followed by its recompute job), every stored profile is the one
//! a full recompute gives — in either event layout (wide and narrow), on a node alone on its
//! store (profiles updated from users' states) or not — and no event waits for an item that
//! has a record.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use penchant_engine::{aggregates, keys};
use penchant_store::{ReadRows, RowFilter, RowSet, Store};

use penchant_engine::catalog::Write;
use penchant_engine::events::{EventType, Layout, Target};
use penchant_engine::jobs::JobState;
use penchant_engine::strategy::Strategy as Personalization;
use penchant_engine::{Engine, EngineConfig};
use proptest::prelude::*;

use crate::support;

const APP: &str = "APP";
const USERS: [&str; 3] = ["u1", "u2", "u3"];
const NAMES: [&str; 2] = ["Product Viewed", "Product Bought"];
const FACETS: [&str; 3] = ["brand", "color", "size"];
const VALUES: [&str; 3] = ["a", "b", "c"];
const KINDS: [EventType; 3] = [EventType::View, EventType::Click, EventType::Conversion];
const ITEMS: usize = 5;

fn item(i: usize) -> String {
    format!("item-{i}")
}

#[derive(Debug, Clone)]
enum Op {
    Strategy(u8),
    Event {
        user: usize,
        kind: usize,
        name: usize,
        filters: Vec<(usize, usize)>,
        /// Days before now: the app keeps 7, so some events fall outside its window.
        age_days: i64,
        /// Events in the request, one ms apart (once a refresh reads 32 deltas in a day, it folds the day).
        copies: usize,
    },
    /// Events on catalog items (`ITEMS`), whose records may not be written yet.
    Items {
        user: usize,
        kind: usize,
        name: usize,
        items: Vec<usize>,
        age_days: i64,
        copies: usize,
    },
    /// Write an item's record (its facet values drawn from `seed`): the first write of an item
    /// that events waited for, or a change.
    Record {
        item: usize,
        seed: usize,
    },
    /// The last request again, as a client retries one whose answer it lost.
    Retry,
    /// Finish the work of every batch not yet forgotten, as after a crash.
    Repair,
    DeleteProfile(usize),
}

fn personalization(seed: u8) -> Personalization {
    // One strategy in four weighs its second event negatively ("not for me"): values can
    // lose weight and leave profiles, in streaming as in batch.
    let events: Vec<(&str, EventType, i32)> = (0..2)
        .map(|i| {
            let score = 1 + i32::from(seed) * 7 % 90 + i as i32 * 10;
            let score = if i == 1 && seed % 4 == 3 {
                -score
            } else {
                score
            };
            (NAMES[i], KINDS[(seed as usize + i) % 3], score)
        })
        .collect();
    let facets: Vec<(&str, u32)> = FACETS[..1 + seed as usize % 3]
        .iter()
        .enumerate()
        .map(|(i, f)| (*f, 10 + 30 * i as u32 + u32::from(seed)))
        .collect();
    support::strategy(&events, &facets)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (0u8..4).prop_map(Op::Strategy),
        6 => (
            0..USERS.len(),
            0..3usize,
            0..NAMES.len(),
            prop::collection::vec((0..3usize, 0..3usize), 1..4),
            prop_oneof![3 => Just(0i64), 1 => 1..12i64],
            prop_oneof![3 => Just(1usize), 1 => 2..40usize],
        )
            .prop_map(|(user, kind, name, filters, age_days, copies)| Op::Event {
                user,
                kind,
                name,
                filters,
                age_days,
                copies,
            }),
        3 => (
            0..USERS.len(),
            0..3usize,
            0..NAMES.len(),
            prop::collection::vec(0..ITEMS, 1..4),
            prop_oneof![3 => Just(0i64), 1 => 1..12i64],
            prop_oneof![3 => Just(1usize), 1 => 2..40usize],
        )
            .prop_map(|(user, kind, name, items, age_days, copies)| Op::Items {
                user,
                kind,
                name,
                items,
                age_days,
                copies,
            }),
        2 => (0..ITEMS, 0..27usize).prop_map(|(item, seed)| Op::Record { item, seed }),
        1 => Just(Op::Retry),
        1 => Just(Op::Repair),
        1 => (0..USERS.len()).prop_map(Op::DeleteProfile),
    ]
}

async fn wait_for_job(engine: &Engine) {
    loop {
        let status = engine.recomputes().status(APP).await.unwrap();
        match status.as_ref().map(|s| s.state) {
            Some(JobState::Running) => tokio::time::sleep(Duration::from_millis(1)).await,
            Some(JobState::Failed) => panic!("{status:?}"),
            _ => return,
        }
    }
}

async fn run(layout: Layout, alone: bool, ops: Vec<Op>) {
    let store: Arc<dyn Store> = Arc::new(penchant_store::MemStore::new());
    let config = EngineConfig {
        recompute_parallelism: 3,
        // Alone on a store with atomic writes, batches update profiles from users' states.
        exclusive_store: alone,
        ..EngineConfig::default()
    };
    let engine = Engine::open(store.clone(), config).await.unwrap();
    engine
        .tenancy()
        .create_app_with(Some(APP), "test", 7, layout)
        .await
        .unwrap();
    let start = penchant_store::validate::now_micros() / 1000 - 1_000_000;
    engine.set_strategy(APP, personalization(0)).await.unwrap();
    wait_for_job(&engine).await;
    let mut last = Vec::new();
    let mut deleted: BTreeMap<&str, i64> = BTreeMap::new();
    for (step, op) in ops.into_iter().enumerate() {
        let at = start + step as i64 * 1000;
        match op {
            Op::Strategy(seed) => {
                engine
                    .set_strategy(APP, personalization(seed))
                    .await
                    .unwrap();
                wait_for_job(&engine).await;
            }
            Op::Event {
                user,
                kind,
                name,
                filters,
                age_days,
                copies,
            } => {
                let filters: Vec<(&str, &str)> = filters
                    .iter()
                    .map(|(f, v)| (FACETS[*f], VALUES[*v]))
                    .collect();
                let event = |i: usize| {
                    let at = at - age_days * 86_400_000 + i as i64;
                    support::event(KINDS[kind], NAMES[name], USERS[user], at, &filters)
                };
                last = (0..copies).map(event).collect();
                engine.push_events(APP, &last).await.unwrap();
            }
            Op::Items {
                user,
                kind,
                name,
                items,
                age_days,
                copies,
            } => {
                let ids: Vec<String> = items.iter().map(|i| item(*i)).collect();
                let event = |i: usize| {
                    let at = at - age_days * 86_400_000 + i as i64;
                    let mut e = support::event(KINDS[kind], NAMES[name], USERS[user], at, &[]);
                    e.target = Target::ObjectIds(ids.clone());
                    e
                };
                last = (0..copies).map(event).collect();
                engine.push_events(APP, &last).await.unwrap();
            }
            Op::Record { item: i, seed } => {
                let mut record = penchant_engine::catalog::Record::new();
                record.insert("objectID".into(), item(i).into());
                for (f, facet) in FACETS.iter().enumerate() {
                    let value = VALUES[(seed / 3usize.pow(f as u32)) % 3];
                    record.insert((*facet).into(), value.into());
                }
                engine
                    .write_records(APP, vec![("items".into(), Write::Put(record))])
                    .await
                    .unwrap();
            }
            Op::Retry => engine.push_events(APP, &last).await.unwrap(),
            Op::Repair => {
                engine.repair(Duration::ZERO).await.unwrap();
            }
            Op::DeleteProfile(user) => {
                engine
                    .profiles()
                    .delete_profile(APP, USERS[user], at)
                    .await
                    .unwrap();
                deleted.insert(USERS[user], at);
            }
        }
    }
    check(&engine).await;
    check_sums(&*store, layout).await;
    check_waiting(&engine, &*store, &deleted).await;
    // Once more after a recompute from the aggregates: every user with events is rewritten.
    engine.set_strategy(APP, personalization(9)).await.unwrap();
    wait_for_job(&engine).await;
    check(&engine).await;
}

type Sums = BTreeMap<(Bytes, Bytes), BTreeMap<String, u64>>;

fn add(sums: &mut Sums, row: Bytes, qualifier: &[u8], value: &[u8]) {
    let counts: BTreeMap<String, u64> = serde_json::from_slice(value).unwrap();
    let sum = sums
        .entry((row, Bytes::copy_from_slice(qualifier)))
        .or_default();
    for (value, n) in counts {
        *sum.entry(value).or_default() += n;
    }
}

/// Every day's aggregate (base and deltas) sums exactly its raw events, stored in `layout` only:
/// none counted twice (a retry, a fold, a repair) nor missed.
async fn check_sums(store: &dyn Store, layout: Layout) {
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
    for row in store.read_all("events", all()).await.unwrap() {
        let Some(user) = keys::user_of(APP, &row.key) else {
            continue; // an intent row
        };
        let ms = u64::from_be_bytes(row.key[row.key.len() - 16..][..8].try_into().unwrap());
        let day = keys::day(APP, user, aggregates::day_of(ms as i64));
        let other = layout.other().read_counts(&row).unwrap();
        assert_eq!(other, None, "{layout}: cells of the other layout");
        if let Some((event_type, name, counts)) = layout.read_counts(&row).unwrap() {
            for (facet, values) in counts {
                let q = keys::event_qualifier(event_type.as_str(), &name, &facet);
                add(
                    &mut raw,
                    day.clone(),
                    &q,
                    &serde_json::to_vec(&values).unwrap(),
                );
            }
        }
    }
    assert_eq!(aggregated, raw);
}

/// No event waits for an item that has a record, and each user's profile counts the events
/// that wait (inside the window, after a deletion).
async fn check_waiting(engine: &Engine, store: &dyn Store, deleted: &BTreeMap<&str, i64>) {
    let filter = RowFilter::column("e", "waiting");
    let rows = store
        .read_all("events", ReadRows::new(RowSet::all()).filter(filter))
        .await
        .unwrap();
    let mut waiting: BTreeMap<&str, u64> = BTreeMap::new();
    let window = penchant_store::validate::now_micros() - 7 * 86_400_000_000;
    for row in &rows {
        let ids: Vec<String> = serde_json::from_slice(&row.cells[0].value).unwrap();
        for id in &ids {
            let record = engine.record(APP, "items", id).await.unwrap();
            assert!(
                record.is_none(),
                "an event waits for {id}, which has a record"
            );
        }
        let user = keys::user_of(APP, &row.key).unwrap();
        let user = USERS.iter().find(|u| **u == user).unwrap();
        let ts = row.cells[0].timestamp;
        if ts >= window && deleted.get(user).is_none_or(|d| ts / 1000 > *d) {
            *waiting.entry(user).or_default() += 1;
        }
    }
    for user in USERS {
        let profile = engine.profiles().get(APP, user).await.unwrap();
        let counted = profile.map_or(0, |p| p.waiting_events);
        assert_eq!(counted, waiting.get(user).copied().unwrap_or(0), "{user}");
    }
}

async fn check(engine: &Engine) {
    let current = engine.strategies().fresh(APP).await.unwrap().unwrap();
    for user in USERS {
        let full = engine
            .profiles()
            .recompute_one(APP, user)
            .await
            .unwrap()
            .unwrap();
        match engine.profiles().stored_profile(APP, user).await.unwrap() {
            Some((stored, version)) => {
                assert_eq!(
                    version, current.version,
                    "{user}: stored under an old strategy"
                );
                assert_eq!(stored, full, "{user}");
                // Independently of `compute`: nothing older than the app's window counts.
                let window = penchant_store::validate::now_micros() / 1000 - 7 * 86_400_000;
                assert!(
                    stored.last_event_at.is_none_or(|t| t >= window),
                    "{user}: an event outside the retention window counts: {stored:?}"
                );
            }
            None => assert!(
                full.last_event_at.is_none(),
                "{user}: events but no profile"
            ),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn streaming_equals_batch(
        narrow in any::<bool>(),
        alone in any::<bool>(),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let layout = if narrow { Layout::Narrow } else { Layout::Wide };
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(run(layout, alone, ops));
    }
}
