//! Several `penchant serve` processes on Bigtable emulators: one store shared by two nodes, and
//! data residency with two emulators standing for two regions.

use std::process::{Child, Stdio};
use std::time::Duration;

use penchant_store::{ReadRows, Store};
use penchant_store_bigtable::BigtableStore;
use penchant_store_bigtable::emulator::Emulator;
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

const ROOT: &str = "root-key";

/// A `penchant serve` process on Bigtable, stopped when dropped.
struct Node {
    child: Child,
    url: String,
    http: Client,
}

impl Node {
    fn start(emulator: &Emulator, config: Option<&std::path::Path>, cache_ttl_ms: u64) -> Self {
        let (child, url) = crate::common::serve(|cmd| {
            cmd.env("PENCHANT_STORE__BACKEND", "bigtable")
                .env("PENCHANT_BIGTABLE__ENDPOINT", emulator.endpoint())
                .env("PENCHANT_AUTH__ADMIN_KEY", ROOT)
                .env("PENCHANT_AUTH__KEY_CACHE_TTL_MS", cache_ttl_ms.to_string())
                .stderr(Stdio::null());
            if let Some(file) = config {
                cmd.arg("--config").arg(file);
            }
        });
        Self {
            child,
            url,
            http: Client::new(),
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        app: &str,
        key: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let url = format!("{}{path}", self.url);
        crate::common::call(&self.http, method, &url, (app, key), body).await
    }

    async fn create_app(&self, app: &str) -> String {
        let (status, body) = self
            .call(
                Method::POST,
                "/1/apps",
                "",
                ROOT,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_one_store_and_caches_go_stale_for_at_most_the_ttl() {
    let emulator = Emulator::start();
    let ttl_ms = 1000;
    let (a, b) = (
        Node::start(&emulator, None, ttl_ms),
        Node::start(&emulator, None, ttl_ms),
    );
    // An app and a key created through A work through B.
    let admin = a.create_app("SHOP").await;
    let (status, _) = b.call(Method::GET, "/1/keys", "SHOP", &admin, None).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "B sees the app admin key written through A"
    );
    let (status, created) = a
        .call(
            Method::POST,
            "/1/keys",
            "SHOP",
            &admin,
            Some(json!({"acl": ["search"]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let search = created["key"].as_str().unwrap().to_owned();
    let (status, body) = b
        .call(
            Method::GET,
            &format!("/1/keys/{search}"),
            "SHOP",
            &admin,
            None,
        )
        .await;
    assert_eq!((status, &body["acl"]), (StatusCode::OK, &json!(["search"])));
    // B authenticates the search key (a valid key without the admin ACL: 403), and caches it.
    let (status, _) = b.call(Method::GET, "/1/keys", "SHOP", &search, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Deleted through A: A refuses it at once; B within its cache TTL.
    let (status, _) = a
        .call(
            Method::DELETE,
            &format!("/1/keys/{search}"),
            "SHOP",
            &admin,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = a.call(Method::GET, "/1/keys", "SHOP", &search, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    tokio::time::sleep(Duration::from_millis(ttl_ms + 500)).await;
    let (status, _) = b.call(Method::GET, "/1/keys", "SHOP", &search, None).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "stale for at most the TTL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_region_holds_only_its_apps_rows() {
    let (us, eu) = (Emulator::start(), Emulator::start());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("penchant.toml");
    std::fs::write(
        &config,
        format!(
            "[placement.targets.eu]\nendpoint = \"{}\"\n[placement.apps]\nEUSHOP = \"eu\"\n",
            eu.endpoint()
        ),
    )
    .unwrap();
    let node = Node::start(&us, Some(&config), 0);
    for app in ["EUSHOP", "USSHOP"] {
        let admin = node.create_app(app).await;
        for acl in ["search", "recommendation"] {
            let (status, _) = node
                .call(
                    Method::POST,
                    "/1/keys",
                    app,
                    &admin,
                    Some(json!({"acl": [acl]})),
                )
                .await;
            assert_eq!(status, StatusCode::OK);
        }
        let (status, listed) = node.call(Method::GET, "/1/keys", app, &admin, None).await;
        assert_eq!(status, StatusCode::OK);
        // The two keys made here (the admin key is not listed, as Algolia does not list it).
        assert_eq!(listed["keys"].as_array().unwrap().len(), 2);
    }
    // Read each emulator directly: every row of every table belongs to its region's app.
    for (emulator, app) in [(&us, "USSHOP"), (&eu, "EUSHOP")] {
        let store = BigtableStore::connect(emulator.config("")).await.unwrap();
        let prefix = format!("{app}\0");
        let mut rows = 0;
        for table in store.list_tables().await.unwrap() {
            if table.name == "placements" {
                // Who lives where is kept in the default target: one row per placed app.
                let placed = store
                    .read_all(&table.name, ReadRows::default())
                    .await
                    .unwrap();
                let keys: Vec<&[u8]> = placed.iter().map(|r| &r.key[..]).collect();
                let expected: Vec<&[u8]> = match app {
                    "USSHOP" => vec![b"EUSHOP"],
                    _ => vec![],
                };
                assert_eq!(keys, expected);
                continue;
            }
            for row in store
                .read_all(&table.name, ReadRows::default())
                .await
                .unwrap()
            {
                assert!(
                    row.key.starts_with(prefix.as_bytes()),
                    "{} holds a row of another app: {:?}",
                    emulator.addr(),
                    row.key
                );
                rows += 1;
            }
        }
        assert_eq!(rows, 4, "{app}: its app row and its 3 keys");
    }
}
