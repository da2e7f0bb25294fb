//! A/B tests in a simulated shop on a manual clock: users split by the test, served their
//! variant, converting more often under B; the results say so with the significance the
//! simulated counts imply (computed here independently), and the guards hold.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use penchant_engine::abtests::{NewTest, NewVariant, Status, decode_query_id};
use penchant_engine::catalog::Record;
use penchant_engine::clock::Clock;
use penchant_engine::events::{Event, EventType, Target};
use penchant_engine::{Engine, EngineConfig, RerankOptions};
use serde_json::{Value, json};

use crate::support;

const APP: &str = "SHOP";
const INDEX: &str = "items";
const DAY_MS: i64 = 86_400_000;

async fn shop() -> (Engine, Clock) {
    let clock = Clock::manual(penchant_store::validate::now_micros());
    let config = EngineConfig {
        clock: clock.clone(),
        strategy_cache_ttl: Duration::from_secs(5),
        ..EngineConfig::default()
    };
    let store = Arc::new(penchant_store::MemStore::new());
    let engine = support::engine_with_app(store, config, APP, support::views(10, 10)).await;
    (engine, clock)
}

fn variant(percentage: i64, description: &str, params: Option<Value>) -> NewVariant {
    NewVariant {
        index: INDEX.into(),
        traffic_percentage: percentage,
        description: Some(description.into()),
        custom_search_parameters: params,
    }
}

fn test(name: &str, a: Option<Value>, b: Option<Value>, end_at: i64) -> NewTest {
    NewTest {
        name: name.into(),
        variants: vec![variant(50, "A", a), variant(50, "B", b)],
        end_at,
    }
}

fn hits() -> Vec<Record> {
    ["Samsung", "Nokia", "Apple"]
        .iter()
        .enumerate()
        .map(|(i, brand)| {
            json!({"objectID": format!("i{i}"), "brand": brand})
                .as_object()
                .unwrap()
                .clone()
        })
        .collect()
}

/// A uniform number in 0..1 drawn from the user's token (the simulation's dice).
fn dice(user: &str, seed: u64) -> f64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(user.as_bytes(), seed) as f64 / u64::MAX as f64
}

fn conversion(user: &str, query_id: &str, at: i64, value: f64) -> Event {
    let mut e = support::event(EventType::Conversion, "Bought", user, at, &[]);
    e.event_subtype = Some("purchase".into());
    e.target = Target::ObjectIds(vec!["i2".into()]);
    e.query_id = Some(query_id.into());
    e.value = Some(json!(value));
    e.currency = Some("EUR".into());
    e
}

fn click(user: &str, query_id: &str, at: i64, position: i64) -> Event {
    let mut e = support::event(EventType::Click, "Clicked", user, at, &[]);
    e.target = Target::ObjectIds(vec!["i2".into()]);
    e.query_id = Some(query_id.into());
    e.positions = Some(vec![position]);
    e
}

/// 1 − p of a two-sided two-proportion z-test (pooled), with erf from Abramowitz and Stegun
/// 7.1.26 (error below 1.5e-7): independent of the engine's statrs.
fn expected_significance(x1: f64, n1: f64, x2: f64, n2: f64) -> f64 {
    let pooled = (x1 + x2) / (n1 + n2);
    let z = (x2 / n2 - x1 / n1) / (pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2)).sqrt();
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.3275911 * x);
    let poly = t
        * (0.254829592
            + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let erf = 1.0 - poly * (-x * x).exp();
    // p = 2·(1 − Φ(|z|)) = 1 − erf(|z|/√2).
    erf
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_shop_finds_the_variant_that_sells_more() {
    let (engine, clock) = shop().await;
    let users: Vec<String> = (0..2000).map(|i| format!("user-{i:04}")).collect();
    // Every user has viewed an Apple item: personalization moves Apple up.
    let now = clock.now_ms();
    for chunk in users.chunks(500) {
        let views: Vec<Event> = chunk
            .iter()
            .map(|u| support::view(u, "Apple", now - 1000))
            .collect();
        engine.push_events(APP, &views).await.unwrap();
    }
    let created = engine
        .add_abtest(
            APP,
            test(
                "personalization off vs impact 50",
                Some(json!({"enablePersonalization": false})),
                Some(json!({"personalizationImpact": 50})),
                now + 14 * DAY_MS,
            ),
        )
        .await
        .unwrap();

    // A second test on the same index would split the same users for the same parameters.
    let refused = engine
        .add_abtest(APP, test("again", None, None, now + DAY_MS))
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("already in the running A/B test"),
        "{refused}"
    );

    // Each user is served once (with a query ID) and converts with the variant's probability.
    let (p_a, p_b) = (0.10, 0.16);
    let mut served = [0.0, 0.0];
    let mut converted = [0.0, 0.0];
    let mut revenue = [0.0, 0.0];
    let mut events = Vec::new();
    for user in &users {
        let options = RerankOptions {
            click_analytics: true,
            ..RerankOptions::default()
        };
        let reranked = engine
            .rerank(APP, INDEX, &hits(), user, options)
            .await
            .unwrap();
        let (test_id, v) = reranked.served.ab_test.expect("every user is in the test");
        assert_eq!(test_id, created.id);
        let query_id = reranked.served.query_id.clone().unwrap();
        assert_eq!(decode_query_id(&query_id), Some((created.id, v)));
        let order: Vec<usize> = reranked.ranked.iter().map(|(i, _)| *i).collect();
        match v {
            0 => {
                assert_eq!(order, [0, 1, 2], "A: personalization off keeps the order");
                assert_eq!(reranked.impact, 0);
            }
            _ => {
                assert_eq!(order[0], 2, "B: impact 50 brings Apple first");
                assert_eq!(reranked.impact, 50);
            }
        }
        served[v] += 1.0;
        if dice(user, 7) < [p_a, p_b][v] {
            converted[v] += 1.0;
            let value = 10.0 + (dice(user, 8) * 90.0).round();
            revenue[v] += value;
            events.push(click(user, &query_id, clock.now_ms(), 3));
            events.push(conversion(user, &query_id, clock.now_ms(), value));
        }
    }
    for chunk in events.chunks(200) {
        engine.push_events(APP, chunk).await.unwrap();
    }
    // Someone else's query ID counts for nothing; a view with the test's query ID neither.
    let mut stray = conversion(
        &users[0],
        "a00dbc80a8d13c4565a442e7e2dca80a",
        clock.now_ms(),
        5.0,
    );
    engine.push_events(APP, &[stray.clone()]).await.unwrap();
    stray.event_type = EventType::View;
    stray.query_id = Some(penchant_engine::abtests::query_id(created.id, 0));
    engine.push_events(APP, &[stray]).await.unwrap();

    let results = engine.abtest_results(APP, created.id).await.unwrap();
    assert_eq!(results.status, Status::Active);
    let [a, b] = &results.counts;
    assert_eq!(
        [a.users as f64, b.users as f64],
        served,
        "users per variant"
    );
    assert_eq!(a.users + b.users, users.len() as i64);
    assert!(
        (a.users as f64 / users.len() as f64 - 0.5).abs() < 0.05,
        "a 50/50 split: {} in A",
        a.users
    );
    assert_eq!([a.searches, b.searches], [a.users, b.users]);
    assert_eq!([a.tracked_searches, b.tracked_searches], [a.users, b.users]);
    assert_eq!(
        [a.converted_users as f64, b.converted_users as f64],
        converted
    );
    assert_eq!([a.conversions as f64, b.conversions as f64], converted);
    assert_eq!([a.purchases, b.purchases], [a.conversions, b.conversions]);
    assert_eq!([a.clicks, b.clicks], [a.conversions, b.conversions]);
    assert_eq!(
        [a.position_sum, b.position_sum],
        [3 * a.clicks, 3 * b.clicks]
    );
    for (i, c) in [a, b].into_iter().enumerate() {
        let eur = c.revenue.get("EUR").copied().unwrap_or_default();
        assert_eq!(
            eur.cents as f64,
            (revenue[i] * 100.0).round(),
            "revenue of variant {i}"
        );
    }

    // B converts more, as simulated, and the significance is the counts' own.
    let rate = |c: f64, n: f64| c / n;
    assert!(rate(converted[1], served[1]) > rate(converted[0], served[0]));
    let expected = expected_significance(converted[0], served[0], converted[1], served[1]);
    let significance = results.significance.conversion.unwrap();
    assert!(
        (significance - expected).abs() < 1e-5,
        "significance {significance}, expected {expected}"
    );
    assert!(
        significance > 0.99,
        "{p_a} vs {p_b} over 2000 users is significant: {significance}"
    );
    // Users still needed: the textbook sample size for the rates seen, less the users counted.
    let (r1, r2) = (rate(converted[0], served[0]), rate(converted[1], served[1]));
    let mean = (r1 + r2) / 2.0;
    let n = ((1.959964 * (2.0 * mean * (1.0 - mean)).sqrt()
        + 0.841621 * (r1 * (1.0 - r1) + r2 * (1.0 - r2)).sqrt())
    .powi(2)
        / (r1 - r2).powi(2))
    .ceil() as i64;
    let sample_size = results.significance.sample_size.unwrap();
    assert!((sample_size - n).abs() <= 1, "{sample_size} against {n}");
    assert_eq!(
        results.significance.users_still_needed,
        Some((sample_size - a.users).max(0) + (sample_size - b.users).max(0))
    );
    assert!(results.significance.revenue.contains_key("EUR"));

    // Stopped: answers are no longer the test's, and later events do not count.
    clock.advance(Duration::from_secs(60));
    engine.stop_abtest(APP, created.id).await.unwrap();
    let after = engine
        .rerank(APP, INDEX, &hits(), &users[1], RerankOptions::default())
        .await
        .unwrap();
    assert_eq!(after.served.ab_test, None);
    clock.advance(Duration::from_secs(60));
    let late_user = users.iter().find(|u| dice(u, 7) >= p_b).unwrap();
    let late_variant = engine.abtests(APP).await.unwrap()[0].variant_of(late_user);
    let late_query = penchant_engine::abtests::query_id(created.id, late_variant);
    engine
        .push_events(
            APP,
            &[conversion(late_user, &late_query, clock.now_ms(), 99.0)],
        )
        .await
        .unwrap();
    let stopped = engine.abtest_results(APP, created.id).await.unwrap();
    assert_eq!(stopped.status, Status::Stopped);
    assert_eq!(
        stopped.counts, results.counts,
        "events after the stop do not count"
    );
    assert!(
        engine.stop_abtest(APP, created.id).await.is_err(),
        "a stopped test cannot stop again"
    );

    // A deleted user leaves the test's raw counts; the variants' sums stay.
    let converter = users.iter().find(|u| dice(u, 7) < p_a).unwrap();
    let row = penchant_engine::keys::abtest_user(APP, converter, created.id);
    let store = engine.store().clone();
    let read = |row| {
        let store = store.clone();
        async move {
            store
                .read_row(penchant_engine::abtests::ABTEST_USERS_TABLE, row, None)
                .await
                .unwrap()
        }
    };
    assert!(read(row.clone()).await.is_some());
    engine.delete_user(APP, converter).await.unwrap();
    assert!(read(row).await.is_none(), "the user's raw counts are gone");
    let kept = engine.abtest_results(APP, created.id).await.unwrap();
    assert_eq!(kept.counts, results.counts, "aggregates stay (anonymous)");

    // The index is free again; a test in the past is refused.
    let next = engine
        .add_abtest(APP, test("next", None, None, clock.now_ms() + DAY_MS))
        .await
        .unwrap();
    assert!(next.id > created.id);
    let past = engine
        .add_abtest(APP, test("past", None, None, clock.now_ms() - 1))
        .await
        .unwrap_err();
    assert!(past.to_string().contains("endAt"), "{past}");
    // It expires at its end.
    clock.advance(Duration::from_millis(DAY_MS as u64));
    let expired = engine.abtest_results(APP, next.id).await.unwrap();
    assert_eq!(expired.status, Status::Expired);
    engine.delete_abtest(APP, next.id).await.unwrap();
    assert!(engine.abtest_results(APP, next.id).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variants_apply_named_strategies_and_checked_parameters() {
    let (engine, clock) = shop().await;
    let now = clock.now_ms();
    // The saved strategy counts views; a named one counts only purchases.
    let purchases = support::strategy(&[("Bought", EventType::Conversion, 50)], &[("brand", 10)]);
    let mut purchases_first = purchases.clone();
    purchases_first.personalization_impact = 100;
    engine
        .set_named_strategy(APP, "purchases", purchases_first)
        .await
        .unwrap();
    let user = "buyer";
    let mut bought = support::event(
        EventType::Conversion,
        "Bought",
        user,
        now - 10,
        &[("brand", "Nokia")],
    );
    bought.target = Target::Filters(vec![("brand".into(), "Nokia".into())]);
    engine
        .push_events(APP, &[support::view(user, "Apple", now - 20), bought])
        .await
        .unwrap();

    let unknown = engine
        .add_abtest(
            APP,
            test(
                "t",
                None,
                Some(json!({"personalizationStrategy": "nope"})),
                now + DAY_MS,
            ),
        )
        .await
        .unwrap_err();
    assert!(
        unknown.to_string().contains("no strategy is named `nope`"),
        "{unknown}"
    );
    let foreign = engine
        .add_abtest(
            APP,
            test(
                "t",
                None,
                Some(json!({"typoTolerance": false})),
                now + DAY_MS,
            ),
        )
        .await
        .unwrap_err();
    assert!(
        foreign
            .to_string()
            .contains("variants[1].customSearchParameters: unknown field `typoTolerance`"),
        "{foreign}"
    );
    let bad_split = NewTest {
        name: "t".into(),
        variants: vec![variant(60, "A", None), variant(30, "B", None)],
        end_at: now + DAY_MS,
    };
    let e = engine.add_abtest(APP, bad_split).await.unwrap_err();
    assert!(e.to_string().contains("add up to 100, not 90"), "{e}");

    let t = engine
        .add_abtest(
            APP,
            test(
                "views vs purchases",
                None,
                Some(json!({"personalizationStrategy": "purchases"})),
                now + DAY_MS,
            ),
        )
        .await
        .unwrap();
    let variant = engine.abtests(APP).await.unwrap()[0].variant_of(user);
    let reranked = engine
        .rerank(APP, INDEX, &hits(), user, RerankOptions::default())
        .await
        .unwrap();
    assert_eq!(reranked.served.ab_test, Some((t.id, variant)));
    assert_eq!(
        reranked.served.query_id, None,
        "no query ID without clickAnalytics"
    );
    let first = reranked.ranked[0].0;
    match variant {
        // The saved strategy (views, impact 50): Apple first.
        0 => assert_eq!((first, reranked.impact), (2, 50)),
        // The named one (purchases, impact 100): Nokia first.
        _ => assert_eq!((first, reranked.impact), (1, 100)),
    }
    // enableABTest: false answers as if no test ran.
    let outside = engine
        .rerank(
            APP,
            INDEX,
            &hits(),
            user,
            RerankOptions {
                enable_ab_test: false,
                click_analytics: true,
                ..RerankOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(outside.served.ab_test, None);
    let plain = outside.served.query_id.unwrap();
    assert_eq!(plain.len(), 32);
    assert_eq!(decode_query_id(&plain), None);
    // A strategy a running test uses cannot be deleted.
    let e = engine
        .delete_named_strategy(APP, "purchases")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("stop it first"), "{e}");
    let listed: BTreeMap<String, u32> = engine
        .named_strategies(APP)
        .await
        .unwrap()
        .into_iter()
        .map(|(name, s)| (name, s.strategy.personalization_impact))
        .collect();
    assert_eq!(listed, BTreeMap::from([("purchases".to_owned(), 100)]));
}

/// Increments in one table wait 5 ms first.
#[derive(Debug)]
struct SlowIncrements(&'static str);

#[async_trait::async_trait]
impl penchant_store::testing::Hook for SlowIncrements {
    async fn before(
        &self,
        op: penchant_store::testing::Op,
        table: &str,
    ) -> penchant_store::Result<()> {
        if op == penchant_store::testing::Op::Increment && table == self.0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tests_started_at_once_on_one_index_on_two_nodes_do_not_both_run() {
    let clock = Clock::manual(penchant_store::validate::now_micros());
    // Between a start's check and its write (the ID's increment) time passes: starts overlap.
    let store: Arc<dyn penchant_store::Store> = Arc::new(penchant_store::testing::Hooked::new(
        SlowIncrements("abtests"),
    ));
    let config = || EngineConfig {
        clock: clock.clone(),
        lease_ttl: Duration::from_secs(10),
        ..EngineConfig::default()
    };
    let one = support::engine_with_app(store.clone(), config(), APP, support::views(10, 10)).await;
    let two = Engine::open(store, config()).await.unwrap();
    let end = clock.now_ms() + DAY_MS;
    for round in 0..20 {
        let index = format!("index-{round}");
        let on = |engine: &Engine, name: &str| {
            let mut t = test(name, None, None, end);
            for v in &mut t.variants {
                v.index = index.clone();
            }
            let engine = engine.clone();
            async move { engine.add_abtest(APP, t).await }
        };
        // Two nodes, and two requests on one node, at once.
        let (a, b, c) = tokio::join!(on(&one, "a"), on(&two, "b"), on(&two, "c"));
        let started = [&a, &b, &c].iter().filter(|r| r.is_ok()).count();
        assert_eq!(started, 1, "round {round}: {a:?} {b:?} {c:?}");
        for refused in [a, b, c].into_iter().filter_map(Result::err) {
            assert!(
                refused
                    .to_string()
                    .contains("already in the running A/B test"),
                "{refused}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_deleted_on_one_node_leaves_no_counts_from_another() {
    let clock = Clock::manual(penchant_store::validate::now_micros());
    let store: Arc<dyn penchant_store::Store> = Arc::new(penchant_store::MemStore::new());
    let config = || EngineConfig {
        clock: clock.clone(),
        ..EngineConfig::default()
    };
    let one = support::engine_with_app(store.clone(), config(), APP, support::views(10, 10)).await;
    let two = Engine::open(store.clone(), config()).await.unwrap();
    let created = one
        .add_abtest(APP, test("t", None, None, clock.now_ms() + DAY_MS))
        .await
        .unwrap();
    // Node two serves a user of the test; its tally waits in memory.
    let options = RerankOptions {
        click_analytics: true,
        ..RerankOptions::default()
    };
    let served = two
        .rerank(APP, INDEX, &hits(), "u1", options)
        .await
        .unwrap();
    assert_eq!(served.served.ab_test.map(|(t, _)| t), Some(created.id));
    one.delete_abtest(APP, created.id).await.unwrap();
    two.flush_abtests().await.unwrap();
    let rows = |table| {
        let store = store.clone();
        async move {
            store
                .read_all(
                    table,
                    penchant_store::ReadRows::new(penchant_store::RowSet::all()),
                )
                .await
                .unwrap()
        }
    };
    let tests: Vec<_> = rows(penchant_engine::abtests::ABTESTS_TABLE)
        .await
        .into_iter()
        .filter(|r| penchant_engine::keys::abtest_of(APP, &r.key).is_some())
        .collect();
    assert!(
        tests.is_empty(),
        "no counter row outlives its test: {tests:?}"
    );
    assert!(
        rows(penchant_engine::abtests::ABTEST_USERS_TABLE)
            .await
            .is_empty()
    );
}
