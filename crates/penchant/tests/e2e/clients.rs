//! End to end with Algolia's official clients, unchanged but for the host, against a real
//! `penchant serve` process. `scripts/test.sh` provides them (`E2E_PYTHON`: a Python with
//! `algoliasearch` v4; `e2e/node/node_modules`: `search-insights` and `algoliasearch` v5);
//! without them these tests fail, they are never skipped.

use std::path::PathBuf;
use std::process::{Child, Command};

use reqwest::{Client, Method};
use serde_json::{Value, json};

use crate::common;

const ROOT: &str = "root-key";

struct Node {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Node {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (child, url) = common::serve_in(dir.path(), ROOT);
        let port = url.rsplit(':').next().unwrap().parse().unwrap();
        Self {
            child,
            port,
            _dir: dir,
        }
    }

    /// Create an app; returns its admin key.
    async fn app(&self, app: &str) -> String {
        let url = format!("http://127.0.0.1:{}/1/apps", self.port);
        let body: Value = common::request(
            &Client::new(),
            Method::POST,
            &url,
            ("", ROOT),
            &json!({"appID": app}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        body["adminAPIKey"].as_str().unwrap().to_owned()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn python() -> String {
    std::env::var("E2E_PYTHON").unwrap_or_else(|_| {
        panic!(
            "E2E_PYTHON is not set: run the tests with ./scripts/test.sh, which makes a virtual \
             environment with Algolia's Python client (scripts/e2e-python.sh)"
        )
    })
}

/// Run a script of `e2e/python` against the node; panics with its output if it fails.
fn run_python(script: &str, node: &Node, app: &str, key: &str) {
    run_script(Command::new(python()), "python", script, node, app, key);
}

/// Run `script` of `e2e/{folder}` with `program` against the node; panics with its output if it
/// fails.
fn run_script(mut program: Command, folder: &str, script: &str, node: &Node, app: &str, key: &str) {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
        .join("../../e2e")
        .join(folder);
    let out = program
        .args([script, "127.0.0.1", &node.port.to_string(), app, key])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn python_client_catalog_and_keys() {
    let node = Node::start();
    let key = node.app("E2E").await;
    run_python("catalog.py", &node, "E2E", &key);
}

#[tokio::test]
async fn python_clients_events_strategy_profiles_and_deletion() {
    let node = Node::start();
    let key = node.app("E2E").await;
    run_python("personalization.py", &node, "E2E", &key);
}

#[tokio::test]
async fn python_recommend_client_every_model() {
    let node = Node::start();
    let key = node.app("E2E").await;
    run_python("recommend.py", &node, "E2E", &key);
}

/// Every search-client call Penchant answers or refuses (with a 4xx naming the alternative),
/// gzip-compressed writes and `x-request-id`, then insights, personalization and recommend.
#[tokio::test]
async fn python_client_surface() {
    let node = Node::start();
    let key = node.app("E2E").await;
    run_python("surface.py", &node, "E2E", &key);
}

/// A request to the node with an app's credentials.
async fn call(node: &Node, method: reqwest::Method, path: &str, app: &str, key: &str, body: Value) {
    let url = format!("http://127.0.0.1:{}{path}", node.port);
    let resp = common::request(&Client::new(), method, &url, (app, key), &body)
        .send()
        .await
        .unwrap();
    assert!(
        resp.status().is_success(),
        "{path}: {}",
        resp.text().await.unwrap()
    );
}

#[tokio::test]
async fn search_insights_events() {
    let node = Node::start();
    let key = node.app("E2E").await;
    let catalog = json!({"requests": [
        {"action": "addObject", "body": {"objectID": "iphone", "brand": "Apple"}},
        {"action": "addObject", "body": {"objectID": "airpods", "brand": "Apple"}},
        {"action": "addObject", "body": {"objectID": "pixel", "brand": "Google"}},
    ]});
    call(
        &node,
        Method::POST,
        "/1/indexes/products/batch",
        "E2E",
        &key,
        catalog,
    )
    .await;
    let strategy = json!({
        "eventsScoring": [
            {"eventName": "Product Viewed", "eventType": "view", "score": 10},
            {"eventName": "Filter Clicked", "eventType": "click", "score": 20},
            {"eventName": "Product Purchased", "eventType": "conversion", "score": 50},
        ],
        "facetsScoring": [{"facetName": "brand", "score": 100}, {"facetName": "discount", "score": 50}],
        "personalizationImpact": 50,
    });
    call(
        &node,
        Method::POST,
        "/1/strategies/personalization",
        "E2E",
        &key,
        strategy,
    )
    .await;
    run_node("events.mjs", "search-insights", &node, "E2E", &key);
}

/// Run a script of `e2e/node`, which needs npm package `package`, against the node; panics with
/// its output if it fails.
fn run_node(script: &str, package: &str, node: &Node, app: &str, key: &str) {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
        .join("../../e2e/node");
    assert!(
        dir.join("node_modules").join(package).is_dir(),
        "{package} is not installed: run the tests with ./scripts/test.sh (scripts/e2e-node.sh)"
    );
    run_script(Command::new("node"), "node", script, node, app, key);
}

/// The same surface through Algolia's JavaScript client v5 (`algoliasearch`): its search client
/// and its insights, personalization and recommend clients, each given the node as its host.
#[tokio::test]
async fn javascript_client_surface() {
    let node = Node::start();
    let key = node.app("E2E").await;
    run_node("clients.mjs", "algoliasearch", &node, "E2E", &key);
}
