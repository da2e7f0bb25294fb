//! Algolia's indexing routes over HTTP: batches, single objects, partial updates, tasks, ACLs.

use crate::common::shop;
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn records_batches_partial_updates_and_tasks() {
    let (s, admin) = shop().await;
    let writer = s.key("SHOP", &admin, &["addObject"]).await;
    let reader = s.key("SHOP", &admin, &["search"]).await;
    let w = Some(("SHOP", writer.as_str()));
    let r = Some(("SHOP", reader.as_str()));

    let batch = json!({"requests": [
        {"action": "addObject", "body": {"objectID": "p1", "brand": "Apple", "price": 999}},
        {"action": "addObject", "body": {"name": "generated id"}},
        {"action": "updateObject", "body": {"objectID": "p2", "brand": "Samsung"}},
        {"action": "partialUpdateObject", "body": {"objectID": "p1", "stock": {"_operation": "Increment", "value": 3}}},
        {"action": "partialUpdateObjectNoCreate", "body": {"objectID": "ghost", "x": 1}},
    ]});
    let body = s
        .ok(Method::POST, "/1/indexes/products/batch", w, Some(batch))
        .await;
    let ids = body["objectIDs"].as_array().unwrap();
    assert_eq!(ids.len(), 5);
    assert_eq!(ids[0], "p1");
    let task = body["taskID"].as_i64().unwrap();
    let (status, t) = s
        .call(
            Method::GET,
            &format!("/1/indexes/products/task/{task}"),
            w,
            None,
        )
        .await;
    assert_eq!(
        (status, t["status"].clone()),
        (StatusCode::OK, json!("published"))
    );

    let (status, p1) = s.call(Method::GET, "/1/indexes/products/p1", r, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        p1,
        json!({"objectID": "p1", "brand": "Apple", "price": 999, "stock": 3})
    );
    let (_, some) = s
        .call(
            Method::GET,
            "/1/indexes/products/p1?attributesToRetrieve=brand",
            r,
            None,
        )
        .await;
    assert_eq!(some, json!({"objectID": "p1", "brand": "Apple"}));
    let (status, body) = s
        .call(Method::GET, "/1/indexes/products/ghost", r, None)
        .await;
    assert_eq!(
        (status, body["message"].clone()),
        (StatusCode::NOT_FOUND, json!("ObjectID does not exist"))
    );

    // A search key cannot write; a writer cannot delete.
    let (status, _) = s
        .call(
            Method::PUT,
            "/1/indexes/products/p3",
            r,
            Some(json!({"brand": "X"})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = s
        .call(Method::DELETE, "/1/indexes/products/p1", w, None)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // PUT, partial, DELETE on single objects.
    let (status, body) = s
        .call(
            Method::PUT,
            "/1/indexes/products/p3",
            w,
            Some(json!({"brand": "Sony"})),
        )
        .await;
    assert_eq!(
        (status, body["objectID"].clone()),
        (StatusCode::OK, json!("p3"))
    );
    let (status, _) = s
        .call(
            Method::POST,
            "/1/indexes/products/p3/partial",
            w,
            Some(json!({"color": "black"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, p3) = s.call(Method::GET, "/1/indexes/products/p3", r, None).await;
    assert_eq!(
        p3,
        json!({"objectID": "p3", "brand": "Sony", "color": "black"})
    );
    let (status, _) = s
        .call(
            Method::DELETE,
            "/1/indexes/products/p3",
            Some(("SHOP", admin.as_str())),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = s.call(Method::GET, "/1/indexes/products/p3", r, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Multi-index batch; an invalid action rejects the whole batch.
    let multi = json!({"requests": [
        {"action": "addObject", "indexName": "a", "body": {"objectID": "1"}},
        {"action": "addObject", "indexName": "b", "body": {"objectID": "1"}},
    ]});
    let body = s
        .ok(Method::POST, "/1/indexes/*/batch", w, Some(multi))
        .await;
    assert!(
        body["taskID"]["a"].is_i64() && body["taskID"]["b"].is_i64(),
        "{body}"
    );
    let bad = json!({"requests": [
        {"action": "addObject", "body": {"objectID": "new"}},
        {"action": "explode", "body": {}},
    ]});
    let (status, body) = s
        .call(Method::POST, "/1/indexes/products/batch", w, Some(bad))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = s
        .call(Method::GET, "/1/indexes/products/new", r, None)
        .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "nothing of a rejected batch is written"
    );

    // Another app sees none of it.
    let other = s.app("OTHER").await;
    let (status, _) = s
        .call(
            Method::GET,
            "/1/indexes/products/p1",
            Some(("OTHER", other.as_str())),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // clear empties the index.
    let clear = json!({"requests": [{"action": "clear"}]});
    let (status, _) = s
        .call(
            Method::POST,
            "/1/indexes/products/batch",
            Some(("SHOP", admin.as_str())),
            Some(clear),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = s.call(Method::GET, "/1/indexes/products/p1", r, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
