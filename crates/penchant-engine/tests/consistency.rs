//! A strong profile read is strong all the way down: when the stored profile is stale and is
//! recomputed on read, every read the recompute makes of the user's rows is strong too.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use penchant_engine::events::{Event, EventType, Target};
use penchant_engine::strategy::{EventScoring, FacetScoring, Strategy};
use penchant_engine::{Consistency, Engine, EngineConfig};
use penchant_store::{
    FamilyChange, GcRule, KeySample, MemStore, Mutation, ReadModifyWriteRule, ReadRows, Result,
    Row, RowFilter, RowMutation, RowStream, Store, TableSchema,
};

/// A MemStore recording the table and consistency of every read.
#[derive(Debug, Default)]
struct Recorder {
    inner: MemStore,
    reads: Mutex<Vec<(String, Consistency)>>,
}

#[async_trait]
impl Store for Recorder {
    async fn create_table(&self, name: &str, f: BTreeMap<String, GcRule>) -> Result<()> {
        self.inner.create_table(name, f).await
    }
    async fn modify_families(&self, t: &str, c: Vec<FamilyChange>) -> Result<TableSchema> {
        self.inner.modify_families(t, c).await
    }
    async fn get_table(&self, t: &str) -> Result<TableSchema> {
        self.inner.get_table(t).await
    }
    async fn list_tables(&self) -> Result<Vec<TableSchema>> {
        self.inner.list_tables().await
    }
    async fn delete_table(&self, t: &str) -> Result<()> {
        self.inner.delete_table(t).await
    }
    async fn drop_row_range(&self, t: &str, p: &[u8]) -> Result<()> {
        self.inner.drop_row_range(t, p).await
    }
    async fn mutate_row(&self, t: &str, k: Bytes, m: Vec<Mutation>) -> Result<()> {
        self.inner.mutate_row(t, k, m).await
    }
    async fn mutate_rows(&self, t: &str, e: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        self.inner.mutate_rows(t, e).await
    }
    async fn read_rows(&self, t: &str, r: ReadRows) -> Result<RowStream> {
        self.reads.lock().push((t.to_owned(), r.consistency));
        self.inner.read_rows(t, r).await
    }
    async fn check_and_mutate_row(
        &self,
        t: &str,
        k: Bytes,
        p: Option<RowFilter>,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        self.inner
            .check_and_mutate_row(t, k, p, on_match, on_no_match)
            .await
    }
    async fn read_modify_write_row(
        &self,
        t: &str,
        k: Bytes,
        r: Vec<ReadModifyWriteRule>,
    ) -> Result<Row> {
        self.inner.read_modify_write_row(t, k, r).await
    }
    async fn sample_row_keys(&self, t: &str) -> Result<Vec<KeySample>> {
        self.inner.sample_row_keys(t).await
    }
    async fn flush(&self) -> Result<()> {
        Ok(())
    }
}

fn view(brand: &str, timestamp: i64) -> Event {
    Event {
        event_type: EventType::View,
        event_subtype: None,
        event_name: "Viewed".into(),
        index: "items".into(),
        user_token: "u1".into(),
        authenticated_user_token: None,
        timestamp,
        target: Target::Filters(vec![("brand".into(), brand.into())]),
        query_id: None,
        positions: None,
        object_data: None,
        value: None,
        currency: None,
    }
}

fn strategy(score: u32) -> Strategy {
    Strategy {
        events_scoring: vec![EventScoring {
            event_name: "Viewed".into(),
            event_type: EventType::View,
            score,
        }],
        facets_scoring: vec![FacetScoring {
            facet_name: "brand".into(),
            score: 10,
        }],
        personalization_impact: 50,
    }
}

#[tokio::test]
async fn a_strong_profile_read_recomputes_from_strong_reads() {
    let store = Arc::new(Recorder::default());
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

    store.reads.lock().clear();
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
    let reads = std::mem::take(&mut *store.reads.lock());
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
    let reads = std::mem::take(&mut *store.reads.lock());
    assert!(
        reads.iter().all(|(_, c)| *c == Consistency::Eventual),
        "{reads:?}"
    );
}
