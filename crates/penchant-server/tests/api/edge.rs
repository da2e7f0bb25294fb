//! The HTTP edge (issue 29): rate limits count per client IP, whatever user token the client
//! sends.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common::Server;

/// Issue 29, item 7: rotating `X-Algolia-UserToken` lifted a key's rate limit (200 of 200
/// requests passed a limit of 10).
#[tokio::test]
async fn user_tokens_do_not_lift_a_keys_rate_limit() {
    let s = Server::start().await;
    let admin = s.app("SHOP").await;
    let (status, created) = s
        .call(
            Method::POST,
            "/1/keys",
            Some(("SHOP", &admin)),
            Some(json!({"acl": ["search"], "maxQueriesPerIPPerHour": 10})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let key = created["key"].as_str().unwrap();
    for i in 0..20 {
        let resp = s
            .http
            .get(format!("{}/1/indexes/products/p1", s.base))
            .header("X-Algolia-Application-Id", "SHOP")
            .header("X-Algolia-API-Key", key)
            .header("X-Algolia-UserToken", format!("user-{i}"))
            .send()
            .await
            .unwrap();
        let limited = resp.status() == StatusCode::TOO_MANY_REQUESTS;
        assert_eq!(limited, i >= 10, "request {i}: {}", resp.status());
    }
}
