//! `POST /1/events` over HTTP: Algolia's messages, all-or-nothing, search-insights' quirks, and
//! the wide-schema rows it writes.

use crate::common::{Server, shop};
use penchant_store::{ReadRows, Row};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// The stored events (not the batches' intent rows, which are deleted once their work is done).
async fn rows(s: &Server) -> Vec<Row> {
    let mut rows = s
        .store
        .read_all("events", ReadRows::default())
        .await
        .unwrap();
    rows.retain(|r| r.latest("e", b"event").is_some());
    rows
}

fn cell(row: &Row, qualifier: &str) -> Option<Value> {
    row.latest("e", qualifier.as_bytes())
        .map(|c| serde_json::from_slice(&c.value).unwrap())
}

#[tokio::test]
async fn events_are_validated_and_stored_in_the_wide_schema() {
    let (s, admin) = shop().await;
    let search = s.key("SHOP", &admin, &["search"]).await;
    let writer = s.key("SHOP", &admin, &["addObject"]).await;
    let w = Some(("SHOP", writer.as_str()));
    let k = Some(("SHOP", search.as_str()));
    let batch = json!({"requests": [
        {"action": "addObject", "body": {"objectID": "iphone", "brand": "Apple", "categories": {"lvl0": "Phones"}}},
        {"action": "addObject", "body": {"objectID": "case", "brand": "Apple", "categories": {"lvl0": "Accessories"}}},
    ]});
    assert_eq!(
        s.call(Method::POST, "/1/indexes/products/batch", w, Some(batch))
            .await
            .0,
        StatusCode::OK
    );

    // Items: facets come from the catalog.
    let at = penchant_store::validate::now_micros() / 1000 - 5000;
    let click = json!({"events": [{
        "eventType": "click", "eventName": "Product Clicked", "index": "products",
        "userToken": "anon-1", "authenticatedUserToken": "user-1",
        "objectIDs": ["iphone", "case", "unknown"], "timestamp": at,
    }]});
    let (status, body) = s
        .call(Method::POST, "/1/events", k, Some(click.clone()))
        .await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"status": 200, "message": "OK"}))
    );
    let stored = rows(&s).await;
    assert_eq!(stored.len(), 1);
    let row = &stored[0];
    assert!(
        row.key.starts_with(b"SHOP\0user-1\0"),
        "the authenticated token is the user"
    );
    assert_eq!(
        cell(row, "click,Product Clicked,brand"),
        Some(json!({"Apple": 2}))
    );
    assert_eq!(
        cell(row, "click,Product Clicked,categories.lvl0"),
        Some(json!({"Accessories": 1, "Phones": 1}))
    );
    assert!(cell(row, "event").is_some());
    // A retried request (events with their timestamps) writes the same row: nothing counts twice.
    s.call(Method::POST, "/1/events", k, Some(click)).await;
    assert_eq!(rows(&s).await.len(), 1);

    // search-insights: credentials in the query string, text/plain body, encoded filters.
    let view = json!({"events": [{
        "eventType": "view", "eventName": "Viewed, filtered", "index": "products",
        "userToken": "user-1", "filters": ["discount%3A10%25", "brand:Apple"],
    }]});
    let url = format!(
        "{}/1/events?X-Algolia-Application-Id=SHOP&X-Algolia-API-Key={search}&X-Algolia-Agent=insights-js",
        s.base
    );
    let resp = s
        .http
        .post(&url)
        .header("content-type", "text/plain;charset=UTF-8")
        .body(view.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let stored = rows(&s).await;
    assert_eq!(stored.len(), 2);
    let viewed = stored
        .iter()
        .find(|r| cell(r, "view,\"Viewed, filtered\",discount").is_some())
        .unwrap();
    assert_eq!(
        cell(viewed, "view,\"Viewed, filtered\",discount"),
        Some(json!({"10%": 1}))
    );
    // The client retries it (its timeout fired before the answer): no timestamp, so the server
    // stamps the retry later, yet it is the same event, stored at the first arrival.
    let first_arrival = viewed.key.clone();
    let retry = s
        .http
        .post(&url)
        .header("content-type", "text/plain;charset=UTF-8")
        .body(view.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), StatusCode::OK);
    let stored = rows(&s).await;
    assert_eq!(stored.len(), 2, "the retry counts once");
    assert!(stored.iter().any(|r| r.key == first_arrival));

    // CORS preflight.
    let resp = s
        .http
        .request(Method::OPTIONS, format!("{}/1/events", s.base))
        .header("origin", "https://shop.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    assert!(resp.headers().contains_key("access-control-allow-origin"));

    // One invalid event rejects the whole request; nothing of it is stored.
    let mixed = json!({"events": [
        {"eventType": "view", "eventName": "ok", "index": "products", "userToken": "user-2", "objectIDs": ["iphone"]},
        {"eventType": "view", "eventName": "ok", "index": "products", "userToken": "user 2", "objectIDs": ["iphone"]},
    ]});
    let (status, body) = s.call(Method::POST, "/1/events", k, Some(mixed)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("UserToken must contain"),
        "{body}"
    );
    assert_eq!(body["status"], 422);
    assert_eq!(rows(&s).await.len(), 2);

    // Bad JSON, oversized bodies, wrong keys, missing ACL, another app's key.
    let resp = s
        .http
        .post(format!("{}/1/events", s.base))
        .header("X-Algolia-Application-Id", "SHOP")
        .header("X-Algolia-API-Key", &search)
        .body("{oops")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        resp.json::<Value>().await.unwrap(),
        json!({"status": 422, "message": "Invalid payload"})
    );
    let resp = s
        .http
        .post(format!("{}/1/events", s.base))
        .header("X-Algolia-Application-Id", "SHOP")
        .header("X-Algolia-API-Key", &search)
        .body(vec![b' '; 2 * 1024 * 1024 + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        resp.json::<Value>().await.unwrap(),
        json!({"status": 413, "message": "Request Entity Too Large"})
    );
    let ok = json!({"events": [{"eventType": "view", "eventName": "v", "index": "i", "userToken": "u", "objectIDs": ["x"]}]});
    let (status, _) = s
        .call(
            Method::POST,
            "/1/events",
            Some(("SHOP", "wrong")),
            Some(ok.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = s.call(Method::POST, "/1/events", w, Some(ok.clone())).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "addObject is not search");
    let other = s.app("OTHER").await;
    let (status, _) = s
        .call(
            Method::POST,
            "/1/events",
            Some(("SHOP", other.as_str())),
            Some(ok),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(rows(&s).await.len(), 2);
}

/// Every 422 over HTTP, with its exact body, and nothing stored for any of them.
#[tokio::test]
async fn every_rejection_has_algolias_message_over_http() {
    let (s, admin) = shop().await;
    let k = Some(("SHOP", admin.as_str()));
    let base = || json!({"eventType": "view", "eventName": "Viewed", "index": "items", "userToken": "u1", "objectIDs": ["a"]});
    let with = |edit: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut e = base();
        edit(e.as_object_mut().unwrap());
        json!({"events": [e]})
    };
    let qid = json!("0123456789abcdef0123456789abcdef");
    let old = penchant_store::validate::now_micros() / 1000 - 31 * 86_400_000;
    let cases: Vec<(Value, &str)> = vec![
        (json!({"events": []}), "No events to process"),
        (
            json!([base()]),
            "Invalid type for field : expected insights.PublicEventsBatch, got array",
        ),
        (
            json!({"events": vec![base(); 1001]}),
            "Cannot process more than 1000 events in a batch",
        ),
        (
            with(&|e| {
                e.remove("eventName");
            }),
            "EventName is required",
        ),
        (
            with(&|e| {
                e.insert("eventName".into(), json!("x".repeat(65)));
            }),
            "EventName must contain only visible ASCII characters, and be between 1 and 64 characters long",
        ),
        (
            with(&|e| {
                e.remove("eventType");
            }),
            "EventType is required",
        ),
        (
            with(&|e| {
                e.insert("eventType".into(), json!("like"));
            }),
            r#"EventType must be one of "click", "conversion" or "view""#,
        ),
        (
            with(&|e| {
                e.insert("eventSubtype".into(), json!("purchase"));
            }),
            "Only event of type conversion should specify the eventSubtype attribute",
        ),
        (
            with(&|e| {
                e.remove("index");
            }),
            "The index field is required",
        ),
        (
            with(&|e| {
                e.remove("userToken");
            }),
            "The userToken field is required",
        ),
        (
            with(&|e| {
                e.insert("userToken".into(), json!("a b"));
            }),
            "UserToken must contain only alphanumeric, equal, plus, slash, hyphen, or underscore characters, and be between 1 and 128 characters long",
        ),
        (
            with(&|e| {
                e.remove("objectIDs");
            }),
            "Event should specify either some ObjectIDs or some Filters",
        ),
        (
            with(&|e| {
                e.insert("filters".into(), json!(["a:b"]));
            }),
            "Event should specify ObjectIDs or Filters, but not both",
        ),
        (
            with(&|e| {
                e.insert("objectIDs".into(), json!(vec!["x"; 21]));
            }),
            "Cannot process more that 20 objects in an event",
        ),
        (
            // Issue 29: a 5 KB objectID was stored, then broke every build of the app.
            with(&|e| {
                e.insert("objectIDs".into(), json!(["a", "x".repeat(5000)]));
            }),
            "ObjectID must be 1 to 512 bytes without a 0 byte: objectIDs[1] is 5000 bytes",
        ),
        (
            with(&|e| {
                e.insert("index".into(), json!("i".repeat(257)));
            }),
            "The index name must be 1 to 256 bytes without control characters",
        ),
        (
            with(&|e| {
                e.insert("positions".into(), json!([1]));
            }),
            "Only event of type click should specify the positions attribute",
        ),
        (
            with(&|e| {
                e.insert("eventType".into(), json!("click"));
                e.insert("positions".into(), json!([1]));
            }),
            "Event of type click with positions should specify a queryID",
        ),
        (
            with(&|e| {
                e.insert("eventType".into(), json!("click"));
                e.insert("queryID".into(), qid.clone());
                e.insert("positions".into(), json!([0]));
            }),
            "Event of type click may only have strictly positive positions",
        ),
        (
            with(&|e| {
                e.insert("eventType".into(), json!("click"));
                e.insert("queryID".into(), qid.clone());
            }),
            "Event of type click should have the same number of ObjectIDs and Positions",
        ),
        (
            with(&|e| {
                e.insert("queryID".into(), json!("nope"));
            }),
            "Query ID must be a search query ID (32 characters hexadecimal string)",
        ),
        (
            with(&|e| {
                e.insert("timestamp".into(), json!(old));
            }),
            "The timestamp must be at most 30 days in the past",
        ),
        (
            with(&|e| {
                e.insert("userToken".into(), json!(7));
            }),
            "Invalid type for field events: expected string, got number",
        ),
    ];
    for (body, message) in cases {
        let (status, got) = s.call(Method::POST, "/1/events", k, Some(body)).await;
        assert_eq!(
            (status, got),
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"status": 422, "message": message})
            )
        );
    }
    assert!(
        rows(&s).await.is_empty(),
        "nothing of a rejected request is stored"
    );
}
