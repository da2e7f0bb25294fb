//! A newcomer left alone: events before the catalog, a strategy, nothing else set up. The
//! server's clock is moved past the schedules' bounds (no sleeping), and every model answers
//! through the official clients, built by the schedules, fresh and personalized.

use std::time::Duration;

use penchant_engine::clock::Clock;
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{Server, now_ms};

const APP: &str = "NEWCOMER";

/// Run `e2e/python/newcomer.py` against the server in `phase`. Needs `E2E_PYTHON`
/// (`scripts/test.sh` sets it), as the end-to-end tests do.
fn python(s: &Server, key: &str, phase: &str) {
    let python = std::env::var("E2E_PYTHON").unwrap_or_else(|_| {
        panic!("E2E_PYTHON is not set: run the tests with ./scripts/test.sh (Algolia's clients)")
    });
    client(
        s,
        &python,
        "python",
        &["newcomer.py", "127.0.0.1", "PORT", APP, key, phase],
    );
}

/// Run `e2e/node/newcomer.mjs` (its packages: `scripts/e2e-node.sh`, run by `scripts/test.sh`).
fn node(s: &Server, key: &str) {
    client(
        s,
        "node",
        "node",
        &["newcomer.mjs", "127.0.0.1", "PORT", APP, key],
    );
}

/// Run `program` in `e2e/{folder}` with `args` (`PORT`: the server's); panics with its output
/// if it fails.
fn client(s: &Server, program: &str, folder: &str, args: &[&str]) {
    let dir =
        std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
            .join("../../e2e")
            .join(folder);
    let port = s.base.rsplit(':').next().unwrap();
    let args: Vec<&str> = args
        .iter()
        .map(|a| if *a == "PORT" { port } else { a })
        .collect();
    let out = std::process::Command::new(program)
        .current_dir(dir)
        .args(&args)
        .output()
        .unwrap_or_else(|e| panic!("{program} does not run: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Wait until the app's jobs (training, build) are no longer running.
async fn jobs_done(s: &Server, key: &str) {
    let creds = Some((APP, key));
    for _ in 0..1000 {
        let mut running = false;
        for path in ["/1/als/train", "/1/recommend/build"] {
            let (_, status) = s.call(Method::GET, path, creds, None).await;
            assert_ne!(status["state"], "failed", "{path}: {status}");
            running |= status["state"] == "running";
        }
        if !running {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the scheduled jobs did not end");
}

/// Move the clock `seconds` on, run a schedules' round and wait for what it started: the tasks
/// it started.
async fn round(s: &Server, clock: &Clock, seconds: u64, key: &str) -> Vec<String> {
    clock.advance(Duration::from_secs(seconds));
    let started = s
        .engine
        .run_schedules()
        .await
        .unwrap()
        .expect("the round's lease");
    jobs_done(s, key).await;
    started.iter().map(|(_, t)| format!("{t:?}")).collect()
}

/// When each scheduled task last started (ISO time), by task.
async fn last_started(s: &Server, key: &str) -> Value {
    let schedules = s
        .ok(Method::GET, "/1/schedules", Some((APP, key)), None)
        .await;
    schedules["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["task"].as_str().unwrap().to_owned(),
                t["lastStartedAt"].clone(),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_left_alone_gets_every_model_built_fresh_and_personalized() {
    let clock = Clock::manual(now_ms() * 1000);
    let s = Server::start_with_clock(clock.clone()).await;
    let key = s.app(APP).await;
    python(&s, &key, "setup");
    // Nothing is built yet: an item's model falls back to trending, and says so.
    let ask = |model: &str| {
        json!({"requests": [{"indexName": "products", "model": model, "threshold": 0,
            "objectID": "t0"}]})
    };
    let creds = Some((APP, key.as_str()));
    let path = "/1/indexes/*/recommendations";
    let before = s
        .ok(Method::POST, path, creds, Some(ask("bought-together")))
        .await;
    assert_eq!(before["results"][0]["fallback"], true, "{before}");

    // A minute on, the schedules' round starts the training and the build.
    assert_eq!(round(&s, &clock, 61, &key).await, ["Training", "Build"]);
    python(&s, &key, "check");
    node(&s, &key);
    let first = s
        .ok(Method::POST, path, creds, Some(ask("bought-together")))
        .await;
    let built = first["results"][0]["modelBuiltAt"].as_i64().unwrap();

    // New events; past the hour, fold-in and build run again and the lists are newer.
    let events: Vec<Value> = (0..3)
        .map(|i| {
            json!({"eventType": "conversion", "eventName": "Purchased", "index": "products",
                "userToken": format!("late{i}"), "objectIDs": ["t0", "t3"]})
        })
        .collect();
    s.ok(
        Method::POST,
        "/1/events",
        creds,
        Some(json!({ "events": events })),
    )
    .await;
    let last = last_started(&s, &key).await;
    assert_eq!(round(&s, &clock, 61 * 60, &key).await, ["FoldIn", "Build"]);
    let now = last_started(&s, &key).await;
    assert_eq!(now["training"], last["training"], "training is daily");
    // ISO times: in the order of their strings.
    assert!(
        now["build"].as_str() > last["build"].as_str(),
        "{last} → {now}"
    );
    let second = s
        .ok(Method::POST, path, creds, Some(ask("bought-together")))
        .await;
    let rebuilt = second["results"][0]["modelBuiltAt"].as_i64().unwrap();
    assert!(
        rebuilt > built,
        "the lists were rebuilt: {built} → {rebuilt}"
    );
    // t3 was bought with t0 by the late users: it leads t0's list now.
    assert_eq!(
        second["results"][0]["hits"][0]["objectID"], "t3",
        "{second}"
    );
    python(&s, &key, "check");
}
