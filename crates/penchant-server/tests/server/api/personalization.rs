//! Strategy, streaming profiles, recompute jobs and deletions over HTTP.

use std::time::Duration;

use crate::common::shop;
use penchant_store::ReadRows;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn strategy() -> Value {
    json!({
        "eventsScoring": [
            {"eventName": "Viewed", "eventType": "view", "score": 10},
            {"eventName": "Bought", "eventType": "conversion", "score": 50}
        ],
        "facetsScoring": [{"facetName": "brand", "score": 100}, {"facetName": "color", "score": 20}],
        "personalizationImpact": 60
    })
}

fn event(kind: &str, name: &str, user: &str, filters: &[&str]) -> Value {
    json!({"eventType": kind, "eventName": name, "index": "items", "userToken": user, "filters": filters})
}

#[tokio::test]
async fn strategy_profiles_jobs_and_deletion() {
    let (s, admin) = shop().await;
    let reco = s.key("SHOP", &admin, &["recommendation"]).await;
    let search = s.key("SHOP", &admin, &["search"]).await;
    let deleter = s.key("SHOP", &admin, &["deleteObject"]).await;
    let r = Some(("SHOP", reco.as_str()));
    let k = Some(("SHOP", search.as_str()));

    // Validation: all fields required, unknown fields and out-of-range values rejected.
    let path = "/1/strategies/personalization";
    let (status, _) = s.call(Method::GET, path, r, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let mut missing = strategy();
    missing
        .as_object_mut()
        .unwrap()
        .remove("personalizationImpact");
    let mut unknown = strategy();
    unknown["extra"] = json!(1);
    let mut impact = strategy();
    impact["personalizationImpact"] = json!(101);
    let mut kind = strategy();
    kind["eventsScoring"][0]["eventType"] = json!("purchase");
    for (bad, needle) in [
        (missing, "personalizationImpact"),
        (unknown, "extra"),
        (impact, "between 0 and 100"),
        (kind, "purchase"),
    ] {
        let (status, body) = s.call(Method::POST, path, r, Some(bad)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body["message"].as_str().unwrap().contains(needle), "{body}");
    }
    let (status, _) = s.call(Method::POST, path, k, Some(strategy())).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "search cannot set the strategy"
    );
    s.ok(Method::POST, path, r, Some(strategy())).await;
    let (_, got) = s.call(Method::GET, path, r, None).await;
    assert_eq!(got, strategy());

    // Streaming: the profile reflects events as soon as the push returns.
    let events = json!({"events": [
        event("view", "Viewed", "alice", &["brand:Apple", "color:red"]),
        event("view", "Viewed", "alice", &["brand:Apple"]),
        event("conversion", "Bought", "alice", &["brand:Sony"]),
        event("click", "Ignored", "alice", &["brand:Nokia"]),
    ]});
    assert_eq!(
        s.call(Method::POST, "/1/events", k, Some(events)).await.0,
        StatusCode::OK
    );
    let profile = s
        .ok(Method::GET, "/1/profiles/personalization/alice", r, None)
        .await;
    assert_eq!(profile["userToken"], "alice");
    assert!(profile["lastEventAt"].as_str().unwrap().ends_with('Z'));
    // Raw: Sony 50*100 = 5000 (best, 20), Apple 2*10*100 = 2000 (8), red 10*20 = 200 (1).
    assert_eq!(
        profile["scores"],
        json!({"brand": {"Sony": 20, "Apple": 8}, "color": {"red": 1}})
    );

    // A strategy change recomputes every profile in the background.
    let mut only_views = strategy();
    only_views["eventsScoring"] =
        json!([{"eventName": "Viewed", "eventType": "view", "score": 10}]);
    assert_eq!(
        s.call(Method::POST, path, r, Some(only_views)).await.0,
        StatusCode::OK
    );
    let mut job = Value::Null;
    for _ in 0..200 {
        job = s
            .call(Method::GET, "/1/strategies/personalization/job", r, None)
            .await
            .1;
        if job["state"] == "done" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(
        job["users"].as_u64().unwrap() + job["skipped"].as_u64().unwrap(),
        1,
        "{job}"
    );
    let (_, profile) = s
        .call(Method::GET, "/1/profiles/personalization/alice", r, None)
        .await;
    assert_eq!(
        profile["scores"],
        json!({"brand": {"Apple": 20}, "color": {"red": 2}})
    );

    // Deleting the profile: earlier events stop counting.
    let (status, body) = s.call(Method::DELETE, "/1/profiles/alice", r, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["userToken"], "alice");
    assert!(body["deletedUntil"].as_str().unwrap().ends_with('Z'));
    let (status, _) = s
        .call(Method::GET, "/1/profiles/personalization/alice", r, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Deleting the user token: every trace gone.
    let bob = json!({"events": [event("view", "Viewed", "bob", &["brand:LG"])]});
    s.call(Method::POST, "/1/events", k, Some(bob)).await;
    let (status, _) = s.call(Method::DELETE, "/1/usertokens/bob", r, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "deleteObject is needed");
    let resp = s
        .http
        .delete(format!("{}/1/usertokens/bob", s.base))
        .header("X-Algolia-Application-Id", "SHOP")
        .header("X-Algolia-API-Key", &deleter)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    let rows = s
        .store
        .read_all("events", ReadRows::default())
        .await
        .unwrap();
    assert!(
        rows.iter().all(|r| !r.key.starts_with(b"SHOP\0bob\0")),
        "bob's events are gone"
    );
    assert!(
        rows.iter().any(|r| r.key.starts_with(b"SHOP\0alice\0")),
        "alice's remain"
    );
    let days = s
        .store
        .read_all("aggregates", ReadRows::default())
        .await
        .unwrap();
    assert!(
        days.iter().all(|r| !r.key.starts_with(b"SHOP\0bob\0")),
        "bob's aggregates are gone"
    );
    assert!(days.iter().any(|r| r.key.starts_with(b"SHOP\0alice\0")));
    let (status, _) = s
        .call(Method::GET, "/1/profiles/personalization/bob", r, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn rerank_and_optional_filters() {
    let (s, admin) = shop().await;
    let search = s.key("SHOP", &admin, &["search"]).await;
    let a = Some(("SHOP", admin.as_str()));
    let k = Some(("SHOP", search.as_str()));
    let catalog = json!({"requests": [
        {"action": "addObject", "body": {"objectID": "s1", "brand": "Samsung"}},
        {"action": "addObject", "body": {"objectID": "a1", "brand": "Apple"}},
        {"action": "addObject", "body": {"objectID": "n1", "brand": "Nokia"}},
    ]});
    s.call(Method::POST, "/1/indexes/phones/batch", a, Some(catalog))
        .await;
    s.call(
        Method::POST,
        "/1/strategies/personalization",
        a,
        Some(strategy()),
    )
    .await;
    let events = json!({"events": [
        event("conversion", "Bought", "dan", &["brand:Apple"]),
        event("view", "Viewed", "dan", &["brand:Nokia"]),
    ]});
    s.call(Method::POST, "/1/events", k, Some(events)).await;

    // Hits by objectID (resolved from the catalog) and inline; the strategy's impact is 60.
    let body = json!({"userToken": "dan", "hits": [
        {"objectID": "s1"}, {"objectID": "n1"}, {"objectID": "x9", "brand": "Apple", "name": "inline"},
    ]});
    let out = s
        .ok(
            Method::POST,
            "/1/indexes/phones/rerank",
            k,
            Some(body.clone()),
        )
        .await;
    assert_eq!(out["personalizationImpact"], 60);
    let ids: Vec<&str> = out["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["objectID"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["x9", "s1", "n1"]);
    let first = &out["hits"][0];
    assert_eq!(first["name"], "inline", "hits come back as given");
    assert_eq!(first["_rankingInfo"]["personalization"]["filtersScore"], 20);
    // Impact 0 keeps the original order; an unknown user too.
    let mut zero = body.clone();
    zero["personalizationImpact"] = json!(0);
    let (_, out) = s
        .call(Method::POST, "/1/indexes/phones/rerank", k, Some(zero))
        .await;
    let ids: Vec<&str> = out["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["objectID"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["s1", "n1", "x9"]);
    let mut stranger = body;
    stranger["userToken"] = json!("nobody");
    let (_, out) = s
        .call(Method::POST, "/1/indexes/phones/rerank", k, Some(stranger))
        .await;
    assert_eq!(out["hits"][0]["objectID"], "s1");
    let (status, _) = s
        .call(
            Method::POST,
            "/1/indexes/phones/rerank",
            k,
            Some(json!({"userToken": "dan", "hits": [{"id": 1}]})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, out) = s
        .call(
            Method::GET,
            "/1/profiles/personalization/dan/optionalFilters",
            k,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // Apple 50*100 = 5000 (20); Nokia 10*100 = 1000 (4).
    assert_eq!(
        out["optionalFilters"],
        json!(["brand:Apple<score=20>", "brand:Nokia<score=4>"])
    );
}

/// Events sent before their items' records count once the records are written: the profile
/// says how many wait meanwhile, `/metrics` counts them per app, and a user deletion leaves no
/// index row of theirs behind.
#[tokio::test]
async fn events_before_the_catalog_count_when_records_arrive() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    s.ok(
        Method::POST,
        "/1/strategies/personalization",
        a,
        Some(strategy()),
    )
    .await;
    s.strategy_job_done(a).await;
    let click = |user: &str, ids: &[&str]| {
        json!({"eventType": "conversion", "eventName": "Bought", "index": "items",
               "userToken": user, "objectIDs": ids})
    };
    s.ok(
        Method::POST,
        "/1/indexes/items/batch",
        a,
        Some(json!({"requests": [
            {"action": "addObject", "body": {"objectID": "known", "brand": "Sony"}}
        ]})),
    )
    .await;
    let events = json!({"events": [
        click("alice", &["tent-9"]),
        click("alice", &["known", "tent-9", "stove-2"]),
        click("bob", &["tent-9"]),
    ]});
    s.ok(Method::POST, "/1/events", a, Some(events)).await;
    let profile = |user: &'static str| {
        let s = &s;
        async move {
            s.ok(
                Method::GET,
                &format!("/1/profiles/personalization/{user}"),
                a,
                None,
            )
            .await
        }
    };
    let alice = profile("alice").await;
    assert_eq!(alice["scores"], json!({"brand": {"Sony": 20}}), "{alice}");
    assert_eq!(alice["waitingEvents"], 2, "{alice}");
    // Bob has no counted event yet, but his profile says one waits.
    let bob = profile("bob").await;
    assert_eq!(bob["scores"], json!({}), "{bob}");
    assert_eq!(bob["waitingEvents"], 1, "{bob}");

    // tent-9 arrives: both of alice's events count it; stove-2 is still awaited.
    s.ok(
        Method::POST,
        "/1/indexes/items/batch",
        a,
        Some(json!({"requests": [
            {"action": "addObject", "body": {"objectID": "tent-9", "brand": "Vango", "color": "green"}}
        ]})),
    )
    .await;
    let alice = profile("alice").await;
    // Raw: Vango 2×50×100 = 10000 (20), Sony 5000 (10), green 2×50×20 = 2000 (4).
    assert_eq!(
        alice["scores"],
        json!({"brand": {"Vango": 20, "Sony": 10}, "color": {"green": 4}}),
        "{alice}"
    );
    assert_eq!(alice["waitingEvents"], 1, "{alice}");
    // A partial update that creates stove-2 counts too.
    s.ok(
        Method::POST,
        "/1/indexes/items/batch",
        a,
        Some(json!({"requests": [
            {"action": "partialUpdateObject", "body": {"objectID": "stove-2", "brand": "Vango"}}
        ]})),
    )
    .await;
    let alice = profile("alice").await;
    assert_eq!(alice.get("waitingEvents"), None, "{alice}");
    assert_eq!(
        alice["scores"],
        json!({"brand": {"Vango": 20, "Sony": 7}, "color": {"green": 3}}),
        "{alice}"
    );
    // The streamed profile is the one a full recompute gives.
    let mut changed = strategy();
    changed["personalizationImpact"] = json!(61);
    s.ok(
        Method::POST,
        "/1/strategies/personalization",
        a,
        Some(changed),
    )
    .await;
    s.strategy_job_done(a).await;
    assert_eq!(profile("alice").await["scores"], alice["scores"]);

    let metrics = s
        .http
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "penchant_events_waiting_total{app=\"SHOP\"} 3",
        "penchant_events_counted_late_total{app=\"SHOP\"} 3",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }

    // Bob is deleted while his event waits: nothing of his stays in the index.
    let (status, _) = s.call(Method::DELETE, "/1/usertokens/bob", a, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let rows = s
        .store
        .read_all("waiting", ReadRows::new(penchant_store::RowSet::all()))
        .await
        .unwrap();
    assert!(rows.is_empty(), "{rows:?}");
}
