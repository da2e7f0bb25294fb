//! The routes the dashboard reads besides the public API: traffic per minute, profile counts,
//! an app's settings for its own keys, a user's latest events, the strategy simulator and the
//! recompute history.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{assert_error, now_ms, shop};

fn strategy(view: u32, conversion: u32) -> Value {
    json!({
        "eventsScoring": [
            {"eventName": "Viewed", "eventType": "view", "score": view},
            {"eventName": "Bought", "eventType": "conversion", "score": conversion}
        ],
        "facetsScoring": [{"facetName": "brand", "score": 100}],
        "personalizationImpact": 100
    })
}

fn event(kind: &str, name: &str, user: &str, brand: &str, at: i64) -> Value {
    json!({"eventType": kind, "eventName": name, "index": "items", "userToken": user,
           "filters": [format!("brand:{brand}")], "timestamp": at})
}

#[tokio::test]
async fn events_per_minute_count_each_stored_event_once() {
    let (s, admin) = shop().await;
    let analytics = s.key("SHOP", &admin, &["analytics"]).await;
    let search = s.key("SHOP", &admin, &["search"]).await;
    let a = Some(("SHOP", analytics.as_str()));
    let k = Some(("SHOP", search.as_str()));
    let t = now_ms() - 1000;
    let batch = json!({"events": [
        event("view", "Viewed", "alice", "Apple", t),
        event("view", "Viewed", "bob", "Apple", t),
        event("view", "Viewed", "bob", "Sony", t + 1),
        event("conversion", "Bought", "alice", "Sony", t),
        event("click", "Clicked", "carol", "Sony", t),
    ]});
    for _ in 0..2 {
        // The second, a retried request, stores nothing new and counts nothing.
        s.ok(Method::POST, "/1/events", k, Some(batch.clone()))
            .await;
    }
    // Another app's traffic is its own.
    let other = s.app("OTHER").await;
    let o = Some(("OTHER", other.as_str()));
    let one = json!({"events": [event("click", "Clicked", "x", "Sony", t)]});
    s.call(Method::POST, "/1/events", o, Some(one)).await;

    let stats = s.ok(Method::GET, "/1/stats/events?hours=1", a, None).await;
    assert_eq!(stats["step"], 60_000);
    let start = stats["start"].as_i64().unwrap();
    assert_eq!(start % 60_000, 0);
    let now = now_ms();
    assert!(
        start <= now - 59 * 60_000 && now < start + 60 * 60_000,
        "{start}"
    );
    let total = |kind: &str| -> u64 {
        let series = stats["counts"][kind].as_array().unwrap();
        assert_eq!(series.len(), 60, "{kind}");
        series.iter().map(|n| n.as_u64().unwrap()).sum()
    };
    assert_eq!(
        (total("view"), total("conversion"), total("click")),
        (3, 1, 1)
    );
    let (_, day) = s
        .call(Method::GET, "/1/stats/events?hours=24", a, None)
        .await;
    assert_eq!(day["counts"]["view"].as_array().unwrap().len(), 24 * 60);
    let (_, default) = s.call(Method::GET, "/1/stats/events", a, None).await;
    assert_eq!(default["counts"]["click"].as_array().unwrap().len(), 6 * 60);

    for bad in ["0", "49", "x", "-1"] {
        assert_error(
            s.call(
                Method::GET,
                &format!("/1/stats/events?hours={bad}"),
                a,
                None,
            )
            .await,
            StatusCode::BAD_REQUEST,
            "hours must be an integer from 1 to 48",
        );
    }
    assert_eq!(
        s.call(Method::GET, "/1/stats/events", k, None).await.0,
        StatusCode::FORBIDDEN,
        "search cannot read the stats"
    );
}

#[tokio::test]
async fn profiles_are_counted() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    let path = "/1/stats/profiles";
    assert_eq!(
        s.call(Method::GET, path, a, None).await.1,
        json!({"count": 0, "exact": true})
    );
    s.call(
        Method::POST,
        "/1/strategies/personalization",
        a,
        Some(strategy(10, 50)),
    )
    .await;
    let t = now_ms() - 1000;
    let events: Vec<Value> = ["u1", "u2", "u3"]
        .iter()
        .map(|u| event("view", "Viewed", u, "Apple", t))
        .collect();
    s.ok(
        Method::POST,
        "/1/events",
        a,
        Some(json!({ "events": events })),
    )
    .await;
    assert_eq!(
        s.call(Method::GET, path, a, None).await.1,
        json!({"count": 3, "exact": true})
    );
}

#[tokio::test]
async fn an_apps_own_keys_read_its_settings() {
    let (s, admin) = shop().await;
    let other = s.app("OTHER").await;
    let settings = s.key("SHOP", &admin, &["settings"]).await;
    let search = s.key("SHOP", &admin, &["search"]).await;
    let app = s
        .ok(
            Method::GET,
            "/1/apps/SHOP",
            Some(("SHOP", settings.as_str())),
            None,
        )
        .await;
    assert_eq!(
        (&app["appID"], &app["retentionDays"], &app["eventLayout"]),
        (&json!("SHOP"), &json!(90), &json!("wide"))
    );
    let layout = s
        .ok(
            Method::GET,
            "/1/apps/SHOP/layout",
            Some(("SHOP", admin.as_str())),
            None,
        )
        .await;
    assert_eq!(layout["eventLayout"], "wide");
    let (status, _) = s
        .call(
            Method::GET,
            "/1/apps/SHOP",
            Some(("", crate::common::ROOT)),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "the global admin key reads any app");
    for (creds, status) in [
        (Some(("SHOP", search.as_str())), StatusCode::FORBIDDEN),
        (Some(("OTHER", other.as_str())), StatusCode::FORBIDDEN),
        (Some(("SHOP", "wrong")), StatusCode::UNAUTHORIZED),
        (None, StatusCode::UNAUTHORIZED),
    ] {
        for path in ["/1/apps/SHOP", "/1/apps/SHOP/layout"] {
            assert_eq!(s.call(Method::GET, path, creds, None).await.0, status);
        }
    }
    assert_error(
        s.call(
            Method::GET,
            "/1/apps/NOPE",
            Some(("", crate::common::ROOT)),
            None,
        )
        .await,
        StatusCode::NOT_FOUND,
        "app `NOPE` does not exist",
    );
}

#[tokio::test]
async fn a_users_latest_events_come_newest_first() {
    let (s, admin) = shop().await;
    let reco = s.key("SHOP", &admin, &["recommendation"]).await;
    let a = Some(("SHOP", admin.as_str()));
    let r = Some(("SHOP", reco.as_str()));
    // Spread over two days: the newest are found in the first window, older ones need more.
    let now = now_ms();
    let times = [
        now - 30 * 3_600_000,
        now - 3 * 3_600_000,
        now - 60_000,
        now - 2000,
        now - 1000,
    ];
    let events: Vec<Value> = times
        .iter()
        .map(|t| event("view", "Viewed", "bob", "Apple", *t))
        .chain([event("view", "Viewed", "bobby", "Apple", now - 500)])
        .collect();
    s.ok(
        Method::POST,
        "/1/events",
        a,
        Some(json!({ "events": events })),
    )
    .await;
    let path = "/1/profiles/personalization/bob/events";
    let stamps = |body: &Value| -> Vec<i64> {
        body["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["timestamp"].as_i64().unwrap())
            .collect()
    };
    let three = s.ok(Method::GET, &format!("{path}?limit=3"), r, None).await;
    assert_eq!(three["userToken"], "bob");
    assert_eq!(stamps(&three), vec![times[4], times[3], times[2]]);
    // As Insights received them.
    assert_eq!(
        three["events"][0],
        event("view", "Viewed", "bob", "Apple", times[4])
    );
    let (_, all) = s.call(Method::GET, path, r, None).await;
    let mut newest_first = times.to_vec();
    newest_first.reverse();
    assert_eq!(stamps(&all), newest_first, "bobby's event is not bob's");
    let (_, none) = s
        .call(
            Method::GET,
            "/1/profiles/personalization/nobody/events",
            r,
            None,
        )
        .await;
    assert_eq!(none["events"], json!([]));
    for bad in ["0", "1001", "x"] {
        assert_error(
            s.call(Method::GET, &format!("{path}?limit={bad}"), r, None)
                .await,
            StatusCode::BAD_REQUEST,
            "limit must be an integer from 1 to 1000",
        );
    }
}

#[tokio::test]
async fn the_simulator_ranks_under_the_saved_and_an_edited_strategy() {
    let (s, admin) = shop().await;
    let reco = s.key("SHOP", &admin, &["recommendation"]).await;
    let a = Some(("SHOP", admin.as_str()));
    let r = Some(("SHOP", reco.as_str()));
    let path = "/1/strategies/personalization/simulate";
    let catalog = json!({"requests": [
        {"action": "addObject", "body": {"objectID": "iphone", "brand": "Apple"}},
        {"action": "addObject", "body": {"objectID": "walkman", "brand": "Sony"}},
    ]});
    s.call(Method::POST, "/1/indexes/items/batch", a, Some(catalog))
        .await;
    let t = now_ms() - 1000;
    // Alice viewed Apple three times and bought Sony once.
    let events = json!({"events": [
        event("view", "Viewed", "alice", "Apple", t),
        event("view", "Viewed", "alice", "Apple", t + 1),
        event("view", "Viewed", "alice", "Apple", t + 2),
        event("conversion", "Bought", "alice", "Sony", t + 3),
    ]});
    s.call(Method::POST, "/1/events", a, Some(events)).await;
    // Hits given by objectID are completed from the catalog; others are scored as given.
    let hits = json!([{"objectID": "nokia", "brand": "Nokia"}, {"objectID": "iphone"}, {"objectID": "walkman"}]);
    let ask = |strategy: Value| json!({"strategy": strategy, "userToken": "alice", "index": "items", "hits": hits});
    let order = |ranking: &Value| -> Vec<String> {
        ranking["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["objectID"].as_str().unwrap().to_owned())
            .collect()
    };

    // No saved strategy yet: only the edited ranking.
    let sim = s
        .ok(Method::POST, path, r, Some(ask(strategy(10, 50))))
        .await;
    assert_eq!(sim["saved"], Value::Null);
    assert_eq!(order(&sim["edited"]), ["walkman", "iphone", "nokia"]);
    assert_eq!(sim["edited"]["scores"]["brand"]["Sony"], 20);

    // Saved: purchases weigh most (Sony first). Edited: views weigh most (Apple first).
    s.call(
        Method::POST,
        "/1/strategies/personalization",
        a,
        Some(strategy(10, 50)),
    )
    .await;
    s.strategy_job_done(r).await;
    let (_, profile_before) = s
        .call(Method::GET, "/1/profiles/personalization/alice", r, None)
        .await;
    let sim = s
        .ok(Method::POST, path, r, Some(ask(strategy(100, 1))))
        .await;
    assert_eq!(order(&sim["saved"]), ["walkman", "iphone", "nokia"]);
    assert_eq!(order(&sim["edited"]), ["iphone", "walkman", "nokia"]);
    assert_eq!(sim["edited"]["scores"]["brand"]["Apple"], 20);
    assert_eq!(sim["edited"]["personalizationImpact"], 100);
    assert_eq!(
        sim["edited"]["hits"][0]["brand"], "Apple",
        "from the catalog"
    );
    assert!(sim["edited"]["hits"][0]["_rankingInfo"]["personalization"]["score"].is_number());
    // What the saved column shows is what re-ranking answers.
    let (_, reranked) = s
        .call(
            Method::POST,
            "/1/indexes/items/rerank",
            a,
            Some(json!({"userToken": "alice", "hits": hits})),
        )
        .await;
    let info = |hits: &Value| -> Vec<(Value, Value)> {
        let hits = hits.as_array().unwrap();
        hits.iter()
            .map(|h| (h["objectID"].clone(), h["_rankingInfo"].clone()))
            .collect()
    };
    assert_eq!(info(&reranked["hits"]), info(&sim["saved"]["hits"]));
    // Nothing was stored.
    let (_, saved) = s
        .call(Method::GET, "/1/strategies/personalization", r, None)
        .await;
    assert_eq!(saved, strategy(10, 50));
    let (_, profile_after) = s
        .call(Method::GET, "/1/profiles/personalization/alice", r, None)
        .await;
    assert_eq!(profile_after, profile_before);

    // A strategy alone is only checked, with a save's messages.
    let (status, ok) = s
        .call(
            Method::POST,
            path,
            r,
            Some(json!({"strategy": strategy(1, 1)})),
        )
        .await;
    assert_eq!((status, ok), (StatusCode::OK, json!({"valid": true})));
    for bad in [strategy(0, 1), strategy(1, 101)] {
        let saving = s
            .call(
                Method::POST,
                "/1/strategies/personalization",
                a,
                Some(bad.clone()),
            )
            .await;
        assert_eq!(saving.0, StatusCode::BAD_REQUEST);
        let simulating = s
            .call(Method::POST, path, r, Some(json!({ "strategy": bad })))
            .await;
        assert_eq!(simulating, saving);
    }
    let mut missing = strategy(1, 1);
    missing.as_object_mut().unwrap().remove("facetsScoring");
    assert_error(
        s.call(Method::POST, path, r, Some(json!({ "strategy": missing })))
            .await,
        StatusCode::BAD_REQUEST,
        "facetsScoring",
    );
    assert_error(
        s.call(
            Method::POST,
            path,
            r,
            Some(json!({"strategy": strategy(1, 1), "userToken": "a b"})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "UserToken must contain only",
    );
    let search = s.key("SHOP", &admin, &["search"]).await;
    assert_eq!(
        s.call(
            Method::POST,
            path,
            Some(("SHOP", search.as_str())),
            Some(json!({"strategy": strategy(1, 1)}))
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn past_recomputes_are_kept_newest_first() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    let path = "/1/strategies/personalization/jobs";
    assert_eq!(
        s.call(Method::GET, path, a, None).await.1,
        json!({"jobs": []})
    );
    let t = now_ms() - 1000;
    let events = json!({"events": [event("view", "Viewed", "alice", "Apple", t)]});
    s.call(Method::POST, "/1/events", a, Some(events)).await;
    let mut versions = Vec::new();
    for view in 1..=3 {
        s.call(
            Method::POST,
            "/1/strategies/personalization",
            a,
            Some(strategy(view, 1)),
        )
        .await;
        versions.push(s.strategy_job_done(a).await["strategyVersion"].clone());
    }
    let jobs = s.ok(Method::GET, path, a, None).await;
    let jobs = jobs["jobs"].as_array().unwrap();
    let got: Vec<Value> = jobs.iter().map(|j| j["strategyVersion"].clone()).collect();
    versions.reverse();
    assert_eq!(got, versions);
    assert!(jobs.iter().all(|j| j["state"] == "done"), "{jobs:?}");
    let (_, current) = s
        .call(Method::GET, "/1/strategies/personalization/job", a, None)
        .await;
    assert_eq!(jobs[0], current);
}
