//! `POST /1/events` over HTTP: Algolia's messages, all-or-nothing, search-insights' quirks, and
//! the wide-schema rows it writes.

mod common;

use common::Server;
use penchant_store::{ReadRows, Row};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn rows(s: &Server) -> Vec<Row> {
    s.store
        .read_all("events", ReadRows::default())
        .await
        .unwrap()
}

fn cell(row: &Row, qualifier: &str) -> Option<Value> {
    row.latest("e", qualifier.as_bytes())
        .map(|c| serde_json::from_slice(&c.value).unwrap())
}

#[tokio::test]
async fn events_are_validated_and_stored_in_the_wide_schema() {
    let s = Server::start().await;
    let admin = s.app("SHOP").await;
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
    let click = json!({"events": [{
        "eventType": "click", "eventName": "Product Clicked", "index": "products",
        "userToken": "anon-1", "authenticatedUserToken": "user-1",
        "objectIDs": ["iphone", "case", "unknown"],
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
    // A retried request writes the same row: nothing counts twice.
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
