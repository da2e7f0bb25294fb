//! A strong profile read is strong all the way down: when the stored profile is stale and is
//! recomputed on read, every read the recompute makes of the user's rows is strong too.

use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use penchant_engine::events::Event;
use penchant_engine::strategy::Strategy;
use penchant_engine::{Consistency, Engine, EngineConfig};
use penchant_store::{ReadRows, Result};

use crate::support::{self, Hook, Hooked, Op};

/// Records the table and consistency of every read.
#[derive(Debug, Default)]
struct Reads(Mutex<Vec<(String, Consistency)>>);

#[async_trait]
impl Hook for Reads {
    async fn before(&self, _: Op, _: &str) -> Result<()> {
        Ok(())
    }
    async fn before_read(&self, table: &str, request: &ReadRows) -> Result<()> {
        self.0.lock().push((table.to_owned(), request.consistency));
        Ok(())
    }
}

fn view(brand: &str, timestamp: i64) -> Event {
    support::view("u1", brand, timestamp)
}

fn strategy(score: i32) -> Strategy {
    support::views(score, 10)
}

#[tokio::test]
async fn a_strong_profile_read_recomputes_from_strong_reads() {
    let store = Arc::new(Hooked::<Reads>::default());
    let engine = Engine::open(store.clone(), EngineConfig::default())
        .await
        .unwrap();
    engine
        .tenancy()
        .create_app_with(Some("APP"), "app", 90, Default::default())
        .await
        .unwrap();
    engine.set_strategy("APP", strategy(10)).await.unwrap();
    let now = || penchant_store::validate::now_micros() / 1000;
    engine
        .push_events("APP", &[view("old", now() - 1000)])
        .await
        .unwrap();
    // A deletion today: today's aggregate is cut, its raw events read on a recompute.
    engine.delete_profile("APP", "u1").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    engine
        .push_events("APP", &[view("new", now())])
        .await
        .unwrap();
    // A new strategy: the stored profile is stale, a read recomputes it.
    engine.set_strategy("APP", strategy(20)).await.unwrap();

    store.hook.0.lock().clear();
    let profile = engine
        .profile("APP", "u1", Consistency::Strong)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        profile.scores["brand"].keys().collect::<Vec<_>>(),
        ["new"],
        "{profile:?}"
    );
    let reads = std::mem::take(&mut *store.hook.0.lock());
    let of_user: Vec<&(String, Consistency)> = reads
        .iter()
        .filter(|(t, _)| ["profiles", "aggregates", "events"].contains(&t.as_str()))
        .collect();
    for table in ["profiles", "aggregates", "events"] {
        assert!(
            of_user.iter().any(|(t, _)| t == table),
            "no read of {table}: {reads:?}"
        );
    }
    assert!(
        of_user.iter().all(|(_, c)| *c == Consistency::Strong),
        "{reads:?}"
    );

    // The default read is eventual.
    engine
        .profile("APP", "u1", Consistency::Eventual)
        .await
        .unwrap();
    let reads = std::mem::take(&mut *store.hook.0.lock());
    assert!(
        reads.iter().all(|(_, c)| *c == Consistency::Eventual),
        "{reads:?}"
    );
}
