//! `GET /metrics`: Prometheus text with per-route counts and latencies, and events ingested and
//! refused. Route labels are templates: no user token becomes a label value.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common::{Server, shop};

#[tokio::test]
async fn metrics_count_requests_by_route_template_and_events() {
    let (s, admin) = shop().await;
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
    let value = |series: &str| -> f64 {
        let line = text.lines().find(|l| l.starts_with(series));
        let line = line.unwrap_or_else(|| panic!("missing {series}:\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    // The engine's figures, read at the scrape: one API key lookup per authenticated call (this
    // server caches nothing: its TTLs are 0).
    let lookups = value(r#"penchant_cache_hits_total{cache="api_keys"}"#)
        + value(r#"penchant_cache_misses_total{cache="api_keys"}"#);
    assert_eq!(lookups, 4.0);
    assert!(value(r#"penchant_cache_entries{cache="strategies"}"#) >= 0.0);
    assert_eq!(value("penchant_jobs_running "), 0.0);
    // One batch of events accepted: one refresh of its users' profiles.
    assert_eq!(
        value("penchant_profile_refresh_duration_seconds_count "),
        1.0
    );
    assert_eq!(
        value(r#"penchant_profile_refresh_duration_seconds_bucket{le="+Inf"}"#),
        1.0
    );
    assert_eq!(value("penchant_recomputed_users_total "), 0.0);
    assert_eq!(
        text.lines().last(),
        Some("# EOF"),
        "one OpenMetrics document"
    );
}

/// Issue 29, item 6: a method is any token a client sends, without credentials; each became a
/// label value kept for the process' life (20,000 methods of 1 KB: a 418 MB `/metrics`).
#[tokio::test]
async fn unknown_methods_share_one_label() {
    use rand::distr::{Alphanumeric, SampleString};
    let s = Server::start().await;
    let mut sent = Vec::new();
    for i in 0..50 {
        let name = format!("M{}", Alphanumeric.sample_string(&mut rand::rng(), 24)).to_uppercase();
        let method = Method::from_bytes(name.as_bytes()).unwrap();
        // Routes that exist (with other methods) and one that does not.
        let path = ["/health", "/1/events", "/nothing"][i % 3];
        let resp = s
            .http
            .request(method, format!("{}{path}", s.base))
            .send()
            .await
            .unwrap();
        assert!(
            resp.status().is_client_error(),
            "{name} {path}: {}",
            resp.status()
        );
        sent.push(name);
    }
    let text = s
        .http
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in &sent {
        assert!(!text.contains(name.as_str()), "{name} is a label:\n{text}");
    }
    assert!(
        text.lines().any(|l| l.starts_with(
            r#"penchant_http_requests_total{method="other",route="/health",status="405"}"#
        )),
        "no `other` method label:\n{text}"
    );
}
