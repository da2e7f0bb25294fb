//! Events past an app's retention window are deleted by the purge, with their days'
//! aggregates; what counts (the profile) does not change; and they are not stored again.

use std::sync::Arc;

use penchant_engine::{Engine, EngineConfig};
use penchant_store::{ReadRows, RowSet};

use crate::support::{self, view};

const DAY: i64 = 86_400_000;

/// An app's rows of users in `table` (not the batches' intent rows).
async fn rows(engine: &Engine, table: &str, app: &str) -> usize {
    let prefix = penchant_engine::keys::app(app);
    engine
        .store()
        .read_all(table, ReadRows::new(RowSet::prefix(prefix)))
        .await
        .unwrap()
        .iter()
        .filter(|r| penchant_engine::keys::user_of(app, &r.key).is_some())
        .count()
}

#[tokio::test]
async fn the_purge_deletes_what_the_window_left_behind() {
    let engine = Engine::open(
        Arc::new(penchant_store::MemStore::new()),
        EngineConfig::default(),
    )
    .await
    .unwrap();
    engine
        .tenancy()
        .create_app_with(Some("WEEK"), "7 days", 90, Default::default())
        .await
        .unwrap();
    engine
        .tenancy()
        .create_app_with(Some("FULL"), "90 days", 90, Default::default())
        .await
        .unwrap();
    let strategy = support::views(10, 10);
    let now = penchant_store::validate::now_micros() / 1000;
    let events = [
        view("u1", "old", now - 20 * DAY),
        view("u1", "old", now - 10 * DAY),
        view("u1", "new", now - DAY),
        view("u2", "old", now - 9 * DAY),
    ];
    for app in ["WEEK", "FULL"] {
        engine
            .strategies()
            .set(app, strategy.clone())
            .await
            .unwrap();
        engine.push_events(app, &events).await.unwrap();
    }
    assert_eq!(rows(&engine, "events", "WEEK").await, 4);
    // The shop shortens its window to a week.
    engine
        .tenancy()
        .update_app("WEEK", None, Some(7))
        .await
        .unwrap();
    let before = engine.profiles().recompute_one("WEEK", "u1").await.unwrap();
    assert!(before.is_some());

    // Another node purging (it holds the purge's lease): this one leaves it alone.
    let other = penchant_engine::leases::Leases::new(
        engine.store().clone(),
        penchant_engine::clock::Clock::system(),
        std::time::Duration::from_secs(60),
    );
    assert!(other.acquire("", "purge").await.unwrap());
    assert_eq!(engine.purge_expired().await.unwrap(), None);
    assert_eq!(rows(&engine, "events", "WEEK").await, 4);
    other.release("", "purge").await.unwrap();

    let purged = engine.purge_expired().await.unwrap();
    assert_eq!(purged, Some((3, 3)));
    assert_eq!(
        rows(&engine, "events", "WEEK").await,
        1,
        "the event in the window stays"
    );
    assert_eq!(rows(&engine, "aggregates", "WEEK").await, 1);
    assert_eq!(
        rows(&engine, "events", "FULL").await,
        4,
        "a 90-day app is left to the GC"
    );
    // What counted before counts now.
    assert_eq!(
        engine.profiles().recompute_one("WEEK", "u1").await.unwrap(),
        before
    );
    let u2 = engine.profiles().recompute_one("WEEK", "u2").await.unwrap();
    assert!(u2.as_ref().is_none_or(|p| p.scores.is_empty()), "{u2:?}");
    // A late retry of the request (Insights takes events 30 days old): what the window no
    // longer holds is not stored again, nor counted.
    engine.push_events("WEEK", &events).await.unwrap();
    assert_eq!(rows(&engine, "events", "WEEK").await, 1);
    assert_eq!(rows(&engine, "aggregates", "WEEK").await, 1);
    assert_eq!(
        engine.profiles().recompute_one("WEEK", "u1").await.unwrap(),
        before,
        "the retry changed nothing"
    );
    assert_eq!(
        engine.purge_expired().await.unwrap(),
        Some((0, 0)),
        "nothing left to purge"
    );
}
