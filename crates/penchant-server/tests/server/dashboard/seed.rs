//! Data the tests put in through the API before the browser looks at it.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{Server, now_ms};

/// An app of its own for a test, with its admin key.
pub async fn app(s: &Server, app: &str) -> String {
    s.app(app).await
}

/// Call the API as `app`'s admin; the answer must be a success.
pub async fn ok(
    s: &Server,
    app: &str,
    key: &str,
    method: Method,
    path: &str,
    body: Value,
) -> Value {
    let body = (method != Method::GET && method != Method::DELETE).then_some(body);
    let (status, answer) = s.call(method.clone(), path, Some((app, key)), body).await;
    assert!(status.is_success(), "{method} {path}: {status} {answer}");
    answer
}

/// Records in `index` (each a JSON object with its objectID).
pub async fn records(s: &Server, app: &str, key: &str, index: &str, records: &[Value]) {
    let requests: Vec<Value> = records
        .iter()
        .map(|r| json!({"action": "addObject", "body": r}))
        .collect();
    ok(
        s,
        app,
        key,
        Method::POST,
        &format!("/1/indexes/{index}/batch"),
        json!({ "requests": requests }),
    )
    .await;
}

/// One Insights event on objectIDs, `ago_ms` before now.
pub fn event(kind: &str, name: &str, user: &str, index: &str, ids: &[&str], ago_ms: i64) -> Value {
    json!({"eventType": kind, "eventName": name, "index": index, "userToken": user,
           "objectIDs": ids, "timestamp": now_ms() - ago_ms})
}

pub async fn events(s: &Server, app: &str, key: &str, events: Vec<Value>) {
    let (status, body) = s
        .call(
            Method::POST,
            "/1/events",
            Some((app, key)),
            Some(json!({ "events": events })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Save a strategy and wait for its recompute to end.
pub async fn strategy(s: &Server, app: &str, key: &str, strategy: Value) {
    ok(
        s,
        app,
        key,
        Method::POST,
        "/1/strategies/personalization",
        strategy,
    )
    .await;
    for _ in 0..1000 {
        let (_, job) = s
            .call(
                Method::GET,
                "/1/strategies/personalization/job",
                Some((app, key)),
                None,
            )
            .await;
        if job["state"] == "done" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the recompute did not end");
}

/// Start a background job (`POST path`) and wait until `GET path` says it is done.
pub async fn job(s: &Server, app: &str, key: &str, path: &str, body: Value) -> Value {
    ok(s, app, key, Method::POST, path, body).await;
    for _ in 0..1000 {
        let (_, status) = s.call(Method::GET, path, Some((app, key)), None).await;
        match status["state"].as_str() {
            Some("done") => return status,
            Some("running") => {}
            _ => panic!("{path}: {status}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{path} did not end");
}
