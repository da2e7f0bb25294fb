//! The Recommend API and per-user queues over HTTP: every model, filters, thresholds, the
//! zero-day fallback, queues under seen items, item deletion and user deletion.

use std::time::Duration;

use crate::common::{Creds, Server, assert_error, now_ms};
use penchant_learn::offline::FEATURES;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn event(kind: &str, user: &str, ids: &[&str], timestamp: i64) -> Value {
    json!({
        "eventType": kind, "eventName": format!("Item {kind}"), "index": "products",
        "userToken": user, "objectIDs": ids, "timestamp": timestamp,
    })
}

async fn ok(
    s: &Server,
    creds: Creds<'_>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let (status, body) = s.call(method, path, creds, body).await;
    assert!(status.is_success(), "{path}: {status} {body}");
    body
}

/// One Recommend request; the first result.
async fn recommend(s: &Server, creds: Creds<'_>, request: Value) -> Value {
    let body = ok(
        s,
        creds,
        Method::POST,
        "/1/indexes/*/recommendations",
        Some(json!({ "requests": [request] })),
    )
    .await;
    body["results"][0].clone()
}

fn ids(result: &Value) -> Vec<String> {
    result["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["objectID"].as_str().unwrap().to_owned())
        .collect()
}

/// The app's ranker job's status once it ended (60 s at most).
async fn ranker_job_end(s: &Server, creds: Creds<'_>) -> Value {
    for _ in 0..3000 {
        let status = ok(s, creds, Method::GET, "/1/ranker/train", None).await;
        if status["state"] != "running" {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the ranker job did not end within 60 s");
}

/// A shop: ten products; "p0" converted most, then "p1", ... (by buyers of one item each);
/// u1 and u2 bought p0 and p1 on one day, u3 p2 and p3; u4 clicked p5 and p6; u5 only viewed.
async fn shop(s: &Server, creds: Creds<'_>) {
    let products: Vec<Value> = (0..10)
        .map(|i| {
            json!({"action": "addObject", "body": {
                "objectID": format!("p{i}"),
                "brand": if i % 2 == 0 { "Apple" } else { "Samsung" },
                "price": i * 10,
                "color": if i % 2 == 0 { "red" } else { "blue" },
            }})
        })
        .collect();
    ok(
        s,
        creds,
        Method::POST,
        "/1/indexes/products/batch",
        Some(json!({ "requests": products })),
    )
    .await;
    let t = now_ms() - 60_000;
    let mut events = Vec::new();
    // Conversions: p0 ×5, p1 ×4, p2 ×3, p3 ×2, p4 ×1 (by several users).
    for (i, n) in [5, 4, 3, 2, 1].into_iter().enumerate() {
        for k in 0..n {
            let user = format!("buyer{i}-{k}");
            events.push(event(
                "conversion",
                &user,
                &[&format!("p{i}")],
                t + i as i64,
            ));
        }
    }
    events.push(event("conversion", "u1", &["p0", "p1"], t));
    events.push(event("conversion", "u2", &["p0"], t));
    events.push(event("conversion", "u2", &["p1"], t + 5));
    events.push(event("conversion", "u3", &["p2", "p3"], t));
    events.push(event("click", "u4", &["p5", "p6"], t));
    events.push(event("view", "u5", &["p7"], t));
    ok(
        s,
        creds,
        Method::POST,
        "/1/events",
        Some(json!({ "events": events })),
    )
    .await;
}

async fn build(s: &Server, creds: Creds<'_>) -> Value {
    let (status, body) = s
        .call(Method::POST, "/1/recommend/build", creds, None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    for _ in 0..500 {
        let status = ok(s, creds, Method::GET, "/1/recommend/build", None).await;
        if status["state"] != "running" {
            assert_eq!(status["state"], "done", "{status}");
            return status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the build did not end");
}

#[tokio::test]
async fn trending_models_rank_conversions_and_honour_filters_and_thresholds() {
    let s = Server::start().await;
    let admin = s.app("SHOP").await;
    let search = s.key("SHOP", &admin, &["search"]).await;
    let (a, k) = (
        Some(("SHOP", admin.as_str())),
        Some(("SHOP", search.as_str())),
    );
    shop(&s, a).await;

    let r = recommend(
        &s,
        k,
        json!({"indexName": "products", "model": "trending-items", "threshold": 0}),
    )
    .await;
    let got = ids(&r);
    assert_eq!(&got[..5], ["p0", "p1", "p2", "p3", "p4"], "{r}");
    assert_eq!(r["hits"][0]["_score"], 100.0);
    assert_eq!(
        r["hits"][0]["brand"], "Apple",
        "hits are the catalog records"
    );
    assert_eq!(r["answeredBy"], "trending-items");
    assert_eq!(r["nbHits"], got.len());
    assert!(!got.contains(&"p7".to_owned()), "views do not trend");

    // facetName / facetValue, filters, threshold, maxRecommendations.
    let r = recommend(
        &s,
        k,
        json!({"indexName": "products", "model": "trending-items", "threshold": 0,
               "facetName": "brand", "facetValue": "Samsung"}),
    )
    .await;
    assert_eq!(&ids(&r)[..2], ["p1", "p3"], "{r}");
    let r = recommend(
        &s,
        k,
        json!({"indexName": "products", "model": "trending-items", "threshold": 0,
               "queryParameters": {"filters": "price >= 20 AND NOT objectID:p3"}}),
    )
    .await;
    assert_eq!(&ids(&r)[..2], ["p2", "p4"], "{r}");
    let r = recommend(
        &s,
        k,
        json!({"indexName": "products", "model": "trending-items", "threshold": 50,
               "queryParameters": {"facetFilters": [["color:red", "color:blue"], "brand:-Samsung"]}}),
    )
    .await;
    // p0 scores 100, p2 about 60 (3 of 5 conversions, a little decayed), p4 20.
    assert_eq!(ids(&r), ["p0", "p2"], "{r}");
    let r = recommend(
        &s,
        k,
        json!({"indexName": "products", "model": "trending-items", "threshold": 0,
               "maxRecommendations": 2, "queryParameters": {"attributesToRetrieve": ["price"]}}),
    )
    .await;
    assert_eq!(ids(&r), ["p0", "p1"]);
    assert_eq!(r["hits"][1]["price"], 10);
    assert!(r["hits"][1].get("brand").is_none(), "{r}");

    let r = recommend(
        &s,
        k,
        json!({"indexName": "products", "model": "trending-facets", "threshold": 0,
               "facetName": "brand"}),
    )
    .await;
    assert_eq!(r["hits"][0]["facetName"], "brand");
    assert_eq!(r["hits"][0]["facetValue"], "Apple", "{r}");
    assert_eq!(r["hits"][0]["_score"], 100.0);
    assert_eq!(r["hits"][1]["facetValue"], "Samsung");

    // Requests are answered in order, each its own model.
    let body = ok(
        &s,
        k,
        Method::POST,
        "/1/indexes/*/recommendations",
        Some(json!({"requests": [
            {"indexName": "products", "model": "trending-facets", "threshold": 0, "facetName": "color"},
            {"indexName": "products", "model": "trending-items", "threshold": 0, "maxRecommendations": 1},
        ]})),
    )
    .await;
    assert_eq!(body["results"][0]["hits"][0]["facetName"], "color");
    assert_eq!(ids(&body["results"][1]), ["p0"]);
}

#[tokio::test]
async fn bad_requests_say_what_is_wrong() {
    let s = Server::start().await;
    let admin = s.app("SHOP").await;
    let a = Some(("SHOP", admin.as_str()));
    let call = |body: Value| {
        s.call(
            Method::POST,
            "/1/indexes/*/recommendations",
            a,
            Some(json!({ "requests": [body] })),
        )
    };
    let bad = StatusCode::BAD_REQUEST;
    assert_error(
        call(json!({"indexName": "products", "model": "trending-items"})).await,
        bad,
        "requests[0]: threshold is required",
    );
    assert_error(
        call(json!({"indexName": "products", "model": "nope", "threshold": 0})).await,
        bad,
        "model 'nope' is not one of",
    );
    assert_error(
        call(json!({"indexName": "products", "model": "bought-together", "threshold": 0})).await,
        bad,
        "objectID is required by model bought-together",
    );
    assert_error(
        call(json!({"indexName": "products", "model": "trending-items", "threshold": 101})).await,
        bad,
        "threshold must be between 0 and 100",
    );
    assert_error(
        call(
            json!({"indexName": "products", "model": "trending-items", "threshold": 0,
                    "maxRecommendations": 31}),
        )
        .await,
        bad,
        "maxRecommendations must be between 1 and 30",
    );
    assert_error(
        call(json!({"indexName": "products", "model": "recommended-for-you", "threshold": 0}))
            .await,
        bad,
        "userToken is required",
    );
    assert_error(
        call(
            json!({"indexName": "products", "model": "trending-items", "threshold": 0,
                    "queryParameters": {"filters": "brand:Apple AND"}}),
        )
        .await,
        bad,
        "col",
    );
    // Without vectors for the index, looking-similar falls back like any model without data
    // (a multi-request call's other answers are not lost); a space named that does not exist
    // is the caller's mistake.
    let (status, body) = call(
        json!({"indexName": "products", "model": "looking-similar", "threshold": 0,
                "objectID": "p1"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // (Nothing trends in this app yet: no hits at all.)
    assert_eq!(body["results"][0]["hits"], json!([]), "{body}");
    assert_error(
        s.call(
            Method::POST,
            "/1/indexes/*/recommendations",
            a,
            Some(json!({})),
        )
        .await,
        bad,
        "requests is required",
    );
}

#[tokio::test]
async fn co_interaction_and_vector_models_answer_and_fall_back_to_trending() {
    let s = Server::start().await;
    let admin = s.app("SHOP").await;
    let a = Some(("SHOP", admin.as_str()));
    shop(&s, a).await;
    let built = build(&s, a).await;
    assert!(built["lists"].as_u64().unwrap() >= 4, "{built}");

    let r = recommend(
        &s,
        a,
        json!({"indexName": "products", "model": "bought-together", "threshold": 0, "objectID": "p0"}),
    )
    .await;
    assert_eq!(ids(&r), ["p1"], "{r}");
    assert_eq!(r["answeredBy"], "bought-together");
    assert_eq!(r["source"], "co-interaction");
    // The answer says when its model was built: the lists, by the build above.
    assert_eq!(r["fallback"], false, "{r}");
    let built_at = r["modelBuiltAt"].as_i64().unwrap();
    let (started, finished) = (built["startedAt"].as_i64(), built["finishedAt"].as_i64());
    assert!(
        started.unwrap() <= built_at && built_at <= finished.unwrap(),
        "{r} {built}"
    );
    let r = recommend(
        &s,
        a,
        json!({"indexName": "products", "model": "related-products", "threshold": 0, "objectID": "p5"}),
    )
    .await;
    assert_eq!(ids(&r), ["p6"], "clicks count for related products: {r}");
    // No vectors for the index yet: looking-similar falls back to trending items.
    let r = recommend(
        &s,
        a,
        json!({"indexName": "products", "model": "looking-similar", "threshold": 0, "objectID": "p0"}),
    )
    .await;
    assert_eq!(r["answeredBy"], "trending-items", "{r}");
    assert_eq!(r["fallback"], true, "{r}");
    assert!(!ids(&r).is_empty(), "{r}");

    // No history for p9: the zero-day model answers, never with p9 itself, within the filters.
    let r = recommend(
        &s,
        a,
        json!({"indexName": "products", "model": "bought-together", "threshold": 0, "objectID": "p9",
               "queryParameters": {"filters": "brand:Samsung"}}),
    )
    .await;
    assert_eq!(r["answeredBy"], "trending-items", "{r}");
    assert_eq!(&ids(&r)[..2], ["p1", "p3"]);
    // A fallback says it is one; trending counts are live.
    assert_eq!(r["fallback"], true, "{r}");
    assert!(
        r["modelBuiltAt"].as_i64().unwrap() >= finished.unwrap(),
        "{r}"
    );
    // Nothing passes: fallbackParameters answer, from the catalog if nothing trends there.
    let r = recommend(
        &s,
        a,
        json!({"indexName": "products", "model": "bought-together", "threshold": 0, "objectID": "p9",
               "queryParameters": {"filters": "price > 1000"},
               "fallbackParameters": {"filters": "color:blue AND price >= 70"}}),
    )
    .await;
    assert_eq!(r["answeredBy"], "fallbackParameters", "{r}");
    assert_eq!(ids(&r), ["p7"], "p9 is the item itself: {r}");
    assert_eq!(r["source"], "catalog");
    assert_eq!(
        (&r["fallback"], &r["modelBuiltAt"]),
        (&json!(true), &Value::Null),
        "{r}"
    );

    // looking-similar: the index's uploaded vectors.
    ok(
        &s,
        a,
        Method::POST,
        "/1/vectors",
        Some(json!({"name": "images", "dimension": 2, "index": "products"})),
    )
    .await;
    let vectors: Vec<Value> = (0..10)
        .map(|i| {
            let t = f64::from(i) / 10.0;
            json!({"id": format!("p{i}"), "vector": [t.cos(), t.sin()]})
        })
        .collect();
    ok(
        &s,
        a,
        Method::POST,
        "/1/vectors/images/items",
        Some(json!({ "vectors": vectors })),
    )
    .await;
    let r = recommend(
        &s,
        a,
        json!({"indexName": "products", "model": "looking-similar", "threshold": 0,
               "objectID": "p5", "maxRecommendations": 2}),
    )
    .await;
    let got = ids(&r);
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|id| id == "p4" || id == "p6"), "{r}");
    assert_eq!(r["source"], "vectors");
    assert!(r["hits"][0]["_score"].as_f64().unwrap() > 99.0);
    // related-products blends co-interaction with the named space's neighbours.
    let r = recommend(
        &s,
        a,
        json!({"indexName": "products", "model": "related-products", "threshold": 0,
               "objectID": "p5", "space": "images"}),
    )
    .await;
    assert_eq!(r["source"], "co-interaction+vectors", "{r}");
    assert_eq!(ids(&r)[0], "p6");
}

#[tokio::test]
async fn queues_serve_unseen_items_and_forget_deleted_items_and_users() {
    let s = Server::start().await;
    let admin = s.app("SHOP").await;
    let a = Some(("SHOP", admin.as_str()));
    shop(&s, a).await;
    let (status, _) = s
        .call(
            Method::PUT,
            "/1/queues/for-you",
            a,
            Some(json!({"indexName": "products", "size": 5, "sources": [{"source": "trending"}]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_error(
        s.call(
            Method::PUT,
            "/1/queues/bad",
            a,
            Some(json!({"indexName": "products", "sources": [{"source": "magic"}]})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "Invalid queue",
    );
    let listed = ok(&s, a, Method::GET, "/1/queues", None).await;
    assert_eq!(listed["queues"][0]["name"], "for-you");

    // A new user: no queue yet, recommended-for-you answers with trending (zero day).
    let r = recommend(
        &s,
        a,
        json!({"indexName": "products", "model": "recommended-for-you", "threshold": 0,
               "queryParameters": {"userToken": "newbie"}}),
    )
    .await;
    assert_eq!(r["answeredBy"], "trending-items", "{r}");

    // The queue, built with a given list on top; seen items are left out.
    ok(
        &s,
        a,
        Method::POST,
        "/1/events",
        Some(json!({"events": [event("view", "newbie", &["p1"], now_ms() - 1000)]})),
    )
    .await;
    let rebuilt = ok(
        &s,
        a,
        Method::POST,
        "/1/queues/for-you/users/newbie/rebuild",
        Some(json!({"items": [{"objectID": "p9", "score": 9.0}, {"objectID": "gone", "score": 5.0}]})),
    )
    .await;
    assert_eq!(rebuilt, json!({"items": 5, "seen": 1, "missing": 1}));
    let peek = ok(
        &s,
        a,
        Method::GET,
        "/1/queues/for-you/users/newbie?n=3",
        None,
    )
    .await;
    let peeked = ids(&peek);
    assert_eq!(peeked, ["p0", "p9", "p2"], "{peek}");
    let r = recommend(
        &s,
        a,
        json!({"indexName": "products", "model": "recommended-for-you", "threshold": 0,
               "queryParameters": {"userToken": "newbie"}}),
    )
    .await;
    assert_eq!(r["source"], "queue", "{r}");
    assert_eq!(&ids(&r)[..3], peeked.as_slice());

    // Popped items are seen: never served again.
    let popped = ok(
        &s,
        a,
        Method::POST,
        "/1/queues/for-you/users/newbie/pop",
        Some(json!({"n": 2})),
    )
    .await;
    assert_eq!(ids(&popped), ["p0", "p9"]);
    let peek = ok(&s, a, Method::GET, "/1/queues/for-you/users/newbie", None).await;
    assert_eq!(ids(&peek), ["p2", "p3", "p4"]);
    let seen = ok(&s, a, Method::GET, "/1/seen/users/newbie", None).await;
    assert!(seen["keys"].as_u64().unwrap_or_default() >= 3, "{seen}");

    // An item deleted from the catalog leaves every queue at once; added again, it is back.
    let (status, _) = s
        .call(Method::DELETE, "/1/indexes/products/p3", a, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let peek = ok(&s, a, Method::GET, "/1/queues/for-you/users/newbie", None).await;
    assert_eq!(ids(&peek), ["p2", "p4"]);
    let r = recommend(
        &s,
        a,
        json!({"indexName": "products", "model": "trending-items", "threshold": 0}),
    )
    .await;
    assert!(!ids(&r).contains(&"p3".to_owned()), "{r}");
    ok(
        &s,
        a,
        Method::PUT,
        "/1/indexes/products/p3",
        Some(json!({"brand": "Samsung", "price": 30})),
    )
    .await;
    let peek = ok(&s, a, Method::GET, "/1/queues/for-you/users/newbie", None).await;
    assert_eq!(ids(&peek), ["p2", "p3", "p4"]);

    // Deleting the user token deletes the queue with the rest.
    let (status, _) = s
        .call(Method::DELETE, "/1/usertokens/newbie", a, None)
        .await;
    assert!(status.is_success());
    let peek = ok(&s, a, Method::GET, "/1/queues/for-you/users/newbie", None).await;
    assert_eq!(peek["hits"], json!([]));

    // The build job rebuilds every user with events; the queue's definition goes with DELETE.
    let built = build(&s, a).await;
    assert!(built["users"].as_u64().unwrap() >= 5, "{built}");
    // The first build knows no totals; the next one expects what this one counted (for the
    // CLI's ETA).
    assert_eq!(built["progress"]["total"], Value::Null, "{built}");
    let again = build(&s, a).await;
    assert_eq!(
        again["expected"],
        json!([built["events"], built["users"]]),
        "{again}"
    );
    assert_eq!(again["progress"]["total"], built["users"], "{again}");
    let peek = ok(&s, a, Method::GET, "/1/queues/for-you/users/u5?n=2", None).await;
    assert_eq!(ids(&peek), ["p0", "p1"]);
    // Credentials in the query string, as search-insights sends them, are not unknown fields.
    let path = format!(
        "/1/queues/for-you/users/u5?n=2&x-algolia-application-id=SHOP&x-algolia-api-key={admin}"
    );
    let (status, peek) = s.call(Method::GET, &path, None, None).await;
    assert_eq!(status, StatusCode::OK, "{peek}");
    assert_eq!(ids(&peek), ["p0", "p1"]);
    ok(&s, a, Method::DELETE, "/1/queues/for-you", None).await;
    assert_error(
        s.call(Method::GET, "/1/queues/for-you/users/u5", a, None)
            .await,
        StatusCode::NOT_FOUND,
        "queue 'for-you' does not exist",
    );
}

/// Recommend personalizes with the profile (the re-ranking formula), boosts optional filters,
/// cuts at `hitsPerPage`, and refuses query parameters it does not take, naming them.
#[tokio::test]
async fn query_parameters_personalize_boost_and_are_never_ignored() {
    let s = Server::start().await;
    let admin = s.app("SHOP").await;
    let a = Some(("SHOP", admin.as_str()));
    shop(&s, a).await;
    ok(
        &s,
        a,
        Method::POST,
        "/1/strategies/personalization",
        Some(json!({
            "eventsScoring": [{"eventName": "Item view", "eventType": "view", "score": 10}],
            "facetsScoring": [{"facetName": "brand", "score": 100}],
            "personalizationImpact": 100
        })),
    )
    .await;
    s.strategy_job_done(a).await;
    // fan views Samsung items only: their profile says Samsung.
    let views: Vec<Value> = ["p1", "p3"]
        .iter()
        .map(|p| event("view", "fan", &[p], now_ms() - 1000))
        .collect();
    ok(
        &s,
        a,
        Method::POST,
        "/1/events",
        Some(json!({"events": views})),
    )
    .await;
    let trending = |params: Value| {
        json!({"indexName": "products", "model": "trending-items", "threshold": 0,
               "maxRecommendations": 4, "queryParameters": params})
    };
    // The model's order: p0 (Apple) p1 (Samsung) p2 (Apple) p3 (Samsung) p4.
    let plain = recommend(&s, a, trending(json!({}))).await;
    assert_eq!(ids(&plain), ["p0", "p1", "p2", "p3"], "{plain}");
    // Personalized: Samsung first, each half in the model's order; drawn from a larger pool.
    let r = recommend(
        &s,
        a,
        trending(
            json!({"userToken": "fan", "enablePersonalization": true, "getRankingInfo": true}),
        ),
    )
    .await;
    assert_eq!(ids(&r), ["p1", "p3", "p5", "p0"], "{r}");
    assert_eq!(
        r["hits"][0]["_rankingInfo"]["personalization"]["filtersScore"], 20,
        "{r}"
    );
    // Impact 0 keeps the model's order; a user without a profile too.
    let r = recommend(
        &s,
        a,
        trending(json!({"userToken": "fan", "enablePersonalization": true,
                        "personalizationImpact": 0})),
    )
    .await;
    assert_eq!(ids(&r), ids(&plain));
    let r = recommend(
        &s,
        a,
        trending(json!({"userToken": "nobody", "enablePersonalization": true})),
    )
    .await;
    assert_eq!(ids(&r), ids(&plain));
    // optionalFilters come first; hitsPerPage cuts.
    let r = recommend(
        &s,
        a,
        trending(json!({"optionalFilters": ["price:40<score=2>", ["price:20"]], "hitsPerPage": 3})),
    )
    .await;
    assert_eq!(ids(&r), ["p4", "p2", "p0"], "{r}");
    assert_eq!(r["hitsPerPage"], 3, "{r}");
    // Refused, named.
    for (params, needle) in [
        (json!({"page": 2}), "page"),
        (json!({"aroundLatLng": "1,2"}), "aroundLatLng"),
        (
            json!({"enablePersonalization": true}),
            "userToken is required",
        ),
        (
            json!({"personalizationImpact": 101, "userToken": "fan"}),
            "personalizationImpact",
        ),
        (json!({"hitsPerPage": 0}), "hitsPerPage"),
        (json!({"optionalFilters": ["brand:-Apple"]}), "negative"),
    ] {
        assert_error(
            s.call(
                Method::POST,
                "/1/indexes/*/recommendations",
                a,
                Some(json!({"requests": [trending(params)]})),
            )
            .await,
            StatusCode::BAD_REQUEST,
            needle,
        );
    }
}

/// `GET/PUT /1/schedules`: the defaults, a change, the next runs; bad settings refused.
#[tokio::test]
async fn schedules_are_read_and_set_over_http() {
    let s = Server::start().await;
    let admin = s.app("SHOP").await;
    let a = Some(("SHOP", admin.as_str()));
    let got = ok(&s, a, Method::GET, "/1/schedules", None).await;
    assert_eq!(
        got["settings"],
        json!({"trainEveryHours": 24, "foldInEveryMinutes": 60, "buildEveryMinutes": 60,
               "rankEveryHours": 24, "queueStaleAfterMinutes": 60})
    );
    // No events yet: nothing is due.
    assert_eq!(got["tasks"][0]["task"], "training", "{got}");
    assert_eq!(got["tasks"][0]["nextRunAt"], Value::Null, "{got}");
    shop(&s, a).await;
    let got = ok(
        &s,
        a,
        Method::PUT,
        "/1/schedules",
        Some(json!({"buildEveryMinutes": 15, "trainEveryHours": 0})),
    )
    .await;
    assert_eq!(got["settings"]["buildEveryMinutes"], 15, "{got}");
    assert_eq!(
        got["settings"]["foldInEveryMinutes"], 60,
        "a field left out: its default"
    );
    let tasks = got["tasks"].as_array().unwrap();
    assert_eq!(
        tasks[0]["everyMinutes"],
        Value::Null,
        "training is off: {got}"
    );
    assert_eq!(tasks[0]["nextRunAt"], Value::Null, "{got}");
    assert_eq!(tasks[2]["task"], "build");
    assert_eq!(tasks[2]["everyMinutes"], 15);
    assert!(
        tasks[2]["nextRunAt"].as_str().unwrap().ends_with('Z'),
        "{got}"
    );
    for (bad, needle) in [
        (json!({"buildEvery": 5}), "buildEvery"),
        (json!({"trainEveryHours": 100000}), "at most a year"),
    ] {
        assert_error(
            s.call(Method::PUT, "/1/schedules", a, Some(bad)).await,
            StatusCode::BAD_REQUEST,
            needle,
        );
    }
}

/// "Not for me": an event named as negative, or the hide route, keeps items out of the user's
/// queue and every model's answer for them (not for others) until unhidden or expired.
#[tokio::test]
async fn not_for_me_keeps_items_out_of_the_users_recommendations() {
    let s = Server::start().await;
    let admin = s.app("SHOP").await;
    let a = Some(("SHOP", admin.as_str()));
    shop(&s, a).await;
    ok(
        &s,
        a,
        Method::PUT,
        "/1/seen/settings",
        Some(json!({"negativeEventNames": ["Not Interested"], "hideDays": 14})),
    )
    .await;
    ok(
        &s,
        a,
        Method::PUT,
        "/1/queues/for-you",
        Some(json!({"indexName": "products", "sources": [{"source": "trending"}]})),
    )
    .await;
    let not_interested = json!({"eventType": "click", "eventName": "Not Interested",
        "index": "products", "userToken": "u5", "objectIDs": ["p0"]});
    ok(
        &s,
        a,
        Method::POST,
        "/1/events",
        Some(json!({"events": [not_interested]})),
    )
    .await;
    build(&s, a).await;
    let for_you = json!({"indexName": "products", "model": "recommended-for-you",
        "threshold": 0, "maxRecommendations": 3, "queryParameters": {"userToken": "u5"}});
    let trending = |user: Option<&str>| {
        let mut r = json!({"indexName": "products", "model": "trending-items", "threshold": 0,
            "maxRecommendations": 3});
        if let Some(user) = user {
            r["queryParameters"] = json!({"userToken": user});
        }
        r
    };
    // u5 viewed p7 (seen) and is not interested in p0: neither is recommended to u5.
    let r = recommend(&s, a, for_you.clone()).await;
    assert_eq!(r["source"], "queue", "{r}");
    assert_eq!(ids(&r), ["p1", "p2", "p3"], "{r}");
    let r = recommend(&s, a, trending(Some("u5"))).await;
    assert_eq!(ids(&r), ["p1", "p2", "p3"], "{r}");
    // Others still get p0; the negative event was not counted as a click anywhere.
    let r = recommend(&s, a, trending(None)).await;
    assert_eq!(ids(&r), ["p0", "p1", "p2"], "{r}");
    let hidden = ok(&s, a, Method::GET, "/1/seen/users/u5/hidden", None).await;
    assert_eq!(hidden["hidden"][0]["objectID"], "p0", "{hidden}");
    assert!(hidden["hidden"][0]["until"].is_string(), "{hidden}");

    // The route: p1 hidden for a day; p0 shown again.
    let answer = ok(
        &s,
        a,
        Method::POST,
        "/1/seen/users/u5/hide",
        Some(json!({"objectIDs": ["p1"], "days": 1})),
    )
    .await;
    assert_eq!(answer["hidden"], 1, "{answer}");
    ok(
        &s,
        a,
        Method::POST,
        "/1/seen/users/u5/unhide",
        Some(json!({"objectIDs": ["p0"]})),
    )
    .await;
    // The queue's rebuild while p0 was hidden left it out; it is back from the next one.
    let r = recommend(&s, a, for_you.clone()).await;
    assert_eq!(ids(&r), ["p2", "p3", "p4"], "{r}");
    ok(
        &s,
        a,
        Method::POST,
        "/1/queues/for-you/users/u5/rebuild",
        Some(json!({})),
    )
    .await;
    let r = recommend(&s, a, for_you).await;
    assert_eq!(ids(&r), ["p0", "p2", "p3"], "{r}");
    let r = recommend(&s, a, trending(Some("u5"))).await;
    assert_eq!(ids(&r), ["p0", "p2", "p3"], "{r}");

    for (path, body, needle) in [
        (
            "/1/seen/users/u5/hide",
            json!({"objectIDs": ["p1"], "days": 0}),
            "days must be between 1 and 365",
        ),
        (
            "/1/seen/users/u5/unhide",
            json!({"objectIDs": ["p1"], "days": 2}),
            "unknown field `days`",
        ),
    ] {
        let got = s.call(Method::POST, path, a, Some(body)).await;
        assert_error(got, StatusCode::BAD_REQUEST, needle);
    }
    let got = s
        .call(
            Method::PUT,
            "/1/seen/settings",
            a,
            Some(json!({"hideDays": 0})),
        )
        .await;
    assert_error(
        got,
        StatusCode::BAD_REQUEST,
        "hideDays must be between 1 and 365",
    );
}

/// A learned queue over HTTP: before the index has a ranker it answers 404s; the ranker job
/// (bad settings refused) learns one from a shop whose users keep to their own kind of item,
/// writes the queue, and Recommend says the learned ranker's version answered; a rebuild by
/// hand is then refused.
#[tokio::test]
async fn a_learned_queue_is_trained_and_served_with_its_ranker_version() {
    let s = Server::start().await;
    let admin = s.app("SHOP").await;
    let a = Some(("SHOP", admin.as_str()));
    let (users, kinds, per_kind) = (160usize, 4usize, 15usize);
    let products: Vec<Value> = (0..kinds * per_kind)
        .map(|i| {
            json!({"action": "addObject", "body": {
                "objectID": format!("p{i}"), "kind": format!("k{}", i % kinds),
            }})
        })
        .collect();
    ok(
        &s,
        a,
        Method::POST,
        "/1/indexes/products/batch",
        Some(json!({"requests": products})),
    )
    .await;
    // Each user clicks 14 items of their own kind, the popular ones (low numbers) more often.
    let mut seed = 17u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    let t = now_ms() - 3_600_000;
    let mut events = Vec::new();
    for n in 0..users * 14 {
        let user = n % users;
        let kind = user % kinds;
        let rank = (next() % per_kind).min(next() % per_kind);
        let item = format!("p{}", rank * kinds + kind);
        events.push(event(
            "click",
            &format!("u{user}"),
            &[&item],
            t + n as i64 * 100,
        ));
    }
    for chunk in events.chunks(1000) {
        ok(
            &s,
            a,
            Method::POST,
            "/1/events",
            Some(json!({"events": chunk})),
        )
        .await;
    }

    assert_error(
        s.call(Method::GET, "/1/rankers/products", a, None).await,
        StatusCode::NOT_FOUND,
        "index 'products' has no learned ranker",
    );
    assert_error(
        s.call(Method::GET, "/1/ranker/train", a, None).await,
        StatusCode::NOT_FOUND,
        "never trained a ranker",
    );
    let queue = json!({"indexName": "products", "ranker": "learned", "size": 20,
        "sources": [{"source": "trending"}]});
    ok(&s, a, Method::PUT, "/1/queues/learned", Some(queue)).await;
    let defined = ok(&s, a, Method::GET, "/1/queues/learned", None).await;
    assert_eq!(defined["ranker"], "learned", "{defined}");

    assert_error(
        s.call(
            Method::POST,
            "/1/ranker/train",
            a,
            Some(json!({"indexName": "products", "rankr": {}})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "Invalid ranker training: unknown field `rankr`",
    );
    assert_error(
        s.call(
            Method::POST,
            "/1/ranker/train",
            a,
            Some(json!({"indexName": "products", "ranker": {"cuts": 9}})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "cuts between 1 and 5",
    );
    let settings = json!({"indexName": "products",
        "ranker": {"maxQueries": 160, "cuts": 2, "params": {"trees": 30}}});
    let (status, started) = s
        .call(Method::POST, "/1/ranker/train", a, Some(settings))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    assert_eq!(started["phase"], "learn", "{started}");
    let done = ranker_job_end(&s, a).await;
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["queues"], json!(["learned"]), "{done}");
    assert_eq!(done["users"], users, "{done}");
    let version = done["version"].as_i64().expect("a version");

    let ranker = ok(&s, a, Method::GET, "/1/rankers/products", None).await;
    assert_eq!(ranker["version"], version, "{ranker}");
    assert!(
        ranker.get("model").is_none(),
        "the trees stay out: {ranker}"
    );
    assert_eq!(ranker["features"].as_array().unwrap().len(), FEATURES.len());
    assert_eq!(
        ranker["learned"]["importance"].as_array().unwrap().len(),
        FEATURES.len()
    );

    let answer = recommend(
        &s,
        a,
        json!({"indexName": "products", "model": "recommended-for-you", "threshold": 0,
            "queue": "learned", "queryParameters": {"userToken": "u5"}}),
    )
    .await;
    assert_eq!(answer["source"], "learned-queue", "{answer}");
    assert_eq!(answer["rankerVersion"], version, "{answer}");
    // u5 keeps to kind k1: most of the learned queue's first hits are of it.
    let kinds_served: Vec<String> = answer["hits"].as_array().unwrap()[..5]
        .iter()
        .map(|h| h["kind"].as_str().unwrap().to_owned())
        .collect();
    let own = kinds_served.iter().filter(|k| *k == "k1").count();
    assert!(own >= 3, "{kinds_served:?}");

    assert_error(
        s.call(
            Method::POST,
            "/1/queues/learned/users/u5/rebuild",
            a,
            Some(json!({})),
        )
        .await,
        StatusCode::CONFLICT,
        "the ranker job writes it",
    );

    // At request time: any model's hits in the ranker's order for the user, each with its
    // features and their contributions (getRankingInfo), in Algolia's ranking-info shape.
    let answer = recommend(
        &s,
        a,
        json!({"indexName": "products", "model": "trending-items", "threshold": 0,
            "ranker": "learned", "maxRecommendations": 10,
            "queryParameters": {"userToken": "u5", "getRankingInfo": true}}),
    )
    .await;
    assert_eq!(answer["ranker"], "learned", "{answer}");
    assert_eq!(answer["rankerVersion"], version, "{answer}");
    let hits = answer["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 10, "{answer}");
    assert_eq!(hits[0]["_score"], 100.0, "{answer}");
    let info = &hits[0]["_rankingInfo"];
    assert_eq!(
        info["personalization"]["score"], 0,
        "not personalized: {info}"
    );
    let learned = &info["learned"];
    assert_eq!(learned["rankerVersion"], version, "{learned}");
    assert_eq!(
        learned["features"].as_object().unwrap().len(),
        FEATURES.len()
    );
    let parts = learned["contributions"]["features"].as_object().unwrap();
    let sum = learned["contributions"]["bias"].as_f64().unwrap()
        + parts.values().map(|v| v.as_f64().unwrap()).sum::<f64>();
    assert!(
        (sum - learned["score"].as_f64().unwrap()).abs() < 1e-6,
        "{learned}"
    );
    let kinds_served: Vec<&str> = hits[..5]
        .iter()
        .map(|h| h["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds_served.iter().filter(|k| **k == "k1").count() >= 3,
        "u5 keeps to k1: {kinds_served:?}"
    );
    assert_error(
        s.call(
            Method::POST,
            "/1/indexes/*/recommendations",
            a,
            Some(
                json!({"requests": [{"indexName": "products", "model": "trending-items",
                "threshold": 0, "ranker": "lambdamart",
                "queryParameters": {"userToken": "u5"}}]}),
            ),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "requests[0]: ranker: `lambdamart` is not a ranker (blend or learned)",
    );
    // Re-ranking by it: u5's kind first.
    let hits: Vec<Value> = (0..8)
        .map(|i| json!({"objectID": format!("p{i}")}))
        .collect();
    let reranked = ok(
        &s,
        a,
        Method::POST,
        "/1/indexes/products/rerank",
        Some(json!({"userToken": "u5", "hits": hits, "ranker": "learned"})),
    )
    .await;
    assert_eq!(reranked["ranker"], "learned", "{reranked}");
    assert_eq!(reranked["rankerVersion"], version, "{reranked}");
    let first = reranked["hits"][0]["objectID"].as_str().unwrap();
    assert!(["p1", "p5"].contains(&first), "u5 keeps to k1: {reranked}");
    assert!(reranked["hits"][0]["_rankingInfo"]["learned"]["score"].is_number());

    // Answers served elsewhere, imported: 40 users were each shown 6 items, one of each kind
    // but one, and clicked the one of their own kind (with the answer's queryID).
    let impression = |u: usize, at: i64| {
        let kind = u % kinds;
        let served: Vec<String> = (0..6)
            .map(|j| format!("p{}", j * kinds + (kind + j) % kinds))
            .collect();
        json!({"index": "products", "queryID": format!("{:032x}", 1000 + u),
            "userToken": format!("u{u}"), "timestamp": at, "objectIDs": served})
    };
    let at = now_ms() - 60_000;
    let click = |u: usize| {
        json!({"eventType": "click", "eventName": "Item click", "index": "products",
            "userToken": format!("u{u}"), "objectIDs": [format!("p{}", u % kinds)],
            "queryID": format!("{:032x}", 1000 + u), "positions": [1], "timestamp": at + 1000})
    };
    let imported = ok(
        &s,
        a,
        Method::POST,
        "/1/impressions",
        Some(json!({"impressions": (0..40).map(|u| impression(u, at)).collect::<Vec<_>>()})),
    )
    .await;
    assert_eq!(imported["status"], 200, "{imported}");
    // Refused as a whole: the good first impression of this batch (which a click follows) is
    // not logged either.
    let mut bad = impression(40, at);
    bad["queryID"] = json!("q".repeat(65));
    for (body, message) in [
        (
            json!({"impressions": []}),
            "impressions must hold 1 to 1000 impressions, not 0",
        ),
        (
            json!({"impressions": [{"index": "products", "queryID": "q", "userTokn": "u1",
                "objectIDs": ["p1"]}]}),
            "Invalid impressions: unknown field `userTokn`",
        ),
        (
            json!({"impressions": [impression(1, at - 31 * 86_400_000)]}),
            "impressions[0]: The timestamp must be at most 30 days in the past",
        ),
        (
            json!({"impressions": [{"index": "products", "queryID": "q", "userToken": "u1",
                "objectIDs": []}]}),
            "impressions[0]: objectIDs must hold 1 to 1000 items",
        ),
        (
            json!({"impressions": [impression(41, at), bad]}),
            "impressions[1]: queryID must be 1 to 64 bytes",
        ),
    ] {
        assert_error(
            s.call(Method::POST, "/1/impressions", a, Some(body)).await,
            StatusCode::BAD_REQUEST,
            message,
        );
    }
    let clicks: Vec<Value> = (0..42).map(click).collect();
    ok(
        &s,
        a,
        Method::POST,
        "/1/events",
        Some(json!({"events": clicks})),
    )
    .await;
    let settings = json!({"indexName": "products", "ranker": {"examples": "impressions",
        "cuts": 1, "params": {"trees": 20, "minRowsInLeaf": 5}}});
    ok(&s, a, Method::POST, "/1/ranker/train", Some(settings)).await;
    let done = ranker_job_end(&s, a).await;
    assert_eq!(done["state"], "done", "{done}");
    let ranker = ok(&s, a, Method::GET, "/1/rankers/products", None).await;
    assert_eq!(ranker["learned"]["examples"], "impressions", "{ranker}");
    assert_eq!(ranker["learned"]["impressions"], 40, "{ranker}");
}
