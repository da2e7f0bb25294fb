//! A/B tests (`/2/abtests`) end to end: Algolia's official Python `AbtestingClient` (with its
//! search, insights, personalization and recommend clients) running a test on one node, and two
//! nodes on one store (a Bigtable emulator) assigning each user the same variant and counting
//! each other's events.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use penchant_store_bigtable::emulator::Emulator;
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

use crate::common;

const ROOT: &str = "root-key";

/// A `penchant serve` process, stopped when dropped.
struct Node {
    child: Child,
    url: String,
    http: Client,
    _dir: Option<tempfile::TempDir>,
}

impl Node {
    /// A node on the embedded store, in a folder of its own.
    fn embedded() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (child, url) = common::serve_in(dir.path(), ROOT);
        Self {
            child,
            url,
            http: Client::new(),
            _dir: Some(dir),
        }
    }

    /// A node on the emulator's store, trusting its caches for a second.
    fn on(emulator: &Emulator) -> Self {
        let (child, url) = common::serve(|cmd| {
            cmd.env("PENCHANT_STORE__BACKEND", "bigtable")
                .env("PENCHANT_BIGTABLE__ENDPOINT", emulator.endpoint())
                .env("PENCHANT_AUTH__ADMIN_KEY", ROOT)
                .env("PENCHANT_AUTH__KEY_CACHE_TTL_MS", "1000")
                .env("PENCHANT_PERSONALIZATION__STRATEGY_CACHE_TTL_MS", "1000")
                .stderr(Stdio::null());
        });
        Self {
            child,
            url,
            http: Client::new(),
            _dir: None,
        }
    }

    fn port(&self) -> u16 {
        self.url.rsplit(':').next().unwrap().parse().unwrap()
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        (app, key): (&str, &str),
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let url = format!("{}{path}", self.url);
        common::call(&self.http, method, &url, (app, key), body).await
    }

    /// A call that must succeed; its answer.
    async fn ok(&self, method: Method, path: &str, creds: (&str, &str), body: Value) -> Value {
        let body = (method != Method::GET && method != Method::DELETE).then_some(body);
        let (status, answer) = self.call(method, path, creds, body).await;
        assert!(status.is_success(), "{path}: {status} {answer}");
        answer
    }

    /// Create an app; returns its admin key.
    async fn app(&self, app: &str) -> String {
        let (status, body) = self
            .call(
                Method::POST,
                "/1/apps",
                ("", ROOT),
                Some(json!({"appID": app})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["adminAPIKey"].as_str().unwrap().to_owned()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run `e2e/python/{script}` against the node; panics with its output if it fails, prints it
/// (what it checked) otherwise.
fn run_python(script: &str, node: &Node, app: &str, key: &str) {
    let python = std::env::var("E2E_PYTHON").unwrap_or_else(|_| {
        panic!(
            "E2E_PYTHON is not set: run the tests with ./scripts/test.sh, which makes a virtual \
             environment with Algolia's Python client (scripts/e2e-python.sh)"
        )
    });
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
        .join("../../e2e/python");
    let out = Command::new(python)
        .args([script, "127.0.0.1", &node.port().to_string(), app, key])
        .current_dir(&dir)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{stderr}");
    println!("{stdout}");
}

/// Create, list, get and a refused second test; 200 users served by Recommend (and a few by
/// rerank), their clicks and conversions (more in variant 2) counted per variant with a
/// significance over 0.95; stop (later events not counted), delete (then 404) — all through
/// the official Python clients (`e2e/python/abtests.py`).
#[tokio::test]
async fn the_official_python_client_runs_an_ab_test_end_to_end() {
    let node = Node::embedded();
    let key = node.app("E2E").await;
    run_python("abtests.py", &node, "E2E", &key);
}

/// 160 users who each click their own kind of product (4 kinds, 60 products); a hand-blend
/// queue `for-you` and a learned queue `for-you-learned`, and a first ranker learned from the
/// history (`examples: history`). Asking for `examples: impressions` before any click with a
/// queryID fails, saying "no logged impression". Then an A/B test, hand blend vs learned
/// ranker: two rounds of tracked `recommended-for-you` answers (queryID, variant; variant 2
/// `learned-queue` with the ranker's version), each user clicking the first hit of their kind
/// with its queryID, one in four converting, the clicks and conversions counted per variant by
/// `get_ab_test`. The ranker is learned again: `auto` under `minImpressions` falls back to
/// history; `auto` and `impressions` learn from the logged impressions (`learned.impressions`
/// = the clicked impressions = train + validation queries), each a newer version; variant-2
/// users are then served that version, still of their own kind. All through the official
/// Python clients plus plain HTTP for Penchant's routes (`e2e/python/ranker.py`).
#[tokio::test]
async fn a_ranker_learned_from_logged_impressions_is_ab_tested_through_the_official_clients() {
    let node = Node::embedded();
    let key = node.app("RANK").await;
    run_python("ranker.py", &node, "RANK", &key);
}

/// A hit list for rerank: six products, brands in turn.
fn hits() -> Value {
    let brands = ["Apple", "Samsung", "Google"];
    Value::Array(
        (0..6)
            .map(|i| json!({"objectID": format!("p{i}"), "brand": brands[i % 3]}))
            .collect(),
    )
}

/// One user's rerank answer on `node`: (abTestID, abTestVariantID, queryID), each null if
/// absent.
async fn serve_user(node: &Node, creds: (&str, &str), user: &str) -> (Value, Value, Value) {
    let answer = node
        .ok(
            Method::POST,
            "/1/indexes/products/rerank",
            creds,
            json!({"userToken": user, "hits": hits(), "clickAnalytics": true}),
        )
        .await;
    (
        answer["abTestID"].clone(),
        answer["abTestVariantID"].clone(),
        answer["queryID"].clone(),
    )
}

/// Sum of `field` over the test's variants, as `node` reports it.
async fn total(node: &Node, creds: (&str, &str), id: u64, field: &str) -> (u64, Value) {
    let test = node
        .ok(Method::GET, &format!("/2/abtests/{id}"), creds, Value::Null)
        .await;
    let sum = test["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v[field].as_u64().unwrap_or(0))
        .sum();
    (sum, test)
}

/// Variant assignment is a function of the test and the user, not of the node: node 2 (once
/// its cache shows the test created through node 1) answers every user the variant node 1
/// answered; events sent to node 2 with node 1's queryIDs are counted, and node 1 reports them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variant_assignment_is_the_same_on_two_nodes_of_one_store() {
    let emulator = Emulator::start();
    let (one, two) = (Node::on(&emulator), Node::on(&emulator));
    let key = one.app("SHOP").await;
    let creds = ("SHOP", key.as_str());
    let catalog = json!({"requests": hits().as_array().unwrap().iter()
        .map(|h| json!({"action": "addObject", "body": h})).collect::<Vec<_>>()});
    one.ok(Method::POST, "/1/indexes/products/batch", creds, catalog)
        .await;
    let strategy = json!({
        "eventsScoring": [{"eventName": "Purchased", "eventType": "conversion", "score": 50}],
        "facetsScoring": [{"facetName": "brand", "score": 100}],
        "personalizationImpact": 100,
    });
    one.ok(
        Method::POST,
        "/1/strategies/personalization",
        creds,
        strategy,
    )
    .await;

    // Node 2 answers a user before any test exists (and caches that none runs).
    let (test, variant, _) = serve_user(&two, creds, "probe").await;
    assert_eq!((test, variant), (Value::Null, Value::Null), "no test yet");

    // A test created through node 1, until 14 days from now.
    let end_at = rfc3339_in_days(14);
    let created = one
        .ok(
            Method::POST,
            "/2/abtests",
            creds,
            json!({"name": "two nodes", "endAt": end_at, "variants": [
                {"index": "products", "trafficPercentage": 50,
                 "customSearchParameters": {"enablePersonalization": false}},
                {"index": "products", "trafficPercentage": 50,
                 "customSearchParameters": {"personalizationImpact": 50}},
            ]}),
        )
        .await;
    let id = created["abTestID"].as_u64().unwrap();

    // Node 2 reports the test once its cache (1 s here) expires.
    let start = Instant::now();
    loop {
        let (test, _, _) = serve_user(&two, creds, "probe").await;
        if test == json!(id) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "node 2 does not report the test after 30 s: {test}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!("node 2 reports the test after {:.1?}", start.elapsed());

    // 100 users, served by both nodes: the same variant from each.
    let mut query_ids = Vec::new();
    let mut variants: BTreeMap<u64, usize> = BTreeMap::new();
    for i in 0..100 {
        let user = format!("user-{i}");
        let (test1, variant1, query1) = serve_user(&one, creds, &user).await;
        let (test2, variant2, query2) = serve_user(&two, creds, &user).await;
        assert_eq!((&test1, &test2), (&json!(id), &json!(id)), "{user}");
        assert_eq!(variant1, variant2, "{user}: node 1 and node 2 disagree");
        let variant = variant1.as_u64().unwrap();
        assert!(variant == 1 || variant == 2, "{user}: variant {variant}");
        *variants.entry(variant).or_default() += 1;
        for q in [&query1, &query2] {
            let q = q.as_str().unwrap();
            assert!(
                q.len() == 32 && q.chars().all(|c| c.is_ascii_hexdigit()),
                "{q}"
            );
        }
        assert_ne!(query1, query2, "{user}: each answer has its own queryID");
        query_ids.push((user, query1.as_str().unwrap().to_owned()));
    }
    println!("each of 100 users gets the same variant from both nodes: {variants:?}");
    assert_eq!(variants.len(), 2, "both variants occur: {variants:?}");
    assert!(
        variants.values().all(|&n| n >= 25),
        "about 50/50: {variants:?}"
    );

    // Conversions sent to node 2 with node 1's queryIDs, for every other user.
    let events: Vec<Value> = query_ids
        .iter()
        .step_by(2)
        .map(|(user, q)| {
            json!({"eventType": "conversion", "eventName": "Purchased", "index": "products",
                   "userToken": user, "objectIDs": ["p0"], "queryID": q})
        })
        .collect();
    let sent = events.len() as u64;
    two.ok(Method::POST, "/1/events", creds, json!({"events": events}))
        .await;
    // Node 2 saves its counts within 5 s; node 1 reads them from the store.
    let start = Instant::now();
    let test = loop {
        let (conversions, test) = total(&one, creds, id, "conversionCount").await;
        if conversions == sent {
            break test;
        }
        assert!(
            conversions < sent && start.elapsed() < Duration::from_secs(20),
            "node 1 reports {conversions} conversions of the {sent} sent to node 2: {test}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!(
        "node 1 reports the {sent} conversions sent to node 2 after {:.1?}",
        start.elapsed()
    );
    let converted: u64 = test["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["convertedUserCount"].as_u64().unwrap())
        .sum();
    assert_eq!(converted, sent, "one conversion per user: {test}");
    // Both nodes served the same 100 users (and node 2 a probe user): distinct users counted
    // once, whichever node served them.
    let (users, test) = total(&one, creds, id, "userCount").await;
    assert_eq!(users, 101, "users counted once across nodes: {test}");
    println!("node 1 counts {users} distinct users (100 and the probe) served by both nodes");
}

/// RFC 3339 for `days` days from now (UTC, whole seconds), without a date crate.
fn rfc3339_in_days(days: u64) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + days * 86_400;
    let (day, rem) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = day as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
