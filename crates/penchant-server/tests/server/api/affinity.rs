//! Row affinity over HTTP: two routes to one replicated instance (MemStore) under an
//! `AffineStore`; with a user's home cluster unreachable, `?consistency=strong` reads answer 503
//! and default (eventual) reads are served by the other cluster.

use std::sync::Arc;

use penchant_store::testing::{Down, Hooked};
use penchant_store::{AffineStore, MemStore, Store};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common::{Server, assert_error};

/// A route to the instance through one cluster, which can become unreachable.
type Cluster = Hooked<Down>;

#[tokio::test]
async fn strong_reads_refuse_when_the_home_cluster_is_unreachable() {
    let instance = Arc::new(MemStore::new());
    let clusters: Vec<Arc<Cluster>> = (0..2)
        .map(|_| Arc::new(Cluster::on(instance.clone(), Down::default())))
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
    s.ok(
        Method::POST,
        "/1/strategies/personalization",
        a,
        Some(strategy),
    )
    .await;
    let events = json!({"events": [{"eventType": "view", "eventName": "Viewed", "index": "items",
        "userToken": user, "filters": ["brand:Apple"]}]});
    s.ok(Method::POST, "/1/events", a, Some(events)).await;
    s.ok(
        Method::PUT,
        "/1/queues/for-you",
        a,
        Some(json!({"indexName": "products", "sources": [{"source": "trending"}]})),
    )
    .await;
    let seen = json!({"objectIDs": ["p1"]});
    s.ok(
        Method::POST,
        "/1/seen/users/alice/madd",
        a,
        Some(seen.clone()),
    )
    .await;

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
    clusters[home].hook.set(true);
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
    clusters[home].hook.set(false);
    s.ok(Method::GET, &with(profile, "strong"), a, None).await;
}
