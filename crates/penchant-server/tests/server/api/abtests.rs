//! A/B tests over HTTP (`/2/abtests`, Algolia's v2 shapes): "queue blend A vs B" served through
//! Recommend with the variant's queue, results from the conversions that carry the answers'
//! query IDs; re-ranking's fields; the guards and errors; named strategies.

use crate::common::{Creds, Server, assert_error, now_ms};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const DAY_MS: i64 = 86_400_000;

fn iso(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

async fn ok(
    s: &Server,
    creds: Creds<'_>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    s.ok(method, path, creds, body).await
}

async fn catalog(s: &Server, a: Creds<'_>) {
    let records: Vec<Value> = (0..10)
        .map(|i| {
            json!({"action": "addObject", "body": {
                "objectID": format!("p{i}"),
                "brand": if i % 2 == 0 { "Apple" } else { "Samsung" },
            }})
        })
        .collect();
    ok(
        s,
        a,
        Method::POST,
        "/1/indexes/products/batch",
        Some(json!({"requests": records})),
    )
    .await;
}

fn test_body(name: &str, a: Value, b: Value) -> Value {
    json!({
        "name": name,
        "variants": [
            {"index": "products", "trafficPercentage": 50, "description": "A", "customSearchParameters": a},
            {"index": "products", "trafficPercentage": 50, "description": "B", "customSearchParameters": b},
        ],
        "endAt": iso(now_ms() + 14 * DAY_MS),
    })
}

#[tokio::test]
async fn queue_blend_a_against_b_is_served_and_measured_from_conversions() {
    let s = Server::start().await;
    let admin = s.app("SHOP").await;
    let a = Some(("SHOP", admin.as_str()));
    catalog(&s, a).await;
    for (queue, top) in [("blend-a", "p1"), ("blend-b", "p9")] {
        ok(
            &s,
            a,
            Method::PUT,
            &format!("/1/queues/{queue}"),
            Some(json!({"indexName": "products", "size": 5, "sources": [{"source": "trending"}]})),
        )
        .await;
        for u in 0..40 {
            ok(
                &s,
                a,
                Method::POST,
                &format!("/1/queues/{queue}/users/u{u}/rebuild"),
                Some(json!({"items": [{"objectID": top, "score": 9.0}]})),
            )
            .await;
        }
    }
    assert_eq!(
        ok(&s, a, Method::GET, "/2/abtests", None).await,
        json!({"abtests": null, "count": 0, "total": 0})
    );
    let created = ok(
        &s,
        a,
        Method::POST,
        "/2/abtests",
        Some(test_body(
            "queue blend A vs B",
            json!({"queue": "blend-a"}),
            json!({"queue": "blend-b"}),
        )),
    )
    .await;
    let id = created["abTestID"].as_i64().unwrap();
    assert_eq!(created["index"], "products");
    assert!(created["taskID"].is_i64());

    // Each user gets their variant's queue, says so, and converts: B's users all, A's one in four.
    let mut by_variant = [0, 0];
    let mut converted = [0, 0];
    for u in 0..40 {
        let user = format!("u{u}");
        let body = ok(
            &s,
            a,
            Method::POST,
            "/1/indexes/*/recommendations",
            Some(json!({"requests": [{
                "indexName": "products", "model": "recommended-for-you", "threshold": 0,
                "queryParameters": {"userToken": user, "clickAnalytics": true},
            }]})),
        )
        .await;
        let r = &body["results"][0];
        assert_eq!(r["abTestID"], id, "{r}");
        let variant = r["abTestVariantID"].as_i64().unwrap();
        let top = r["hits"][0]["objectID"].as_str().unwrap();
        assert_eq!(top, ["p1", "p9"][variant as usize - 1], "{r}");
        assert_eq!(r["source"], "queue");
        assert_eq!(r["fallback"], false);
        let query_id = r["queryID"].as_str().unwrap();
        assert_eq!(query_id.len(), 32);
        by_variant[variant as usize - 1] += 1;
        if variant == 2 || u % 4 == 0 {
            converted[variant as usize - 1] += 1;
            let event = json!({
                "eventType": "conversion", "eventSubtype": "purchase", "eventName": "Bought",
                "index": "products", "userToken": user, "objectIDs": [top],
                "queryID": query_id, "value": 10.5, "currency": "USD", "timestamp": now_ms(),
            });
            ok(
                &s,
                a,
                Method::POST,
                "/1/events",
                Some(json!({"events": [event]})),
            )
            .await;
        }
    }
    assert!(by_variant[0] > 5 && by_variant[1] > 5, "{by_variant:?}");
    // Outside the test: enableABTest false, or another index.
    let body = ok(
        &s,
        a,
        Method::POST,
        "/1/indexes/*/recommendations",
        Some(json!({"requests": [{
            "indexName": "products", "model": "trending-items", "threshold": 0,
            "queryParameters": {"userToken": "u1", "enableABTest": false},
        }]})),
    )
    .await;
    assert!(body["results"][0].get("abTestID").is_none(), "{body}");
    assert!(body["results"][0].get("queryID").is_none());

    let test = ok(&s, a, Method::GET, &format!("/2/abtests/{id}"), None).await;
    assert_eq!(test["status"], "active");
    assert_eq!(test["name"], "queue blend A vs B");
    let variants = test["variants"].as_array().unwrap();
    for (i, v) in variants.iter().enumerate() {
        // Every field Algolia's clients require.
        for field in [
            "index",
            "trafficPercentage",
            "addToCartCount",
            "clickCount",
            "conversionCount",
            "purchaseCount",
            "searchCount",
            "noResultCount",
            "userCount",
            "trackedUserCount",
        ] {
            assert!(v.get(field).is_some(), "variant {i} lacks {field}: {v}");
        }
        assert_eq!(v["userCount"], by_variant[i]);
        assert_eq!(v["trackedSearchCount"], by_variant[i]);
        assert_eq!(
            v["customSearchParameters"]["queue"],
            ["blend-a", "blend-b"][i]
        );
    }
    let (conv_a, conv_b) = (
        variants[0]["conversionCount"].as_i64().unwrap(),
        variants[1]["conversionCount"].as_i64().unwrap(),
    );
    assert_eq!([conv_a, conv_b], converted);
    assert_eq!(conv_b, by_variant[1], "every B user converted");
    assert_eq!(variants[1]["purchaseCount"], conv_b);
    assert_eq!(
        variants[1]["currencies"]["USD"]["revenue"],
        json!(conv_b as f64 * 10.5)
    );
    assert_eq!(variants[1]["conversionRate"], json!(1.0));
    let significance = test["conversionSignificance"].as_f64().unwrap();
    assert!(significance > 0.99, "{test}");

    // One test per index.
    assert_error(
        s.call(
            Method::POST,
            "/2/abtests",
            a,
            Some(test_body("again", json!({}), json!({}))),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "already in the running A/B test",
    );
    let listed = ok(
        &s,
        a,
        Method::GET,
        "/2/abtests?indexPrefix=prod&limit=5",
        None,
    )
    .await;
    assert_eq!(
        (listed["count"].clone(), listed["total"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(listed["abtests"][0]["abTestID"], id);
    let none = ok(&s, a, Method::GET, "/2/abtests?indexSuffix=zzz", None).await;
    assert_eq!(none, json!({"abtests": [], "count": 0, "total": 0}));

    // Stopped: answers leave the test.
    let stopped = ok(&s, a, Method::POST, &format!("/2/abtests/{id}/stop"), None).await;
    assert_eq!(stopped["abTestID"], id);
    let test = ok(&s, a, Method::GET, &format!("/2/abtests/{id}"), None).await;
    assert_eq!(test["status"], "stopped");
    assert!(test["stoppedAt"].is_string());
    let body = ok(
        &s,
        a,
        Method::POST,
        "/1/indexes/*/recommendations",
        Some(json!({"requests": [{
            "indexName": "products", "model": "recommended-for-you", "threshold": 0,
            "queryParameters": {"userToken": "u1", "clickAnalytics": true},
        }]})),
    )
    .await;
    assert!(body["results"][0].get("abTestID").is_none(), "{body}");
    assert!(
        body["results"][0]["queryID"].is_string(),
        "clickAnalytics alone gives a query ID"
    );

    ok(&s, a, Method::DELETE, &format!("/2/abtests/{id}"), None).await;
    assert_error(
        s.call(Method::GET, &format!("/2/abtests/{id}"), a, None)
            .await,
        StatusCode::NOT_FOUND,
        &format!("A/B test {id} does not exist"),
    );
    assert_error(
        s.call(Method::GET, "/2/abtests/x", a, None).await,
        StatusCode::BAD_REQUEST,
        "is not an A/B test ID",
    );
}

#[tokio::test]
async fn rerank_reports_the_variant_and_bad_tests_are_refused_with_their_reason() {
    let s = Server::start().await;
    let admin = s.app("SHOP").await;
    let a = Some(("SHOP", admin.as_str()));
    catalog(&s, a).await;
    let bad = [
        (
            json!({"name": "x", "variants": [], "endAt": iso(now_ms() + DAY_MS)}),
            "exactly 2 variants",
        ),
        (
            {
                let mut b = test_body("x", json!({}), json!({}));
                b["endAt"] = json!("next week");
                b
            },
            "endAt must be an RFC 3339 date-time",
        ),
        (
            {
                let mut b = test_body("x", json!({}), json!({}));
                b["variants"][1]["index"] = json!("other");
                b
            },
            "both variants must be on the same index",
        ),
        (
            test_body("x", json!({}), json!({"typoTolerance": false})),
            "unknown field `typoTolerance`",
        ),
        (
            test_body("x", json!({}), json!({"queue": "nope"})),
            "variants[1].customSearchParameters.queue",
        ),
        (
            test_body("x", json!({}), json!({"model": "magic"})),
            "model 'magic' is not one of",
        ),
    ];
    for (body, needle) in bad {
        assert_error(
            s.call(Method::POST, "/2/abtests", a, Some(body)).await,
            StatusCode::BAD_REQUEST,
            needle,
        );
    }
    // A search-only key may not start a test; an analytics key may read them.
    let search = s.key("SHOP", &admin, &["search"]).await;
    let (status, _) = s
        .call(
            Method::POST,
            "/2/abtests",
            Some(("SHOP", &search)),
            Some(test_body("x", json!({}), json!({}))),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Named strategies: saved, listed, read; a variant uses one.
    let strategy = json!({
        "eventsScoring": [{"eventName": "Viewed", "eventType": "view", "score": 10}],
        "facetsScoring": [{"facetName": "brand", "score": 10}],
        "personalizationImpact": 100,
    });
    ok(
        &s,
        a,
        Method::PUT,
        "/1/strategies/personalization/named/views",
        Some(strategy.clone()),
    )
    .await;
    let listed = ok(
        &s,
        a,
        Method::GET,
        "/1/strategies/personalization/named",
        None,
    )
    .await;
    assert_eq!(listed["strategies"][0]["name"], "views");
    let one = ok(
        &s,
        a,
        Method::GET,
        "/1/strategies/personalization/named/views",
        None,
    )
    .await;
    assert_eq!(one["strategy"], strategy);
    assert_error(
        s.call(
            Method::GET,
            "/1/strategies/personalization/named/none",
            a,
            None,
        )
        .await,
        StatusCode::NOT_FOUND,
        "no strategy is named `none`",
    );
    let created = ok(
        &s,
        a,
        Method::POST,
        "/2/abtests",
        Some(test_body(
            "off vs views",
            json!({"enablePersonalization": false}),
            json!({"personalizationStrategy": "views"}),
        )),
    )
    .await;
    let id = created["abTestID"].clone();
    ok(
        &s,
        a,
        Method::POST,
        "/1/events",
        Some(json!({"events": (0..20).map(|u| json!({
            "eventType": "view", "eventName": "Viewed", "index": "products",
            "userToken": format!("r{u}"), "objectIDs": ["p3"], "timestamp": now_ms() - 1000,
        })).collect::<Vec<_>>()})),
    )
    .await;
    let mut seen = [false, false];
    for u in 0..20 {
        let r = ok(
            &s,
            a,
            Method::POST,
            "/1/indexes/products/rerank",
            Some(json!({"userToken": format!("r{u}"), "clickAnalytics": true,
                        "hits": [{"objectID": "p0"}, {"objectID": "p2"}, {"objectID": "p3"}]})),
        )
        .await;
        assert_eq!(r["abTestID"], id, "{r}");
        let variant = r["abTestVariantID"].as_i64().unwrap();
        seen[variant as usize - 1] = true;
        let first = r["hits"][0]["objectID"].clone();
        match variant {
            1 => assert_eq!(
                (first, r["personalizationImpact"].clone()),
                (json!("p0"), json!(0))
            ),
            _ => assert_eq!(
                (first, r["personalizationImpact"].clone()),
                (json!("p3"), json!(100))
            ),
        }
        assert_eq!(r["queryID"].as_str().unwrap().len(), 32);
    }
    assert_eq!(seen, [true, true], "20 users fall in both variants");
    assert_error(
        s.call(
            Method::DELETE,
            "/1/strategies/personalization/named/views",
            a,
            None,
        )
        .await,
        StatusCode::CONFLICT,
        "stop it first",
    );
    let test = ok(&s, a, Method::GET, &format!("/2/abtests/{id}"), None).await;
    let users: i64 = test["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["userCount"].as_i64().unwrap())
        .sum();
    assert_eq!(users, 20);
}
