//! Apps, API keys and ACLs over HTTP, on the in-memory store.

use crate::common::Server;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

#[tokio::test]
async fn apps_keys_acls_and_credentials() {
    let s = Server::start().await;
    let unauthorized = json!({"status": 401, "message": "Invalid credentials"});

    // Apps need the global admin key.
    let (status, body) = s.call(Method::GET, "/1/apps", None, None).await;
    assert_eq!(
        (status, body),
        (StatusCode::UNAUTHORIZED, unauthorized.clone())
    );
    let root = Some(("", "root-key"));
    let (status, app) = s
        .call(
            Method::POST,
            "/1/apps",
            root,
            Some(json!({"appID": "SHOP1", "name": "Shop"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{app}");
    let admin = app["adminAPIKey"].as_str().unwrap().to_owned();
    assert_eq!(admin.len(), 32);
    let (status, body) = s
        .call(
            Method::POST,
            "/1/apps",
            root,
            Some(json!({"appID": "SHOP1"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    // Retention: 90 days by default, 1 to 90, changed with PUT.
    let (status, body) = s
        .call(
            Method::PUT,
            "/1/apps/SHOP1",
            root,
            Some(json!({"retentionDays": 30})),
        )
        .await;
    assert_eq!(
        (status, body["retentionDays"].clone()),
        (StatusCode::OK, json!(30)),
        "{body}"
    );
    let (status, body) = s
        .call(
            Method::PUT,
            "/1/apps/SHOP1",
            root,
            Some(json!({"retentionDays": 91})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = s
        .call(
            Method::PUT,
            "/1/apps/NOPE",
            root,
            Some(json!({"retentionDays": 10})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = s
        .call(
            Method::POST,
            "/1/apps",
            root,
            Some(json!({"appId": "typo"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"].as_str().unwrap().contains("appId"),
        "{body}"
    );

    // The app's admin key creates a search-only key.
    let new_key = json!({"acl": ["search"], "description": "front"});
    let created = s
        .ok(
            Method::POST,
            "/1/keys",
            Some(("SHOP1", &admin)),
            Some(new_key),
        )
        .await;
    let search = created["key"].as_str().unwrap().to_owned();
    assert!(created["createdAt"].as_str().unwrap().ends_with('Z'));

    // A search key may not manage keys: 403.
    let (status, body) = s
        .call(Method::GET, "/1/keys", Some(("SHOP1", &search)), None)
        .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::FORBIDDEN,
            json!({"status": 403, "message": "Method not allowed with this API key: it lacks the ACL `admin`"})
        )
    );
    // Credentials in the query string, any case, as search-insights sends them.
    let url = format!(
        "{}/1/keys/{search}?X-Algolia-Application-Id=SHOP1&x-algolia-api-key={admin}",
        s.base
    );
    let body: Value = s.http.get(url).send().await.unwrap().json().await.unwrap();
    assert_eq!(body["value"], search.as_str());
    assert_eq!(body["acl"], json!(["search"]));
    assert_eq!(body["description"], "front");

    // Another app's key, or a wrong key, is refused.
    let (_, other) = s
        .call(
            Method::POST,
            "/1/apps",
            root,
            Some(json!({"appID": "SHOP2"})),
        )
        .await;
    let other_admin = other["adminAPIKey"].as_str().unwrap();
    for (app, key) in [
        ("SHOP1", other_admin),
        ("SHOP1", "nope"),
        ("NOAPP", admin.as_str()),
    ] {
        let (status, body) = s.call(Method::GET, "/1/keys", Some((app, key)), None).await;
        assert_eq!(
            (status, body),
            (StatusCode::UNAUTHORIZED, unauthorized.clone()),
            "{app}"
        );
    }
    // The global admin key acts as admin of an existing app.
    let (status, listed) = s
        .call(Method::GET, "/1/keys", Some(("SHOP1", "root-key")), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let values: Vec<&str> = listed["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["value"].as_str().unwrap())
        .collect();
    assert_eq!(values.len(), 1, "the admin key is not listed");
    assert!(
        values
            .iter()
            .all(|v| v.ends_with('…') && v.chars().count() == 7),
        "{values:?}"
    );

    // Bad JSON is a JSON error.
    let resp = s
        .http
        .post(format!("{}/1/keys", s.base))
        .header("X-Algolia-Application-Id", "SHOP1")
        .header("X-Algolia-API-Key", &admin)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("Invalid JSON"),
        "{body}"
    );

    // Deleting a key: it stops working at once on this node.
    let path = format!("/1/keys/{search}");
    let (status, _) = s
        .call(Method::DELETE, &path, Some(("SHOP1", &admin)), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = s
        .call(Method::DELETE, &path, Some(("SHOP1", &admin)), None)
        .await;
    assert_eq!(
        (status, body["message"].clone()),
        (StatusCode::NOT_FOUND, json!("Key does not exist"))
    );

    // Deleting an app removes its keys.
    let (status, _) = s.call(Method::DELETE, "/1/apps/SHOP1", root, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = s
        .call(Method::GET, "/1/keys", Some(("SHOP1", &admin)), None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (_, apps) = s.call(Method::GET, "/1/apps", root, None).await;
    assert_eq!(apps["apps"].as_array().unwrap().len(), 1);
}
