//! An app's event layout over HTTP: chosen when the app is created, changed only by its
//! migration (started with POST, followed with GET), profiles the same in either.

use crate::common::{ROOT, Server, assert_error};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn strategy() -> Value {
    json!({
        "eventsScoring": [
            {"eventName": "Viewed", "eventType": "view", "score": 10},
            {"eventName": "Bought", "eventType": "conversion", "score": 50}
        ],
        "facetsScoring": [{"facetName": "brand", "score": 100}],
        "personalizationImpact": 60
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_layout_is_set_at_creation_and_migrated_with_a_job() {
    let s = Server::start().await;
    let root = Some(("", ROOT));
    let new_app = |body: Value| s.call(Method::POST, "/1/apps", root, Some(body));
    assert_error(
        new_app(json!({"appID": "BAD", "eventLayout": "tall"})).await,
        StatusCode::BAD_REQUEST,
        "eventLayout",
    );
    let (status, created) = new_app(json!({"appID": "SHOP", "eventLayout": "narrow"})).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["eventLayout"], "narrow");
    let admin = created["adminAPIKey"].as_str().unwrap().to_owned();
    let (_, wide) = new_app(json!({"appID": "WIDE"})).await;
    assert_eq!(wide["eventLayout"], "wide", "the default");
    let app = Some(("SHOP", admin.as_str()));

    // The layout is changed by its migration only; the same layout may be restated.
    assert_error(
        s.call(
            Method::PUT,
            "/1/apps/SHOP",
            root,
            Some(json!({"eventLayout": "wide"})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "POST /1/apps/SHOP/layout",
    );
    let (status, body) = s
        .call(
            Method::PUT,
            "/1/apps/SHOP",
            root,
            Some(json!({"eventLayout": "narrow", "name": "Shop"})),
        )
        .await;
    assert_eq!(
        (status, &body["name"]),
        (StatusCode::OK, &json!("Shop")),
        "{body}"
    );
    let body = s.ok(Method::GET, "/1/apps/SHOP/layout", root, None).await;
    assert_eq!(
        body,
        json!({"eventLayout": "narrow", "alsoWritten": null, "migration": null})
    );
    // The global admin key, or a key of the app with ACL `settings` (its admin key has it).
    let (status, _) = s.call(Method::GET, "/1/apps/SHOP/layout", app, None).await;
    assert_eq!(status, StatusCode::OK);
    let search = s.key("SHOP", &admin, &["search"]).await;
    let (status, _) = s
        .call(
            Method::GET,
            "/1/apps/SHOP/layout",
            Some(("SHOP", search.as_str())),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Starting a migration takes the global admin key.
    let (status, _) = s
        .call(
            Method::POST,
            "/1/apps/SHOP/layout",
            app,
            Some(json!({"eventLayout": "wide"})),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let path = "/1/strategies/personalization";
    assert_eq!(
        s.call(Method::POST, path, app, Some(strategy())).await.0,
        StatusCode::OK
    );
    let events = json!({"events": [
        {"eventType": "view", "eventName": "Viewed", "index": "items", "userToken": "alice", "filters": ["brand:Apple", "color:red"]},
        {"eventType": "conversion", "eventName": "Bought", "index": "items", "userToken": "alice", "filters": ["brand:Sony"]},
    ]});
    assert_eq!(
        s.call(Method::POST, "/1/events", app, Some(events)).await.0,
        StatusCode::OK
    );
    let profile = "/1/profiles/personalization/alice";
    let before = s.ok(Method::GET, profile, app, None).await;
    assert_eq!(before["scores"], json!({"brand": {"Sony": 20, "Apple": 4}}));

    // Migrate to wide: 202 with the job, then followed to its end.
    let layout = |to: &str| json!({"eventLayout": to});
    let (status, job) = s
        .call(
            Method::POST,
            "/1/apps/SHOP/layout",
            root,
            Some(layout("wide")),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    assert_eq!(
        (&job["from"], &job["to"], &job["state"]),
        (&json!("narrow"), &json!("wide"), &json!("running"))
    );
    assert_error(
        s.call(
            Method::POST,
            "/1/apps/SHOP/layout",
            root,
            Some(layout("wide")),
        )
        .await,
        StatusCode::CONFLICT,
        "running",
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        let (_, body) = s.call(Method::GET, "/1/apps/SHOP/layout", root, None).await;
        if body["migration"]["state"] != "running" {
            break body;
        }
        assert!(std::time::Instant::now() < deadline, "{body}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(status["eventLayout"], "wide", "{status}");
    assert_eq!(status["migration"]["state"], "done", "{status}");
    assert_eq!(status["migration"]["phase"], "done", "{status}");
    assert_eq!(status["migration"]["backfilled"], 2, "{status}");
    let (_, after) = s.call(Method::GET, profile, app, None).await;
    assert_eq!(after["scores"], before["scores"]);

    assert_error(
        s.call(
            Method::POST,
            "/1/apps/SHOP/layout",
            root,
            Some(layout("wide")),
        )
        .await,
        StatusCode::CONFLICT,
        "already",
    );
    assert_error(
        s.call(
            Method::POST,
            "/1/apps/NOPE/layout",
            root,
            Some(layout("wide")),
        )
        .await,
        StatusCode::NOT_FOUND,
        "NOPE",
    );
    assert_error(
        s.call(
            Method::POST,
            "/1/apps/SHOP/layout",
            root,
            Some(json!({"eventLayout": "x"})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "eventLayout",
    );
}
