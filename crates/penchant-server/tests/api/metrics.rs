//! `GET /metrics`: Prometheus text with per-route counts and latencies, and events ingested and
//! refused. Route labels are templates: no user token becomes a label value.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common::Server;

#[tokio::test]
async fn metrics_count_requests_by_route_template_and_events() {
    let s = Server::start().await;
    let admin = s.app("SHOP").await;
    let a = Some(("SHOP", admin.as_str()));
    let event = |user: &str| {
        json!({"eventType": "view", "eventName": "Viewed", "index": "items", "userToken": user,
               "objectIDs": ["a"]})
    };
    let (status, _) = s
        .call(
            Method::POST,
            "/1/events",
            a,
            Some(json!({"events": [event("u1"), event("u2")]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = s
        .call(Method::POST, "/1/events", a, Some(json!({"events": []})))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    for user in ["secret-user-1", "secret-user-2"] {
        let path = format!("/1/profiles/personalization/{user}");
        s.call(Method::GET, &path, a, None).await;
    }

    let resp = s
        .http
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let text = resp.text().await.unwrap();
    for line in [
        r#"penchant_http_requests_total{method="POST",route="/1/events",status="200"} 1"#,
        r#"penchant_http_requests_total{method="POST",route="/1/events",status="422"} 1"#,
        r#"penchant_http_requests_total{method="GET",route="/1/profiles/personalization/{user_token}",status="404"} 2"#,
        r#"penchant_http_request_duration_seconds_count{method="POST",route="/1/events"} 2"#,
        "penchant_events_ingested_total 2",
        r#"penchant_events_rejected_total{status="422"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}:\n{text}");
    }
    assert!(!text.contains("secret-user"), "user tokens are not labels");
}
