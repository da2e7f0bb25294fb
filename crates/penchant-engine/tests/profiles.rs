//! Streaming equals batch: after any sequence of events (some older than the app's 7-day
//! retention window), profile deletions and strategy changes (each followed by its recompute
//! job), every stored profile is the one a full recompute gives.

use std::sync::Arc;
use std::time::Duration;

use penchant_engine::events::{Event, EventType, Target};
use penchant_engine::jobs::JobState;
use penchant_engine::strategy::{EventScoring, FacetScoring, Strategy as Personalization};
use penchant_engine::{Engine, EngineConfig};
use proptest::prelude::*;

const APP: &str = "APP";
const USERS: [&str; 3] = ["u1", "u2", "u3"];
const NAMES: [&str; 2] = ["Product Viewed", "Product Bought"];
const FACETS: [&str; 3] = ["brand", "color", "size"];
const VALUES: [&str; 3] = ["a", "b", "c"];
const KINDS: [EventType; 3] = [EventType::View, EventType::Click, EventType::Conversion];

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
    },
    DeleteProfile(usize),
}

fn personalization(seed: u8) -> Personalization {
    Personalization {
        events_scoring: (0..2)
            .map(|i| EventScoring {
                event_name: NAMES[i].into(),
                event_type: KINDS[(seed as usize + i) % 3],
                score: 1 + u32::from(seed) * 7 % 90 + i as u32 * 10,
            })
            .collect(),
        facets_scoring: FACETS[..1 + seed as usize % 3]
            .iter()
            .enumerate()
            .map(|(i, f)| FacetScoring {
                facet_name: (*f).into(),
                score: 10 + 30 * i as u32 + u32::from(seed),
            })
            .collect(),
        personalization_impact: 50,
    }
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
        )
            .prop_map(|(user, kind, name, filters, age_days)| Op::Event {
                user,
                kind,
                name,
                filters,
                age_days,
            }),
        1 => (0..USERS.len()).prop_map(Op::DeleteProfile),
    ]
}

async fn wait_for_job(engine: &Engine) {
    loop {
        let status = engine.jobs().status(APP).await.unwrap();
        match status.as_ref().map(|s| s.state) {
            Some(JobState::Running) => tokio::time::sleep(Duration::from_millis(1)).await,
            Some(JobState::Failed) => panic!("{status:?}"),
            _ => return,
        }
    }
}

async fn run(ops: Vec<Op>) {
    let store = Arc::new(penchant_store::MemStore::new());
    let config = EngineConfig {
        recompute_parallelism: 3,
        ..EngineConfig::default()
    };
    let engine = Engine::open(store, config).await.unwrap();
    engine
        .tenancy()
        .create_app_with(Some(APP), "test", 7)
        .await
        .unwrap();
    let start = penchant_store::validate::now_micros() / 1000 - 1_000_000;
    engine.set_strategy(APP, personalization(0)).await.unwrap();
    wait_for_job(&engine).await;
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
            } => {
                let event = Event {
                    event_type: KINDS[kind],
                    event_subtype: None,
                    event_name: NAMES[name].into(),
                    index: "items".into(),
                    user_token: USERS[user].into(),
                    authenticated_user_token: None,
                    timestamp: at - age_days * 86_400_000,
                    target: Target::Filters(
                        filters
                            .iter()
                            .map(|(f, v)| (FACETS[*f].into(), VALUES[*v].into()))
                            .collect(),
                    ),
                    query_id: None,
                    positions: None,
                    object_data: None,
                    value: None,
                    currency: None,
                };
                engine.push_events(APP, &[event]).await.unwrap();
            }
            Op::DeleteProfile(user) => {
                engine
                    .profiles()
                    .delete_profile(APP, USERS[user], at)
                    .await
                    .unwrap();
            }
        }
    }
    check(&engine).await;
    // Once more after a recompute from the aggregates: every user with events is rewritten.
    engine.set_strategy(APP, personalization(9)).await.unwrap();
    wait_for_job(&engine).await;
    check(&engine).await;
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
    fn streaming_equals_batch(ops in prop::collection::vec(op(), 1..40)) {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(run(ops));
    }
}
