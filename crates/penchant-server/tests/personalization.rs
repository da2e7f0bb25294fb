//! Strategy, streaming profiles, recompute jobs and deletions over HTTP.

mod common;

use std::time::Duration;

use common::Server;
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
    let s = Server::start().await;
    let admin = s.app("SHOP").await;
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
    let (status, body) = s.call(Method::POST, path, r, Some(strategy())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
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
    let (status, profile) = s
        .call(Method::GET, "/1/profiles/personalization/alice", r, None)
        .await;
    assert_eq!(status, StatusCode::OK, "{profile}");
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
    let (status, _) = s
        .call(Method::GET, "/1/profiles/personalization/bob", r, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
