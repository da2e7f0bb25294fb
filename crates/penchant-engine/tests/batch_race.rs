//! A batch recompute racing with the streaming path: an event arrives (and its refresh writes
//! the user's profile) after the batch read the user's events but before the batch writes. The
//! batch's older profile must not replace the fresher one.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use penchant_engine::events::{Event, EventType, Target};
use penchant_engine::profiles::{PROFILES_TABLE, Source};
use penchant_engine::strategy::{EventScoring, FacetScoring, Strategy};
use penchant_engine::{Engine, EngineConfig};
use penchant_store::{
    FamilyChange, GcRule, KeySample, MemStore, Mutation, ReadModifyWriteRule, ReadRows, Result,
    Row, RowFilter, RowMutation, RowStream, Store, TableSchema,
};
use tokio::sync::{Mutex, oneshot};

const APP: &str = "APP";
const USER: &str = "u1";

/// A store that, once armed, stops the next batch write of profiles (`mutate_rows` on the
/// profiles table) until the test lets it go.
#[derive(Debug, Default)]
struct Gate {
    inner: MemStore,
    /// (tells the test the write is waiting, lets the write go on).
    armed: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
}

#[async_trait]
impl Store for Gate {
    async fn create_table(&self, name: &str, families: BTreeMap<String, GcRule>) -> Result<()> {
        self.inner.create_table(name, families).await
    }
    async fn modify_families(
        &self,
        table: &str,
        changes: Vec<FamilyChange>,
    ) -> Result<TableSchema> {
        self.inner.modify_families(table, changes).await
    }
    async fn get_table(&self, table: &str) -> Result<TableSchema> {
        self.inner.get_table(table).await
    }
    async fn list_tables(&self) -> Result<Vec<TableSchema>> {
        self.inner.list_tables().await
    }
    async fn delete_table(&self, table: &str) -> Result<()> {
        self.inner.delete_table(table).await
    }
    async fn drop_row_range(&self, table: &str, prefix: &[u8]) -> Result<()> {
        self.inner.drop_row_range(table, prefix).await
    }
    async fn mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        mutations: Vec<Mutation>,
    ) -> Result<()> {
        self.inner.mutate_row(table, row_key, mutations).await
    }
    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        if table == PROFILES_TABLE {
            let gate = self.armed.lock().await.take();
            if let Some((waiting, go)) = gate {
                waiting.send(()).unwrap();
                go.await.unwrap();
            }
        }
        self.inner.mutate_rows(table, entries).await
    }
    async fn read_rows(&self, table: &str, request: ReadRows) -> Result<RowStream> {
        self.inner.read_rows(table, request).await
    }
    async fn check_and_mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        predicate: Option<RowFilter>,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        self.inner
            .check_and_mutate_row(table, row_key, predicate, on_match, on_no_match)
            .await
    }
    async fn read_modify_write_row(
        &self,
        table: &str,
        row_key: Bytes,
        rules: Vec<ReadModifyWriteRule>,
    ) -> Result<Row> {
        self.inner
            .read_modify_write_row(table, row_key, rules)
            .await
    }
    async fn sample_row_keys(&self, table: &str) -> Result<Vec<KeySample>> {
        self.inner.sample_row_keys(table).await
    }
    async fn flush(&self) -> Result<()> {
        self.inner.flush().await
    }
}

fn strategy(brand_score: u32) -> Strategy {
    Strategy {
        events_scoring: vec![EventScoring {
            event_name: "Viewed".into(),
            event_type: EventType::View,
            score: 10,
        }],
        facets_scoring: vec![FacetScoring {
            facet_name: "brand".into(),
            score: brand_score,
        }],
        personalization_impact: 50,
    }
}

fn view(brand: &str, timestamp: i64) -> Event {
    Event {
        event_type: EventType::View,
        event_subtype: None,
        event_name: "Viewed".into(),
        index: "items".into(),
        user_token: USER.into(),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_during_a_batch_is_not_overwritten() {
    for source in [Source::Raw, Source::Aggregates] {
        let store = Arc::new(Gate::default());
        let engine = Engine::open(store.clone(), EngineConfig::default())
            .await
            .unwrap();
        engine
            .tenancy()
            .create_app_with(Some(APP), "test", 30)
            .await
            .unwrap();
        let now = penchant_store::validate::now_micros() / 1000;
        engine.strategies().set(APP, strategy(10)).await.unwrap();
        engine
            .push_events(APP, &[view("a", now - 10_000)])
            .await
            .unwrap();

        // A new strategy, recomputed by a batch that stops before it writes.
        let versioned = engine.strategies().set(APP, strategy(20)).await.unwrap();
        let (waiting, batch_waits) = oneshot::channel();
        let (go, gate) = oneshot::channel();
        *store.armed.lock().await = Some((waiting, gate));
        let batch = {
            let engine = engine.clone();
            tokio::spawn(async move {
                engine
                    .profiles()
                    .recompute_all(APP, &versioned, source, 1)
                    .await
            })
        };
        batch_waits.await.unwrap();
        // Meanwhile an event: its streaming refresh writes the profile first.
        engine.push_events(APP, &[view("b", now)]).await.unwrap();
        go.send(()).unwrap();
        batch.await.unwrap().unwrap();

        let (stored, _) = engine
            .profiles()
            .stored_profile(APP, USER)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.last_event_at, Some(now), "{source:?}: {stored:?}");
        assert!(stored.scores["brand"].contains_key("b"), "{source:?}");
        let full = engine.profiles().recompute_one(APP, USER).await.unwrap();
        assert_eq!(Some(stored), full, "{source:?}");
    }
}
