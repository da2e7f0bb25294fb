//! Data the tests put in through the API before the browser looks at it.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{Server, now_ms};

/// An app of its own for a test, on a server, with its admin key: what the tests seed it with
/// goes through it.
pub struct App<'a> {
    pub s: &'a Server,
    pub app: &'static str,
    pub key: String,
}

impl<'a> App<'a> {
    /// Create `app` on the server.
    pub async fn new(s: &'a Server, app: &'static str) -> Self {
        let key = s.app(app).await;
        Self { s, app, key }
    }

    /// Call the API as the app's admin; the answer must be a success.
    pub async fn ok(&self, method: Method, path: &str, body: Value) -> Value {
        let body = (method != Method::GET && method != Method::DELETE).then_some(body);
        let creds = Some((self.app, self.key.as_str()));
        let (status, answer) = self.s.call(method.clone(), path, creds, body).await;
        assert!(status.is_success(), "{method} {path}: {status} {answer}");
        answer
    }

    /// Records in `index` (each a JSON object with its objectID).
    pub async fn records(&self, index: &str, records: &[Value]) {
        let requests: Vec<Value> = records
            .iter()
            .map(|r| json!({"action": "addObject", "body": r}))
            .collect();
        let path = format!("/1/indexes/{index}/batch");
        self.ok(Method::POST, &path, json!({ "requests": requests }))
            .await;
    }

    pub async fn events(&self, events: Vec<Value>) {
        let creds = Some((self.app, self.key.as_str()));
        let body = Some(json!({ "events": events }));
        self.s.ok(Method::POST, "/1/events", creds, body).await;
    }

    /// Save a strategy and wait for its recompute to end.
    pub async fn strategy(&self, strategy: Value) {
        self.ok(Method::POST, "/1/strategies/personalization", strategy)
            .await;
        let creds = Some((self.app, self.key.as_str()));
        self.s.strategy_job_done(creds).await;
    }

    /// Start a background job (`POST path`) and wait until `GET path` says it is done.
    pub async fn job(&self, path: &str, body: Value) -> Value {
        self.ok(Method::POST, path, body).await;
        let creds = Some((self.app, self.key.as_str()));
        for _ in 0..1000 {
            let (_, status) = self.s.call(Method::GET, path, creds, None).await;
            match status["state"].as_str() {
                Some("done") => return status,
                Some("running") => {}
                _ => panic!("{path}: {status}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{path} did not end");
    }
}

/// One Insights event on objectIDs, `ago_ms` before now.
pub fn event(kind: &str, name: &str, user: &str, index: &str, ids: &[&str], ago_ms: i64) -> Value {
    json!({"eventType": kind, "eventName": name, "index": index, "userToken": user,
           "objectIDs": ids, "timestamp": now_ms() - ago_ms})
}
