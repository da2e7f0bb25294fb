//! What `penchant serve` logs at `info`: one line per request (method, route template, status,
//! duration, app, request id; never a key) and a line when a background job starts and ends.

use std::io::Read;
use std::process::Stdio;

use serde_json::{Value, json};

use crate::common::{self, post_ok, signal};

#[tokio::test]
async fn info_logs_every_request_and_each_job_start_and_end_without_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url) = common::serve(|cmd| {
        cmd.arg("--data-dir")
            .arg(dir.path())
            .env("PENCHANT_AUTH__ADMIN_KEY", "root")
            .env("PENCHANT_LOG__FORMAT", "json")
            .stderr(Stdio::piped());
    });
    // Read as it comes: a full pipe would stop the server.
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        pipe.read_to_string(&mut text).unwrap();
        text
    });
    post_ok(&url, "/1/apps", "", json!({"appID": "LOGS"})).await;
    let strategy = json!({
        "eventsScoring": [{"eventName": "Viewed", "eventType": "view", "score": 10}],
        "facetsScoring": [{"facetName": "brand", "score": 10}],
        "personalizationImpact": 10,
    });
    // A strategy change starts a profile recompute (a background job).
    post_ok(&url, "/1/strategies/personalization", "LOGS", strategy).await;
    // A refused request, its key in the query string (as search-insights sends it).
    let refused = reqwest::Client::new()
        .get(format!(
            "{url}/1/profiles/personalization/alice?x-algolia-application-id=LOGS&x-algolia-api-key=wrong-key"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let refused_id = refused.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    // Until the recompute has ended.
    let http = reqwest::Client::new();
    for _ in 0..200 {
        let job: Value = common::request(
            &http,
            reqwest::Method::GET,
            &format!("{url}/1/strategies/personalization/job"),
            ("LOGS", "root"),
            &Value::Null,
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        if job["state"] == "done" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    signal(&child, "-TERM");
    assert!(child.wait().unwrap().success());
    let stderr = reader.join().unwrap();

    let lines: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let requests: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "penchant::requests")
        .collect();
    let line = requests
        .iter()
        .find(|l| l["fields"]["request_id"] == refused_id.as_str())
        .unwrap_or_else(|| panic!("no line for the refused request in:\n{stderr}"));
    let fields = &line["fields"];
    assert_eq!(line["level"], "INFO");
    assert_eq!(fields["method"], "GET");
    assert_eq!(fields["route"], "/1/profiles/personalization/{user_token}");
    assert_eq!(fields["status"], 401);
    assert_eq!(fields["app"], "LOGS");
    assert!(fields["ms"].as_f64().unwrap() >= 0.0);
    assert!(
        requests
            .iter()
            .any(|l| l["fields"]["route"] == "/1/apps" && l["fields"]["status"] == 201),
        "{stderr}"
    );
    assert!(!stderr.contains("wrong-key"), "a key was logged:\n{stderr}");
    let message = |m: &str| {
        lines
            .iter()
            .any(|l| l["fields"]["message"] == m && l["fields"]["app"] == "LOGS")
    };
    assert!(message("profile recompute job started"), "{stderr}");
    assert!(message("profile recompute job ended"), "{stderr}");
}
