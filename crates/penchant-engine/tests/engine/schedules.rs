//! A newcomer's shop left alone: events sent before the catalog, nothing set up but the
//! strategy. The schedules' rounds (the clock advanced by hand, never slept on) train ALS and
//! build the co-interaction lists at once, then keep them fresh within their intervals; every
//! Recommend model answers from its own model, personalized, saying when it was built.

use std::time::Duration;

use penchant_engine::catalog::Write;
use penchant_engine::clock::Clock;
use penchant_engine::events::{Event, EventType, Target};
use penchant_engine::jobs::JobState;
use penchant_engine::recommend::{RecommendHit, RecommendRequest};
use penchant_engine::schedules::{Schedules, Task};
use penchant_engine::{Engine, EngineConfig};
use serde_json::json;

use crate::support;

const APP: &str = "SHOP";
const ITEMS: usize = 8;

fn bought(user: usize, items: &[usize], at: i64) -> Event {
    let mut e = support::event(
        EventType::Conversion,
        "Bought",
        &format!("u{user}"),
        at,
        &[],
    );
    e.target = Target::ObjectIds(items.iter().map(|i| format!("i{i}")).collect());
    e
}

async fn wait_until_done(engine: &Engine) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let training = engine.training_status(APP).await.unwrap();
        let build = engine.build_status(APP).await.unwrap();
        let states = [training.map(|s| s.state), build.map(|s| s.state)];
        if states.iter().all(|s| *s != Some(JobState::Running)) {
            for s in states.into_iter().flatten() {
                assert_eq!(s, JobState::Done);
            }
            return;
        }
        assert!(std::time::Instant::now() < deadline, "jobs did not end");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn recommend(
    engine: &Engine,
    request: serde_json::Value,
) -> penchant_engine::recommend::Recommendations {
    let request: RecommendRequest = serde_json::from_value(request).unwrap();
    engine
        .recommendations(APP, &[request])
        .await
        .unwrap()
        .remove(0)
}

fn started(round: Option<Vec<(String, Task)>>) -> Vec<Task> {
    round.unwrap().into_iter().map(|(_, t)| t).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shop_left_alone_gets_every_model_built_and_kept_fresh() {
    let clock = Clock::manual(penchant_store::validate::now_micros());
    let config = EngineConfig {
        clock: clock.clone(),
        ..EngineConfig::default()
    };
    let store = std::sync::Arc::new(penchant_store::MemStore::new());
    let engine = Engine::open(store, config).await.unwrap();
    engine
        .tenancy()
        .create_app(Some(APP), "shop")
        .await
        .unwrap();
    // Nothing to train on yet: nothing is due.
    assert_eq!(started(engine.run_schedules().await.unwrap()), []);

    // Events first: pairs bought together (i0+i1, i2+i3, ...), by many users; then the catalog.
    let now = clock.now_ms();
    let mut events = Vec::new();
    for user in 0..24 {
        let pair = 2 * (user % (ITEMS / 2));
        events.push(bought(user, &[pair, pair + 1], now - 60_000 + user as i64));
    }
    engine.push_events(APP, &events).await.unwrap();
    let records = (0..ITEMS)
        .map(|i| {
            let record = json!({"objectID": format!("i{i}"), "brand": format!("b{}", i / 2)});
            (
                "items".to_owned(),
                Write::Put(record.as_object().unwrap().clone()),
            )
        })
        .collect();
    engine.write_records(APP, records).await.unwrap();
    engine
        .set_strategy(
            APP,
            support::strategy(&[("Bought", EventType::Conversion, 50)], &[("brand", 100)]),
        )
        .await
        .unwrap();
    // The events counted their items once the records came.
    let profile = engine.profiles().get(APP, "u0").await.unwrap().unwrap();
    assert_eq!(profile.waiting_events, 0);
    assert_eq!(profile.scores["brand"]["b0"], 20, "{profile:?}");

    // Before the first round, every default task is due now.
    let (settings, tasks) = engine.schedules(APP).await.unwrap();
    assert_eq!(settings, Schedules::default());
    assert!(
        tasks.iter().all(|t| t.next_run_at == Some(clock.now_ms())),
        "{tasks:?}"
    );
    assert_eq!(
        started(engine.run_schedules().await.unwrap()),
        [Task::Training, Task::Build]
    );
    wait_until_done(&engine).await;
    let built = clock.now_ms();

    let together = recommend(
        &engine,
        json!({"indexName": "items", "model": "bought-together", "objectID": "i2", "threshold": 0}),
    )
    .await;
    assert_eq!(together.answered_by, "bought-together", "{together:?}");
    assert_eq!(together.built_at, Some(built));
    match &together.hits[0] {
        RecommendHit::Item { record, .. } => assert_eq!(record["objectID"], "i3"),
        other => panic!("{other:?}"),
    }
    let for_you = recommend(
        &engine,
        json!({"indexName": "items", "model": "recommended-for-you", "threshold": 0,
               "queryParameters": {"userToken": "u0"}}),
    )
    .await;
    assert_eq!(for_you.answered_by, "recommended-for-you", "{for_you:?}");
    assert!(for_you.built_at.is_some(), "{for_you:?}");
    // Personalized by default: each hit says how the profile ranked it.
    assert!(
        for_you.hits.iter().all(|h| matches!(
            h,
            RecommendHit::Item {
                personalization: Some(_),
                ..
            }
        )),
        "{for_you:?}"
    );

    // Nothing is due again until its interval has passed.
    assert_eq!(started(engine.run_schedules().await.unwrap()), []);
    clock.advance(Duration::from_secs(61 * 60));
    assert_eq!(
        started(engine.run_schedules().await.unwrap()),
        [Task::FoldIn, Task::Build]
    );
    wait_until_done(&engine).await;
    let (_, tasks) = engine.schedules(APP).await.unwrap();
    let training = tasks.iter().find(|t| t.task == Task::Training).unwrap();
    assert_eq!(training.next_run_at, Some(built + 24 * 3_600_000));
    clock.advance(Duration::from_secs(23 * 3600));
    let round = started(engine.run_schedules().await.unwrap());
    assert!(round.contains(&Task::Training), "{round:?}");
    wait_until_done(&engine).await;

    // Turned off, a task never runs.
    engine
        .set_schedules(
            APP,
            Schedules {
                build_every_minutes: 0,
                fold_in_every_minutes: 0,
                train_every_hours: 0,
                ..Schedules::default()
            },
        )
        .await
        .unwrap();
    clock.advance(Duration::from_secs(48 * 3600));
    assert_eq!(started(engine.run_schedules().await.unwrap()), []);
}
