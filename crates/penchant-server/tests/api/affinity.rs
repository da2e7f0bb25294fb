//! Row affinity over HTTP: two routes to one replicated instance (MemStore) under an
//! `AffineStore`; with a user's home cluster unreachable, `?consistency=strong` reads answer 503
//! and default (eventual) reads are served by the other cluster.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use penchant_store::{
    AffineStore, FamilyChange, GcRule, KeySample, MemStore, Mutation, ReadModifyWriteRule,
    ReadRows, Result, Row, RowFilter, RowMutation, RowStream, Store, StoreError, TableSchema,
};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common::{Server, assert_error};

/// A route to the instance through one cluster, which can become unreachable.
#[derive(Debug)]
struct Cluster {
    instance: Arc<MemStore>,
    down: AtomicBool,
}

impl Cluster {
    fn check(&self) -> Result<()> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("cluster unreachable".into()));
        }
        Ok(())
    }
}

#[async_trait]
impl Store for Cluster {
    async fn create_table(&self, name: &str, f: BTreeMap<String, GcRule>) -> Result<()> {
        self.check()?;
        self.instance.create_table(name, f).await
    }
    async fn modify_families(&self, t: &str, c: Vec<FamilyChange>) -> Result<TableSchema> {
        self.check()?;
        self.instance.modify_families(t, c).await
    }
    async fn get_table(&self, t: &str) -> Result<TableSchema> {
        self.check()?;
        self.instance.get_table(t).await
    }
    async fn list_tables(&self) -> Result<Vec<TableSchema>> {
        self.check()?;
        self.instance.list_tables().await
    }
    async fn delete_table(&self, t: &str) -> Result<()> {
        self.check()?;
        self.instance.delete_table(t).await
    }
    async fn drop_row_range(&self, t: &str, p: &[u8]) -> Result<()> {
        self.check()?;
        self.instance.drop_row_range(t, p).await
    }
    async fn mutate_row(&self, t: &str, k: Bytes, m: Vec<Mutation>) -> Result<()> {
        self.check()?;
        self.instance.mutate_row(t, k, m).await
    }
    async fn mutate_rows(&self, t: &str, e: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        self.check()?;
        self.instance.mutate_rows(t, e).await
    }
    async fn read_rows(&self, t: &str, r: ReadRows) -> Result<RowStream> {
        self.check()?;
        self.instance.read_rows(t, r).await
    }
    async fn check_and_mutate_row(
        &self,
        t: &str,
        k: Bytes,
        p: Option<RowFilter>,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        self.check()?;
        self.instance
            .check_and_mutate_row(t, k, p, on_match, on_no_match)
            .await
    }
    async fn read_modify_write_row(
        &self,
        t: &str,
        k: Bytes,
        r: Vec<ReadModifyWriteRule>,
    ) -> Result<Row> {
        self.check()?;
        self.instance.read_modify_write_row(t, k, r).await
    }
    async fn sample_row_keys(&self, t: &str) -> Result<Vec<KeySample>> {
        self.check()?;
        self.instance.sample_row_keys(t).await
    }
    async fn flush(&self) -> Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn strong_reads_refuse_when_the_home_cluster_is_unreachable() {
    let instance = Arc::new(MemStore::new());
    let clusters: Vec<Arc<Cluster>> = (0..2)
        .map(|_| {
            Arc::new(Cluster {
                instance: instance.clone(),
                down: AtomicBool::new(false),
            })
        })
        .collect();
    let affine = AffineStore::new(
        clusters
            .iter()
            .map(|c| c.clone() as Arc<dyn Store>)
            .collect(),
        None,
    );
    let user = "alice";
    let home = affine.home(&penchant_engine::keys::profile("SHOP", user));
    let s = Server::start_on(Arc::new(affine)).await;
    let admin = s.app("SHOP").await;
    let a = Some(("SHOP", admin.as_str()));
    let strategy = json!({
        "eventsScoring": [{"eventName": "Viewed", "eventType": "view", "score": 10}],
        "facetsScoring": [{"facetName": "brand", "score": 100}],
        "personalizationImpact": 60
    });
    let (status, body) = s
        .call(
            Method::POST,
            "/1/strategies/personalization",
            a,
            Some(strategy),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let events = json!({"events": [{"eventType": "view", "eventName": "Viewed", "index": "items",
        "userToken": user, "filters": ["brand:Apple"]}]});
    let (status, body) = s.call(Method::POST, "/1/events", a, Some(events)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = s
        .call(
            Method::PUT,
            "/1/queues/for-you",
            a,
            Some(json!({"indexName": "products", "sources": [{"source": "trending"}]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let seen = json!({"objectIDs": ["p1"]});
    let (status, body) = s
        .call(
            Method::POST,
            "/1/seen/users/alice/madd",
            a,
            Some(seen.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let profile = "/1/profiles/personalization/alice";
    let reads = [
        (Method::GET, profile.to_owned(), None),
        (Method::GET, "/1/seen/users/alice".to_owned(), None),
        (
            Method::POST,
            "/1/seen/users/alice/mexists".to_owned(),
            Some(seen.clone()),
        ),
        (
            Method::POST,
            "/1/seen/users/alice/unseen".to_owned(),
            Some(seen.clone()),
        ),
        (
            Method::GET,
            "/1/queues/for-you/users/alice?n=3".to_owned(),
            None,
        ),
    ];
    let with = |path: &str, consistency: &str| {
        let sep = if path.contains('?') { '&' } else { '?' };
        format!("{path}{sep}consistency={consistency}")
    };

    // Every cluster up: every read answers, whatever its consistency.
    for (method, path, body) in &reads {
        for path in [path.clone(), with(path, "eventual"), with(path, "strong")] {
            let (status, got) = s.call(method.clone(), &path, a, body.clone()).await;
            assert_eq!(status, StatusCode::OK, "{path}: {got}");
        }
        assert_error(
            s.call(method.clone(), &with(path, "fresh"), a, body.clone())
                .await,
            StatusCode::BAD_REQUEST,
            "consistency must be eventual or strong",
        );
    }
    let (_, before) = s.call(Method::GET, profile, a, None).await;
    assert_eq!(before["scores"]["brand"]["Apple"], 20, "{before}");

    // Alice's home cluster unreachable: strong reads refuse with 503, saying why; eventual
    // ones (the default) are served by the other cluster.
    clusters[home].down.store(true, Ordering::SeqCst);
    for (method, path, body) in &reads {
        assert_error(
            s.call(method.clone(), &with(path, "strong"), a, body.clone())
                .await,
            StatusCode::SERVICE_UNAVAILABLE,
            "strong read: the home cluster of this user's rows is unreachable",
        );
        for path in [path.clone(), with(path, "eventual")] {
            let (status, got) = s.call(method.clone(), &path, a, body.clone()).await;
            assert_eq!(status, StatusCode::OK, "{path}: {got}");
        }
    }
    let (_, during) = s.call(Method::GET, profile, a, None).await;
    assert_eq!(during, before);

    // Home back: strong reads answer again.
    clusters[home].down.store(false, Ordering::SeqCst);
    let (status, got) = s.call(Method::GET, &with(profile, "strong"), a, None).await;
    assert_eq!(status, StatusCode::OK, "{got}");
}
